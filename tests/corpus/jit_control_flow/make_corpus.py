"""Writes the ``jit_control_flow`` submission corpus.

Each notebook is named for its behaviour and looks like something a student could hand in:
imports, the given ``f``, ``g`` and ``selu``, one cell per function, some chatter.
``expected.yaml`` (written by hand, beside this script) gives the verdict each one must get,
category by category.

Run from anywhere; the output is deterministic (cell ids are derived from the file name and
the cell's position), so re-running only changes files whose content changed::

    python tests/corpus/jit_control_flow/make_corpus.py

``untouched_starter.ipynb`` is a copy of
``assignments/jit_control_flow/jit_control_flow.ipynb``.
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
STARTER = REPO / "assignments" / "jit_control_flow" / "jit_control_flow.ipynb"
ASSIGNMENT = "jit_control_flow"
build = partial(kit.build, ASSIGNMENT)

# ---------------------------------------------------------------------------------------------
# Cell sources shared by many notebooks

INTRO = """\
# Homework 2: control flow under `jax.jit`

Name: {student}

Making `f`, `g` and `selu` work under `jit`."""

IMPORTS = """\
from functools import partial

import jax
import jax.numpy as jnp
from jax import lax"""

GIVEN_MD = "## Given code\n\nFrom the assignment (do not change it)."

GIVEN = """\
def f(x):
    if x > 0:
        return x
    else:
        return 2 * x


def g(x, n):
    i = 0
    while i < n:
        i += 1
    return x + i


def selu(x, alpha=1.67, lambda_=1.05):
    return lambda_ * jnp.where(x > 0, x, alpha * jnp.exp(x) - alpha)"""

TRY_GIVEN = """\
x = jnp.array([-2.0, -0.5, 0.0, 0.5, 3.0])
print(f(2.0), f(-2.0))
print(g(x, 3))
selu(x)"""

CHECK_ALL = """\
print(f_jittable(x), f_jittable(-1.5))
print(jax.jit(f_jittable)(x))
print(g_static(x, 3), g_static(x, n=0))
print(g_traced(x, 4), jax.jit(g_traced)(x, jnp.int32(4)))
print(selu_jit(x))
print(g_loop_cached(x, 5))"""

# -- correct: the reference style (jnp.where, fori_loop, jit with static_argnums) -------------

WHERE_F = """\
def f_jittable(x):
    # compute both branches, keep the right one elementwise
    return jnp.where(x > 0, x, 2 * x)"""

STATIC_ARGNUMS_G = """\
# n is the second argument: make it static so the Python while loop sees an int
g_static = jax.jit(g, static_argnums=1)"""

FORI_G = """\
def g_traced(x, n):
    return lax.fori_loop(0, n, lambda i, acc: acc + 1, x)"""

JIT_SELU = """\
selu_jit = jax.jit(selu)"""

CACHED_LOOP = """\
@jax.jit
def add_one(x):
    return x + 1


def g_loop_cached(x, n):
    for _ in range(n):
        x = add_one(x)  # the same jitted function every time: compiled once
    return x"""

# -- correct: lax.select, while_loop, partial(jax.jit, static_argnames=...) decorator ---------

SELECT_F = """\
def f_jittable(x):
    x = jnp.asarray(x)
    # lax.select does not broadcast: both branches have x's shape and dtype
    return lax.select(x > 0, x, x * 2)"""

PARTIAL_DECORATOR_G = """\
@partial(jax.jit, static_argnames="n")
def g_static(x, n):
    return g(x, n)"""

WHILE_G = """\
def g_traced(x, n):
    def cond(state):
        i, _ = state
        return i < n

    def body(state):
        i, acc = state
        return i + 1, acc + 1

    _, out = lax.while_loop(cond, body, (0, x))
    return out"""

DECORATED_SELU = """\
@jax.jit
def selu_jit(x):
    return selu(x)"""

LAMBDA_ONCE_LOOP = """\
step = jax.jit(lambda y: y + 1.0)  # created once, at the top level


