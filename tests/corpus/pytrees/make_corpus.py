"""Writes the ``pytrees`` submission corpus.

Each notebook is named for its behaviour and looks like something a student could hand in:
imports, a look at a tree or two, one cell per function, a last cell that tries them.
``expected.yaml`` (written by hand, beside this script) gives the verdict each one must get,
category by category.

Run from anywhere; the output is deterministic (cell ids are derived from the file name and
the cell's position), so re-running only changes files whose content changed::

    python tests/corpus/pytrees/make_corpus.py

``untouched_starter.ipynb`` is a copy of ``assignments/pytrees/pytrees.ipynb``.
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
STARTER = REPO / "assignments" / "pytrees" / "pytrees.ipynb"
ASSIGNMENT = "pytrees"
build = partial(kit.build, ASSIGNMENT)

# ---------------------------------------------------------------------------------------------
# Cell sources shared by many notebooks

INTRO = """\
# Homework 6: pytrees

Name: {student}

Working on whole trees of arrays with `jax.tree`."""

IMPORTS = """\
import jax
import jax.numpy as jnp
import numpy as np"""

EXPLORE_MD = "## Trying things out"

EXPLORE = """\
example = {"w": np.ones((2, 3)), "b": [np.zeros(3), None], "extra": ()}
print(jax.tree.leaves(example))
print(jax.tree.structure(example))"""

CHECK_ALL = """\
params = {"w": np.ones((2, 2), np.float32), "b": [np.zeros(2, np.float32), None], "n": (np.array(3, np.int32), [])}
print(count_leaves(params))
print(tree_shapes(params))
print(scale_tree(params, 0.5))
print(sgd_update(params, params, 0.1))
print(tree_l2_norm(params), jax.jit(tree_l2_norm)(params))"""

# -- correct: the reference style (jax.tree.map and jax.tree.leaves) --------------------------

MAP_COUNT = """\
def count_leaves(tree):
    return len(jax.tree.leaves(tree))"""

MAP_SHAPES = """\
def tree_shapes(tree):
    return jax.tree.map(lambda x: x.shape, tree)"""

MAP_SCALE = """\
def scale_tree(tree, c):
    return jax.tree.map(lambda x: x * c, tree)"""

MAP_SGD = """\
def sgd_update(params, grads, lr):
    return jax.tree.map(lambda p, g: p - lr * g, params, grads)"""

MAP_NORM = """\
def tree_l2_norm(tree):
    total = sum(jnp.sum(x**2) for x in jax.tree.leaves(tree))
    return jnp.sqrt(total)"""

# -- correct: flatten / unflatten with jax.tree_util ------------------------------------------

FLAT_COUNT = """\
from jax.tree_util import tree_flatten, tree_structure, tree_unflatten


def count_leaves(tree):
    return tree_structure(tree).num_leaves"""

FLAT_SHAPES = """\
def tree_shapes(tree):
    leaves, treedef = tree_flatten(tree)
    return tree_unflatten(treedef, [tuple(np.shape(leaf)) for leaf in leaves])"""

FLAT_SCALE = """\
def scale_tree(tree, c):
    leaves, treedef = tree_flatten(tree)
    return tree_unflatten(treedef, [jnp.multiply(leaf, c) for leaf in leaves])"""

FLAT_SGD = """\
def sgd_update(params, grads, lr):
    p_leaves, treedef = tree_flatten(params)
    g_leaves = treedef.flatten_up_to(grads)  # grads has the same structure
    return tree_unflatten(treedef, [p - lr * g for p, g in zip(p_leaves, g_leaves)])"""

FLAT_NORM = """\
def tree_l2_norm(tree):
    leaves, _ = tree_flatten(tree)
    squares = jnp.array([jnp.vdot(leaf, leaf) for leaf in leaves], dtype=jnp.float32)
    return jnp.sqrt(jnp.sum(squares))"""

# -- correct: hand-written recursion, jax.tree.reduce, extra cells ----------------------------

REC_HELPERS = """\
def _map(fn, tree, *others):
    \"\"\"My own tree_map: containers are rebuilt, anything else is a leaf.\"\"\"
    if tree is None:
        return None
    if isinstance(tree, dict):
        return {k: _map(fn, tree[k], *(o[k] for o in others)) for k in tree}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_map(fn, t, *(o[i] for o in others)) for i, t in enumerate(tree))
    return fn(tree, *others)"""

REC_COUNT = """\
def count_leaves(tree):
    if tree is None:
        return 0
    if isinstance(tree, dict):
        return sum(count_leaves(v) for v in tree.values())
    if isinstance(tree, (list, tuple)):
        return sum(count_leaves(v) for v in tree)
    return 1"""

REC_SHAPES = """\
def tree_shapes(tree):
    return _map(lambda x: tuple(int(d) for d in np.shape(x)), tree)"""

REC_SCALE = """\
def scale_tree(tree, c):
    return _map(lambda x: jnp.asarray(x) * c, tree)"""

REC_SGD = """\
def sgd_update(params, grads, lr):
    return _map(lambda p, g: p - lr * g, params, grads)"""

REC_NORM = """\
def tree_l2_norm(tree):
    sum_sq = jax.tree.reduce(lambda acc, x: acc + jnp.sum(jnp.square(x)), tree, 0.0)
    return jnp.sqrt(sum_sq)"""

EXTRA_MD = """\
## Playing with the MLP from the tutorial

