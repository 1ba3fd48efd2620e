"""Hidden tests for `pytrees` (curriculum §6).

Inputs are random (the `rng` fixture, seeded per grading run and test), never the public ones.
The structures are fixed and cover what the curriculum asks for: dicts, lists and tuples nested
in each other, `None`, empty containers (`[]`, `()`, `{}`), a bare array (a tree of one leaf),
a tree with no leaves at all, 0-d leaves, and float32, int32 and bool leaves. Leaf shapes and
values are random.

What can cross the trust boundary, and so what these trees are made of: dicts with **string**
keys, lists, tuples, `None`, and NumPy arrays of numeric or bool dtype. A student's function
receives exactly these (NumPy arrays, not JAX arrays) and must return the same kinds of things.
Namedtuples, dataclasses, `flax`/`equinox` modules and other custom pytree node classes cannot
be sent or returned (they would carry behaviour), so they are not tested; neither are dicts
with non-string keys.

How results are compared (each expected value is computed with the reference solution, here,
in the trusted process):
- structure: `jax.tree.structure(got) == jax.tree.structure(expected)` (dict keys, list vs
  tuple, `None`, empty containers), after `assert_close`, which walks both trees and names the
  first place where they differ;
- numerics: the leaves, in `jax.tree.leaves` order, within the default float32 tolerance, so a
  function that gets every number right but loses the structure loses only structure points;
- `tree_shapes`: a shape is itself a tuple of ints, which `jax.tree` treats as a node with int
  leaves (and `()`, the shape of a 0-d leaf, as a node with no leaves at all). So the result is
  compared exactly with `assert_close(..., exact=True)` (a shape must be a tuple of ints: not a
  list, not an array), and its structure with `jax.tree.structure(..., is_leaf=is_shape)`, which
  makes each tuple of ints one leaf. An empty tuple in the input maps to `()` in the output
  either way, so the ambiguity between "the shape of a 0-d leaf" and "an empty tuple node" does
  not matter: both are `()`.
- `count_leaves` may return a Python int, a NumPy integer or a 0-d integer array: the value
  must equal the expected count exactly.

`scale_tree` of an int leaf: the leaf is multiplied by `c` with ordinary type promotion, as
`leaf * c` computes it in JAX or NumPy: an int32 leaf times an int `c` stays an integer array; an
int32 leaf times a float `c` becomes a float array (float32 in JAX, float64 in NumPy; the
comparison accepts either width, but not an int result truncated back to the leaf's dtype).
Bool leaves appear only in the trees given to `count_leaves` and `tree_shapes`: arithmetic on
bools (`True * 0.5`, `True ** 2`) differs between NumPy and JAX and is not part of the contract.

jit: `sgd_update` and `tree_l2_norm` are exported once under `jax.jit` from the shapes and
dtypes of the hidden trees (every leaf, and `lr`, traced; no value reaches the sandbox), and
that one module runs in the evaluator on two calls that differ only in values. It must give the
reference's structure and leaves both times: one trace serves every value. As in every property
test, a function with wrong numbers or a wrong structure fails this one too (the README's
"Crashes and wrong numbers").

Points: structure 9, numerics 8, jit 4 (21; with the public tests' 7: structure 12, numerics 11, jit 5, 28).
"""

import jax
import numpy as np
import pytest

from grader.testing import CheckFailure, StudentRaised, assert_close, error_cause, hint_for, quoted

# --------------------------------------------------------------------------- hidden trees


def _dim(rng):
    return int(rng.integers(1, 6))


def f32(rng, *shape):
    return np.asarray(2 * rng.standard_normal(shape), dtype=np.float32)


def i32(rng, *shape):
    return np.asarray(rng.integers(-5, 6, size=shape), dtype=np.int32)


def boolean(rng, *shape):
    return np.asarray(rng.random(shape) < 0.5)


