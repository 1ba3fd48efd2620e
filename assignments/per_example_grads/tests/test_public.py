"""Public tests for `per_example_grads`: small fixed inputs, one point each.

Run them with `jaxgrade check per_example_grads.ipynb`. The hidden tests use other, random
inputs (a batch of one, a single parameter, large batches), and also check that the mean of
your per-example gradients is your batch gradient, that both functions are vectorized over
the batch and work under jax.jit.
"""

import numpy as np
import pytest

from grader.testing import assert_close, check_is_jitted, check_vectorized

PARAMS = np.array([0.5, -1.0, 2.0], dtype=np.float32)  # P = 3
XS = np.array([[1.0, 2.0, 0.0], [0.0, -1.0, 1.0]], dtype=np.float32)  # B = 2 examples
YS = np.array([1.0, 2.0], dtype=np.float32)


def per_example_np(params, xs, ys):
    """Derived by hand: the gradient of (x . params - y) ** 2 is 2 * (x . params - y) * x."""
    return (2 * (xs @ params - ys)[:, None] * xs).astype(np.float32)


@pytest.mark.category("numerics")
@pytest.mark.points(1)
def test_per_example_grads(submission):
    """Row b of per_example_grads is the gradient of loss_fn on example b alone."""
    expected = per_example_np(PARAMS, XS, YS)  # [[-5, -10, 0], [0, -2, 2]]
    assert_close(submission.per_example_grads(PARAMS, XS, YS), expected, name="per_example_grads(params, xs, ys)")


@pytest.mark.category("numerics")
@pytest.mark.points(1)
def test_batch_grad(submission):
    """batch_grad is the gradient of the loss averaged over the batch."""
    expected = per_example_np(PARAMS, XS, YS).mean(axis=0)  # [-2.5, -6, 1]
    assert_close(submission.batch_grad(PARAMS, XS, YS), expected, name="batch_grad(params, xs, ys)")


@pytest.mark.category("jit")
@pytest.mark.points(1)
def test_per_example_grads_is_jitted(submission):
    """per_example_grads is a jax.jit-compiled function (judged from its compiled code)."""
    check_is_jitted(submission, "per_example_grads", (PARAMS, XS, YS), expected=per_example_np(PARAMS, XS, YS))


@pytest.mark.category("vectorization")
@pytest.mark.points(1)
def test_per_example_grads_is_vectorized(submission):
    """per_example_grads traces once for any batch size (no Python loop over the examples)."""
    cases = [(PARAMS, XS[:1], YS[:1]), (PARAMS, XS, YS)]
    specs = [("3", "float32"), ("B, 3", "float32"), ("B", "float32")]  # B: a symbolic batch size
    check_vectorized(submission, "per_example_grads", specs, cases, reference=per_example_np)