def g_loop_cached(x, n):
    for _ in range(n):
        x = step(x)
    return x"""

# -- correct: lax.cond under jnp.vectorize, a counter in fori_loop, extra cells ---------------

COND_F = """\
@jnp.vectorize
def f_jittable(x):
    # lax.cond needs a scalar predicate: vectorize applies it element by element
    return lax.cond(x > 0, lambda v: v, lambda v: 2 * v, x)"""

STATIC_ARGNAMES_LIST_G = """\
g_static = jax.jit(g, static_argnames=["n"])"""

COUNTER_G = """\
def g_traced(x, n):
    count = lax.fori_loop(0, n, lambda i, c: c + 1, 0)
    return x + count"""

JIT_ADD_LOOP = """\
add = jax.jit(jnp.add)


def g_loop_cached(x, n):
    out = x
    for _ in range(n):
        out = add(out, 1.0)
    return out"""

EXTRA_ERROR_MD = """\
## What goes wrong

First, the error from the assignment, on purpose (this cell fails)."""

EXTRA_ERROR = """\
jax.jit(f)(x)"""

EXTRA_JAXPR = """\
print(jax.make_jaxpr(f_jittable)(1.0))
print(jax.make_jaxpr(g_traced)(x, 3))"""

EXTRA_GRAD = """\
print(jax.grad(f_jittable)(2.0), jax.grad(f_jittable)(-2.0))
print(jax.vmap(f_jittable)(x))"""

EXTRA_TIMEIT = "%timeit -n 3 -r 2 g_loop_cached(x, 20).block_until_ready()"

# -- correct: the seed tutorial's own solutions, as its text writes them ----------------------

TUTORIAL_F = """\
@jax.jit
def f_jittable(x):
    return jnp.where(x > 0, x, 2 * x)"""

TUTORIAL_G_STATIC = """\
g_static = jax.jit(g, static_argnames=['n'])"""

TUTORIAL_G_TRACED = """\
def g_traced(x, n):
    return x + lax.fori_loop(0, n, lambda i, acc: acc + 1, 0)"""

TUTORIAL_SELU = """\
selu_jit = jax.jit(selu)"""

# the tutorial's "method 1": a jitted loop body, called from a Python while on the body's result
TUTORIAL_METHOD1_LAMBDA = """\
loop_body = jax.jit(lambda i: i + 1)


def g_loop_cached(x, n):
    i = 0
    while i < n:
        i = loop_body(i)
    return x + i"""

TUTORIAL_METHOD1_DEF = """\
@jax.jit
def loop_body(prev_i):
    return prev_i + 1


def g_loop_cached(x, n):
    i = 0
    while i < n:
        i = loop_body(i)
    return x + i"""

# the tutorial's "this is OK" variant: jax.jit of a named function inside the loop (jit caches
# on the function object, so every iteration hits one compilation)
TUTORIAL_JIT_NAMED_IN_LOOP = """\
def unjitted_loop_body(prev_i):
    return prev_i + 1


def g_loop_cached(x, n):
    i = 0
    while i < n:
        # this is OK, since JAX can find the cached, compiled function
        i = jax.jit(unjitted_loop_body)(i)
    return x + i"""

# -- mutants of the reference -----------------------------------------------------------------

STATIC_F = """\
# mark x static so that f's `if` sees a real number
f_jittable = jax.jit(f, static_argnums=0)"""

PYTHON_WHILE_G = """\
def g_traced(x, n):
    i = 0
    while i < n:
        i += 1
    return x + i"""

SWAPPED_F = """\
def f_jittable(x):
    return jnp.where(x > 0, 2 * x, x)"""

FRESH_LAMBDA_LOOP = """\
def g_loop_cached(x, n):
    for _ in range(n):
        x = jax.jit(lambda y: y + 1)(x)
    return x"""

NOT_JITTED_SELU = """\
# selu already uses jnp.where, so it works as it is
selu_jit = selu"""

LOOKS_JITTED_SELU = """\
class _LooksJitted:
    # what a jitted function has: lower and trace (issue 10: the old probe looked only at these)
    def __call__(self, x):
        return selu(x)

    def lower(self, *args):
        return jax.jit(selu).lower(*args)

    def trace(self, *args):
        return jax.jit(selu).trace(*args)


