"""Public tests for `stop_gradient`: small fixed inputs, one point each.

Run them with `jaxgrade check stop_gradient.ipynb`. The hidden tests use other, random inputs
(other state sizes, batches of one and of many transitions) and also check that your functions
work under jax.jit and that batched_td_update is vectorized over the batch.
"""

import numpy as np
import pytest

from grader.testing import CheckFailure, assert_close, check_jit, check_vectorized

# The tutorial's transition: theta, s_tm1, r_t, s_t.
THETA = np.array([0.1, -0.1, 0.0], dtype=np.float32)
S_TM1 = np.array([1.0, 2.0, -1.0], dtype=np.float32)
R_T = np.float32(1.0)
S_T = np.array([2.0, 1.0, 0.0], dtype=np.float32)

# A batch of three transitions for the same theta.
S_TM1S = np.array([[1.0, 2.0, -1.0], [0.0, 1.0, 1.0], [2.0, -1.0, 0.5]], dtype=np.float32)
R_TS = np.array([1.0, -0.5, 2.0], dtype=np.float32)
S_TS = np.array([[2.0, 1.0, 0.0], [1.0, 1.0, -1.0], [0.0, 0.0, 3.0]], dtype=np.float32)


def td_error_np(theta, s_tm1, r_t, s_t):
    """r_t + v(s_t) - v(s_tm1), for the linear value function v(s) = theta . s."""
    return r_t + np.dot(theta, s_t) - np.dot(theta, s_tm1)


def semi_gradient_np(theta, s_tm1, r_t, s_t):
    """The gradient of -0.5 * (target - v(s_tm1))**2 with the target held constant."""
    return (td_error_np(theta, s_tm1, r_t, s_t) * s_tm1).astype(np.float32)


def batched_np(theta, s_tm1s, r_ts, s_ts):
    rows = [semi_gradient_np(theta, a, r, b) for a, r, b in zip(s_tm1s, r_ts, s_ts, strict=True)]
    return np.mean(rows, axis=0).astype(np.float32)


@pytest.mark.category("numerics")
@pytest.mark.points(1)
def test_td_loss_with_stop_gradient_value(submission):
    """td_loss_with_stop_gradient has the value of td_loss: -0.5 * 1.2**2 = -0.72."""
    got = submission.td_loss_with_stop_gradient(THETA, S_TM1, R_T, S_T)
    assert_close(got, np.float32(-0.72), name="td_loss_with_stop_gradient(theta, s_tm1, r_t, s_t)")


@pytest.mark.category("numerics")
@pytest.mark.points(1)
def test_td_update(submission):
    """td_update is the semi-gradient: [1.2, 2.4, -1.2] for the tutorial's transition."""
    got = submission.td_update(THETA, S_TM1, R_T, S_T)
    try:
        assert_close(got, semi_gradient_np(THETA, S_TM1, R_T, S_T), name="td_update(theta, s_tm1, r_t, s_t)")
    except CheckFailure as exc:
        full_gradient = td_error_np(THETA, S_TM1, R_T, S_T) * (S_TM1 - S_T)  # [-1.2, 1.2, -1.2]
        if np.shape(got) != full_gradient.shape or not np.allclose(got, full_gradient, rtol=1e-4, atol=1e-5):
            raise
        raise CheckFailure(
            f"{exc.message}; that is jax.grad(td_loss), the full gradient: the target is not held constant",
            "Wrap the TD target `r_t + value_fn(theta, s_t)` in `jax.lax.stop_gradient`.",
        ) from None


@pytest.mark.category("numerics")
@pytest.mark.points(1)
def test_batched_td_update(submission):
    """batched_td_update is the mean of td_update over a batch of three transitions."""
    got = submission.batched_td_update(THETA, S_TM1S, R_TS, S_TS)
    assert_close(got, batched_np(THETA, S_TM1S, R_TS, S_TS), name="batched_td_update(theta, s_tm1s, r_ts, s_ts)")


@pytest.mark.category("jit")
@pytest.mark.points(1)
def test_td_update_under_jit(submission):
    """td_update works under jax.jit (wrong numbers are counted under numerics, not here)."""
    check_jit(submission, "td_update", (THETA, S_TM1, R_T, S_T), reference=semi_gradient_np)


@pytest.mark.category("vectorization")
@pytest.mark.points(1)
def test_batched_td_update_is_vectorized(submission):
    """batched_td_update traces once for any batch size (no Python loop over the batch).

    Wrong numbers are counted under numerics: the one traced module must agree with the
    right answer or, failing that, with your own eager result for each batch size."""
    cases = [(THETA, S_TM1S[:1], R_TS[:1], S_TS[:1]), (THETA, S_TM1S, R_TS, S_TS)]
    specs = [("3", "float32"), ("B, 3", "float32"), ("B", "float32"), ("B, 3", "float32")]
    check_vectorized(submission, "batched_td_update", specs, cases, reference=batched_np)
