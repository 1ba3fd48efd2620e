"""Public tests for `vmap_convolve`: small fixed inputs, one check per function.

Run them with `jaxgrade check vmap_convolve.ipynb`. The hidden tests use other, random inputs
and also check vectorization, jit compatibility and purity.
"""

import numpy as np
import pytest

from grader.testing import assert_close, check_is_jitted, check_vectorized

XS = np.array([[0.0, 1.0, 2.0, 3.0, 4.0], [1.0, -1.0, 2.0, -2.0, 3.0]], dtype=np.float32)  # (B=2, N=5)
WS = np.array([[2.0, 3.0, 4.0], [1.0, 0.0, -1.0]], dtype=np.float32)  # (B=2, 3)
W = np.array([0.5, -1.0, 2.0], dtype=np.float32)  # (3,)


def convolve_np(x, w):
    """The given `convolve`, in NumPy: one dot product per window of three."""
    return np.array([np.dot(x[i - 1 : i + 2], w) for i in range(1, len(x) - 1)], dtype=np.float32)


@pytest.mark.category("numerics")
@pytest.mark.points(1)
def test_batched_convolve(submission):
    """batched_convolve(xs, ws) gives convolve(xs[b], ws[b]) in row b."""
    expected = np.stack([convolve_np(x, w) for x, w in zip(XS, WS)])  # [[11, 20, 29], [-1, 1, -1]]
    assert_close(submission.batched_convolve(XS, WS), expected, name="batched_convolve(xs, ws)")


@pytest.mark.category("numerics")
@pytest.mark.points(1)
def test_batched_convolve_shared_w(submission):
    """batched_convolve_shared_w(xs, w) uses the same w for every row."""
    expected = np.stack([convolve_np(x, W) for x in XS])
    assert_close(submission.batched_convolve_shared_w(XS, W), expected, name="batched_convolve_shared_w(xs, w)")


@pytest.mark.category("numerics")
@pytest.mark.points(1)
def test_batched_convolve_axis1(submission):
    """batched_convolve_axis1 maps over axis 1: (N, B), (3, B) -> (N-2, B)."""
    expected = np.stack([convolve_np(x, w) for x, w in zip(XS, WS)]).T  # shape (3, 2)
    got = submission.batched_convolve_axis1(XS.T.copy(), WS.T.copy())
    assert_close(got, expected, name="batched_convolve_axis1(xs.T, ws.T)")


@pytest.mark.category("numerics")
@pytest.mark.points(1)
def test_fast_batched_convolve(submission):
    """fast_batched_convolve gives the same numbers as batched_convolve."""
    expected = np.stack([convolve_np(x, w) for x, w in zip(XS, WS)])
    assert_close(submission.fast_batched_convolve(XS, WS), expected, name="fast_batched_convolve(xs, ws)")


@pytest.mark.category("jit")
@pytest.mark.points(1)
def test_fast_batched_convolve_is_jitted(submission):
    """fast_batched_convolve is a jax.jit-compiled function (judged from its compiled code)."""
    expected = np.stack([convolve_np(x, w) for x, w in zip(XS, WS)])
    check_is_jitted(submission, "fast_batched_convolve", (XS, WS), expected=expected)


@pytest.mark.category("numerics")
@pytest.mark.points(1)
def test_manually_vectorized_convolve(submission):
    """manually_vectorized_convolve gives the same numbers as batched_convolve."""
    expected = np.stack([convolve_np(x, w) for x, w in zip(XS, WS)])
    assert_close(submission.manually_vectorized_convolve(XS, WS), expected, name="manually_vectorized_convolve(xs, ws)")


@pytest.mark.category("vectorization")
@pytest.mark.points(1)
def test_batched_convolve_is_vectorized(submission):
    """batched_convolve traces once for any batch size (no Python loop over the batch)."""
    cases = [(XS[:1], WS[:1]), (XS, WS)]

    def reference(xs, ws):  # wrong numbers count under numerics only: the check falls back to eager results
        return np.stack([convolve_np(x, w) for x, w in zip(xs, ws, strict=True)])

    check_vectorized(
        submission, "batched_convolve", [("B, 5", "float32"), ("B, 3", "float32")], cases, reference=reference
    )
