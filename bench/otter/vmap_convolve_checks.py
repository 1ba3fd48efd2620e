"""Checks for the otter version of vmap_convolve's tests (bench/compare.py builds the autograder).

Otter runs its tests in the student's kernel, after the notebook, and hands each test the
notebook's globals (``env``). These helpers check what jaxgrade's public and hidden tests check,
as far as a test running in the student's own process can (bench/README.md lists the
differences):

- numbers against the reference solution (``reference/vmap_convolve/solution.py``, shipped in
  the autograder zip as ``vmap_convolve_solution.py``), with jaxgrade's default tolerance;
- jit: ``jax.jit(f)`` gives the reference's numbers; "is jitted": the jaxpr of ``f`` is one call
  of a jitted function;
- vectorization: one ``jax.export`` trace with a symbolic batch size gives the reference's
  numbers for every batch size, and the trace has no loop over the batch (a ``scan`` of symbolic
  length, or a ``while``); "no vmap": no ``vmap`` in the lowered code's name stack nor in the
  source of the function and of the notebook functions it names;
- purity: two calls on read-only inputs agree exactly and with the reference, and the jaxpr has
  no host callback.

As in jaxgrade, a property (jit, vectorization, purity) counts only for a function that gives
the right numbers on that test's inputs.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import jax
import numpy as np
import vmap_convolve_solution as reference
from jax import export

SEED = 20261120  # grading.yaml's course seed; the inputs are drawn like jaxgrade's, not equal to them
RTOL, ATOL = 1e-5, 1e-6  # jaxgrade's default tolerance; atol is scaled by max(1, max|expected|)

FUNCTIONS = [
    "batched_convolve",
    "batched_convolve_shared_w",
    "batched_convolve_axis1",
    "fast_batched_convolve",
    "manually_vectorized_convolve",
]
# (B, N) of the hidden numerics tests: a batch of one, N = 3, non-square shapes, a large batch.
SHAPES = [(1, 3), (2, 17), (7, 5), (64, 17), (64, 3)]

# The public tests' fixed inputs.
XS = np.array([[0.0, 1.0, 2.0, 3.0, 4.0], [1.0, -1.0, 2.0, -2.0, 3.0]], dtype=np.float32)  # (B=2, N=5)
WS = np.array([[2.0, 3.0, 4.0], [1.0, 0.0, -1.0]], dtype=np.float32)  # (B=2, 3)
W = np.array([0.5, -1.0, 2.0], dtype=np.float32)  # (3,)


def rng(test: str) -> np.random.Generator:
    """A generator seeded per test, like jaxgrade's ``rng`` fixture."""
    return np.random.default_rng([SEED, zlib.crc32(test.encode())])


def function(env: dict[str, Any], name: str) -> Callable[..., Any]:
    f = env.get(name)
    assert callable(f), f"`{name}` is not defined in the notebook"
    return f


def assert_close(got: Any, want: Any, what: str) -> None:
    """Shape, dtype kind and values within jaxgrade's default tolerance."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    assert got.dtype.kind == want.dtype.kind, f"{what}: dtype {got.dtype}, expected {want.dtype}"
    atol = ATOL * max(1.0, float(np.max(np.abs(want)))) if want.size else ATOL
    assert np.allclose(got, want, rtol=RTOL, atol=atol), f"{what}: wrong values"


def convolve_np(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The given `convolve`, in NumPy (the public tests' expected values)."""
    return np.array([np.dot(x[i - 1 : i + 2], w) for i in range(1, len(x) - 1)], dtype=np.float32)


def public_expected(name: str) -> np.ndarray:
    if name == "batched_convolve_shared_w":
        return np.stack([convolve_np(x, W) for x in XS])
    rows = np.stack([convolve_np(x, w) for x, w in zip(XS, WS)])
    return rows.T if name == "batched_convolve_axis1" else rows


def public_args(name: str) -> tuple[np.ndarray, ...]:
    if name == "batched_convolve_shared_w":
        return XS, W
    if name == "batched_convolve_axis1":
        return XS.T.copy(), WS.T.copy()
    return XS, WS


