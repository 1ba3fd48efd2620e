"""Writes the ``per_example_grads`` submission corpus.

Each notebook is named for its behaviour and looks like something a student could hand in:
imports, the given ``loss_fn``, one cell per function, some chatter. ``expected.yaml``
(written by hand, beside this script) gives the verdict each one must get, category by
category.

Run from anywhere; the output is deterministic (cell ids are derived from the file name and
the cell's position), so re-running only changes files whose content changed::

    python tests/corpus/per_example_grads/make_corpus.py

``untouched_starter.ipynb`` is a copy of ``assignments/per_example_grads/per_example_grads.ipynb``.
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
STARTER = REPO / "assignments" / "per_example_grads" / "per_example_grads.ipynb"
ASSIGNMENT = "per_example_grads"
build = partial(kit.build, ASSIGNMENT)

# ---------------------------------------------------------------------------------------------
# Cell sources shared by many notebooks

INTRO = """\
# Homework 5: per-example gradients

Name: {student}

One gradient per example with `jit(vmap(grad))`, and the gradient of the batch loss."""

IMPORTS = """\
import jax
import jax.numpy as jnp
import numpy as np"""

GIVEN_MD = "## Given code\n\nFrom the assignment (do not change it)."

GIVEN = """\
def loss_fn(params, x, y):
    return jnp.mean((jnp.dot(x, params) - y) ** 2)"""

DATA = """\
rng = np.random.default_rng(0)
params = rng.standard_normal(3).astype(np.float32)
xs = rng.standard_normal((4, 3)).astype(np.float32)
ys = rng.standard_normal(4).astype(np.float32)
loss_fn(params, xs, ys)"""

CHECK_ALL = """\
g = per_example_grads(params, xs, ys)
print(g.shape, g)
print(batch_grad(params, xs, ys), g.mean(axis=0))"""

# -- correct: the reference style -------------------------------------------------------------

JIT_VMAP_GRAD = """\
per_example_grads = jax.jit(jax.vmap(jax.grad(loss_fn), in_axes=(None, 0, 0)))"""

GRAD_OF_LOSS = """\
def batch_grad(params, xs, ys):
    # loss_fn on the whole batch is already the mean loss
    return jax.grad(loss_fn)(params, xs, ys)"""

# -- correct: a jitted function that closes over params, grad of a vmapped mean ---------------

DECORATED_CLOSURE = """\
@jax.jit
def per_example_grads(params, xs, ys):
    def grad_for(x, y):
        return jax.grad(loss_fn)(params, x, y)

    return jax.vmap(grad_for)(xs, ys)"""

GRAD_OF_VMAPPED_MEAN = """\
def batch_grad(params, xs, ys):
    def mean_loss(p):
        return jnp.mean(jax.vmap(loss_fn, in_axes=(None, 0, 0))(p, xs, ys))

    return jax.grad(mean_loss)(params)"""

# -- correct: the Jacobian of the vector of losses, batch_grad from the per-example rows -------

JACREV = """\
def losses(params, xs, ys):
    # one loss per example
    return jax.vmap(loss_fn, in_axes=(None, 0, 0))(params, xs, ys)


# the Jacobian of the B losses with respect to params has one row per example
per_example_grads = jax.jit(jax.jacrev(losses))"""

MEAN_OF_ROWS = """\
@jax.jit
def batch_grad(params, xs, ys):
    return jnp.mean(per_example_grads(params, xs, ys), axis=0)"""

EXTRA_MD = """\
## Timing and a look inside

The loop is slow; the jitted vmap is one program."""

EXTRA_LOOP = """\
def loop(params, xs, ys):
    return jnp.stack([jax.grad(loss_fn)(params, x, y) for x, y in zip(xs, ys)])


