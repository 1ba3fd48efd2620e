"""Hidden tests for `stop_gradient` (curriculum §7).

Inputs are random (the `rng` fixture, seeded per grading run and test), never the public ones:
state sizes P of 1, 4 and 9 (the public tests use 3), batches of 1, 7 and 64 transitions.
A missing or misplaced `stop_gradient` is caught by gradients, never by reading the student's
source: without it the gradient is the full one, (target - v) * (s_tm1 - s_t); on v_tm1 it is
-(target - v) * s_t; on the whole loss it is 0. Two gradients are checked:
- the gradient of the student's own td_loss_with_stop_gradient, taken on the trusted side: the
  function is exported with `vjp_order=1` and the evaluator (which never runs student code)
  differentiates the module with respect to theta. Its value alone says nothing about
  stop_gradient (`td_loss_with_stop_gradient = td_loss` has the right value), and a correct
  td_update written by hand must not stand in for it (issue 10);
- td_update's numbers.
Points: numerics 10, jit 3, vectorization 3 (16; with the public tests' 5, 21). The loss's
gradient test (3) took its points from numerics tests that stay: the loss's value 3 -> 2,
td_update 4 -> 3, batched_td_update 3 -> 2, so the total is unchanged. Vectorization: the
module traced with a symbolic batch must not loop over the batch (`lax.map`/`lax.scan` is
sequential), judged from the module.
"""

import numpy as np
import pytest

from grader.testing import (
    CheckFailure,
    StudentRaised,
    SubmissionError,
    assert_close,
    check_jit,
    check_vectorized,
    hint_for,
)

FUNCTIONS = ["td_loss_with_stop_gradient", "td_update", "batched_td_update"]
# gradients come from a difference of two dot products: allow a few float32 roundings more
GRAD_TOL = {"rtol": 1e-4, "atol": 1e-5}


def transition(rng, P):
    """A random theta (P,) and one transition: s_tm1 (P,), r_t (), s_t (P,), all float32."""
    theta = (0.5 * rng.standard_normal(P)).astype(np.float32)
    s_tm1 = rng.standard_normal(P).astype(np.float32)
    r_t = np.float32(rng.standard_normal())
    s_t = rng.standard_normal(P).astype(np.float32)
    return theta, s_tm1, r_t, s_t


def batch(rng, B, P):
    """A random theta (P,) and B transitions: s_tm1s (B, P), r_ts (B,), s_ts (B, P)."""
    theta = (0.5 * rng.standard_normal(P)).astype(np.float32)
    s_tm1s = rng.standard_normal((B, P)).astype(np.float32)
    r_ts = rng.standard_normal(B).astype(np.float32)
    s_ts = rng.standard_normal((B, P)).astype(np.float32)
    return theta, s_tm1s, r_ts, s_ts


def diagnose_update(got, theta, s_tm1, r_t, s_t):
    """What a wrong td_update equals, if it is one of the classic misplacements of stop_gradient."""
    theta, s_tm1, s_t = (np.asarray(a, dtype=np.float64) for a in (theta, s_tm1, s_t))
    delta = float(r_t) + theta @ s_t - theta @ s_tm1  # target - v(s_tm1)
    known = [
        (
            "the full gradient of td_loss, (target - v) * (s_tm1 - s_t): the target is not held constant",
            delta * (s_tm1 - s_t),
        ),
        ("-(target - v) * s_t: the gradient flows through the target instead of v(s_tm1)", -delta * s_t),
        ("zero: no gradient flows at all (is the whole loss inside stop_gradient?)", np.zeros_like(theta)),
    ]
    got = np.asarray(got)
    for what, value in known:
        if got.shape == value.shape and np.allclose(got, value, rtol=1e-4, atol=1e-5):
            return what
    return ""


# --------------------------------------------------------------------------- numerics (10: 2 + 3 + 3 + 2)


@pytest.mark.category("numerics")
@pytest.mark.points(2)
@pytest.mark.parametrize("P", [1, 4, 9])
def test_td_loss_with_stop_gradient_value(submission, reference, rng, P):
    """td_loss_with_stop_gradient has the same value as the given td_loss."""
    args = transition(rng, P)
    got = submission.td_loss_with_stop_gradient(*args)
    assert_close(got, reference.td_loss(*args), name=f"td_loss_with_stop_gradient with P={P}")


