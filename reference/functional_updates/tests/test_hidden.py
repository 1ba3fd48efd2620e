"""Hidden tests for `functional_updates` (curriculum §8).

Inputs are random (the `rng` fixture, seeded per grading run and test), never the public ones:
lengths from the smallest legal one (N = 1) to 64, exact zeros (the boundary of `x < 0`), and
for `increment_at` repeated indices in every case but the single-index one (an index repeated
up to five times, more than a hundred repeats in the largest case).

What the tests hand over, and why:
- numerics: fresh, writable NumPy arrays, so that a function that gets the numbers right by
  writing into its input still earns its numerics points (writing into the input is purity's
  business, not numerics');
- purity: the same call twice (`check_pure`): the two results must agree exactly (no global
  state) and equal the reference's (a function that writes into its input gives a wrong second
  result, whatever the sandbox reports), the caller's NumPy arrays must be unchanged afterwards
  (`.mutated`, reported by the sandbox), and, in a second test, the arrays are **read-only**
  (`readonly=True`: the operating system maps them read-only, as a caller's shared data would
  be), so writing into them raises `ValueError: assignment destination is read-only` and no
  flag makes them writable again. Scalars in these calls are Python numbers: `readonly=True` cannot set the flag on
  a NumPy scalar (see the report on the grader);
- jit: `check_jit` traces each function under `jax.jit`, so every argument is a traced JAX
  array: this is the JAX-array path of the contract (`.at` on a tracer, no NumPy conversion).
  The protocol has no way to send a concrete `jax.Array` to an eager call (a NumPy array
  arrives as NumPy), so an eager call on JAX arrays is not tested separately; every way we know
  to fail on a concrete JAX array (NumPy conversion, in-place assignment) also fails on a
  tracer.

Points: numerics 8, purity 6, jit 5 (19; with the public tests' 5, 24).
"""

import contextlib

import numpy as np
import pytest

from grader.testing import CheckFailure, StudentRaised, assert_close, check_jit, check_pure

FUNCTIONS = ["set_first", "increment_at", "clamp_negatives"]

# errors this assignment is about, by a piece of their message, and what to do instead
ARRAY_HINTS = {
    "has no attribute 'at'": "NumPy arrays have no `.at` (it is a JAX array property), and the grader passes NumPy "
    "arrays: convert first with `x = jnp.asarray(x)`, then `x.at[i].set(v)`.",
    "immutable": "JAX arrays cannot be assigned to: build a new array with `x.at[i].set(v)` or `.add(v)`, or with `jnp.where`.",
    "read-only": "Never assign into an argument: the caller's array may be shared or read-only. Convert with "
    "`jnp.asarray(x)` and build a new array with `x.at[i].set(v)` / `.add(v)` or `jnp.where`.",
}


REPEATS_HINT = (
    "Repeated indices must accumulate: `x.at[idx].add(amount)` adds every amount. Reading the old values "
    "first (`x.at[idx].set(x[idx] + amount)`, or NumPy's `y[idx] += amount`) reads each entry once, so "
    "only one of the amounts of a repeated index survives."
)


@contextlib.contextmanager
def teaching():
    """Adds this assignment's hint to a failure whose message names one of ARRAY_HINTS' errors."""
    try:
        yield
    except (StudentRaised, CheckFailure) as exc:
        said = exc.says if isinstance(exc, StudentRaised) else (lambda text: False)
        extra = next((h for key, h in ARRAY_HINTS.items() if key in exc.message or said(key)), "")
        if not extra or extra in exc.hint:
            raise
        raise CheckFailure(exc.message, f"{exc.hint} {extra}".strip()) from None


