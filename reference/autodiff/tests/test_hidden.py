"""Hidden tests for `autodiff` (curriculum §4).

Inputs are random (the `rng` fixture, seeded per grading run and test), never the public ones;
the two tests of `fit_linear_regression`'s defaults share one call, on the first one's inputs.

Gradients are compared with `jax.grad` of the reference at float32 tolerance (rtol 1e-5, atol
1e-6 * max(1, max|expected|)). Every autodiff route (`grad`, `value_and_grad`, `vjp`,
`jacrev`, `jacfwd`) gives 2 * (x - y) to the last bit, while a finite-difference gradient is
off by the float32 rounding error of the loss divided by the step: with vectors of 16 or
more entries of magnitude about 4 the loss is a few hundred, and central or forward
differences with any step from 1e-1 down to 1e-5 miss by far more than the tolerance.

The jit tests use tiny inputs (magnitude 1e-3) on purpose: XLA's fusion changes float32
rounding between the compiled and the eager function, and a finite-difference gradient
magnifies that rounding by 1/step, so on inputs of ordinary size a finite-difference
solution would also lose its jit points although it compiles fine. On tiny inputs the loss
is tiny and so is its rounding error; the jit tests are about tracing, precision belongs to
the numerics tests.

`fit_linear_regression` is called in the sandbox with NumPy data made from its own hidden
`w, b`, with the defaults and with `steps` (and `lr`) passed as Python numbers, and compared
with the reference run of the same algorithm (lr, steps, init [1., 1.]). With the defaults it
runs 1000 steps, which a tutorial-style loop of eager steps takes seconds to do: one such call
(on hidden points) serves both tests of the defaults, the reference's theta and the recovered
line.

Points: numerics 18, jit 6 (24; with the public tests' 6, 30).
"""

import numpy as np
import pytest

from grader.testing import CheckFailure, assert_close, check_jit

GRAD_FUNCTIONS = ["grad_sse_wrt_x", "grad_sse_wrt_both", "sse_value_and_grad", "sse_with_aux_grad"]
# the fit runs hundreds of float32 steps: a little looser than the default
FIT_RTOL, FIT_ATOL = 1e-4, 1e-5


def pair(rng, shape, scale=4.0):
    """Random float32 x and y of the given shape, entries of magnitude about `scale`."""
    x = (scale * rng.standard_normal(shape)).astype(np.float32)
    y = (scale * rng.standard_normal(shape)).astype(np.float32)
    return x, y


def line_data(rng, n):
    """NumPy float32 points on a hidden line w * x + b, with a little noise; returns xs, ys, w, b."""
    w, b = float(rng.uniform(-3.0, 3.0)), float(rng.uniform(-2.0, 2.0))
    xs = rng.uniform(-2.0, 2.0, n).astype(np.float32)
    ys = (w * xs + b + 0.1 * rng.standard_normal(n)).astype(np.float32)
    return xs, ys, w, b


def check_gradient(submission, reference, rng, name, shape):
    x, y = pair(rng, shape)
    got = getattr(submission, name)(x, y)
    expected = getattr(reference, name)(x, y)
    label = f"{name}(x, y) for x, y of shape {shape}"
    try:
        assert_close(got, expected, name=label)
    except CheckFailure as exc:
        leaves = expected if isinstance(expected, tuple) else (expected,)
        scale = max(1.0, *(float(np.max(np.abs(np.asarray(leaf)))) for leaf in leaves))
        try:  # roughly right, to one or a few digits: an approximation, not the exact gradient
            assert_close(got, expected, rtol=0.1, atol=0.1 * scale, name=label)
        except CheckFailure:
            raise exc from None
        raise CheckFailure(
            exc.message + " — close, but not float32-exact",
            "This looks like an approximation such as finite differences, which loses about half "
            "of float32's digits. Differentiate with jax.grad (or jax.value_and_grad, jax.vjp): "
            "it is exact up to float rounding.",
        ) from None


# --------------------------------------------------------------------------- numerics (18)


@pytest.mark.category("numerics")
@pytest.mark.points(3)
@pytest.mark.parametrize("shape", [(16,), (64,), (6, 8)])
def test_grad_sse_wrt_x_numerics(submission, reference, rng, shape):
    """grad_sse_wrt_x is the exact gradient with respect to x (jax.grad, not finite differences)."""
    check_gradient(submission, reference, rng, "grad_sse_wrt_x", shape)


