"""Writes the ``functional_updates`` submission corpus.

Each notebook is named for its behaviour and looks like something a student could hand in:
imports, a first try of `.at[]`, one cell per function, a last cell that tries them.
``expected.yaml`` (written by hand, beside this script) gives the verdict each one must get,
category by category.

Run from anywhere; the output is deterministic (cell ids are derived from the file name and
the cell's position), so re-running only changes files whose content changed::

    python tests/corpus/functional_updates/make_corpus.py

``untouched_starter.ipynb`` is a copy of
``assignments/functional_updates/functional_updates.ipynb``.
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
STARTER = REPO / "assignments" / "functional_updates" / "functional_updates.ipynb"
ASSIGNMENT = "functional_updates"
build = partial(kit.build, ASSIGNMENT)

# ---------------------------------------------------------------------------------------------
# Cell sources shared by many notebooks

INTRO = """\
# Homework 8: functional array updates

Name: {student}

No more `x[i] = v`: building new arrays with `.at[]`."""

IMPORTS = """\
import jax
import jax.numpy as jnp
import numpy as np"""

TRY_MD = "## First try"

TRY = """\
z = jnp.zeros(4)
print(z.at[2].set(1.0), z.at[jnp.array([1, 1])].add(1.0), z)"""

CHECK_ALL = """\
x = np.array([1.5, -2.0, 0.0, 4.0, -0.5], dtype=np.float32)
print(set_first(x, 9.0), x)
print(increment_at(x, np.array([3, 0, 3]), 1.0))
print(clamp_negatives(x))
print(jax.jit(clamp_negatives)(x))"""

# -- correct: the reference style (.at[] after jnp.asarray, jnp.where) ------------------------

AT_SET = """\
def set_first(x, value):
    x = jnp.asarray(x)  # NumPy arrays have no .at
    return x.at[0].set(value)"""

AT_ADD = """\
def increment_at(x, idx, amount):
    x = jnp.asarray(x)
    return x.at[idx].add(amount)  # .add accumulates repeated indices"""

WHERE_CLAMP = """\
def clamp_negatives(x):
    x = jnp.asarray(x)
    return jnp.where(x < 0, 0.0, x)"""

# -- correct: whole-array operations (a mask for set_first, one-hot sums, jnp.maximum) --------

MASK_SET = """\
def set_first(x, value):
    x = jnp.asarray(x)
    first = jnp.arange(x.shape[0]) == 0
    return jnp.where(first, jnp.asarray(value, dtype=x.dtype), x)"""

ONEHOT_ADD = """\
def increment_at(x, idx, amount):
    x = jnp.asarray(x)
    idx = jnp.asarray(idx)
    amounts = jnp.broadcast_to(jnp.asarray(amount, dtype=x.dtype), idx.shape)
    one_hot = idx[:, None] == jnp.arange(x.shape[0])[None, :]  # (K, N)
    return x + jnp.sum(jnp.where(one_hot, amounts[:, None], 0), axis=0)"""

MAXIMUM_CLAMP = """\
def clamp_negatives(x):
    return jnp.maximum(x, 0)"""

# -- correct: concatenate, bincount, clip; extra cells -----------------------------------------

CONCAT_SET = """\
def set_first(x, value):
    x = jnp.asarray(x)
    return jnp.concatenate([jnp.asarray([value], dtype=x.dtype), x[1:]])"""

BINCOUNT_ADD = """\
def increment_at(x, idx, amount):
    x = jnp.asarray(x)
    weights = jnp.broadcast_to(amount, jnp.shape(idx))
    return x + jnp.bincount(idx, weights=weights, length=x.shape[0])"""

CLIP_CLAMP = """\
def clamp_negatives(x):
    return jnp.clip(x, min=0)"""

EXTRA_ERROR_MD = """\
## The error from the sharp bits

On purpose (this cell fails):"""

EXTRA_ERROR = """\
jx = jnp.arange(3.0)
jx[0] = 10.0"""

EXTRA_JAXPR = """\
print(jax.make_jaxpr(increment_at)(jnp.zeros(4), jnp.array([1, 1]), 1.0))
print(jax.make_jaxpr(clamp_negatives)(jnp.zeros(3)))"""

EXTRA_TIMEIT = "%timeit -n 3 -r 2 jax.jit(increment_at)(jnp.zeros(1000), jnp.arange(500) % 7, 1.0).block_until_ready()"

# -- mutants of the reference -----------------------------------------------------------------

NUMPY_COPY_SET = """\
def set_first(x, value):
    y = np.array(x)  # a copy, so x stays the same
    y[0] = value
    return y"""

NUMPY_ADD_AT = """\
def increment_at(x, idx, amount):
    y = np.array(x)
    np.add.at(y, idx, amount)  # unbuffered: repeated indices accumulate
    return y"""

SET_PLUS_ADD = """\
def increment_at(x, idx, amount):
    x = jnp.asarray(x)
    return x.at[idx].set(x[idx] + amount)"""

MASK_CLAMP = """\
def clamp_negatives(x):
    x = jnp.asarray(x)
    return x.at[x < 0].set(0.0)"""

IN_PLACE_SET = """\
def set_first(x, value):
    x[0] = value
    return x"""

# -- typical mistakes -------------------------------------------------------------------------

NO_ASARRAY_SET = """\
def set_first(x, value):
    return x.at[0].set(value)"""

NO_ASARRAY_ADD = """\
def increment_at(x, idx, amount):
    return x.at[idx].add(amount)"""

JAX_ITEM_SET = """\
def set_first(x, value):
    y = jnp.asarray(x)  # a JAX copy
    y[0] = value
    return y"""

FANCY_IADD = """\
def increment_at(x, idx, amount):
    y = np.array(x, copy=True)
    y[idx] += amount
    return y"""

