"""Public tests for `pytrees`: one small fixed tree, one point each.

Run them with `jaxgrade check pytrees.ipynb`. The hidden tests use other, random trees: dicts,
lists and tuples nested in each other, `None`, empty containers, a bare array, a tree with no
leaves, float32, int32 and bool leaves. They compare the structure of your results exactly and
run `sgd_update` and `tree_l2_norm` under `jax.jit`.

Your functions receive plain Python containers (dicts with string keys, lists, tuples, None)
of NumPy arrays, and should return the same kinds of things (JAX arrays are fine as leaves).
"""

import jax
import numpy as np
import pytest

from grader.testing import CheckFailure, assert_close, check_jit

W = np.array([[1.0, -2.0], [0.5, 3.0]], dtype=np.float32)
B = np.array([0.25, -1.0], dtype=np.float32)
STEP = np.array(3, dtype=np.int32)
# a dict holding a list that holds None, a tuple with a 0-d int leaf, and an empty list
TREE = {"layer": [{"w": W, "b": B}, None], "extra": (STEP, [])}


@pytest.mark.category("structure")
@pytest.mark.points(1)
def test_count_leaves(submission):
    """count_leaves counts the three arrays; None and the empty list are not leaves."""
    got = submission.count_leaves(TREE)
    if isinstance(got, np.ndarray) and got.shape == ():
        got = got.item()
    if not isinstance(got, (int, np.integer)) or int(got) != 3:
        raise CheckFailure(
            f"count_leaves(tree): expected 3, got {got!r}"[:300],
            "None and empty containers have no leaves; `jax.tree.leaves(tree)` lists the leaves.",
        )


@pytest.mark.category("structure")
@pytest.mark.points(1)
def test_tree_shapes(submission):
    """tree_shapes keeps the structure and gives each leaf's shape as a tuple of ints."""
    expected = {"layer": [{"w": (2, 2), "b": (2,)}, None], "extra": ((), [])}
    try:
        assert_close(submission.tree_shapes(TREE), expected, name="tree_shapes(tree)", exact=True)
    except CheckFailure as exc:
        raise CheckFailure(
            exc.message,
            "Keep the structure (`jax.tree.map` rebuilds it) and give each shape as a tuple of ints (`x.shape`).",
        ) from None


def check_leaves(got, expected, name):
    """The leaves of ``got`` equal those of ``expected``, in `jax.tree.leaves` order. Only the
    numbers: whether the structure is kept is a separate (structure) test."""
    got_leaves, want_leaves = jax.tree.leaves(got), jax.tree.leaves(expected)
    if len(got_leaves) != len(want_leaves):
        raise CheckFailure(f"{name}: expected {len(want_leaves)} leaves, got {len(got_leaves)}")
    for i, (g, w) in enumerate(zip(got_leaves, want_leaves)):
        assert_close(g, w, name=f"{name}, leaf {i}")


@pytest.mark.category("numerics")
@pytest.mark.points(1)
def test_scale_tree(submission):
    """scale_tree multiplies every leaf by c."""
    expected = {"layer": [{"w": W * 2.0, "b": B * 2.0}, None], "extra": (STEP * 2, [])}
    check_leaves(submission.scale_tree(TREE, 2), expected, "scale_tree(tree, 2)")


PARAMS = {"w": W, "b": B, "frozen": None}
GRADS = {"w": np.ones_like(W), "b": np.full_like(B, 2.0), "frozen": None}


@pytest.mark.category("numerics")
@pytest.mark.points(1)
def test_sgd_update(submission):
    """sgd_update computes params - lr * grads leaf by leaf."""
    expected = {"w": W - 0.5, "b": B - 1.0, "frozen": None}
    check_leaves(submission.sgd_update(PARAMS, GRADS, 0.5), expected, "sgd_update(params, grads, 0.5)")


@pytest.mark.category("structure")
@pytest.mark.points(1)
def test_sgd_update_keeps_structure(submission):
    """sgd_update returns a tree of the structure of params: a dict with keys b, frozen, w."""
    got = submission.sgd_update(PARAMS, GRADS, 0.5)
    if jax.tree.structure(got) != jax.tree.structure(PARAMS):
        raise CheckFailure(
            f"sgd_update(params, grads, 0.5): expected the structure {jax.tree.structure(PARAMS)}, "
            f"got {jax.tree.structure(got)}",
            "`jax.tree.map(fn, params, grads)` returns a tree of the same structure as params.",
        )


@pytest.mark.category("numerics")
@pytest.mark.points(1)
def test_tree_l2_norm(submission):
    """tree_l2_norm is the square root of the sum of squares of every entry."""
    expected = np.float32(np.sqrt(np.sum(W**2) + np.sum(B**2) + 9.0))
    assert_close(submission.tree_l2_norm(TREE), expected, name="tree_l2_norm(tree)")


@pytest.mark.category("jit")
@pytest.mark.points(1)
def test_tree_l2_norm_under_jit(submission):
    """tree_l2_norm works under jax.jit, where every leaf is a tracer, and gives the norm."""
    # traced under jax.jit from the tree's shapes and dtypes, then run on the tree
    expected = np.float32(np.sqrt(np.sum(W**2) + np.sum(B**2) + 9.0))
    check_jit(submission, "tree_l2_norm", (TREE,), expected=expected)
