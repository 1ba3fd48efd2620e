"""Public tests for `jit_control_flow`: small fixed inputs, one point each.

Run them with `jaxgrade check jit_control_flow.ipynb`. The hidden tests use other, random
inputs (scalars and arrays, n = 0, larger n) and also check that your functions are traced
once, compile only when they must, and work under jax.jit with traced arguments.
"""

import numpy as np
import pytest

from grader.testing import assert_close, check_is_jitted, check_jit

X = np.array([-2.0, -0.5, 0.0, 0.5, 3.0], dtype=np.float32)


def f_np(x):
    """The given `f`, elementwise, in NumPy: x where x > 0, else 2 * x."""
    return np.where(x > 0, x, 2 * x).astype(np.float32)


def selu_np(x, alpha=1.67, lambda_=1.05):
    """The given `selu`, in NumPy."""
    return (lambda_ * np.where(x > 0, x, alpha * np.exp(x) - alpha)).astype(np.float32)


@pytest.mark.category("numerics")
@pytest.mark.points(1)
def test_f_jittable(submission):
    """f_jittable equals f on a positive and a negative scalar, and elementwise on an array."""
    assert_close(submission.f_jittable(np.float32(1.5)), np.float32(1.5), name="f_jittable(1.5)")
    assert_close(submission.f_jittable(np.float32(-1.5)), np.float32(-3.0), name="f_jittable(-1.5)")
    assert_close(submission.f_jittable(X), f_np(X), name="f_jittable([-2, -0.5, 0, 0.5, 3])")


@pytest.mark.category("jit")
@pytest.mark.points(1)
def test_f_jittable_under_jit(submission):
    """f_jittable works under jax.jit, where x is a tracer (no Python `if` on its value)."""
    check_jit(submission, "f_jittable", (X,), reference=f_np)


@pytest.mark.category("numerics")
@pytest.mark.points(1)
def test_g_static(submission):
    """g_static(x, n) returns x + n for a Python int n."""
    assert_close(submission.g_static(X, 3), X + 3, name="g_static(x, 3)")


@pytest.mark.category("numerics")
@pytest.mark.points(1)
def test_g_traced(submission):
    """g_traced(x, n) returns x + n."""
    assert_close(submission.g_traced(X, 4), X + 4, name="g_traced(x, 4)")


@pytest.mark.category("jit")
@pytest.mark.points(1)
def test_g_traced_under_jit(submission):
    """g_traced works under jax.jit with n traced (an int32 array, not a Python int)."""
    check_jit(submission, "g_traced", (X, np.int32(4)), reference=lambda x, n: x + n)


@pytest.mark.category("numerics")
@pytest.mark.points(1)
def test_selu_jit(submission):
    """selu_jit gives the same numbers as selu."""
    assert_close(submission.selu_jit(X), selu_np(X), name="selu_jit(x)")


@pytest.mark.category("jit")
@pytest.mark.points(1)
def test_selu_jit_is_jitted(submission):
    """selu_jit is a jax.jit-compiled function (judged from its compiled code)."""
    check_is_jitted(submission, "selu_jit", (X,), expected=selu_np(X))


@pytest.mark.category("numerics")
@pytest.mark.points(1)
def test_g_loop_cached(submission):
    """g_loop_cached(x, n) returns x + n."""
    assert_close(submission.g_loop_cached(X, 5), X + 5, name="g_loop_cached(x, 5)")