@pytest.mark.category("numerics")
@pytest.mark.points(3)
@pytest.mark.parametrize("shape", [(32,), (4, 12)])
def test_grad_sse_wrt_both_numerics(submission, reference, rng, shape):
    """grad_sse_wrt_both returns the tuple (d/dx, d/dy), both exact."""
    check_gradient(submission, reference, rng, "grad_sse_wrt_both", shape)


@pytest.mark.category("numerics")
@pytest.mark.points(3)
@pytest.mark.parametrize("shape", [(24,), (64,)])
def test_sse_value_and_grad_numerics(submission, reference, rng, shape):
    """sse_value_and_grad returns the tuple (value, d/dx), both exact."""
    check_gradient(submission, reference, rng, "sse_value_and_grad", shape)


@pytest.mark.category("numerics")
@pytest.mark.points(3)
@pytest.mark.parametrize("shape", [(32,), (3, 16)])
def test_sse_with_aux_grad_numerics(submission, reference, rng, shape):
    """sse_with_aux_grad returns the tuple (d/dx, x - y): the gradient and the auxiliary output."""
    check_gradient(submission, reference, rng, "sse_with_aux_grad", shape)


# (number of points, keyword arguments): the defaults (converged), and short runs that depend on
# the initial theta, on lr and on steps, passed as Python numbers
FIT_CASES = {
    "defaults": (200, {}),
    "steps=5": (7, {"steps": 5}),
    "lr=0.05,steps=20": (40, {"lr": 0.05, "steps": 20}),
}
_WITH_DEFAULTS = pytest.StashKey[dict]()


def fit_with_defaults(request, submission, rng):
    """xs, ys, w, b and fit_linear_regression(xs, ys), called once per grading run, on 200
    hidden points (drawn with the first asking test's rng), for both tests of the defaults; a
    call that raised raises again.  Both tests must stay hidden: the second test's message may
    quote what the student's code printed during the first test's call, and the plugin scrubs
    a hidden test's message only of what was printed during that test."""
    kept = request.session.stash.setdefault(_WITH_DEFAULTS, {})
    if "data" not in kept:
        kept["data"] = line_data(rng, FIT_CASES["defaults"][0])
        try:
            kept["theta"] = submission.fit_linear_regression(*kept["data"][:2])
        except Exception as exc:
            kept["raised"] = exc
    if "raised" in kept:
        raise kept["raised"]
    return (*kept["data"], kept["theta"])


@pytest.mark.category("numerics")
@pytest.mark.points(4)
@pytest.mark.parametrize("case", list(FIT_CASES))
def test_fit_linear_regression_numerics(request, submission, reference, rng, case):
    """fit_linear_regression runs `steps` gradient-descent updates with step `lr` from [1., 1.]."""
    n, kwargs = FIT_CASES[case]
    if case == "defaults":
        xs, ys, _, _, got = fit_with_defaults(request, submission, rng)
    else:
        xs, ys, _, _ = line_data(rng, n)
        got = submission.fit_linear_regression(xs, ys, **kwargs)
    call = ", ".join(["xs", "ys"] + [f"{k}={v}" for k, v in kwargs.items()])
    assert_close(
        got,
        reference.fit_linear_regression(xs, ys, **kwargs),
        rtol=FIT_RTOL,
        atol=FIT_ATOL,
        name=f"fit_linear_regression({call}) on {n} points",
    )


@pytest.mark.category("numerics")
@pytest.mark.points(2)
def test_fit_linear_regression_recovers_the_line(request, submission, rng):
    """With the defaults, fit_linear_regression recovers the hidden w and b of noisy data."""
    _, _, w, b, got = fit_with_defaults(request, submission, rng)
    try:
        assert_close(got, np.array([w, b], dtype=np.float32), rtol=0.0, atol=0.1, name="theta = [w, b]")
    except CheckFailure as exc:
        raise CheckFailure(
            # not the line's w and b: they are this hidden test's inputs
            f"fit_linear_regression(xs, ys) did not recover the line y = w * x + b the data was drawn from: {exc.message}",
            "Each step is theta - lr * jax.grad(mse)(theta, xs, ys), from theta = jnp.array([1., 1.]), "
            "with mse the mean of (w * x + b - y) ** 2.",
        ) from None


# --------------------------------------------------------------------------- jit (6)


@pytest.mark.category("jit")
@pytest.mark.points(6)
@pytest.mark.parametrize("name", GRAD_FUNCTIONS)
def test_works_under_jit(submission, reference, rng, name):
    """The function works under jax.jit (no NumPy conversion, no Python branch on values)."""
    check_jit(submission, name, pair(rng, (8,), scale=1e-3), reference=getattr(reference, name))