Counting parameters, and one SGD step with random gradients."""

EXTRA_MLP = """\
def init_mlp(widths, key):
    params = []
    for n_in, n_out in zip(widths[:-1], widths[1:]):
        key, sub = jax.random.split(key)
        params.append({"weights": jax.random.normal(sub, (n_in, n_out)), "biases": jnp.zeros(n_out)})
    return params


mlp = init_mlp([2, 16, 1], jax.random.key(0))
print(tree_shapes(mlp), count_leaves(mlp))
grads = scale_tree(mlp, 0.01)
print(tree_l2_norm(mlp), tree_l2_norm(sgd_update(mlp, grads, 1.0)))"""

EXTRA_ERROR = """\
# tree_map needs matching structures: this fails on purpose
jax.tree.map(lambda a, b: a + b, [1, 2], (1, 2))"""

EXTRA_TIMEIT = "%timeit -n 3 -r 2 jax.jit(tree_l2_norm)(mlp).block_until_ready()"

# -- mutants of the reference -----------------------------------------------------------------

FLAT_LIST_SHAPES = """\
def tree_shapes(tree):
    return [x.shape for x in jax.tree.leaves(tree)]"""

FLAT_LIST_SCALE = """\
def scale_tree(tree, c):
    return [x * c for x in jax.tree.leaves(tree)]"""

FLAT_LIST_SGD = """\
def sgd_update(params, grads, lr):
    return [p - lr * g for p, g in zip(jax.tree.leaves(params), jax.tree.leaves(grads))]"""

NONE_COUNT = """\
def count_leaves(tree):
    # None marks a missing value, so it should count too
    return len(jax.tree.leaves(tree, is_leaf=lambda x: x is None))"""

NO_SQRT_NORM = """\
def tree_l2_norm(tree):
    return sum(jnp.sum(x**2) for x in jax.tree.leaves(tree))"""

MATH_SQRT_NORM = """\
import math


def tree_l2_norm(tree):
    total = sum(jnp.sum(x**2) for x in jax.tree.leaves(tree))
    return math.sqrt(total)"""

# -- typical mistakes -------------------------------------------------------------------------

SIZE_COUNT = """\
def count_leaves(tree):
    # how many numbers are in the tree
    return sum(np.size(x) for x in jax.tree.leaves(tree))"""

LIST_SHAPES = """\
def tree_shapes(tree):
    return jax.tree.map(lambda x: list(x.shape), tree)"""

KEEP_DTYPE_SCALE = """\
def scale_tree(tree, c):
    # keep every leaf's dtype
    return jax.tree.map(lambda x: (x * c).astype(x.dtype), tree)"""

FLOAT_LR_SGD = """\
def sgd_update(params, grads, lr):
    lr = float(lr)  # make sure it is a number
    return jax.tree.map(lambda p, g: p - lr * g, params, grads)"""

CONCAT_NORM = """\
def tree_l2_norm(tree):
    flat = jnp.concatenate([jnp.ravel(x) for x in jax.tree.leaves(tree)])
    return jnp.linalg.norm(flat)"""

TODO = """\
# TODO"""

# ---------------------------------------------------------------------------------------------
# Assembling notebooks


def head(student: str) -> list[tuple[str, str]]:
    return [md(INTRO.format(student=student)), code(IMPORTS), md(EXPLORE_MD), code(EXPLORE)]


def solution_cells(
    count_leaves: str, tree_shapes: str, scale_tree: str, sgd_update: str, tree_l2_norm: str
) -> list[tuple[str, str]]:
    cells = [md("## My solutions")]
    for title, source in [
        ("count_leaves", count_leaves),
        ("tree_shapes", tree_shapes),
        ("scale_tree", scale_tree),
        ("sgd_update", sgd_update),
        ("tree_l2_norm", tree_l2_norm),
    ]:
        cells += [md(f"### `{title}`"), code(source)]
    return cells


