"""Hidden tests for `jit_control_flow` (curriculum §2).

Inputs are random (the `rng` fixture, seeded per grading run and test), never the public ones.
The shapes and loop counts of the retracing and compile-count tests are used nowhere else, so
that neither the student's own notebook nor an earlier test can have warmed JAX's caches.
Points: numerics 11, jit 13 (24; with the public tests' 8, 32).

`g_loop_cached` is not run under an outer `jax.jit`: the contract (curriculum §2) does not ask
it, and the tutorial's own answer (`while i < n: i = loop_body(i)`, with `i` the jitted body's
result) cannot work there, since the loop test needs a concrete `i`. The point that case carried
moved to `test_g_loop_cached_compile_count` (1 -> 2), so g_loop_cached keeps its 3 jit points
and the jit total stays 13: under jit 5 (one per case), selu_jit jitted 1, traces once 2,
recompiles 2, compile counts 2 + 1.
"""

import numpy as np
import pytest

from grader.testing import (
    assert_close,
    check_compile_count,
    check_is_jitted,
    check_jit,
    check_recompiles,
    check_traces_once,
)


def normal(rng, *shape):
    """Random float32 values of both signs, with a few exact zeros (the boundary of `x > 0`)."""
    x = (3 * rng.standard_normal(shape)).astype(np.float32)
    if x.size >= 3:
        flat = x.reshape(-1)
        flat[rng.choice(flat.size, size=max(1, flat.size // 5), replace=False)] = 0.0
    return x


def scalar(rng, sign):
    """A float32 scalar: positive, negative or zero."""
    return np.float32(sign * rng.uniform(0.1, 5.0))


# --------------------------------------------------------------------------- numerics (11)


@pytest.mark.category("numerics")
@pytest.mark.points(3)
@pytest.mark.parametrize("case", ["positive", "negative", "zero", "array1", "array17", "array4x5"])
def test_f_jittable_numerics(submission, reference, rng, case):
    """f_jittable equals f: on positive, negative and zero scalars, and elementwise on arrays."""
    if case in ("positive", "negative", "zero"):
        x = scalar(rng, {"positive": 1, "negative": -1, "zero": 0}[case])
    else:
        x = normal(rng, *{"array1": (1,), "array17": (17,), "array4x5": (4, 5)}[case])
    assert_close(submission.f_jittable(x), reference.f_jittable(x), name=f"f_jittable on a {case} input")


@pytest.mark.category("numerics")
@pytest.mark.points(2)
@pytest.mark.parametrize("n", [0, 1, 6])
def test_g_static_numerics(submission, reference, rng, n):
    """g_static(x, n) returns x + n for a Python int n >= 0."""
    x = normal(rng, 6)
    assert_close(submission.g_static(x, n), reference.g_static(x, n), name=f"g_static(x, {n})")


@pytest.mark.category("numerics")
@pytest.mark.points(2)
@pytest.mark.parametrize("n", [0, 1, 9])
def test_g_traced_numerics(submission, reference, rng, n):
    """g_traced(x, n) returns x + n for an integer n >= 0."""
    x = normal(rng, 2, 3)
    assert_close(submission.g_traced(x, n), reference.g_traced(x, n), name=f"g_traced(x, {n})")


@pytest.mark.category("numerics")
@pytest.mark.points(2)
@pytest.mark.parametrize("shape", [(9,), (3, 4)])
def test_selu_jit_numerics(submission, reference, rng, shape):
    """selu_jit gives the same numbers as selu, on both sides of zero and at zero."""
    x = normal(rng, *shape)
    assert_close(submission.selu_jit(x), reference.selu_jit(x), name=f"selu_jit on shape {shape}")


@pytest.mark.category("numerics")
@pytest.mark.points(2)
@pytest.mark.parametrize("n", [0, 1, 4])
def test_g_loop_cached_numerics(submission, reference, rng, n):
    """g_loop_cached(x, n) returns x + n."""
    x = normal(rng, 6)
    assert_close(submission.g_loop_cached(x, n), reference.g_loop_cached(x, n), name=f"g_loop_cached(x, {n})")


# --------------------------------------------------------------------------- jit (13)

# name -> (what is traced, static arguments); a Python int n is static, an int32 array n is traced
JIT_CASES = {
    "f_jittable-array": ("f_jittable", lambda rng: (normal(rng, 2, 7),), None),
    # a 0-d abstract value, as jax.grad traces it
    "f_jittable-scalar": ("f_jittable", lambda rng: (scalar(rng, -1),), None),
    "g_static": ("g_static", lambda rng: (normal(rng, 8),), {"n": 5}),
    "g_traced-n-traced": ("g_traced", lambda rng: (normal(rng, 8), np.int32(7)), None),
    "selu_jit": ("selu_jit", lambda rng: (normal(rng, 5, 3),), None),
    # no g_loop_cached case: it need not work under an outer jit (see the module docstring)
}


@pytest.mark.category("jit")
@pytest.mark.points(5)
@pytest.mark.parametrize("case", list(JIT_CASES))
def test_works_under_jit(submission, reference, rng, case):
    """The function traces under jax.jit with traced arguments and gives the right numbers."""
    name, make_args, static = JIT_CASES[case]
    check_jit(submission, name, make_args(rng), static=static, reference=getattr(reference, name))


@pytest.mark.category("jit")
@pytest.mark.points(1)
def test_selu_jit_is_itself_jitted(submission, reference, rng):
    """selu_jit is itself a jax.jit-compiled function (judged from its compiled code)."""
    check_is_jitted(submission, "selu_jit", (normal(rng, 2, 5),), reference=reference.selu_jit)


@pytest.mark.category("jit")
@pytest.mark.points(2)
def test_f_jittable_traces_once(submission, reference, rng):
    """Under one jax.jit, one trace of f_jittable serves five values of one shape."""
    values = [scalar(rng, s) for s in (1, -1, 0, 1, -1)]
    check_traces_once(submission, "f_jittable", [(v,) for v in values], reference=reference.f_jittable)


@pytest.mark.category("jit")
@pytest.mark.points(2)
def test_g_static_recompiles_only_for_new_n(submission, reference, rng):
    """g_static compiles again when n changes, and not when only the values of x change."""
    x1, x2 = normal(rng, 3, 11), normal(rng, 3, 11)
    check_recompiles(
        submission,
        "g_static",
        [((x1,), {"n": 13}), ((x2,), {"n": 13}), ((x1,), {"n": 17})],
        [None, False, True],
        reference=reference.g_static,
    )


@pytest.mark.category("jit")
@pytest.mark.points(2)
def test_g_loop_cached_compile_count(submission, rng):
    """Two calls of g_loop_cached(x, 20) cause at most 2 XLA compilations."""
    x = normal(rng, 2, 9)
    check_compile_count(submission, "g_loop_cached", [(x, 20), (x, 20)], at_most=2)


@pytest.mark.category("jit")
@pytest.mark.points(1)
def test_g_loop_cached_repeated_calls_do_not_compile(submission, rng):
    """Three calls of g_loop_cached(x, 5) compile the body once, not once per call.

    Stricter than the two-call test: a `jax.jit(partial(...))` built once per call (outside
    the loop) compiles once per call, so it passes that one and fails this one."""
    x = normal(rng, 9, 2)
    check_compile_count(submission, "g_loop_cached", [(x, 5), (x, 5), (x, 5)], at_most=2)
