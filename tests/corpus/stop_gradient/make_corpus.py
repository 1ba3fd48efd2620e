"""Writes the ``stop_gradient`` submission corpus.

Each notebook is named for its behaviour and looks like something a student could hand in:
imports, the given ``value_fn`` and ``td_loss``, the tutorial's example transition, one cell
per function, some chatter.  ``expected.yaml`` (written by hand, beside this script) gives the
verdict each one must get, category by category.

Run from anywhere; the output is deterministic (cell ids are derived from the file name and
the cell's position), so re-running only changes files whose content changed::

    python tests/corpus/stop_gradient/make_corpus.py

``untouched_starter.ipynb`` is a copy of ``assignments/stop_gradient/stop_gradient.ipynb``.
"""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/corpus, for notebook_kit
import notebook_kit as kit  # noqa: E402
from notebook_kit import code, md  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
STARTER = REPO / "assignments" / "stop_gradient" / "stop_gradient.ipynb"
ASSIGNMENT = "stop_gradient"
build = partial(kit.build, ASSIGNMENT)

# ---------------------------------------------------------------------------------------------
# Cell sources shared by many notebooks

INTRO = """\
# Homework 7: TD learning with `stop_gradient`

Name: {student}

The TD target must be treated as a constant when we differentiate the loss."""

IMPORTS = """\
import jax
import jax.numpy as jnp
import numpy as np"""

GIVEN_MD = "## Given code\n\nFrom the assignment (do not change it)."

GIVEN = """\
def value_fn(theta, s):
    return jnp.dot(theta, s)


def td_loss(theta, s_tm1, r_t, s_t):
    v_tm1 = value_fn(theta, s_tm1)
    target = r_t + value_fn(theta, s_t)
    return -0.5 * ((target - v_tm1) ** 2)"""

TRY_GIVEN = """\
theta = jnp.array([0.1, -0.1, 0.0])
s_tm1 = jnp.array([1.0, 2.0, -1.0])
r_t = jnp.array(1.0)
s_t = jnp.array([2.0, 1.0, 0.0])
print(td_loss(theta, s_tm1, r_t, s_t))
jax.grad(td_loss)(theta, s_tm1, r_t, s_t)"""

CHECK_ALL = """\
s_tm1s = jnp.stack([s_tm1, s_t, s_tm1])
r_ts = jnp.array([1.0, -0.5, 2.0])
s_ts = jnp.stack([s_t, s_tm1, s_tm1])
print(td_loss_with_stop_gradient(theta, s_tm1, r_t, s_t))
print(td_update(theta, s_tm1, r_t, s_t))  # should be [1.2, 2.4, -1.2]
print(jax.jit(td_update)(theta, s_tm1, r_t, s_t))
print(batched_td_update(theta, s_tm1s, r_ts, s_ts))"""

# -- correct: the tutorial's style (stop_gradient on the target, grad, vmap + mean) -----------

TUTORIAL_LOSS = """\
def td_loss_with_stop_gradient(theta, s_tm1, r_t, s_t):
    v_tm1 = value_fn(theta, s_tm1)
    target = r_t + value_fn(theta, s_t)
    # the target is a label: no gradient through it
    return -0.5 * ((jax.lax.stop_gradient(target) - v_tm1) ** 2)"""

GRAD_UPDATE = """\
td_update = jax.grad(td_loss_with_stop_gradient)"""

VMAP_MEAN_BATCHED = """\
def batched_td_update(theta, s_tm1s, r_ts, s_ts):
    # theta is shared, the transitions are batched along axis 0
    per_example = jax.vmap(td_update, in_axes=(None, 0, 0, 0))(theta, s_tm1s, r_ts, s_ts)
    return per_example.mean(axis=0)"""

# -- correct: a stopped TD error, a jitted grad, the gradient of the mean loss ----------------

DELTA_LOSS = """\
def td_loss_with_stop_gradient(theta, s_tm1, r_t, s_t):
    target = jax.lax.stop_gradient(r_t + value_fn(theta, s_t))
    td_error = target - value_fn(theta, s_tm1)
    return -0.5 * td_error**2"""

JIT_GRAD_UPDATE = """\
@jax.jit
def td_update(theta, s_tm1, r_t, s_t):
    return jax.grad(td_loss_with_stop_gradient)(theta, s_tm1, r_t, s_t)"""