LOOP_CLAMP = """\
def clamp_negatives(x):
    x = jnp.asarray(x)
    values = [v if v > 0 else 0.0 for v in x.ravel()]
    return jnp.array(values, dtype=x.dtype).reshape(x.shape)"""

TODO = """\
# TODO"""

# ---------------------------------------------------------------------------------------------
# Assembling notebooks


def head(student: str) -> list[tuple[str, str]]:
    return [md(INTRO.format(student=student)), code(IMPORTS), md(TRY_MD), code(TRY)]


def solution_cells(set_first: str, increment_at: str, clamp_negatives: str) -> list[tuple[str, str]]:
    cells = [md("## My solutions")]
    for title, source in [
        ("set_first", set_first),
        ("increment_at", increment_at),
        ("clamp_negatives", clamp_negatives),
    ]:
        cells += [md(f"### `{title}`"), code(source)]
    return cells


def at_solution(**override: str) -> list[tuple[str, str]]:
    parts = {"set_first": AT_SET, "increment_at": AT_ADD, "clamp_negatives": WHERE_CLAMP}
    parts.update(override)
    return solution_cells(**parts)


def mistake(name: str, student: str, check: str = CHECK_ALL, **override: str) -> nbformat.NotebookNode:
    """The reference style with some functions replaced; the last cell tries them all."""
    return build(name, head(student) + at_solution(**override) + [code(check)])


# the seed tutorial (Sharp bits, in-place updates): jnp.asarray then x.at[idx].set / .add, and
# jnp.where for the masked update (the boolean-mask .at[] does not jit)
TUTORIAL_FILLS = {
    "todo1": """\
def set_first(x, value):
    x = jnp.asarray(x)
    return x.at[0].set(value)""",
    "todo2": """\
def increment_at(x, idx, amount):
    x = jnp.asarray(x)
    return x.at[idx].add(amount)""",
    "todo3": """\
def clamp_negatives(x):
    x = jnp.asarray(x)
    return jnp.where(x < 0, 0.0, x)""",
}


def corpus() -> dict[str, nbformat.NotebookNode | str]:
    nbs: dict[str, nbformat.NotebookNode | str] = {}

    # correct, in three styles
    nbs["correct_at.ipynb"] = mistake("correct_at", "A. Student")
    nbs["correct_where_onehot.ipynb"] = build(
        "correct_where_onehot",
        head("B. Student") + solution_cells(MASK_SET, ONEHOT_ADD, MAXIMUM_CLAMP) + [code(CHECK_ALL)],
        tagged=False,
    )
    nbs["correct_concat_bincount.ipynb"] = build(
        "correct_concat_bincount",
        [
            *head("C. Student"),
            md(EXTRA_ERROR_MD),
            code(EXTRA_ERROR),
            *solution_cells(CONCAT_SET, BINCOUNT_ADD, CLIP_CLAMP),
            code(CHECK_ALL),
            code(EXTRA_JAXPR),
            code(EXTRA_TIMEIT),
        ],
    )

    # the reference's mutants, as a student would write them
    nbs["numpy_copy_in_place.ipynb"] = mistake(
        "numpy_copy_in_place", "D. Student", set_first=NUMPY_COPY_SET, increment_at=NUMPY_ADD_AT
    )
    nbs["set_instead_of_add.ipynb"] = mistake("set_instead_of_add", "E. Student", increment_at=SET_PLUS_ADD)
    nbs["boolean_mask.ipynb"] = mistake(
        "boolean_mask",
        "F. Student",
        check=CHECK_ALL.replace("\nprint(jax.jit(clamp_negatives)(x))", ""),
        clamp_negatives=MASK_CLAMP,
    )
    nbs["writes_into_input.ipynb"] = mistake(
        "writes_into_input",
        "G. Student",
        check=CHECK_ALL.replace("print(set_first(x, 9.0), x)", "print(set_first(x.copy(), 9.0))"),
        set_first=IN_PLACE_SET,
    )

    # typical mistakes
    nbs["no_asarray.ipynb"] = mistake(
        "no_asarray",
        "H. Student",
        check="print(set_first(jnp.zeros(3), 1.0), increment_at(jnp.zeros(3), jnp.array([1, 1]), 1.0))",
        set_first=NO_ASARRAY_SET,
        increment_at=NO_ASARRAY_ADD,
        clamp_negatives=MAXIMUM_CLAMP,
    )
    nbs["jax_item_assignment.ipynb"] = mistake(
        "jax_item_assignment",
        "I. Student",
        check=CHECK_ALL.replace("print(set_first(x, 9.0), x)\n", ""),
        set_first=JAX_ITEM_SET,
    )
    nbs["numpy_fancy_iadd.ipynb"] = mistake("numpy_fancy_iadd", "J. Student", increment_at=FANCY_IADD)
    nbs["clamp_python_loop.ipynb"] = mistake(
        "clamp_python_loop",
        "K. Student",
        check=CHECK_ALL.replace("\nprint(jax.jit(clamp_negatives)(x))", ""),
        clamp_negatives=LOOP_CLAMP,
    )
    nbs["partial_submission.ipynb"] = mistake(
        "partial_submission",
        "L. Student",
        check="print(set_first(np.ones(3), 0.0))",
        increment_at=TODO,
        clamp_negatives=TODO,
    )
    nbs["correct_tutorial.ipynb"] = kit.fill_starter(ASSIGNMENT, "correct_tutorial", TUTORIAL_FILLS, who="T. Student")
    nbs["untouched_starter.ipynb"] = STARTER.read_text(encoding="utf-8")
    return nbs


if __name__ == "__main__":
    kit.write_corpus(HERE, corpus())
