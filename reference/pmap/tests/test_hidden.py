"""Hidden tests for `pmap` (curriculum §9), graded with 4 devices (`devices: 4`).

Inputs are random (the `rng` fixture, seeded per grading run and test), never the public ones:
D = 4 rows (one per device), signal lengths N of 3 (the shortest), 5 and 17 for
`parallel_convolve`, row lengths n of 1, 6 and 33 for `global_mean`.

Parallelism is judged from the compiled code, on the trusted side: `check_parallel` exports
the function for the test's shapes (`jax.export` under `jax.jit`, from shapes only), and the
evaluator (which never runs student code) reads the module. It must be exported for 4 devices
and split into one program per device (`sdy.manual_computation`: what `jax.pmap` and
`shard_map` lower to). `jax.vmap` or a Python loop compiles for one device; `jax.vmap` followed
by `jax.device_put(out, NamedSharding(mesh, P("d")))` compiles for 4 devices but as one
program whose result is only placed there, so both fail. Where the result lies is not looked
at: the kernel reports it, and it says nothing about where the work was done. global_mean must
also combine the devices' results with a collective (`lax.psum`, `lax.pmean`, `all_gather`...):
`jax.pmap(lambda row: jnp.mean(xs))(xs)`, each device averaging the whole closed-over array,
has no collective and fails. The work must be done in the per-device programs: the module may
compute nothing with the inputs outside them (moving entries and rescaling the result, such as
dividing it by the number of devices, are fine), so `jax.vmap(convolve)` followed by an identity
`pmap` fails; device d must receive row d of `xs` and `ws` and no other, so the closed-over mean
fails even beside a `psum` that changes nothing; and parallel_convolve's row d must be computed
from row d alone (no rows exchanged with `all_gather`). Following the rule for crashes and wrong numbers (README), the
module is also run in the evaluator (with the arguments replicated on a 4-device mesh) and must
give the reference's numbers: a wrong or crashing function earns no parallelism point.

jit: the function traces under `jax.jit` for concrete shapes (`jax.export` in the sandbox),
which fails for code that needs concrete values (`float(x)`, `np.asarray(x)`, a Python `if` on
a value). (History: this test does not run the module, because until the evaluator placed the
arguments of a multi-device module on a mesh, `exp.call` refused 4-device modules; the
parallelism tests above now run them.)

Points: numerics 7, parallelism 4, jit 2 (13; with the public tests' 4, 17).
"""

import numpy as np
import pytest

from grader.testing import CheckFailure, StudentRaised, assert_close, check_parallel, hint_for

D = 4  # devices, and rows: one row per device
# the mean of many float32 values, combined across devices in whatever order: a little looser
MEAN_TOL = {"rtol": 1e-5, "atol": 1e-5}


def normal(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def convolve_args(rng, N):
    """xs (D, N) and ws (D, 3): one signal and one window per device."""
    return normal(rng, D, N), normal(rng, D, 3)


def mean_args(rng, n):
    """xs (D, n), with an offset per row so that every row's own mean differs from the global one."""
    return ((normal(rng, D, n) + np.arange(D, dtype=np.float32)[:, None]),)


ARGS = {"parallel_convolve": lambda rng: convolve_args(rng, 8), "global_mean": lambda rng: mean_args(rng, 10)}


def check_traces_under_jit(submission, name, args):
    """`name` traces under jax.jit for the shapes of `args` (see the module docstring)."""
    try:
        submission.export(name, example=tuple(args))
    except StudentRaised as exc:
        where = exc.location.describe() if exc.location else ""
        first = next((ln for ln in str(exc.evalue).splitlines() if ln.strip()), "")[:300]
        raise CheckFailure(
            f"`{name}` does not work under jax.jit: {exc.ename}{' at ' + where if where else ''}: {first}",
            exc.hint or hint_for(exc.ename, exc.evalue, exc.location),
        ) from None


def diagnose_mean(got, xs):
    """(what, hint) when a wrong global_mean is one of the classic slips with collectives."""
    got, xs = np.asarray(got), np.asarray(xs, dtype=np.float64)
    if got.shape != (xs.shape[0],):
        return None
    known = [
        (
            xs.mean(axis=1),
            "each entry is the mean of its own row only",
            "Each device must combine its row's mean with the others': `lax.psum` over the pmapped axis "
            "(give `jax.pmap` an `axis_name=` and use the same name in the psum), then divide by the "
            "number of devices.",
        ),
        (
            np.full(xs.shape[0], xs.mean(axis=1).sum()),
            "each entry is the sum of the row means, not their mean",
            "After `lax.psum` of the row means, divide by the number of devices: `lax.psum(1, axis_name)`.",
        ),
    ]
    for value, what, hint in known:
        if np.allclose(got, value, rtol=1e-4, atol=1e-5):
            return what, hint
    return None


# --------------------------------------------------------------------------- numerics (7)


@pytest.mark.category("numerics")
@pytest.mark.points(3)
@pytest.mark.parametrize("N", [3, 5, 17])
def test_parallel_convolve_numerics(submission, reference, rng, N):
    """parallel_convolve(xs, ws) gives convolve(xs[d], ws[d]) in row d, for D = 4 rows."""
    args = convolve_args(rng, N)
    got = submission.parallel_convolve(*args)
    assert_close(got, reference.parallel_convolve(*args), name=f"parallel_convolve with D={D}, N={N}")


@pytest.mark.category("numerics")
@pytest.mark.points(4)
@pytest.mark.parametrize("n", [1, 6, 33])
def test_global_mean_numerics(submission, reference, rng, n):
    """Every entry of global_mean(xs) is the mean of all of xs (not the mean of its own row)."""
    args = mean_args(rng, n)
    got = submission.global_mean(*args)
    try:
        assert_close(got, reference.global_mean(*args), name=f"global_mean with D={D}, n={n}", **MEAN_TOL)
    except CheckFailure as exc:
        what = diagnose_mean(got, args[0])
        if not what:
            raise
        raise CheckFailure(f"{exc.message}; {what[0]}", what[1]) from None


# --------------------------------------------------------------------------- parallelism (4)


@pytest.mark.category("parallelism")
@pytest.mark.points(4)
@pytest.mark.parametrize("name", ["parallel_convolve", "global_mean"])
def test_runs_on_every_device(submission, reference, rng, name):
    """Compiled for the 4 devices as one program per device (jax.pmap), with the reference's
    numbers; global_mean's devices combine their row means with a collective (lax.psum)."""
    mean = name == "global_mean"
    check_parallel(
        submission,
        name,
        ARGS[name](rng),
        devices=D,
        collective=mean,
        reference=getattr(reference, name),
        tolerance=MEAN_TOL if mean else None,
    )


# --------------------------------------------------------------------------- jit (2)


@pytest.mark.category("jit")
@pytest.mark.points(2)
@pytest.mark.parametrize("name", ["parallel_convolve", "global_mean"])
def test_traces_under_jit(submission, rng, name):
    """The function traces under jax.jit (no Python code that needs concrete values)."""
    check_traces_under_jit(submission, name, ARGS[name](rng))