GRAD_OF_MEAN_BATCHED = """\
def mean_td_loss(theta, s_tm1s, r_ts, s_ts):
    losses = jax.vmap(td_loss_with_stop_gradient, in_axes=(None, 0, 0, 0))(theta, s_tm1s, r_ts, s_ts)
    return jnp.mean(losses)


# the gradient of the mean is the mean of the gradients
batched_td_update = jax.jit(jax.grad(mean_td_loss))"""

# -- correct: value_and_grad, array operations over the batch, extra cells --------------------

INLINE_LOSS = """\
def td_loss_with_stop_gradient(theta, s_tm1, r_t, s_t):
    return -0.5 * (jax.lax.stop_gradient(r_t + value_fn(theta, s_t)) - value_fn(theta, s_tm1)) ** 2"""

VALUE_AND_GRAD_UPDATE = """\
_loss_and_grad = jax.value_and_grad(td_loss_with_stop_gradient)


def td_update(theta, s_tm1, r_t, s_t):
    _, grad = _loss_and_grad(theta, s_tm1, r_t, s_t)
    return grad"""

ARRAY_OPS_BATCHED = """\
def batched_td_update(theta, s_tm1s, r_ts, s_ts):
    # semi-gradient of each transition: (target - v(s_tm1)) * s_tm1, all rows at once
    td_errors = r_ts + s_ts @ theta - s_tm1s @ theta   # (B,)
    return jnp.mean(td_errors[:, None] * s_tm1s, axis=0)"""

EXTRA_MD = """\
## Does it learn?

A few steps of TD(0) on random transitions of a tiny chain, adding `lr * td_update`."""

EXTRA_TRAIN = """\
key = jax.random.PRNGKey(0)
k1, k2, k3 = jax.random.split(key, 3)
S_tm1 = jax.random.normal(k1, (256, 3))
S_t = jax.random.normal(k2, (256, 3))
R = jax.random.normal(k3, (256,))
th = jnp.zeros(3)
for step in range(50):
    th = th + 0.1 * batched_td_update(th, S_tm1, R, S_t)
print(th)"""

EXTRA_COMPARE = """\
# my batched version agrees with a vmap of td_update
per_ex = jax.vmap(td_update, in_axes=(None, 0, 0, 0))(th, S_tm1, R, S_t)
print(jnp.allclose(per_ex.mean(0), batched_td_update(th, S_tm1, R, S_t), atol=1e-5))"""

EXTRA_TIMEIT = "%timeit -n 5 -r 2 batched_td_update(th, S_tm1, R, S_t).block_until_ready()"

# -- mutants of the reference -----------------------------------------------------------------

NO_STOP_LOSS = """\
def td_loss_with_stop_gradient(theta, s_tm1, r_t, s_t):
    v_tm1 = value_fn(theta, s_tm1)
    target = r_t + value_fn(theta, s_t)
    return -0.5 * ((target - v_tm1) ** 2)"""

STOP_V_LOSS = """\
def td_loss_with_stop_gradient(theta, s_tm1, r_t, s_t):
    v_tm1 = jax.lax.stop_gradient(value_fn(theta, s_tm1))
    target = r_t + value_fn(theta, s_t)
    return -0.5 * ((target - v_tm1) ** 2)"""

STOP_ALL_LOSS = """\
def td_loss_with_stop_gradient(theta, s_tm1, r_t, s_t):
    v_tm1 = value_fn(theta, s_tm1)
    target = r_t + value_fn(theta, s_t)
    # the loss is only used as a training signal, keep its gradient out of the graph
    return jax.lax.stop_gradient(-0.5 * ((target - v_tm1) ** 2))"""

LOOP_BATCHED = """\
def batched_td_update(theta, s_tm1s, r_ts, s_ts):
    total = jnp.zeros_like(theta)
    for b in range(s_tm1s.shape[0]):
        total = total + td_update(theta, s_tm1s[b], r_ts[b], s_ts[b])
    return total / s_tm1s.shape[0]"""

# -- typical mistakes -------------------------------------------------------------------------

STOP_REWARD_LOSS = """\
def td_loss_with_stop_gradient(theta, s_tm1, r_t, s_t):
    v_tm1 = value_fn(theta, s_tm1)
    target = jax.lax.stop_gradient(r_t) + value_fn(theta, s_t)  # the reward is the label
    return -0.5 * ((target - v_tm1) ** 2)"""