def make_args(gen: np.random.Generator, name: str, B: int, N: int) -> tuple[np.ndarray, ...]:
    """Random float32 arguments for `name`, with batch size B and signal length N."""

    def normal(*shape: int) -> np.ndarray:
        return gen.standard_normal(shape).astype(np.float32)

    if name == "batched_convolve_shared_w":
        return normal(B, N), normal(3)
    if name == "batched_convolve_axis1":
        return normal(N, B), normal(3, B)
    return normal(B, N), normal(B, 3)


def symbolic_args(name: str, N: int) -> tuple[jax.ShapeDtypeStruct, ...]:
    """Argument shapes with a symbolic batch size B (and a fixed signal length N)."""
    (B,) = export.symbolic_shape("B")

    def spec(*shape: Any) -> jax.ShapeDtypeStruct:
        return jax.ShapeDtypeStruct(shape, np.float32)

    if name == "batched_convolve_shared_w":
        return spec(B, N), spec(3)
    if name == "batched_convolve_axis1":
        return spec(N, B), spec(3, B)
    return spec(B, N), spec(B, 3)


def _equations(jaxpr: Any) -> Iterator[Any]:
    """Every equation of a jaxpr, those of the jaxprs inside it (jit, cond, scan, ...) too."""
    for eqn in jaxpr.eqns:
        yield eqn
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                sub = getattr(sub, "jaxpr", sub)
                if hasattr(sub, "eqns"):
                    yield from _equations(sub)


# --------------------------------------------------------------------------- the checks


def check_public(env: dict[str, Any], name: str) -> None:
    """The public numerics test of `name`: fixed inputs, NumPy's convolve row by row."""
    assert_close(function(env, name)(*public_args(name)), public_expected(name), name)


def check_numerics(env: dict[str, Any], test: str, name: str, B: int, N: int) -> None:
    args = make_args(rng(test), name, B, N)
    assert_close(function(env, name)(*args), getattr(reference, name)(*args), f"{name} with B={B}, N={N}")


def check_jit(env: dict[str, Any], test: str, name: str) -> None:
    """``jax.jit(f)`` works and gives the reference's numbers."""
    args = make_args(rng(test), name, 7, 11)
    assert_close(jax.jit(function(env, name))(*args), getattr(reference, name)(*args), f"jax.jit({name})")


def check_is_jitted(env: dict[str, Any], name: str, args: tuple[np.ndarray, ...], want: Any) -> None:
    """`name` gives `want`, and its jaxpr is one call of a jitted function (what jax.jit makes)."""
    f = function(env, name)
    assert_close(f(*args), want, name)
    jaxpr = jax.make_jaxpr(f)(*args).jaxpr
    whole = len(jaxpr.eqns) == 1 and jaxpr.eqns[0].primitive.name in ("jit", "pjit")
    assert whole and list(jaxpr.eqns[0].outvars) == list(jaxpr.outvars), f"`{name}` is not a jax.jit-compiled function"


def check_vectorized(
    env: dict[str, Any], name: str, symbolic: tuple[Any, ...], cases: list[tuple[np.ndarray, ...]], want: list[Any]
) -> None:
    """One trace for a symbolic batch size (a Python loop over the batch cannot be traced so)
    gives `want` for every case, and has no loop over the batch (lax.map/scan/fori_loop)."""
    f = function(env, name)
    exported = export.export(jax.jit(f))(*symbolic)
    for case, expected in zip(cases, want):
        assert_close(exported.call(*case), expected, f"{name} traced with a symbolic batch, B={case[0].shape[0]}")
    for eqn in _equations(jax.make_jaxpr(f)(*symbolic).jaxpr):
        loops = eqn.primitive.name == "while" or (
            eqn.primitive.name == "scan" and not isinstance(eqn.params.get("length"), int)
        )
        assert not loops, f"`{name}` loops over the batch ({eqn.primitive.name})"