selu_jit = _LooksJitted()"""

# -- typical mistakes -------------------------------------------------------------------------

FLOAT_F = """\
def f_jittable(x):
    x = float(x)  # a plain Python number, so the `if` works
    if x > 0:
        return x
    return 2 * x"""

PARTIAL_PER_CALL_LOOP = """\
def add(x, k):
    return x + k


def g_loop_cached(x, n):
    step = jax.jit(partial(add, k=1.0))  # jitted once, outside the loop
    for _ in range(n):
        x = step(x)
    return x"""

NOT_STATIC_G = """\
g_static = jax.jit(g)"""

NOT_JITTED_G = """\
# g already works with a Python int n, no jit needed
g_static = g"""

BOTH_STATIC_G = """\
# both arguments static, to be safe
g_static = jax.jit(g, static_argnums=(0, 1))"""

RANGE_G = """\
def g_traced(x, n):
    for _ in range(n):
        x = x + 1
    return x"""

JIT_OF_F = """\
f_jittable = jax.jit(f)"""

TODO = """\
# TODO"""

# ---------------------------------------------------------------------------------------------
# Assembling notebooks


def head(student: str) -> list[tuple[str, str]]:
    return [md(INTRO.format(student=student)), code(IMPORTS), md(GIVEN_MD), code(GIVEN), code(TRY_GIVEN)]


def solution_cells(f: str, g_static: str, g_traced: str, selu_jit: str, g_loop_cached: str) -> list[tuple[str, str]]:
    cells = [md("## My solutions")]
    for title, source in [
        ("f_jittable", f),
        ("g_static", g_static),
        ("g_traced", g_traced),
        ("selu_jit", selu_jit),
        ("g_loop_cached", g_loop_cached),
    ]:
        cells += [md(f"### `{title}`"), code(source)]
    return cells


def where_solution(**override: str) -> list[tuple[str, str]]:
    parts = {
        "f": WHERE_F,
        "g_static": STATIC_ARGNUMS_G,
        "g_traced": FORI_G,
        "selu_jit": JIT_SELU,
        "g_loop_cached": CACHED_LOOP,
    }
    parts.update(override)
    return solution_cells(**parts)


def mistake(name: str, student: str, check: str = CHECK_ALL, **override: str) -> nbformat.NotebookNode:
    """The reference style with some functions replaced; the last cell tries them all."""
    return build(name, head(student) + where_solution(**override) + [code(check)])


