"""Public tests for `pmap`: small fixed inputs, one point each, with 4 devices.

Run them with `jaxgrade check pmap.ipynb` (it starts JAX with 4 CPU devices, as the notebook's
first cell does). The hidden tests use other, random inputs (signals of length 3 and longer
ones, rows of one value and of many) and also check that both functions work under jax.jit.
Parallelism is judged from the compiled code: one program per device (jax.pmap) that does the
work on its own row, and for global_mean a collective (lax.psum).
"""

import numpy as np
import pytest

from grader.testing import CheckFailure, assert_close, check_parallel

D = 4  # devices, and rows: one row per device
XS = np.array(
    [[0.0, 1.0, 2.0, 3.0, 4.0], [1.0, -1.0, 2.0, -2.0, 3.0], [5.0, 4.0, 3.0, 2.0, 1.0], [0.5, 0.5, 0.5, 0.5, 0.5]],
    dtype=np.float32,
)  # (D=4, N=5)
WS = np.array([[2.0, 3.0, 4.0], [1.0, 0.0, -1.0], [0.0, 1.0, 0.0], [1.0, 1.0, 1.0]], dtype=np.float32)  # (D=4, 3)


def convolve_np(x, w):
    """The given `convolve`, in NumPy: one dot product per window of three."""
    return np.array([np.dot(x[i - 1 : i + 2], w) for i in range(1, len(x) - 1)], dtype=np.float32)


@pytest.mark.category("numerics")
@pytest.mark.points(1)
def test_parallel_convolve(submission):
    """parallel_convolve(xs, ws) gives convolve(xs[d], ws[d]) in row d."""
    expected = np.stack([convolve_np(x, w) for x, w in zip(XS, WS, strict=True)])  # (4, 3)
    assert_close(submission.parallel_convolve(XS, WS), expected, name="parallel_convolve(xs, ws)")


@pytest.mark.category("numerics")
@pytest.mark.points(1)
def test_global_mean(submission):
    """Every entry of global_mean(xs) is the mean of all of xs: here 1.525, four times."""
    expected = np.full(D, XS.mean(), dtype=np.float32)  # the rows' own means are 2, 0.6, 3, 0.5
    got = submission.global_mean(XS)
    try:
        assert_close(got, expected, name="global_mean(xs)")
    except CheckFailure as exc:
        if np.shape(got) != (D,) or not np.allclose(got, XS.mean(axis=1)):
            raise
        raise CheckFailure(
            f"{exc.message}; each entry is the mean of its own row only",
            "Combine the devices' row means with `lax.psum` over the pmapped axis (`jax.pmap(f, axis_name=...)`), "
            "then divide by the number of devices.",
        ) from None


@pytest.mark.category("parallelism")
@pytest.mark.points(1)
def test_parallel_convolve_runs_on_every_device(submission):
    """parallel_convolve is compiled as one program per device on the 4 devices (jax.pmap, not
    vmap), and gives the right numbers."""
    expected = np.stack([convolve_np(x, w) for x, w in zip(XS, WS, strict=True)])
    check_parallel(submission, "parallel_convolve", (XS, WS), devices=D, expected=expected)


@pytest.mark.category("parallelism")
@pytest.mark.points(1)
def test_global_mean_runs_on_every_device(submission):
    """global_mean runs one program per device on the 4 devices, which combine their row means
    with a collective (lax.psum), and gives the right numbers."""
    expected = np.full(D, XS.mean(), dtype=np.float32)
    check_parallel(submission, "global_mean", (XS,), devices=D, collective=True, expected=expected)
