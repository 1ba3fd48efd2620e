"""Public tests for `functional_updates`: small fixed inputs, one point each.

Run them with `jaxgrade check functional_updates.ipynb`. The hidden tests use other, random
inputs (N = 1 up to 64, many repeated indices), hand your functions read-only NumPy arrays,
check that the caller's arrays are unchanged and that repeated calls agree, and run every
function under `jax.jit`, where its arguments are traced JAX arrays.
"""

import contextlib

import numpy as np
import pytest

from grader.testing import CheckFailure, StudentRaised, assert_close, check_jit, check_pure

X = np.array([1.5, -2.0, 0.0, 4.0, -0.5], dtype=np.float32)

# errors this assignment is about, by a piece of their message, and what to do instead
HINTS = {
    "has no attribute 'at'": "NumPy arrays have no `.at` (it is a JAX array property), and the grader passes NumPy "
    "arrays: convert first with `x = jnp.asarray(x)`, then `x.at[i].set(v)`.",
    "immutable": "JAX arrays cannot be assigned to: build a new array with `x.at[i].set(v)` or `.add(v)`, or with `jnp.where`.",
    "read-only": "Never assign into an argument: the caller's array may be shared or read-only. Convert with "
    "`jnp.asarray(x)` and build a new array with `x.at[i].set(v)` / `.add(v)` or `jnp.where`.",
    "values differ": "Repeated indices must accumulate: `x.at[idx].add(amount)` adds every amount, while "
    "`x.at[idx].set(x[idx] + amount)` (or NumPy's `y[idx] += amount`) counts a repeated index once.",
}


@contextlib.contextmanager
def teaching(*keys):
    """Adds the hint of HINTS[key] to a failure whose message contains that key."""
    try:
        yield
    except (StudentRaised, CheckFailure) as exc:
        said = exc.says if isinstance(exc, StudentRaised) else (lambda text: False)
        extra = next((HINTS[k] for k in keys or HINTS if k in exc.message or said(k)), "")
        if not extra:
            raise
        raise CheckFailure(exc.message, f"{exc.hint} {extra}".strip()) from None


@pytest.mark.category("numerics")
@pytest.mark.points(1)
def test_set_first(submission):
    """set_first(x, value) is x with element 0 replaced by value."""
    expected = np.array([9.0, -2.0, 0.0, 4.0, -0.5], dtype=np.float32)
    with teaching("has no attribute 'at'", "immutable", "read-only"):
        assert_close(submission.set_first(X, 9.0), expected, name="set_first(x, 9.0)")


@pytest.mark.category("purity")
@pytest.mark.points(1)
def test_set_first_leaves_x_unchanged(submission):
    """set_first works on a read-only NumPy array and leaves it unchanged."""
    with teaching("has no attribute 'at'", "immutable", "read-only"):
        check_pure(submission, "set_first", (X, 9.0), readonly=True)


@pytest.mark.category("numerics")
@pytest.mark.points(1)
def test_increment_at_repeated_index(submission):
    """increment_at adds the amount once per occurrence of an index: index 3 appears twice."""
    idx = np.array([3, 0, 3], dtype=np.int32)
    expected = np.array([2.5, -2.0, 0.0, 6.0, -0.5], dtype=np.float32)
    with teaching():
        assert_close(submission.increment_at(X, idx, 1.0), expected, name="increment_at(x, [3, 0, 3], 1.0)")


@pytest.mark.category("numerics")
@pytest.mark.points(1)
def test_clamp_negatives(submission):
    """clamp_negatives replaces the negative entries by 0."""
    expected = np.array([1.5, 0.0, 0.0, 4.0, 0.0], dtype=np.float32)
    with teaching("has no attribute 'at'", "immutable", "read-only"):
        assert_close(submission.clamp_negatives(X), expected, name="clamp_negatives(x)")


@pytest.mark.category("jit")
@pytest.mark.points(1)
def test_clamp_negatives_under_jit(submission):
    """clamp_negatives works under jax.jit, where x is a tracer (no boolean-mask indexing)."""
    check_jit(submission, "clamp_negatives", (X,), expected=np.maximum(X, 0))