def map_solution(**override: str) -> list[tuple[str, str]]:
    parts = {
        "count_leaves": MAP_COUNT,
        "tree_shapes": MAP_SHAPES,
        "scale_tree": MAP_SCALE,
        "sgd_update": MAP_SGD,
        "tree_l2_norm": MAP_NORM,
    }
    parts.update(override)
    return solution_cells(**parts)


def mistake(name: str, student: str, check: str = CHECK_ALL, **override: str) -> nbformat.NotebookNode:
    """The reference style with some functions replaced; the last cell tries them all."""
    return build(name, head(student) + map_solution(**override) + [code(check)])


# the seed tutorial (Working with pytrees): jax.tree.leaves / jax.tree.map with lambdas, the
# update step as a tree.map over params and grads
TUTORIAL_FILLS = {
    "todo1": """\
def count_leaves(tree):
    return len(jax.tree.leaves(tree))""",
    "todo2": """\
def tree_shapes(tree):
    return jax.tree.map(lambda x: x.shape, tree)""",
    "todo3": """\
def scale_tree(tree, c):
    return jax.tree.map(lambda x: x * c, tree)""",
    "todo4": """\
@jax.jit
def sgd_update(params, grads, lr):
    return jax.tree.map(lambda p, g: p - lr * g, params, grads)""",
    "todo5": """\
def tree_l2_norm(tree):
    return jnp.sqrt(sum(jnp.sum(x ** 2) for x in jax.tree.leaves(tree)))""",
}


def corpus() -> dict[str, nbformat.NotebookNode | str]:
    nbs: dict[str, nbformat.NotebookNode | str] = {}

    # correct, in three styles
    nbs["correct_tree_map.ipynb"] = mistake("correct_tree_map", "A. Student")
    nbs["correct_flatten_unflatten.ipynb"] = build(
        "correct_flatten_unflatten",
        head("B. Student")
        + solution_cells(FLAT_COUNT, FLAT_SHAPES, FLAT_SCALE, FLAT_SGD, FLAT_NORM)
        + [code(CHECK_ALL)],
        tagged=False,
    )
    nbs["correct_recursive.ipynb"] = build(
        "correct_recursive",
        [
            *head("C. Student"),
            md("## A helper"),
            code(REC_HELPERS),
            *solution_cells(REC_COUNT, REC_SHAPES, REC_SCALE, REC_SGD, REC_NORM),
            code(CHECK_ALL),
            md(EXTRA_MD),
            code(EXTRA_MLP),
            code(EXTRA_ERROR),
            code(EXTRA_TIMEIT),
        ],
    )

    # the reference's mutants, as a student would write them
    nbs["flatten_to_list.ipynb"] = mistake(
        "flatten_to_list",
        "D. Student",
        tree_shapes=FLAT_LIST_SHAPES,
        scale_tree=FLAT_LIST_SCALE,
        sgd_update=FLAT_LIST_SGD,
    )
    nbs["counts_none.ipynb"] = mistake("counts_none", "E. Student", count_leaves=NONE_COUNT)
    nbs["norm_without_sqrt.ipynb"] = mistake("norm_without_sqrt", "F. Student", tree_l2_norm=NO_SQRT_NORM)
    nbs["norm_math_sqrt.ipynb"] = mistake(
        "norm_math_sqrt",
        "G. Student",
        check=CHECK_ALL.replace(", jax.jit(tree_l2_norm)(params))", ")"),
        tree_l2_norm=MATH_SQRT_NORM,
    )

    # typical mistakes
    nbs["count_array_elements.ipynb"] = mistake("count_array_elements", "H. Student", count_leaves=SIZE_COUNT)
    nbs["shapes_as_lists.ipynb"] = mistake("shapes_as_lists", "I. Student", tree_shapes=LIST_SHAPES)
    nbs["scale_keeps_dtype.ipynb"] = mistake("scale_keeps_dtype", "J. Student", scale_tree=KEEP_DTYPE_SCALE)
    nbs["sgd_float_lr.ipynb"] = mistake("sgd_float_lr", "K. Student", sgd_update=FLOAT_LR_SGD)
    nbs["norm_concatenate.ipynb"] = mistake("norm_concatenate", "L. Student", tree_l2_norm=CONCAT_NORM)
    nbs["partial_submission.ipynb"] = mistake(
        "partial_submission",
        "M. Student",
        check="print(count_leaves(example), tree_shapes(example))",
        scale_tree=TODO,
        sgd_update=TODO,
        tree_l2_norm=TODO,
    )
    nbs["correct_tutorial.ipynb"] = kit.fill_starter(ASSIGNMENT, "correct_tutorial", TUTORIAL_FILLS, who="T. Student")
    nbs["untouched_starter.ipynb"] = STARTER.read_text(encoding="utf-8")
    return nbs


if __name__ == "__main__":
    kit.write_corpus(HERE, corpus())