def normal(rng, *shape):
    """float32 values of both signs, with some exact zeros."""
    x = (3 * rng.standard_normal(shape)).astype(np.float32)
    if x.size >= 3:
        flat = x.reshape(-1)
        flat[rng.choice(flat.size, size=max(1, flat.size // 5), replace=False)] = 0.0
    return x


def indices(rng, n, k, *, repeats=True):
    """k int32 indices into range(n); with ``repeats``, at least one index occurs several times."""
    idx = rng.integers(0, n, size=k).astype(np.int32)
    if repeats and k >= 2:
        idx[rng.choice(k, size=max(2, k // 3), replace=False)] = idx[0]
    return idx


# --------------------------------------------------------------------------- numerics (8)

SET_FIRST_CASES = {  # name -> (x, value)
    "n1": lambda rng: (normal(rng, 1), float(rng.uniform(-5, 5))),
    "n2": lambda rng: (normal(rng, 2), float(rng.uniform(-5, 5))),
    "n17": lambda rng: (normal(rng, 17), 0.0),
    "int32": lambda rng: (rng.integers(-9, 10, size=6).astype(np.int32), int(rng.integers(10, 99))),
}


@pytest.mark.category("numerics")
@pytest.mark.points(2)
@pytest.mark.parametrize("case", list(SET_FIRST_CASES))
def test_set_first_numerics(submission, reference, rng, case):
    """set_first(x, value) equals x with element 0 replaced by value, in x's dtype."""
    x, value = SET_FIRST_CASES[case](rng)
    with teaching():
        got = submission.set_first(x, value)
    assert_close(got, reference.set_first(x, value), name=f"set_first ({case})")


INCREMENT_CASES = {  # name -> (x, idx, amount)
    # one scalar amount, added once per occurrence of an index
    "repeats-scalar": lambda rng: (normal(rng, 8), indices(rng, 8, 6), float(rng.uniform(0.5, 3))),
    # one amount per index
    "repeats-per-index": lambda rng: (normal(rng, 17), indices(rng, 17, 10), normal(rng, 10) + 1),
    # every index the same
    "all-same": lambda rng: (normal(rng, 3), np.full(5, 1, dtype=np.int32), normal(rng, 5) + 1),
    # the smallest case: N = 1, one index
    "single": lambda rng: (normal(rng, 1), np.zeros(1, dtype=np.int32), float(rng.uniform(0.5, 3))),
    # many more indices than entries
    "large": lambda rng: (normal(rng, 64), indices(rng, 64, 200), normal(rng, 200)),
}


@pytest.mark.category("numerics")
@pytest.mark.points(4)
@pytest.mark.parametrize("case", list(INCREMENT_CASES))
def test_increment_at_numerics(submission, reference, rng, case):
    """increment_at adds amount at each index; a repeated index gets every one of its amounts."""
    x, idx, amount = INCREMENT_CASES[case](rng)
    with teaching():
        got = submission.increment_at(x, idx, amount)
    want = reference.increment_at(x, idx, amount)
    try:
        assert_close(got, want, name=f"increment_at ({case})")
    except CheckFailure as exc:
        counts = np.bincount(idx, minlength=x.size)
        hint = exc.hint
        if counts.max() > 1:
            hint = REPEATS_HINT
        raise CheckFailure(exc.message, hint) from None


@pytest.mark.category("numerics")
@pytest.mark.points(2)
@pytest.mark.parametrize("shape", [(1,), (17,), (4, 5)])
def test_clamp_negatives_numerics(submission, reference, rng, shape):
    """clamp_negatives replaces every negative entry by 0 and keeps the others."""
    x = normal(rng, *shape)
    if x.size == 1:
        x = -np.abs(x) - 1  # a single, negative entry
    with teaching():
        got = submission.clamp_negatives(x)
    assert_close(got, reference.clamp_negatives(x), name=f"clamp_negatives on shape {shape}")


# --------------------------------------------------------------------------- purity (6)


def pure_args(rng, name):
    """Arguments for the purity checks: NumPy arrays and Python numbers (no NumPy scalars)."""
    if name == "set_first":
        return normal(rng, 7), float(rng.uniform(-5, 5))
    if name == "increment_at":
        return normal(rng, 9), indices(rng, 9, 6), normal(rng, 6)
    return (normal(rng, 3, 4),)


@pytest.mark.category("purity")
@pytest.mark.points(3)
@pytest.mark.parametrize("name", FUNCTIONS)
def test_inputs_unchanged(submission, reference, rng, name):
    """The caller's NumPy arrays are unchanged after two calls, and both results are right (a
    function that writes into its input, or keeps state, gives a wrong second result)."""
    with teaching():
        check_pure(submission, name, pure_args(rng, name), readonly=False, reference=getattr(reference, name))


@pytest.mark.category("purity")
@pytest.mark.points(3)
@pytest.mark.parametrize("name", FUNCTIONS)
def test_read_only_inputs(submission, reference, rng, name):
    """The function works on read-only NumPy arrays (the operating system maps them read-only,
    so no flag makes them writable again): it never writes into its arguments."""
    with teaching():
        check_pure(submission, name, pure_args(rng, name), readonly=True, reference=getattr(reference, name))


# --------------------------------------------------------------------------- jit (5)

JIT_CASES = {  # name -> (function, make args); scalars are NumPy scalars so that they are traced
    "set_first": ("set_first", lambda rng: (normal(rng, 9), np.float32(rng.uniform(-5, 5)))),
    "increment_at-per-index": ("increment_at", lambda rng: (normal(rng, 12), indices(rng, 12, 7), normal(rng, 7))),
    "increment_at-scalar": (
        "increment_at",
        lambda rng: (normal(rng, 5), indices(rng, 5, 4), np.float32(rng.uniform(0.5, 3))),
    ),
    "clamp_negatives-1d": ("clamp_negatives", lambda rng: (normal(rng, 17),)),
    "clamp_negatives-2d": ("clamp_negatives", lambda rng: (normal(rng, 3, 4),)),
}


@pytest.mark.category("jit")
@pytest.mark.points(5)
@pytest.mark.parametrize("case", list(JIT_CASES))
def test_works_under_jit(submission, reference, rng, case):
    """The function works under jax.jit with every argument traced (x, idx and amount are JAX tracers)."""
    name, make_args = JIT_CASES[case]
    with teaching():
        check_jit(submission, name, make_args(rng), reference=getattr(reference, name))
