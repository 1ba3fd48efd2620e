"""Public tests for `autodiff`: small fixed inputs, one point each.

Run them with `jaxgrade check autodiff.ipynb`. The hidden tests use other, random inputs
(longer vectors, 2-D arrays, other data for the fit), compare your gradients with jax.grad at
float32 precision (a finite-difference approximation is not precise enough), and check that
the gradient functions work under jax.jit.
"""

import numpy as np
import pytest

from grader.testing import CheckFailure, assert_close, check_jit

X = np.array([1.0, -2.0, 3.5, 0.5, 4.0, -1.5, 2.5, -3.0], dtype=np.float32)
Y = np.array([-2.0, 1.5, 0.5, 3.0, -4.0, 2.5, -0.5, 1.0], dtype=np.float32)
XS = np.array([0.0, 1.0, 2.0, 3.0, -1.0], dtype=np.float32)
YS = np.array([1.0, 3.0, 5.0, 7.0, -1.0], dtype=np.float32)  # exactly 2 * x + 1


def sse_np(x, y):
    """The given `sum_squared_error`, in NumPy."""
    return np.float32(np.sum((x - y) ** 2))


def dsse_dx_np(x, y):
    """Its gradient with respect to x, derived by hand: 2 * (x - y)."""
    return (2 * (x - y)).astype(np.float32)


def fit_np(xs, ys, lr=0.1, steps=1000):
    """Gradient descent on the mean squared error of w * x + b, from [1, 1], with hand-derived gradients."""
    xs, ys = xs.astype(np.float64), ys.astype(np.float64)
    w, b = 1.0, 1.0
    for _ in range(steps):
        r = w * xs + b - ys
        w, b = w - lr * 2 * np.mean(r * xs), b - lr * 2 * np.mean(r)
    return np.array([w, b], dtype=np.float32)


def assert_gradient(got, expected, name):
    """assert_close, with a hint when the values are only roughly right (finite differences)."""
    try:
        assert_close(got, expected, name=name)
    except CheckFailure as exc:
        try:
            assert_close(got, expected, rtol=0.1, atol=1.0, name=name)
        except CheckFailure:
            raise exc from None
        raise CheckFailure(
            exc.message + " — close, but not float32-exact",
            "This looks like an approximation such as finite differences, which loses about half "
            "of float32's digits. Differentiate with jax.grad (or jax.value_and_grad, jax.vjp): "
            "it is exact up to float rounding.",
        ) from None


@pytest.mark.category("numerics")
@pytest.mark.points(1)
def test_grad_sse_wrt_x(submission):
    """grad_sse_wrt_x(x, y) is 2 * (x - y), exactly as jax.grad computes it."""
    assert_gradient(submission.grad_sse_wrt_x(X, Y), dsse_dx_np(X, Y), name="grad_sse_wrt_x(x, y)")


@pytest.mark.category("numerics")
@pytest.mark.points(1)
def test_grad_sse_wrt_both(submission):
    """grad_sse_wrt_both(x, y) is the tuple (d/dx, d/dy)."""
    expected = (dsse_dx_np(X, Y), dsse_dx_np(Y, X))
    assert_gradient(submission.grad_sse_wrt_both(X, Y), expected, name="grad_sse_wrt_both(x, y)")


@pytest.mark.category("numerics")
@pytest.mark.points(1)
def test_sse_value_and_grad(submission):
    """sse_value_and_grad(x, y) is the tuple (sum_squared_error(x, y), d/dx)."""
    expected = (sse_np(X, Y), dsse_dx_np(X, Y))
    assert_gradient(submission.sse_value_and_grad(X, Y), expected, name="sse_value_and_grad(x, y)")


@pytest.mark.category("numerics")
@pytest.mark.points(1)
def test_sse_with_aux_grad(submission):
    """sse_with_aux_grad(x, y) is the tuple (d/dx, x - y)."""
    expected = (dsse_dx_np(X, Y), X - Y)
    assert_gradient(submission.sse_with_aux_grad(X, Y), expected, name="sse_with_aux_grad(x, y)")


@pytest.mark.category("numerics")
@pytest.mark.points(1)
def test_fit_linear_regression(submission):
    """fit_linear_regression finds w = 2, b = 1 on points of y = 2x + 1, and 5 steps give the expected theta."""
    assert_close(
        submission.fit_linear_regression(XS, YS), fit_np(XS, YS), rtol=1e-4, name="fit_linear_regression(xs, ys)"
    )
    assert_close(
        submission.fit_linear_regression(XS, YS, steps=5),
        fit_np(XS, YS, steps=5),
        rtol=1e-4,
        name="fit_linear_regression(xs, ys, steps=5)",
    )


@pytest.mark.category("jit")
@pytest.mark.points(1)
def test_grad_sse_wrt_x_under_jit(submission):
    """grad_sse_wrt_x works under jax.jit (no NumPy conversion of its traced arguments)."""
    x, y = X / 1000, Y / 1000  # small values: this test is about tracing, not precision
    check_jit(submission, "grad_sse_wrt_x", (x, y), reference=dsse_dx_np)