@pytest.mark.category("numerics")
@pytest.mark.points(3)
@pytest.mark.parametrize("P", [1, 4, 9])
def test_td_loss_gradient_is_the_semi_gradient(submission, reference, rng, P):
    """The gradient of td_loss_with_stop_gradient itself (taken on the trusted side, from its
    exported module) is the semi-gradient: the target is held constant."""
    args = transition(rng, P)
    name = "td_loss_with_stop_gradient"
    try:
        exp = submission.export(name, example=args, vjp_order=1)
    except StudentRaised as exc:
        where = exc.location.describe() if exc.location else ""
        first = next((ln for ln in str(exc.evalue).splitlines() if ln.strip()), "")[:300]
        raise CheckFailure(
            f"`{name}` cannot be differentiated with jax.grad: {exc.ename}{' at ' + where if where else ''}: {first}",
            exc.hint or hint_for(exc.ename, exc.evalue, exc.location),
        ) from None
    try:
        got, _ = submission.evaluate_grad(name, exp.module, 0, *args)
    except SubmissionError as exc:
        raise CheckFailure(
            f"the gradient of `{name}` could not be taken: {exc.message}",
            "td_loss_with_stop_gradient must return one number (a scalar) that jax.grad can differentiate.",
        ) from None
    try:
        assert_close(got, reference.td_update(*args), name=f"jax.grad({name}) with P={P}", **GRAD_TOL)
    except CheckFailure as exc:
        what = diagnose_update(got, *args)
        raise CheckFailure(
            f"{exc.message}" + (f"; the gradient of your td_loss_with_stop_gradient is {what}" if what else ""),
            "Hold only the TD target `r_t + value_fn(theta, s_t)` constant with `jax.lax.stop_gradient`: "
            "the loss keeps its value, and its gradient flows through v(s_tm1) alone.",
        ) from None


@pytest.mark.category("numerics")
@pytest.mark.points(3)
@pytest.mark.parametrize("P", [1, 4, 9])
def test_td_update_is_the_semi_gradient(submission, reference, rng, P):
    """td_update is the gradient with the target held constant: (target - v(s_tm1)) * s_tm1."""
    args = transition(rng, P)
    got = submission.td_update(*args)
    try:
        assert_close(got, reference.td_update(*args), name=f"td_update with P={P}", **GRAD_TOL)
    except CheckFailure as exc:
        what = diagnose_update(got, *args)
        if not what:
            raise
        raise CheckFailure(
            f"{exc.message}; your td_update is {what}",
            "Hold only the TD target `r_t + value_fn(theta, s_t)` constant with `jax.lax.stop_gradient`: "
            "the loss keeps its value, and the gradient flows through v(s_tm1) alone.",
        ) from None


@pytest.mark.category("numerics")
@pytest.mark.points(2)
@pytest.mark.parametrize("B", [1, 7, 64])
def test_batched_td_update_numerics(submission, reference, rng, B):
    """batched_td_update is the mean of td_update over the batch."""
    args = batch(rng, B, 4)
    got = submission.batched_td_update(*args)
    assert_close(got, reference.batched_td_update(*args), name=f"batched_td_update with B={B}, P=4", **GRAD_TOL)


# --------------------------------------------------------------------------- jit (3)

JIT_ARGS = {
    "td_loss_with_stop_gradient": lambda rng: transition(rng, 5),
    "td_update": lambda rng: transition(rng, 5),
    "batched_td_update": lambda rng: batch(rng, 6, 5),
}


@pytest.mark.category("jit")
@pytest.mark.points(3)
@pytest.mark.parametrize("name", FUNCTIONS)
def test_works_under_jit(submission, reference, rng, name):
    """The function works under jax.jit (every argument traced) and gives its eager result."""
    check_jit(submission, name, JIT_ARGS[name](rng), reference=getattr(reference, name))


# --------------------------------------------------------------------------- vectorization (3)


@pytest.mark.category("vectorization")
@pytest.mark.points(3)
def test_batched_td_update_vectorized(submission, reference, rng):
    """batched_td_update is vectorized: one trace with a symbolic batch size B serves every B."""
    theta = batch(rng, 1, 4)[0]
    cases = [(theta, *batch(rng, B, 4)[1:]) for B in (1, 5, 64)]
    specs = [("4", "float32"), ("B, 4", "float32"), ("B", "float32"), ("B, 4", "float32")]
    check_vectorized(submission, "batched_td_update", specs, cases, reference=reference.batched_td_update)