def mixed(rng, bools=False):
    """A dict at the top: nested dicts, a list holding None and a tuple, an empty tuple, an int
    scalar; with ``bools``, bool leaves too."""
    n = _dim(rng)
    tree = {
        "dense": {"w": f32(rng, 3, n), "b": f32(rng, n)},
        "blocks": [f32(rng, n, 2), None, (i32(rng, _dim(rng)), f32(rng))],
        "frozen": (),
        "step": i32(rng),
    }
    if bools:
        tree["mask"] = boolean(rng, _dim(rng))
        tree["flags"] = [boolean(rng), None, {}]
    return tree


def list_top(rng):
    """A list at the top, with an empty list, a dict holding None and a 3-d leaf."""
    return [f32(rng, 1), [], {"x": f32(rng, 2, _dim(rng), 1), "y": None}, i32(rng, 2, 2)]


def tuple_top(rng):
    """A tuple at the top: a 0-d leaf, an empty dict, None in a list, lists of lists."""
    return (f32(rng), {"a": {}, "b": [None, f32(rng, _dim(rng) + 2)]}, [[i32(rng, 2, 2)]], (f32(rng, 1, 1),))


def single_leaf(rng):
    """A bare array: a tree with exactly one leaf and no containers."""
    return f32(rng, _dim(rng) + 1)


def no_leaves(rng):
    """Only containers and None: no leaves at all."""
    return {"a": None, "b": [], "c": ((), {}), "d": [None, None]}


def deep(rng):
    """Deep nesting: dicts in lists in dicts in tuples."""
    return [{"a": [{"b": (f32(rng, 2),)}]}, {"c": {"d": {"e": [i32(rng, 3), None]}}}]


TREES = {
    "mixed": mixed,
    "mixed-bools": lambda rng: mixed(rng, bools=True),
    "list-top": list_top,
    "tuple-top": tuple_top,
    "single-leaf": single_leaf,
    "no-leaves": no_leaves,
    "deep": deep,
}


def float_like(rng, tree):
    """A tree of the same structure and shapes with float32 values (gradients, or new params)."""
    return jax.tree.map(lambda leaf: f32(rng, *np.shape(leaf)), tree)


def params_tree(rng, kind):
    """sgd_update's params: float32 leaves, with None and empty containers."""
    if kind == "mlp":
        return {
            "layers": [
                {"w": f32(rng, 3, 4), "b": f32(rng, 4)},
                {"w": f32(rng, 4, 1), "b": f32(rng, 1)},
            ],
            "scale": f32(rng),
            "frozen": None,
            "buffers": (),
            "head": (f32(rng, 2), []),
        }
    return ([f32(rng, _dim(rng))], (f32(rng, 2, 2), None), {})


# --------------------------------------------------------------------------- comparisons


def _leaf_paths(tree):
    return [
        jax.tree_util.keystr(path) or "(the whole tree)" for path, _ in jax.tree_util.tree_flatten_with_path(tree)[0]
    ]


def check_leaves(got, expected, name, hint="", **tol):
    """The leaves of ``got`` equal those of ``expected``, in jax.tree.leaves order (numerics)."""
    got_leaves, exp_leaves = jax.tree.leaves(got), jax.tree.leaves(expected)
    if len(got_leaves) != len(exp_leaves):
        raise CheckFailure(
            f"{name}: expected {len(exp_leaves)} leaves, got {len(got_leaves)}",
            "Work leaf by leaf with `jax.tree.map`, so that every array leaf gives one array leaf.",
        )
    for path, g, e in zip(_leaf_paths(expected), got_leaves, exp_leaves):
        try:
            assert_close(g, e, name=f"{name}, leaf {path}", **tol)
        except CheckFailure as exc:
            raise CheckFailure(exc.message, exc.hint or hint) from None


def check_structure(got, expected, name):
    """``got`` has exactly the pytree structure of ``expected`` (dict keys, list vs tuple, None,
    empty containers)."""
    got_def, exp_def = jax.tree.structure(got), jax.tree.structure(expected)
    if got_def != exp_def:
        raise CheckFailure(
            f"{name}: the structure changed: expected {exp_def}, got {quoted(str(got_def), 'another structure')}",
            "`jax.tree.map(fn, tree)` rebuilds the input's structure (dicts stay dicts with the same "
            "keys, lists stay lists, tuples stay tuples, None stays None); flattening to a list of "
            "leaves loses it unless you `jax.tree.unflatten` the result.",
        )