def check_public_vectorized(env: dict[str, Any]) -> None:
    """The public test: batched_convolve traces once for batches of 1 and 2."""
    (B,) = export.symbolic_shape("B")
    symbolic = (jax.ShapeDtypeStruct((B, 5), np.float32), jax.ShapeDtypeStruct((B, 3), np.float32))
    cases = [(XS[:1], WS[:1]), (XS, WS)]
    want = [np.stack([convolve_np(x, w) for x, w in zip(xs, ws)]) for xs, ws in cases]
    check_vectorized(env, "batched_convolve", symbolic, cases, want)


def check_batch_vectorized(env: dict[str, Any], test: str, name: str, N: int = 9) -> None:
    gen = rng(test)
    cases = [make_args(gen, name, B, N) for B in (1, 5, 64)]
    want = [getattr(reference, name)(*case) for case in cases]
    check_vectorized(env, name, symbolic_args(name, N), cases, want)


def _sources(env: dict[str, Any], f: Any) -> Iterator[str]:
    """The source of `f` and of the notebook functions it names, transitively."""
    seen: set[int] = set()
    todo = [f]
    while todo:
        g = todo.pop()
        g = getattr(g, "__wrapped__", g)  # jax.jit / jax.vmap / functools.wraps keep the function here
        code = getattr(g, "__code__", None)
        if code is None or id(code) in seen:
            continue
        seen.add(id(code))
        try:
            yield inspect.getsource(g)
        except (OSError, TypeError):
            pass
        codes = [code]
        while codes:
            c = codes.pop()
            codes += [k for k in c.co_consts if inspect.iscode(k)]
            todo += [env[n] for n in c.co_names if n in env and callable(env[n])]


def _names_vmap(source: str) -> bool:
    """Whether the code uses ``vmap`` as a name or attribute (comments and strings do not count)."""
    try:
        tree = ast.parse(textwrap.dedent(source))
    except SyntaxError:
        return False
    for node in ast.walk(tree):
        if (isinstance(node, ast.Name) and node.id == "vmap") or (
            isinstance(node, ast.Attribute) and node.attr == "vmap"
        ):
            return True
        if isinstance(node, ast.alias) and "vmap" in (node.name.split(".")[-1], node.asname):
            return True
    return False


def check_no_vmap(env: dict[str, Any], test: str, name: str) -> None:
    """`name` gives the reference's numbers without jax.vmap (neither traced nor in its source)."""
    f = function(env, name)
    args = make_args(rng(test), name, 4, 9)
    assert not any(_names_vmap(src) for src in _sources(env, f)), f"`{name}` uses jax.vmap"
    lowered = jax.jit(f).lower(*args).as_text(debug_info=True)
    assert "vmap(" not in lowered, f"`{name}` uses jax.vmap"
    assert_close(f(*args), getattr(reference, name)(*args), name)


def _read_only(a: np.ndarray) -> np.ndarray:
    """A copy of `a` whose memory is read-only for good (its base is immutable bytes)."""
    return np.frombuffer(a.tobytes(), dtype=a.dtype).reshape(a.shape)


def check_pure(env: dict[str, Any], test: str, name: str) -> None:
    """Two calls on read-only inputs agree exactly and with the reference; no host callbacks."""
    f = function(env, name)
    args = make_args(rng(test), name, 6, 8)
    want = getattr(reference, name)(*args)
    frozen = tuple(_read_only(a) for a in args)
    first, second = np.asarray(f(*frozen)), np.asarray(f(*frozen))
    assert_close(first, want, f"call 1 of {name}")
    assert_close(second, want, f"call 2 of {name}")
    assert first.shape == second.shape and np.array_equal(first, second, equal_nan=True), f"`{name}` is not repeatable"
    assert all(np.array_equal(a, b) for a, b in zip(frozen, args)), f"`{name}` modified its inputs"
    callbacks = [e.primitive.name for e in _equations(jax.make_jaxpr(f)(*args).jaxpr) if "callback" in e.primitive.name]
    assert not callbacks, f"`{name}` calls back into Python ({callbacks[0]})"