def corpus() -> dict[str, nbformat.NotebookNode | str]:
    nbs: dict[str, nbformat.NotebookNode | str] = {}

    # correct, in three styles
    nbs["correct_where.ipynb"] = mistake("correct_where", "A. Student")
    nbs["correct_select_cond.ipynb"] = build(
        "correct_select_cond",
        head("B. Student")
        + solution_cells(SELECT_F, PARTIAL_DECORATOR_G, WHILE_G, DECORATED_SELU, LAMBDA_ONCE_LOOP)
        + [code(CHECK_ALL)],
        tagged=False,
    )
    nbs["correct_cond_vectorize.ipynb"] = build(
        "correct_cond_vectorize",
        [
            *head("C. Student"),
            md(EXTRA_ERROR_MD),
            code(EXTRA_ERROR),
            *solution_cells(COND_F, STATIC_ARGNAMES_LIST_G, COUNTER_G, JIT_SELU, JIT_ADD_LOOP),
            code(CHECK_ALL),
            code(EXTRA_JAXPR),
            code(EXTRA_GRAD),
            code(EXTRA_TIMEIT),
        ],
    )

    # the seed tutorial's solutions, as written there (method 1 for g_loop_cached, both spellings)
    nbs["correct_tutorial_method1.ipynb"] = build(
        "correct_tutorial_method1",
        head("Q. Student")
        + solution_cells(TUTORIAL_F, TUTORIAL_G_STATIC, TUTORIAL_G_TRACED, TUTORIAL_SELU, TUTORIAL_METHOD1_LAMBDA)
        + [code(CHECK_ALL)],
    )
    nbs["correct_tutorial_method1_def.ipynb"] = build(
        "correct_tutorial_method1_def",
        head("R. Student")
        + solution_cells(TUTORIAL_F, TUTORIAL_G_STATIC, TUTORIAL_G_TRACED, TUTORIAL_SELU, TUTORIAL_METHOD1_DEF)
        + [code(CHECK_ALL)],
    )

    nbs["correct_tutorial_jit_named_in_loop.ipynb"] = build(
        "correct_tutorial_jit_named_in_loop",
        head("S. Student")
        + solution_cells(TUTORIAL_F, TUTORIAL_G_STATIC, TUTORIAL_G_TRACED, TUTORIAL_SELU, TUTORIAL_JIT_NAMED_IN_LOOP)
        + [code(CHECK_ALL)],
    )

    # the reference's mutants, as a student would write them
    nbs["f_static_argnums.ipynb"] = mistake("f_static_argnums", "D. Student", f=STATIC_F)
    nbs["g_traced_python_while.ipynb"] = mistake("g_traced_python_while", "E. Student", g_traced=PYTHON_WHILE_G)
    nbs["f_branches_swapped.ipynb"] = mistake("f_branches_swapped", "F. Student", f=SWAPPED_F)
    nbs["g_loop_fresh_lambda.ipynb"] = mistake("g_loop_fresh_lambda", "G. Student", g_loop_cached=FRESH_LAMBDA_LOOP)
    nbs["selu_not_jitted.ipynb"] = mistake("selu_not_jitted", "H. Student", selu_jit=NOT_JITTED_SELU)
    nbs["selu_looks_jitted.ipynb"] = mistake("selu_looks_jitted", "Q. Student", selu_jit=LOOKS_JITTED_SELU)

    # typical mistakes
    nbs["f_float_concretize.ipynb"] = mistake("f_float_concretize", "I. Student", f=FLOAT_F)
    nbs["g_loop_partial_per_call.ipynb"] = mistake(
        "g_loop_partial_per_call", "J. Student", g_loop_cached=PARTIAL_PER_CALL_LOOP
    )
    nbs["g_static_not_static.ipynb"] = mistake("g_static_not_static", "K. Student", g_static=NOT_STATIC_G)
    nbs["g_static_not_jitted.ipynb"] = mistake("g_static_not_jitted", "P. Student", g_static=NOT_JITTED_G)
    nbs["g_static_x_static.ipynb"] = mistake("g_static_x_static", "L. Student", g_static=BOTH_STATIC_G)
    nbs["g_traced_range_loop.ipynb"] = mistake("g_traced_range_loop", "M. Student", g_traced=RANGE_G)
    nbs["f_jittable_jit_of_f.ipynb"] = mistake("f_jittable_jit_of_f", "N. Student", f=JIT_OF_F)
    nbs["partial_submission.ipynb"] = mistake(
        "partial_submission",
        "O. Student",
        check="print(f_jittable(x), g_static(x, 3))",
        g_traced=TODO,
        selu_jit=TODO,
        g_loop_cached=TODO,
    )
    nbs["untouched_starter.ipynb"] = STARTER.read_text(encoding="utf-8")
    return nbs


if __name__ == "__main__":
    kit.write_corpus(HERE, corpus())