big_xs = np.random.default_rng(1).standard_normal((256, 3)).astype(np.float32)
big_ys = np.random.default_rng(2).standard_normal(256).astype(np.float32)
print(np.allclose(loop(params, big_xs[:8], big_ys[:8]), per_example_grads(params, big_xs[:8], big_ys[:8]), atol=1e-5))"""

EXTRA_TIMEIT = "%timeit -n 3 -r 2 per_example_grads(params, big_xs, big_ys).block_until_ready()"

EXTRA_JAXPR = """\
print(jax.make_jaxpr(per_example_grads)(params, xs, ys))"""

# -- mutants of the reference -----------------------------------------------------------------

LOOP_JITTED = """\
@jax.jit
def per_example_grads(params, xs, ys):
    grads = []
    for b in range(xs.shape[0]):
        grads.append(jax.grad(loss_fn)(params, xs[b], ys[b]))
    return jnp.stack(grads)"""

MAPS_PARAMS = """\
per_example_grads = jax.jit(jax.vmap(jax.grad(loss_fn)))"""

REPEATED = """\
@jax.jit
def per_example_grads(params, xs, ys):
    g = jax.grad(loss_fn)(params, xs, ys)
    return jnp.tile(g, (xs.shape[0], 1))  # one row per example"""

NOT_JITTED = """\
per_example_grads = jax.vmap(jax.grad(loss_fn), in_axes=(None, 0, 0))"""

# -- typical mistakes -------------------------------------------------------------------------

GRAD_OF_SUM = """\
def batch_grad(params, xs, ys):
    def total_loss(p):
        return jnp.sum(jax.vmap(loss_fn, in_axes=(None, 0, 0))(p, xs, ys))

    return jax.grad(total_loss)(params)"""

BATCH_GRAD_SHAPE = """\
per_example_grads = jax.jit(jax.grad(loss_fn))"""

BATCH_GRAD_LOOP = """\
def batch_grad(params, xs, ys):
    total = jnp.zeros_like(params)
    for x, y in zip(xs, ys):
        total = total + jax.grad(loss_fn)(params, x, y)
    return total / len(xs)"""

PLAIN_LOOP = """\
def per_example_grads(params, xs, ys):
    return jnp.stack([jax.grad(loss_fn)(params, x, y) for x, y in zip(xs, ys)])"""

# -- issue 10: a sequential map over the examples, a callable that only looks jitted, jit of a
# partial ------------------------------------------------------------------------------------

LAX_MAP = """\
@jax.jit
def per_example_grads(params, xs, ys):
    # one example at a time, inside jax
    return jax.lax.map(lambda xy: jax.grad(loss_fn)(params, *xy), (xs, ys))"""

LOOKS_JITTED = """\
class Jitted:
    \"\"\"Has everything a jitted function has (lower, trace), minus the compiling.\"\"\"

    def __init__(self, fun):
        self.fun = fun

    def __call__(self, *args):
        return self.fun(*args)

    def lower(self, *args):
        return jax.jit(self.fun).lower(*args)

    def trace(self, *args):
        return jax.jit(self.fun).trace(*args)


per_example_grads = Jitted(jax.vmap(jax.grad(loss_fn), in_axes=(None, 0, 0)))"""

JIT_PARTIAL = """\
from functools import partial


def grads_of(loss, params, xs, ys):
    return jax.vmap(jax.grad(loss), in_axes=(None, 0, 0))(params, xs, ys)


per_example_grads = jax.jit(partial(grads_of, loss_fn))"""

TODO = """\
# TODO"""

# ---------------------------------------------------------------------------------------------
# Assembling notebooks


def head(student: str) -> list[tuple[str, str]]:
    return [md(INTRO.format(student=student)), code(IMPORTS), md(GIVEN_MD), code(GIVEN), code(DATA)]


def solution_cells(per_example: str, batch: str) -> list[tuple[str, str]]:
    cells = [md("## My solutions")]
    for title, source in [("per_example_grads", per_example), ("batch_grad", batch)]:
        cells += [md(f"### `{title}`"), code(source)]
    return cells


def mistake(
    name: str, student: str, check: str = CHECK_ALL, per_example: str = JIT_VMAP_GRAD, batch: str = GRAD_OF_LOSS
) -> nbformat.NotebookNode:
    """The reference style with one function replaced; the last cell tries both."""
    return build(name, head(student) + solution_cells(per_example, batch) + [code(check)])