WRONG_ARGNUM_UPDATE = """\
# differentiate with respect to the state we update from
td_update = jax.grad(td_loss_with_stop_gradient, argnums=1)"""

SUM_BATCHED = """\
def batched_td_update(theta, s_tm1s, r_ts, s_ts):
    per_example = jax.vmap(td_update, in_axes=(None, 0, 0, 0))(theta, s_tm1s, r_ts, s_ts)
    return per_example.sum(axis=0)"""

VMAP_THETA_BATCHED = """\
def batched_td_update(theta, s_tm1s, r_ts, s_ts):
    return jnp.mean(jax.vmap(td_update)(theta, s_tm1s, r_ts, s_ts), axis=0)"""

NUMPY_UPDATE = """\
def td_update(theta, s_tm1, r_t, s_t):
    # the semi-gradient worked out by hand: (target - v(s_tm1)) * s_tm1
    td_error = float(r_t + np.dot(theta, s_t) - np.dot(theta, s_tm1))
    return td_error * np.asarray(s_tm1)"""

# -- issue 10: the loss's own gradient, and a sequential map over the batch --------------------

SAME_AS_TD_LOSS = """\
# same value as td_loss, so same function
td_loss_with_stop_gradient = td_loss"""

BY_HAND_UPDATE = """\
def td_update(theta, s_tm1, r_t, s_t):
    # the semi-gradient worked out by hand: (target - v(s_tm1)) * s_tm1
    td_error = r_t + value_fn(theta, s_t) - value_fn(theta, s_tm1)
    return td_error * s_tm1"""

STOP_NEXT_VALUE_LOSS = """\
def td_loss_with_stop_gradient(theta, s_tm1, r_t, s_t):
    # r_t does not depend on theta: stopping v(s_t) holds the whole target constant
    target = r_t + jax.lax.stop_gradient(value_fn(theta, s_t))
    return -0.5 * (target - value_fn(theta, s_tm1)) ** 2"""

LAX_MAP_BATCHED = """\
def batched_td_update(theta, s_tm1s, r_ts, s_ts):
    # one transition at a time, but inside jax: no Python loop
    per_example = jax.lax.map(lambda t: td_update(theta, *t), (s_tm1s, r_ts, s_ts))
    return per_example.mean(axis=0)"""

TODO = """\
# TODO"""

# ---------------------------------------------------------------------------------------------
# Assembling notebooks


def head(student: str) -> list[tuple[str, str]]:
    return [md(INTRO.format(student=student)), code(IMPORTS), md(GIVEN_MD), code(GIVEN), code(TRY_GIVEN)]


def solution_cells(loss: str, update: str, batched: str) -> list[tuple[str, str]]:
    cells = [md("## My solutions")]
    for title, source in [
        ("td_loss_with_stop_gradient", loss),
        ("td_update", update),
        ("batched_td_update", batched),
    ]:
        cells += [md(f"### `{title}`"), code(source)]
    return cells


def tutorial_solution(**override: str) -> list[tuple[str, str]]:
    parts = {"loss": TUTORIAL_LOSS, "update": GRAD_UPDATE, "batched": VMAP_MEAN_BATCHED}
    parts.update(override)
    return solution_cells(**parts)


def mistake(name: str, student: str, check: str = CHECK_ALL, **override: str) -> nbformat.NotebookNode:
    """The tutorial style with some functions replaced; the last cell tries them all."""
    return build(name, head(student) + tutorial_solution(**override) + [code(check)])


# the seed tutorial (Stopping gradients): td_loss with stop_gradient on the target,
# td_update = jax.grad, and its per-example gradients jax.jit(jax.vmap(jax.grad(td_loss),
# in_axes=(None, 0, 0, 0))), averaged
TUTORIAL_FILLS = {
    "todo1": """\
def td_loss_with_stop_gradient(theta, s_tm1, r_t, s_t):
  v_tm1 = value_fn(theta, s_tm1)
  target = r_t + value_fn(theta, s_t)
  return -0.5 * ((jax.lax.stop_gradient(target) - v_tm1) ** 2)""",
    "todo2": """\
td_update = jax.grad(td_loss_with_stop_gradient)""",
    "todo3": """\
perex_grads = jax.jit(jax.vmap(jax.grad(td_loss_with_stop_gradient), in_axes=(None, 0, 0, 0)))


def batched_td_update(theta, s_tm1s, r_ts, s_ts):
  return perex_grads(theta, s_tm1s, r_ts, s_ts).mean(axis=0)""",
}


