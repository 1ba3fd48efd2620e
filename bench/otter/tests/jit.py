"""jit, 7 points as in jaxgrade: public 1 (fast_batched_convolve is jitted); hidden 6: each
function under jax.jit (4 points over 5 functions), fast_batched_convolve is jitted (2)."""

from otter.test_files import test_case
from vmap_convolve_checks import (
    FUNCTIONS,
    check_is_jitted,
    check_jit,
    make_args,
    public_args,
    public_expected,
    reference,
    rng,
)

OK_FORMAT = False

name = "jit"


@test_case(name="test_public::test_fast_batched_convolve_is_jitted", points=1)
def public_is_jitted(env):
    fn = "fast_batched_convolve"
    check_is_jitted(env, fn, public_args(fn), public_expected(fn))


def under_jit(test, fn):
    return lambda env: check_jit(env, test, fn)


for fn in FUNCTIONS:
    test = f"test_works_under_jit[{fn}]"
    globals()[test] = test_case(name=test, points=4 / len(FUNCTIONS), hidden=True)(under_jit(test, fn))


@test_case(name="test_hidden::test_fast_batched_convolve_is_jitted", points=2, hidden=True)
def hidden_is_jitted(env):
    args = make_args(rng("test_hidden::test_fast_batched_convolve_is_jitted"), "fast_batched_convolve", 6, 10)
    check_is_jitted(env, "fast_batched_convolve", args, reference.fast_batched_convolve(*args))