SHAPES_HINT = (
    "Keep the input's structure (`jax.tree.map` rebuilds it, None and empty containers included) and "
    "give each leaf's shape as a tuple of ints, `x.shape` or `jnp.shape(x)`: not a list, not an array."
)


def is_shape(value):
    """A shape: a tuple of ints (the empty tuple too)."""
    return isinstance(value, tuple) and all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) for d in value)


def check_jit_tree(submission, name, calls, reference):
    """``name`` exported once under ``jax.jit`` from the shapes and dtypes of the first call's
    pytrees (no value reaches the sandbox); that one module, run in the evaluator, gives the
    reference's structure and leaves for every call (so one trace serves calls that differ only
    in values)."""
    try:
        exp = submission.export(name, example=calls[0])
    except StudentRaised as exc:
        where = exc.location.describe() if exc.location else ""
        cause = error_cause(exc.evalue)
        raise CheckFailure(
            f"`{name}` does not work under jax.jit: {exc.ename}{' at ' + where if where else ''}"
            + (f": {cause}" if cause else ""),
            exc.hint or hint_for(exc.ename, exc.evalue, exc.location),
        ) from None
    for i, args in enumerate(calls):
        label = f"jax.jit({name}), call {i + 1}"
        got, _ = submission.evaluate(name, exp.module, *args)
        want = reference(*args)
        check_structure(got, want, label)
        check_leaves(got, want, label)


# --------------------------------------------------------------------------- structure (9)


@pytest.mark.category("structure")
@pytest.mark.points(3)
@pytest.mark.parametrize("tree", ["mixed-bools", "list-top", "tuple-top", "single-leaf", "no-leaves", "deep"])
def test_count_leaves(submission, reference, rng, tree):
    """count_leaves counts leaves as jax.tree_util does: None and empty containers are not leaves."""
    t = TREES[tree](rng)
    want = reference.count_leaves(t)
    got = submission.count_leaves(t)
    value = got
    if isinstance(got, np.ndarray) and got.shape == () and got.dtype.kind in "iu":
        value = got.item()
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise CheckFailure(
            f"count_leaves on the {tree} tree: expected the int {want}, got {quoted(repr(got), type(got).__name__)}"[
                :300
            ],
            "Return a Python int: `len(jax.tree.leaves(tree))`.",
        )
    if int(value) != want:
        raise CheckFailure(
            f"count_leaves on the {tree} tree: expected {want} leaves, got {quoted(str(int(value)), 'another number')}",
            "`None` and empty containers ([], (), {}) are pytree nodes without leaves; every array, "
            "whatever its size or dtype, is one leaf. `jax.tree.leaves(tree)` lists exactly the leaves.",
        )


@pytest.mark.category("structure")
@pytest.mark.points(3)
@pytest.mark.parametrize("tree", ["mixed-bools", "tuple-top", "no-leaves"])
def test_tree_shapes(submission, reference, rng, tree):
    """tree_shapes keeps the structure and replaces each leaf by its shape, a tuple of ints."""
    t = TREES[tree](rng)
    want = reference.tree_shapes(t)
    got = submission.tree_shapes(t)
    try:
        assert_close(got, want, name=f"tree_shapes on the {tree} tree", exact=True)
    except CheckFailure as exc:
        raise CheckFailure(exc.message, SHAPES_HINT) from None
    got_def, want_def = jax.tree.structure(got, is_leaf=is_shape), jax.tree.structure(want, is_leaf=is_shape)
    if got_def != want_def:  # pragma: no cover - assert_close(exact=True) already caught it
        raise CheckFailure(
            f"tree_shapes on the {tree} tree: structure {quoted(str(got_def), '(another)')}, expected {want_def}"
        )