def corpus() -> dict[str, nbformat.NotebookNode | str]:
    nbs: dict[str, nbformat.NotebookNode | str] = {}

    # correct, in three styles
    nbs["correct_tutorial.ipynb"] = mistake("correct_tutorial", "A. Student")
    nbs["correct_grad_of_mean.ipynb"] = build(
        "correct_grad_of_mean",
        head("B. Student") + solution_cells(DELTA_LOSS, JIT_GRAD_UPDATE, GRAD_OF_MEAN_BATCHED) + [code(CHECK_ALL)],
        tagged=False,
    )
    nbs["correct_array_ops.ipynb"] = build(
        "correct_array_ops",
        [
            *head("C. Student"),
            *solution_cells(INLINE_LOSS, VALUE_AND_GRAD_UPDATE, ARRAY_OPS_BATCHED),
            code(CHECK_ALL),
            md(EXTRA_MD),
            code(EXTRA_TRAIN),
            code(EXTRA_COMPARE),
            code(EXTRA_TIMEIT),
        ],
    )

    # the reference's mutants, as a student would write them
    nbs["no_stop_gradient.ipynb"] = mistake("no_stop_gradient", "D. Student", loss=NO_STOP_LOSS)
    nbs["stop_gradient_on_v_tm1.ipynb"] = mistake("stop_gradient_on_v_tm1", "E. Student", loss=STOP_V_LOSS)
    nbs["stop_gradient_whole_loss.ipynb"] = mistake("stop_gradient_whole_loss", "F. Student", loss=STOP_ALL_LOSS)
    nbs["batched_python_loop.ipynb"] = mistake("batched_python_loop", "G. Student", batched=LOOP_BATCHED)

    # typical mistakes
    nbs["stop_gradient_on_reward.ipynb"] = mistake("stop_gradient_on_reward", "H. Student", loss=STOP_REWARD_LOSS)
    nbs["grad_wrt_state.ipynb"] = mistake("grad_wrt_state", "I. Student", update=WRONG_ARGNUM_UPDATE)
    nbs["batched_sum_not_mean.ipynb"] = mistake("batched_sum_not_mean", "J. Student", batched=SUM_BATCHED)
    nbs["batched_maps_theta.ipynb"] = mistake(
        "batched_maps_theta",
        "K. Student",
        check=CHECK_ALL.rsplit("\n", 1)[0],  # the batched call raises: the student left it out
        batched=VMAP_THETA_BATCHED,
    )
    nbs["td_update_numpy_by_hand.ipynb"] = mistake(
        "td_update_numpy_by_hand",
        "L. Student",
        check=CHECK_ALL.replace("print(jax.jit(td_update)(theta, s_tm1, r_t, s_t))\n", ""),
        update=NUMPY_UPDATE,
        batched=ARRAY_OPS_BATCHED,
    )
    # issue 10: the loss's gradient is checked, not only its value; lax.map is not vectorized
    nbs["loss_is_td_loss_update_by_hand.ipynb"] = mistake(
        "loss_is_td_loss_update_by_hand", "N. Student", loss=SAME_AS_TD_LOSS, update=BY_HAND_UPDATE
    )
    nbs["correct_stop_next_value_update_by_hand.ipynb"] = mistake(
        "correct_stop_next_value_update_by_hand", "O. Student", loss=STOP_NEXT_VALUE_LOSS, update=BY_HAND_UPDATE
    )
    nbs["batched_lax_map.ipynb"] = mistake("batched_lax_map", "P. Student", batched=LAX_MAP_BATCHED)
    nbs["partial_submission.ipynb"] = mistake(
        "partial_submission",
        "M. Student",
        check="print(td_loss_with_stop_gradient(theta, s_tm1, r_t, s_t))",
        update=TODO,
        batched=TODO,
    )
    nbs["correct_tutorial_perex.ipynb"] = kit.fill_starter(ASSIGNMENT, "correct_tutorial_perex", TUTORIAL_FILLS, who="T. Student")
    nbs["untouched_starter.ipynb"] = STARTER.read_text(encoding="utf-8")
    return nbs


if __name__ == "__main__":
    kit.write_corpus(HERE, corpus())
