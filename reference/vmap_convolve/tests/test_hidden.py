"""Hidden tests for `vmap_convolve` (curriculum §1).

Inputs are random (the `rng` fixture, seeded per grading run and test), never the public ones.
Points: numerics 15, vectorization 9, jit 6, purity 3 (33; with the public tests' 7, 40).
"""

import numpy as np
import pytest

from grader.testing import assert_close, check_is_jitted, check_jit, check_no_vmap, check_pure, check_vectorized

FUNCTIONS = [
    "batched_convolve",
    "batched_convolve_shared_w",
    "batched_convolve_axis1",
    "fast_batched_convolve",
    "manually_vectorized_convolve",
]
# (B, N): a batch of one, the shortest signal (N = 3), non-square shapes, a large batch.
SHAPES = [(1, 3), (2, 17), (7, 5), (64, 17), (64, 3)]


def make_args(rng, name, B, N):
    """Random float32 arguments for `name`, with batch size B and signal length N."""

    def normal(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    if name == "batched_convolve_shared_w":
        return normal(B, N), normal(3)
    if name == "batched_convolve_axis1":
        return normal(N, B), normal(3, B)
    return normal(B, N), normal(B, 3)


def symbolic_specs(name, N):
    """Argument specs with a symbolic batch size B (and a fixed signal length N)."""
    if name == "batched_convolve_shared_w":
        return [(f"B, {N}", "float32"), ("3", "float32")]
    if name == "batched_convolve_axis1":
        return [(f"{N}, B", "float32"), ("3, B", "float32")]
    return [(f"B, {N}", "float32"), ("B, 3", "float32")]


def check_numerics(submission, reference, rng, name, B, N):
    args = make_args(rng, name, B, N)
    got = getattr(submission, name)(*args)
    assert_close(got, getattr(reference, name)(*args), name=f"{name} with B={B}, N={N}")


# --------------------------------------------------------------------------- numerics (15)


@pytest.mark.category("numerics")
@pytest.mark.points(3)
@pytest.mark.parametrize("B,N", SHAPES)
def test_batched_convolve_numerics(submission, reference, rng, B, N):
    """batched_convolve matches convolve row by row on random batches."""
    check_numerics(submission, reference, rng, "batched_convolve", B, N)


@pytest.mark.category("numerics")
@pytest.mark.points(3)
@pytest.mark.parametrize("B,N", SHAPES)
def test_batched_convolve_shared_w_numerics(submission, reference, rng, B, N):
    """batched_convolve_shared_w applies one shared window to every row."""
    check_numerics(submission, reference, rng, "batched_convolve_shared_w", B, N)


@pytest.mark.category("numerics")
@pytest.mark.points(3)
@pytest.mark.parametrize("B,N", SHAPES)
def test_batched_convolve_axis1_numerics(submission, reference, rng, B, N):
    """batched_convolve_axis1 maps over axis 1 and returns (N-2, B)."""
    check_numerics(submission, reference, rng, "batched_convolve_axis1", B, N)


@pytest.mark.category("numerics")
@pytest.mark.points(3)
@pytest.mark.parametrize("B,N", SHAPES)
def test_fast_batched_convolve_numerics(submission, reference, rng, B, N):
    """fast_batched_convolve matches convolve row by row on random batches."""
    check_numerics(submission, reference, rng, "fast_batched_convolve", B, N)


@pytest.mark.category("numerics")
@pytest.mark.points(3)
@pytest.mark.parametrize("B,N", SHAPES)
def test_manually_vectorized_convolve_numerics(submission, reference, rng, B, N):
    """manually_vectorized_convolve matches convolve row by row on random batches."""
    check_numerics(submission, reference, rng, "manually_vectorized_convolve", B, N)


# --------------------------------------------------------------------------- vectorization (10)


def check_batch_vectorized(submission, reference, rng, name, N=9):
    """One trace with a symbolic batch size, evaluated for several concrete batch sizes."""
    cases = [make_args(rng, name, B, N) for B in (1, 5, 64)]
    check_vectorized(submission, name, symbolic_specs(name, N), cases, reference=getattr(reference, name))


@pytest.mark.category("vectorization")
@pytest.mark.points(1)
def test_batched_convolve_vectorized(submission, reference, rng):
    """batched_convolve is vectorized: no Python loop over the batch."""
    check_batch_vectorized(submission, reference, rng, "batched_convolve")


@pytest.mark.category("vectorization")
@pytest.mark.points(2)
def test_batched_convolve_shared_w_vectorized(submission, reference, rng):
    """batched_convolve_shared_w is vectorized: no Python loop over the batch."""
    check_batch_vectorized(submission, reference, rng, "batched_convolve_shared_w")


@pytest.mark.category("vectorization")
@pytest.mark.points(2)
def test_batched_convolve_axis1_vectorized(submission, reference, rng):
    """batched_convolve_axis1 is vectorized over axis 1: no Python loop over the batch."""
    check_batch_vectorized(submission, reference, rng, "batched_convolve_axis1")


@pytest.mark.category("vectorization")
@pytest.mark.points(1)
def test_fast_batched_convolve_vectorized(submission, reference, rng):
    """fast_batched_convolve is vectorized: no Python loop over the batch."""
    check_batch_vectorized(submission, reference, rng, "fast_batched_convolve")


@pytest.mark.category("vectorization")
@pytest.mark.points(1)
def test_manually_vectorized_convolve_vectorized(submission, reference, rng):
    """manually_vectorized_convolve is vectorized: no Python loop over the batch."""
    check_batch_vectorized(submission, reference, rng, "manually_vectorized_convolve")


@pytest.mark.category("vectorization")
@pytest.mark.points(2)
def test_manually_vectorized_convolve_no_vmap(submission, reference, rng):
    """manually_vectorized_convolve is vectorized by hand, without jax.vmap (and works)."""
    check_no_vmap(
        submission,
        "manually_vectorized_convolve",
        make_args(rng, "manually_vectorized_convolve", 4, 9),
        reference=reference.manually_vectorized_convolve,
    )


# --------------------------------------------------------------------------- jit (6)


@pytest.mark.category("jit")
@pytest.mark.points(4)
@pytest.mark.parametrize("name", FUNCTIONS)
def test_works_under_jit(submission, reference, rng, name):
    """The function works under jax.jit and gives its eager result."""
    check_jit(submission, name, make_args(rng, name, 7, 11), reference=getattr(reference, name))


@pytest.mark.category("jit")
@pytest.mark.points(2)
def test_fast_batched_convolve_is_jitted(submission, reference, rng):
    """fast_batched_convolve is itself a jax.jit-compiled function (judged from its compiled code)."""
    args = make_args(rng, "fast_batched_convolve", 6, 10)
    check_is_jitted(submission, "fast_batched_convolve", args, reference=reference.fast_batched_convolve)


# --------------------------------------------------------------------------- purity (3)


@pytest.mark.category("purity")
@pytest.mark.points(3)
@pytest.mark.parametrize("name", FUNCTIONS)
def test_pure(submission, reference, rng, name):
    """The function leaves its inputs unchanged and repeats its (right) result exactly."""
    check_pure(submission, name, make_args(rng, name, 6, 8), reference=getattr(reference, name))