# the seed tutorial (per-example gradients): jit(vmap(grad(loss)), in_axes=(None, 0, 0)), and the
# batch gradient as grad of the loss written for a batch (loss_fn already averages over rows)
TUTORIAL_FILLS = {
    "todo1": """\
per_example_grads = jax.jit(jax.vmap(jax.grad(loss_fn), in_axes=(None, 0, 0)))""",
    "todo2": """\
# loss_fn is written with jnp.dot and jnp.mean: on a batch xs of shape (B, P) it is the mean loss
batch_grad = jax.jit(jax.grad(loss_fn))""",
}


def corpus() -> dict[str, nbformat.NotebookNode | str]:
    nbs: dict[str, nbformat.NotebookNode | str] = {}

    # correct, in three styles
    nbs["correct_jit_vmap_grad.ipynb"] = mistake("correct_jit_vmap_grad", "A. Student")
    nbs["correct_closure_vmap.ipynb"] = build(
        "correct_closure_vmap",
        head("B. Student") + solution_cells(DECORATED_CLOSURE, GRAD_OF_VMAPPED_MEAN) + [code(CHECK_ALL)],
        tagged=False,
    )
    nbs["correct_jacrev_extra_cells.ipynb"] = build(
        "correct_jacrev_extra_cells",
        [
            *head("C. Student"),
            *solution_cells(JACREV, MEAN_OF_ROWS),
            code(CHECK_ALL),
            md(EXTRA_MD),
            code(EXTRA_LOOP),
            code(EXTRA_TIMEIT),
            code(EXTRA_JAXPR),
        ],
    )

    # the reference's mutants, as a student would write them
    nbs["python_loop_over_examples.ipynb"] = mistake("python_loop_over_examples", "D. Student", per_example=LOOP_JITTED)
    nbs["maps_over_params.ipynb"] = mistake(
        "maps_over_params", "E. Student", check="print(batch_grad(params, xs, ys))", per_example=MAPS_PARAMS
    )
    nbs["batch_grad_repeated.ipynb"] = mistake("batch_grad_repeated", "F. Student", per_example=REPEATED)
    nbs["not_jitted.ipynb"] = mistake("not_jitted", "G. Student", per_example=NOT_JITTED)

    # typical mistakes
    nbs["batch_grad_sum_not_mean.ipynb"] = mistake("batch_grad_sum_not_mean", "H. Student", batch=GRAD_OF_SUM)
    nbs["per_example_is_batch_grad.ipynb"] = mistake(
        "per_example_is_batch_grad", "I. Student", per_example=BATCH_GRAD_SHAPE
    )
    nbs["batch_grad_python_loop.ipynb"] = mistake("batch_grad_python_loop", "J. Student", batch=BATCH_GRAD_LOOP)
    nbs["plain_python_loop.ipynb"] = mistake("plain_python_loop", "K. Student", per_example=PLAIN_LOOP)
    nbs["lax_map_over_examples.ipynb"] = mistake("lax_map_over_examples", "L. Student", per_example=LAX_MAP)
    nbs["looks_jitted.ipynb"] = mistake("looks_jitted", "M. Student", per_example=LOOKS_JITTED)
    nbs["correct_jit_partial.ipynb"] = mistake("correct_jit_partial", "N. Student", per_example=JIT_PARTIAL)
    nbs["partial_submission.ipynb"] = mistake(
        "partial_submission", "L. Student", check="print(per_example_grads(params, xs, ys))", batch=TODO
    )
    nbs["correct_tutorial.ipynb"] = kit.fill_starter(ASSIGNMENT, "correct_tutorial", TUTORIAL_FILLS, who="T. Student")
    nbs["untouched_starter.ipynb"] = STARTER.read_text(encoding="utf-8")
    return nbs


if __name__ == "__main__":
    kit.write_corpus(HERE, corpus())