@pytest.mark.category("structure")
@pytest.mark.points(2)
@pytest.mark.parametrize("tree", ["mixed", "tuple-top"])
def test_scale_tree_keeps_structure(submission, reference, rng, tree):
    """scale_tree returns a tree of exactly the input's structure."""
    t = TREES[tree](rng)
    got = submission.scale_tree(t, -1.5)
    want = reference.scale_tree(t, -1.5)
    check_structure(got, want, f"scale_tree on the {tree} tree")
    assert_close(jax.tree.map(np.shape, got), jax.tree.map(np.shape, want), name=f"scale_tree on the {tree} tree")


@pytest.mark.category("structure")
@pytest.mark.points(1)
def test_sgd_update_keeps_structure(submission, reference, rng):
    """sgd_update returns a tree of exactly the structure of params."""
    params = params_tree(rng, "mlp")
    grads = float_like(rng, params)
    got = submission.sgd_update(params, grads, 0.05)
    check_structure(got, reference.sgd_update(params, grads, 0.05), "sgd_update")


# --------------------------------------------------------------------------- numerics (8)


@pytest.mark.category("numerics")
@pytest.mark.points(3)
@pytest.mark.parametrize(("tree", "c"), [("mixed", -0.5), ("list-top", 3), ("single-leaf", 2.5)])
def test_scale_tree_numerics(submission, reference, rng, tree, c):
    """Every leaf of scale_tree(tree, c) is the leaf times c (an int leaf times a float c is a float)."""
    t = TREES[tree](rng)
    check_leaves(
        submission.scale_tree(t, c),
        reference.scale_tree(t, c),
        f"scale_tree on the {tree} tree, c={c}",
        hint="Multiply each leaf by c and keep the result as it comes out: an int leaf times a float c is a "
        "float array (do not cast it back to the leaf's dtype).",
    )


@pytest.mark.category("numerics")
@pytest.mark.points(2)
@pytest.mark.parametrize("kind", ["mlp", "tuple"])
def test_sgd_update_numerics(submission, reference, rng, kind):
    """Every leaf of sgd_update(params, grads, lr) is params - lr * grads."""
    params = params_tree(rng, kind)
    grads = float_like(rng, params)
    lr = float(rng.uniform(0.01, 0.5))
    check_leaves(
        submission.sgd_update(params, grads, lr), reference.sgd_update(params, grads, lr), f"sgd_update ({kind})"
    )


@pytest.mark.category("numerics")
@pytest.mark.points(3)
@pytest.mark.parametrize("tree", ["mixed", "single-leaf", "no-leaves", "deep"])
def test_tree_l2_norm_numerics(submission, reference, rng, tree):
    """tree_l2_norm is the square root of the sum of squares of every entry (0 for no leaves)."""
    t = TREES[tree](rng)
    assert_close(submission.tree_l2_norm(t), reference.tree_l2_norm(t), name=f"tree_l2_norm on the {tree} tree")


# --------------------------------------------------------------------------- jit (4)


@pytest.mark.category("jit")
@pytest.mark.points(2)
@pytest.mark.parametrize("kind", ["mlp", "tuple"])
def test_sgd_update_under_jit(submission, reference, rng, kind):
    """sgd_update works under jax.jit with every leaf and lr traced, and is traced once."""
    params = params_tree(rng, kind)
    calls = [
        (params, float_like(rng, params), np.float32(0.1)),
        (float_like(rng, params), float_like(rng, params), np.float32(0.3)),
    ]
    check_jit_tree(submission, "sgd_update", calls, reference.sgd_update)


@pytest.mark.category("jit")
@pytest.mark.points(2)
@pytest.mark.parametrize("tree", ["mixed", "deep"])
def test_tree_l2_norm_under_jit(submission, reference, rng, tree):
    """tree_l2_norm works under jax.jit with every leaf traced, and is traced once."""
    t = TREES[tree](rng)
    other = jax.tree.map(lambda leaf: (leaf * 2 + 1).astype(leaf.dtype), t)
    check_jit_tree(submission, "tree_l2_norm", [(t,), (other,)], reference.tree_l2_norm)
