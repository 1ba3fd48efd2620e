"""Hidden tests for `per_example_grads` (curriculum §5).

Inputs are random (the `rng` fixture, seeded per grading run and test), never the public ones:
a batch of one, a single parameter, batches smaller and larger than the number of parameters
(never equal to it, so that mapping over `params` by mistake always shows).
Points: numerics 9, vectorization 5, jit 4 (18; with the public tests' 4, 22).
"""

import numpy as np
import pytest

from grader.testing import CheckFailure, StudentRaised, assert_close, check_is_jitted, check_jit, check_vectorized

# (B, P): batch size and number of parameters
NUMERIC_SHAPES = [(1, 5), (2, 3), (7, 5), (64, 17), (4, 1)]


def make_args(rng, B, P):
    """params (P,), xs (B, P), ys (B,): random float32."""
    params = rng.standard_normal(P).astype(np.float32)
    xs = rng.standard_normal((B, P)).astype(np.float32)
    ys = rng.standard_normal(B).astype(np.float32)
    return params, xs, ys


def call(submission, name, *args):
    """The student's function on `args`; vmap's complaint about mismatched batch sizes, which
    comes from mapping over `params` too, gets a hint about `in_axes`."""
    try:
        return getattr(submission, name)(*args)
    except StudentRaised as exc:
        if not exc.says("inconsistent sizes"):
            raise
        raise CheckFailure(
            exc.message,  # it carries the lines of vmap's message that name each argument's size
            "params is the same for every example: do not map over it. Give vmap one in_axes entry "
            "per argument, None for params and 0 for xs and ys: in_axes=(None, 0, 0).",
        ) from None


def check_numerics(submission, reference, rng, name, B, P):
    args = make_args(rng, B, P)
    got = call(submission, name, *args)
    assert_close(got, getattr(reference, name)(*args), name=f"{name}(params, xs, ys) with B={B}, P={P}")


# --------------------------------------------------------------------------- numerics (9)


@pytest.mark.category("numerics")
@pytest.mark.points(4)
@pytest.mark.parametrize("B,P", NUMERIC_SHAPES)
def test_per_example_grads_numerics(submission, reference, rng, B, P):
    """Row b of per_example_grads is grad(loss_fn)(params, xs[b], ys[b])."""
    check_numerics(submission, reference, rng, "per_example_grads", B, P)


@pytest.mark.category("numerics")
@pytest.mark.points(3)
@pytest.mark.parametrize("B,P", [(1, 5), (7, 3), (64, 17)])
def test_batch_grad_numerics(submission, reference, rng, B, P):
    """batch_grad is the gradient of the mean loss over the batch."""
    check_numerics(submission, reference, rng, "batch_grad", B, P)


@pytest.mark.category("numerics")
@pytest.mark.points(2)
@pytest.mark.parametrize("B,P", [(6, 4), (48, 9)])
def test_mean_of_per_example_grads_is_batch_grad(submission, reference, rng, B, P):
    """The mean over the batch of the per-example gradients equals batch_grad. Each side is
    first compared with the reference, so the message blames the one that is wrong."""
    params, xs, ys = make_args(rng, B, P)
    per_example = call(submission, "per_example_grads", params, xs, ys)
    if not isinstance(per_example, np.ndarray) or per_example.shape != (B, P):
        what = f"shape {per_example.shape}" if isinstance(per_example, np.ndarray) else type(per_example).__name__
        raise CheckFailure(
            f"per_example_grads(params, xs, ys) with B={B}, P={P} returned {what}, not shape (B, P) = ({B}, {P})",
            "One gradient per example: map jax.grad(loss_fn) over the rows of xs and ys, not over params.",
        )
    want = reference.batch_grad(params, xs, ys)
    mean = per_example.astype(np.float64).mean(axis=0).astype(per_example.dtype)
    wrong = []
    for label, value, hint in (
        (
            "the mean of per_example_grads over the batch",
            mean,
            "Row b of per_example_grads is jax.grad(loss_fn)(params, xs[b], ys[b]): map over the rows of "
            "xs and ys only (in_axes=(None, 0, 0)).",
        ),
        (
            "batch_grad(params, xs, ys)",
            call(submission, "batch_grad", params, xs, ys),
            "The gradient of a mean is the mean of the gradients: batch_grad differentiates the loss "
            "averaged over the batch (loss_fn on the whole batch already averages).",
        ),
    ):
        try:
            assert_close(value, want, name=label)
        except CheckFailure as exc:
            wrong.append((exc.message, hint))
    if wrong:
        raise CheckFailure(
            "; ".join(message for message, _ in wrong)
            + f" — compared with the gradient of the mean loss over the batch (B={B}, P={P})",
            " ".join(hint for _, hint in wrong),
        )


# --------------------------------------------------------------------------- vectorization (5)

SPECS = [("5", "float32"), ("B, 5", "float32"), ("B", "float32")]


def check_batch_vectorized(submission, reference, rng, name):
    """One trace with a symbolic batch size, evaluated for several concrete batch sizes."""
    cases = [make_args(rng, B, 5) for B in (1, 6, 64)]
    check_vectorized(submission, name, SPECS, cases, reference=getattr(reference, name))


@pytest.mark.category("vectorization")
@pytest.mark.points(3)
def test_per_example_grads_vectorized(submission, reference, rng):
    """per_example_grads is vectorized over the batch: no Python loop over the examples."""
    check_batch_vectorized(submission, reference, rng, "per_example_grads")


@pytest.mark.category("vectorization")
@pytest.mark.points(2)
def test_batch_grad_vectorized(submission, reference, rng):
    """batch_grad is vectorized over the batch: no Python loop over the examples."""
    check_batch_vectorized(submission, reference, rng, "batch_grad")


# --------------------------------------------------------------------------- jit (4)


@pytest.mark.category("jit")
@pytest.mark.points(2)
@pytest.mark.parametrize("name", ["per_example_grads", "batch_grad"])
def test_works_under_jit(submission, reference, rng, name):
    """The function works under jax.jit and gives its eager result."""
    check_jit(submission, name, make_args(rng, 9, 4), reference=getattr(reference, name))


@pytest.mark.category("jit")
@pytest.mark.points(2)
def test_per_example_grads_is_itself_jitted(submission, reference, rng):
    """per_example_grads is itself a jax.jit-compiled function (judged from its compiled code)."""
    args = make_args(rng, 6, 3)
    check_is_jitted(submission, "per_example_grads", args, reference=reference.per_example_grads)
