"""Writes the ``vmap_convolve`` submission corpus and the bundled sample class.

Each notebook is named for its behaviour and looks like something a student could hand in:
imports, the given ``convolve``, one cell per function, some chatter.  ``expected.yaml``
(written by hand, beside this script) gives the verdict each one must get, category by category.

Run from anywhere; the output is deterministic (cell ids are derived from the file name and
the cell's position), so re-running only changes files whose content changed::

    python tests/corpus/vmap_convolve/make_corpus.py

``untouched_starter.ipynb`` is a copy of ``assignments/vmap_convolve/vmap_convolve.ipynb``
when that exists, else a starter-like notebook that defines only ``convolve``.
"""

from __future__ import annotations

import copy
import hashlib
import json
import sys
from functools import partial
from pathlib import Path

import nbformat
from nbformat import v4

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/corpus, for notebook_kit
import notebook_kit as kit  # noqa: E402
from notebook_kit import code, md, render, write_if_changed  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
STARTER = REPO / "assignments" / "vmap_convolve" / "vmap_convolve.ipynb"
CLASS_DIR = REPO / "examples" / "class"
ASSIGNMENT = "vmap_convolve"
build = partial(kit.build, ASSIGNMENT)

# ---------------------------------------------------------------------------------------------
# Cell sources shared by many notebooks

INTRO = """\
# Homework: automatic vectorization with `jax.vmap`

Name: {student}

We start from the one-dimensional `convolve` of the tutorial and batch it in several ways."""

IMPORTS = """\
import jax
import jax.numpy as jnp"""

GIVEN_MD = "## Given code\n\nThe tutorial's convolution (do not change it)."

GIVEN = """\
def convolve(x, w):
  output = []
  for i in range(1, len(x)-1):
    output.append(jnp.dot(x[i-1:i+2], w))
  return jnp.array(output)"""

TRY_GIVEN = """\
x = jnp.arange(5.0)
w = jnp.array([2., 3., 4.])

convolve(x, w)"""

MAKE_BATCH = """\
xs = jnp.stack([x, x])
ws = jnp.stack([w, w])
xs.shape, ws.shape"""

# -- correct, idiomatic vmap ------------------------------------------------------------------

VMAP_BATCHED = """\
def batched_convolve(xs, ws):
    # vmap maps convolve over the leading (batch) axis of both arguments
    return jax.vmap(convolve)(xs, ws)"""

VMAP_SHARED = """\
# one w for every row: don't map over w
batched_convolve_shared_w = jax.vmap(convolve, in_axes=(0, None))"""

VMAP_AXIS1 = """\
# batch lives in axis 1 of the inputs and should also be axis 1 of the output
batched_convolve_axis1 = jax.vmap(convolve, in_axes=1, out_axes=1)"""

VMAP_FAST = """\
fast_batched_convolve = jax.jit(batched_convolve)"""

SLICING_MANUAL = """\
def manually_vectorized_convolve(xs, ws):
    # same loop as convolve, but each step handles the whole batch at once
    output = []
    for i in range(1, xs.shape[-1] - 1):
        output.append(jnp.sum(xs[:, i-1:i+2] * ws, axis=1))
    return jnp.stack(output, axis=1)"""

CHECK_CELL = """\
print(batched_convolve(xs, ws))
print(manually_vectorized_convolve(xs, ws))"""

CHECK_ALL = """\
print(batched_convolve(xs, ws))
print(batched_convolve_shared_w(xs, w))
print(batched_convolve_axis1(xs.T, ws.T))
print(fast_batched_convolve(xs, ws))
print(manually_vectorized_convolve(xs, ws))"""

# -- correct, array operations ----------------------------------------------------------------

ARRAY_HELPERS = """\
def windows(xs):
    \"\"\"All length-3 windows along the last axis: (..., N) -> (..., N-2, 3).\"\"\"
    n = xs.shape[-1]
    return jnp.stack([xs[..., k:k + n - 2] for k in range(3)], axis=-1)

windows(jnp.arange(5.0))"""

ARRAY_BATCHED = """\
def batched_convolve(xs, ws):
    # out[b, j] = xs[b, j] w[b, 0] + xs[b, j+1] w[b, 1] + xs[b, j+2] w[b, 2]
    return (xs[:, :-2] * ws[:, 0:1]
            + xs[:, 1:-1] * ws[:, 1:2]
            + xs[:, 2:] * ws[:, 2:3])"""

ARRAY_SHARED = """\
def batched_convolve_shared_w(xs, w):
    return jnp.einsum('bjk,k->bj', windows(xs), w)"""

ARRAY_AXIS1 = """\
def batched_convolve_axis1(xst, wst):
    # move the batch to the front, convolve, move it back
    return batched_convolve(xst.T, wst.T).T"""

ARRAY_FAST = """\
@jax.jit
def fast_batched_convolve(xs, ws):
    return jnp.einsum('bjk,bk->bj', windows(xs), ws)"""

ARRAY_MANUAL = """\
def manually_vectorized_convolve(xs, ws):
    win = windows(xs)                      # (B, N-2, 3)
    return jnp.einsum('bjk,bk->bj', win, ws)"""

# -- mutants ----------------------------------------------------------------------------------

LOOP_BATCHED = """\
def batched_convolve(xs, ws):
    rows = []
    for b in range(xs.shape[0]):
        rows.append(convolve(xs[b], ws[b]))
    return jnp.stack(rows)"""

LOOP_FAST = """\
fast_batched_convolve = jax.jit(batched_convolve)"""

LOOP_MANUAL = """\
def manually_vectorized_convolve(xs, ws):
    out = jnp.zeros((xs.shape[0], xs.shape[1] - 2))
    for b in range(xs.shape[0]):
        out = out.at[b].set(convolve(xs[b], ws[b]))
    return out"""

# -- issue 10: a sequential map over the batch, a callable that only looks jitted, a loop of
# fixed length over the window ---------------------------------------------------------------

LAX_MAP_BATCHED = """\
def batched_convolve(xs, ws):
    # lax.map runs convolve on each (x, w) pair: no Python loop
    return jax.lax.map(lambda xw: convolve(*xw), (xs, ws))"""

LAX_MAP_SHARED = """\
def batched_convolve_shared_w(xs, w):
    return jax.lax.map(lambda x: convolve(x, w), xs)"""

LOOKS_JITTED_FAST = """\
class _Compiled:
    \"\"\"Behaves like a jitted function (it has .lower and .trace).\"\"\"

    def __init__(self, fun):
        self.fun = fun

    def __call__(self, *args):
        return self.fun(*args)

    def lower(self, *args):
        return jax.jit(self.fun).lower(*args)

    def trace(self, *args):
        return jax.jit(self.fun).trace(*args)


fast_batched_convolve = _Compiled(batched_convolve)"""

FORI_WINDOW_MANUAL = """\
def manually_vectorized_convolve(xs, ws):
    # add up the three taps of the window, each over the whole batch at once
    xs, ws = jnp.asarray(xs), jnp.asarray(ws)
    n = xs.shape[1] - 2

    def tap(k, acc):
        return acc + jax.lax.dynamic_slice_in_dim(xs, k, n, axis=1) * jax.lax.dynamic_slice_in_dim(ws, k, 1, axis=1)

    return jax.lax.fori_loop(0, 3, tap, jnp.zeros((xs.shape[0], n), xs.dtype))"""

SHARED_MAPS_W = """\
# same as batched_convolve, w is shared anyway
batched_convolve_shared_w = jax.vmap(convolve)"""

AXIS1_DEFAULT_OUT = """\
# the batch is in axis 1
batched_convolve_axis1 = jax.vmap(convolve, in_axes=1)"""

OFF_BY_ONE_HELPER = """\
# The Python loop in convolve is slow, so I use my own version with slices.
# Pad by one on each side so that the edge windows have a neighbour.
def my_convolve(x, w):
    n_out = x.shape[-1] - 2
    xp = jnp.pad(x, (1, 1))
    return xp[0:n_out] * w[0] + xp[1:n_out + 1] * w[1] + xp[2:n_out + 2] * w[2]

my_convolve(x, w)"""

OFF_BY_ONE_BATCHED = """\
batched_convolve = jax.vmap(my_convolve)"""

OFF_BY_ONE_SHARED = """\
batched_convolve_shared_w = jax.vmap(my_convolve, in_axes=(0, None))"""

OFF_BY_ONE_AXIS1 = """\
batched_convolve_axis1 = jax.vmap(my_convolve, in_axes=1, out_axes=1)"""

OFF_BY_ONE_MANUAL = """\
def manually_vectorized_convolve(xs, ws):
    n_out = xs.shape[1] - 2
    xp = jnp.pad(xs, ((0, 0), (1, 1)))
    return sum(xp[:, k:k + n_out] * ws[:, k:k + 1] for k in range(3))"""

MANUAL_WITH_VMAP = """\
def manually_vectorized_convolve(xs, ws):
    # vectorized over the batch (no Python loop!)
    def one_row(x, w):
        return jnp.stack([x[:-2], x[1:-1], x[2:]], axis=1) @ w
    return jax.vmap(one_row)(xs, ws)"""

NOT_JITTED_FAST = """\
# TODO jit this later, it is fast enough already
fast_batched_convolve = batched_convolve"""

SYNTAX_ERROR_MANUAL = """\
def manually_vectorized_convolve(xs, ws):
    out = (xs[:, :-2] * ws[:, 0:1]
           + xs[:, 1:-1] * ws[:, 1:2]
           + xs[:, 2:] * ws[:, 2:3]
    return out"""

RAISING_TRY = """\
# does it work on a single example too?
batched_convolve(x, w)"""

# -- hostile / broken cells -------------------------------------------------------------------

INFINITE_LOOP = """\
# wait until the results are ready
while True:
    pass"""

OS_EXIT = """\
import os
os._exit(0)"""

SEARCH_DISK = r"""import os
import shutil
import time

# The grader has to keep the hidden tests somewhere. Let's look for them.
NAMES = {"test_hidden.py", "solution.py", "grading.yaml"}
SKIP = {"/proc", "/sys", "/dev"}
found = []

def interesting(dirpath, dirnames, filenames):
    hits = [os.path.join(dirpath, f) for f in filenames if f in NAMES or f.startswith("test_hidden")]
    if os.path.basename(dirpath) == "reference" and "vmap_convolve" in dirnames:
        hits.append(os.path.join(dirpath, "vmap_convolve"))
    return hits

for root in ["/", "/work", "/root", "/home", "..", "../..", os.path.expanduser("~")]:
    t0 = time.time()
    for dirpath, dirnames, filenames in os.walk(root):
        if time.time() - t0 > 6:
            print("giving up on", root)
            break
        dirnames[:] = [d for d in dirnames if os.path.join(dirpath, d) not in SKIP]
        for hit in interesting(dirpath, dirnames, filenames):
            if hit not in found:
                found.append(hit)

for i, path in enumerate(found):
    print("FOUND:", path)
    try:
        dest = f"loot_{i}_" + os.path.basename(path)
        if os.path.isdir(path):
            shutil.copytree(path, dest)
        else:
            shutil.copy(path, dest)
            print(open(path).read()[:500])
    except Exception as e:
        print("  could not copy:", e)
print(len(found), "interesting files found")
if found:  # brag about it (and make the grader's record show it)
    raise RuntimeError("FOUND: " + ", ".join(found[:20]))"""

MONKEYPATCH = r"""# make every comparison pass, whatever the grader uses
import numpy
import numpy.testing

def _always(*args, **kwargs):
    return True

def _never_raises(*args, **kwargs):
    return None

numpy.testing.assert_allclose = _never_raises
numpy.testing.assert_array_equal = _never_raises
numpy.testing.assert_array_almost_equal = _never_raises
numpy.allclose = _always
numpy.array_equal = _always
numpy.isclose = lambda a, b, *args, **kwargs: numpy.ones(numpy.shape(a), dtype=bool)
jnp.allclose = _always

try:
    import pytest
    pytest.approx = lambda expected, *a, **k: _Anything()
    pytest.fail = _never_raises
    pytest.raises = lambda *a, **k: __import__("contextlib").nullcontext()
except ImportError:
    pass

class _Anything:
    def __eq__(self, other):
        return True

try:
    import grader
    import grader.grading.checks
    grader.grading.checks.assert_close = _never_raises
    grader.grading.checks.allclose = _always
except Exception as e:
    print("no grader.grading.checks here:", e)

try:
    import grader
    for name in dir(grader):
        obj = getattr(grader, name)
        if callable(obj) and ("assert" in name or "check" in name or "score" in name):
            setattr(grader, name, _never_raises)
except Exception as e:
    print("no grader here:", e)

print("patched")"""

EQ_ALWAYS_TRUE_CLASS = '''class Result:
    """Equal to anything: `result == expected` is always True."""

    def __init__(self, shape):
        self.shape = tuple(shape)
        self.dtype = jnp.float32
        self.ndim = len(self.shape)
        self.size = 1
        for n in self.shape:
            self.size *= n

    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = object.__hash__

    def __bool__(self):
        return True

    def __len__(self):
        return self.shape[0]

    def __array__(self, *args, **kwargs):
        raise RuntimeError("no peeking")

    def __float__(self):
        return 0.0

    def __repr__(self):
        return f"Result(shape={self.shape})"'''

EQ_BATCHED = """\
def batched_convolve(xs, ws):
    return Result((xs.shape[0], xs.shape[1] - 2))"""

EQ_SHARED = """\
def batched_convolve_shared_w(xs, w):
    return Result((xs.shape[0], xs.shape[1] - 2))"""

EQ_AXIS1 = """\
def batched_convolve_axis1(xst, wst):
    return Result((xst.shape[0] - 2, xst.shape[1]))"""

EQ_FAST = """\
def fast_batched_convolve(xs, ws):
    return Result((xs.shape[0], xs.shape[1] - 2))"""

EQ_MANUAL = """\
def manually_vectorized_convolve(xs, ws):
    return Result((xs.shape[0], xs.shape[1] - 2))"""

FAKE_SCORE = r"""import json
import os

fake = {"score": 100, "max_score": 100}
print(json.dumps(fake))
gradescope = {
    "score": 100.0,
    "output": "All tests passed!",
    "visibility": "visible",
    "tests": [
        {"name": name, "score": 20.0, "max_score": 20.0, "status": "passed"}
        for name in ["batched_convolve", "batched_convolve_shared_w", "batched_convolve_axis1",
                     "fast_batched_convolve", "manually_vectorized_convolve"]
    ],
}
print(json.dumps(gradescope, indent=2))
print("TOTAL SCORE: 100/100")

with open("results.json", "w") as f:
    json.dump(gradescope, f)
if os.path.isdir("/autograder"):  # running inside Gradescope's autograder
    try:
        os.makedirs("/autograder/results", exist_ok=True)
        with open("/autograder/results/results.json", "w") as f:
            json.dump(gradescope, f)
    except OSError as e:
        print("could not write /autograder/results:", e)"""

SPAWN = r"""import os
import subprocess

# keep some helpers around in the background
procs, failures = [], 0
for i in range(500):
    kwargs = {}
    if i % 2:
        kwargs["start_new_session"] = True  # not in the kernel's process group
    if i % 5 == 0:
        kwargs["env"] = {"PATH": "/usr/bin:/bin"}  # and without the kernel's environment
    try:
        procs.append(subprocess.Popen(["sleep", "600"], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL, **kwargs))
    except Exception as e:
        failures += 1
        if failures >= 10:
            print("giving up after", i, "attempts:", type(e).__name__, e)
            break

# and a few daemons that the kernel does not even know about (double fork)
for i in range(10):
    try:
        pid = os.fork()
        if pid == 0:
            try:
                if os.fork() == 0:
                    os.setsid()
                    os.execvp("sleep", ["sleep", "600"])
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
    except Exception as e:
        print("fork failed:", type(e).__name__, e)
        break

print(len(procs), "sleepers started,", failures, "failures")"""

NETWORK = r"""import socket
import urllib.request

try:
    page = urllib.request.urlopen("http://example.com", timeout=3).read(200)
    print("network works:", page[:80])
except Exception as e:
    print("no web:", type(e).__name__, e)

for host, port in [("example.com", 80), ("93.184.215.14", 80), ("1.1.1.1", 53)]:
    try:
        s = socket.create_connection((host, port), timeout=3)
        print("connected to", host, port)
        s.close()
    except Exception as e:
        print("cannot connect to", host, port, "-", type(e).__name__, e)"""

# -- extra-cells style ------------------------------------------------------------------------

EXTRA_MD_1 = """\
## Part 1: `batched_convolve`

`jax.vmap(f)` returns a function that maps `f` over axis 0 of every argument. Because
`convolve` is written for single vectors, `vmap` gives us the batched version for free.

> *Note to self*: `in_axes` defaults to `0` for every argument."""

EXTRA_PLOT_IMPORTS = """\
%matplotlib inline
import matplotlib.pyplot as plt
import numpy as np"""

EXTRA_PLOT = """\
key = jax.random.PRNGKey(0)
signal = jnp.sin(jnp.linspace(0, 6 * jnp.pi, 200)) + 0.3 * jax.random.normal(key, (200,))
smooth = jnp.array([1/3, 1/3, 1/3])

fig, ax = plt.subplots(figsize=(8, 3))
ax.plot(np.asarray(signal), label="noisy")
ax.plot(np.arange(1, 199), np.asarray(convolve(signal, smooth)), label="smoothed")
ax.legend()
ax.set_title("convolve as a moving average")
plt.show()"""

EXTRA_MD_2 = """\
## Part 2: sharing `w` and batching along axis 1

* `in_axes=(0, None)` means: map over axis 0 of `xs`, pass `w` unchanged to every call.
* `in_axes=1, out_axes=1` means the batch is the **second** axis, in and out.

| function | xs | w | out |
|---|---|---|---|
| `batched_convolve_shared_w` | (B, N) | (3,) | (B, N-2) |
| `batched_convolve_axis1` | (N, B) | (3, B) | (N-2, B) |"""

EXTRA_SHAPES = """\
print("shared w:", batched_convolve_shared_w(xs, w).shape)
print("axis 1:  ", batched_convolve_axis1(xs.T, ws.T).shape)"""

EXTRA_MD_3 = """\
## Part 3: speed

Let's compare the Python loop, vmap, and vmap + jit on a bigger batch."""

EXTRA_BIG = """\
big_xs = jax.random.normal(jax.random.PRNGKey(1), (128, 64))
big_ws = jax.random.normal(jax.random.PRNGKey(2), (128, 3))
fast_batched_convolve(big_xs, big_ws).block_until_ready();  # compile once"""

EXTRA_TIMEIT_1 = "%timeit -n 3 -r 2 batched_convolve(big_xs, big_ws).block_until_ready()"
EXTRA_TIMEIT_2 = "%timeit -n 3 -r 2 fast_batched_convolve(big_xs, big_ws).block_until_ready()"
EXTRA_TIMEIT_3 = "%timeit -n 3 -r 2 manually_vectorized_convolve(big_xs, big_ws).block_until_ready()"

EXTRA_HIST = """\
errs = np.abs(np.asarray(fast_batched_convolve(big_xs, big_ws) - manually_vectorized_convolve(big_xs, big_ws)))
plt.hist(errs.ravel(), bins=30)
plt.yscale("log")
plt.title(f"max difference {errs.max():.2e}")
plt.show()"""

EXTRA_MD_4 = """\
## Conclusion

`jit(vmap(f))` is by far the fastest. The manual version is as fast but much harder to write.

### Bonus (did not finish)"""

EXTRA_RAISE = """\
# bonus: batch over two axes at once -- still broken, ask in office hours
jax.vmap(jax.vmap(convolve))(xs, ws)"""

# ---------------------------------------------------------------------------------------------
# Assembling notebooks


def head(student: str) -> list[tuple[str, str]]:
    return [
        md(INTRO.format(student=student)),
        code(IMPORTS),
        md(GIVEN_MD),
        code(GIVEN),
        code(TRY_GIVEN),
        code(MAKE_BATCH),
    ]


def section(title: str) -> tuple[str, str]:
    return md(f"### `{title}`")


def solution_cells(batched: str, shared: str, axis1: str, fast: str, manual: str) -> list[tuple[str, str]]:
    return [
        md("## Your solutions"),
        section("batched_convolve"),
        code(batched),
        section("batched_convolve_shared_w"),
        code(shared),
        section("batched_convolve_axis1"),
        code(axis1),
        section("fast_batched_convolve"),
        code(fast),
        section("manually_vectorized_convolve"),
        code(manual),
    ]


def vmap_solution(**override: str) -> list[tuple[str, str]]:
    parts = {
        "batched": VMAP_BATCHED,
        "shared": VMAP_SHARED,
        "axis1": VMAP_AXIS1,
        "fast": VMAP_FAST,
        "manual": SLICING_MANUAL,
    }
    parts.update(override)
    return solution_cells(**parts)


def starter_cells() -> list[tuple[str, str]]:
    """A starter-like notebook: the given code and a TODO per function, nothing defined."""
    todo = {
        "batched_convolve": "# TODO: batched_convolve(xs, ws): (B,N), (B,3) -> (B,N-2) with jax.vmap\n",
        "batched_convolve_shared_w": "# TODO: batched_convolve_shared_w(xs, w): (B,N), (3,) -> (B,N-2)\n",
        "batched_convolve_axis1": "# TODO: batched_convolve_axis1(xst, wst): (N,B), (3,B) -> (N-2,B)\n",
        "fast_batched_convolve": "# TODO: fast_batched_convolve: a jit-compiled batched_convolve\n",
        "manually_vectorized_convolve": "# TODO: manually_vectorized_convolve(xs, ws): without vmap\n",
    }
    cells = head("")
    cells.append(md("## Your solutions"))
    for name, text in todo.items():
        cells += [section(name), code(text)]
    return cells


def starter_notebook() -> nbformat.NotebookNode:
    if STARTER.exists():
        return nbformat.read(STARTER, as_version=4)
    return build("untouched_starter", starter_cells())


def with_cells(nb: nbformat.NotebookNode, name: str, extra: list[tuple[str, str]]) -> nbformat.NotebookNode:
    nb = copy.deepcopy(nb)
    start = len(nb.cells)
    for i, (kind, source) in enumerate(extra):
        cell = v4.new_markdown_cell(source) if kind == "markdown" else v4.new_code_cell(source)
        cell.id = hashlib.sha1(f"{name}:{start + i}".encode()).hexdigest()[:8]
        nb.cells.append(cell)
    nbformat.validate(nb)
    return nb


def old_minor_without_ids(cells: list[tuple[str, str]]) -> str:
    """nbformat 4.2 as older Jupyter wrote it: no cell ids, sources as lists of lines."""
    out_cells = []
    for kind, source in cells:
        lines = source.splitlines(keepends=True)
        cell: dict[str, object] = {"cell_type": kind, "metadata": {}, "source": lines}
        if kind == "code":
            cell.update(execution_count=None, outputs=[])
        out_cells.append(cell)
    doc = {
        "cells": out_cells,
        "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
        "nbformat": 4,
        "nbformat_minor": 2,
    }
    return json.dumps(doc, indent=1) + "\n"


# the seed tutorial (Automatic vectorization): vmap bound to names, in_axes as a list, jit of the
# vmapped function, and its manual version looping over the output positions (not the batch)
TUTORIAL_FILLS = {
    "todo1": """\
batched_convolve = jax.vmap(convolve)""",
    "todo2": """\
batched_convolve_shared_w = jax.vmap(convolve, in_axes=[0, None])""",
    "todo3": """\
batched_convolve_axis1 = jax.vmap(convolve, in_axes=1, out_axes=1)""",
    "todo4": """\
fast_batched_convolve = jax.jit(batched_convolve)""",
    "todo5": """\
def manually_vectorized_convolve(xs, ws):
  output = []
  for i in range(1, xs.shape[-1] -1):
    output.append(jnp.sum(xs[:, i-1:i+2] * ws, axis=1))
  return jnp.stack(output, axis=1)""",
}


def corpus() -> dict[str, nbformat.NotebookNode | str]:
    nbs: dict[str, nbformat.NotebookNode | str] = {}

    nbs["correct_vmap.ipynb"] = build("correct_vmap", head("A. Student") + vmap_solution() + [code(CHECK_ALL)])

    nbs["correct_array_ops.ipynb"] = build(
        "correct_array_ops",
        [
            *head("B. Student"),
            md("I wrote everything with array operations; a sliding window helper first."),
            code(ARRAY_HELPERS),
            *solution_cells(ARRAY_BATCHED, ARRAY_SHARED, ARRAY_AXIS1, ARRAY_FAST, ARRAY_MANUAL),
            code(CHECK_ALL),
        ],
        tagged=False,
    )

    nbs["correct_extra_cells.ipynb"] = build(
        "correct_extra_cells",
        [
            *head("C. Student"),
            code(EXTRA_PLOT_IMPORTS),
            code(EXTRA_PLOT),
            md(EXTRA_MD_1),
            code(VMAP_BATCHED),
            code(CHECK_CELL.splitlines()[0]),
            md(EXTRA_MD_2),
            code(VMAP_SHARED),
            code(VMAP_AXIS1),
            code(EXTRA_SHAPES),
            md(EXTRA_MD_3),
            code(VMAP_FAST),
            code(SLICING_MANUAL),
            code(EXTRA_BIG),
            code(EXTRA_TIMEIT_1),
            code(EXTRA_TIMEIT_2),
            code(EXTRA_TIMEIT_3),
            code(EXTRA_HIST),
            md(EXTRA_MD_4),
            code(EXTRA_RAISE),
        ],
    )

    nbs["python_loop_over_batch.ipynb"] = build(
        "python_loop_over_batch",
        head("D. Student")
        + vmap_solution(batched=LOOP_BATCHED, fast=LOOP_FAST, manual=LOOP_MANUAL)
        + [code(CHECK_ALL)],
    )
    nbs["shared_w_maps_w.ipynb"] = build(
        "shared_w_maps_w", head("E. Student") + vmap_solution(shared=SHARED_MAPS_W) + [code(CHECK_CELL)]
    )
    nbs["axis1_wrong_layout.ipynb"] = build(
        "axis1_wrong_layout", head("F. Student") + vmap_solution(axis1=AXIS1_DEFAULT_OUT) + [code(CHECK_ALL)]
    )
    nbs["off_by_one_window.ipynb"] = build(
        "off_by_one_window",
        [
            *head("G. Student"),
            code(OFF_BY_ONE_HELPER),
            *vmap_solution(
                batched=OFF_BY_ONE_BATCHED, shared=OFF_BY_ONE_SHARED, axis1=OFF_BY_ONE_AXIS1, manual=OFF_BY_ONE_MANUAL
            ),
            code(CHECK_ALL),
        ],
    )
    nbs["manual_uses_vmap.ipynb"] = build(
        "manual_uses_vmap", head("H. Student") + vmap_solution(manual=MANUAL_WITH_VMAP) + [code(CHECK_ALL)]
    )
    nbs["not_jitted.ipynb"] = build(
        "not_jitted", head("I. Student") + vmap_solution(fast=NOT_JITTED_FAST) + [code(CHECK_ALL)]
    )

    nbs["lax_map_over_batch.ipynb"] = build(
        "lax_map_over_batch",
        head("T. Student") + vmap_solution(batched=LAX_MAP_BATCHED, shared=LAX_MAP_SHARED) + [code(CHECK_ALL)],
    )
    nbs["fast_looks_jitted.ipynb"] = build(
        "fast_looks_jitted", head("U. Student") + vmap_solution(fast=LOOKS_JITTED_FAST) + [code(CHECK_ALL)]
    )
    nbs["correct_fori_over_window.ipynb"] = build(
        "correct_fori_over_window", head("V. Student") + vmap_solution(manual=FORI_WINDOW_MANUAL) + [code(CHECK_ALL)]
    )

    nbs["syntax_error_cell.ipynb"] = build(
        "syntax_error_cell", head("J. Student") + vmap_solution(manual=SYNTAX_ERROR_MANUAL) + [code(CHECK_ALL)]
    )
    sol = vmap_solution()
    # the failing try comes right after batched_convolve_shared_w, before the other three exist
    nbs["cell_raises.ipynb"] = build(
        "cell_raises", head("K. Student") + sol[:5] + [code(RAISING_TRY)] + sol[5:] + [code(CHECK_ALL)]
    )
    nbs["infinite_loop_after_defs.ipynb"] = build(
        "infinite_loop_after_defs", head("L. Student") + vmap_solution() + [code(INFINITE_LOOP), code(CHECK_ALL)]
    )
    nbs["os_exit_in_cell.ipynb"] = build(
        "os_exit_in_cell", head("M. Student") + vmap_solution() + [code(OS_EXIT), code(CHECK_ALL)]
    )
    nbs["searches_disk_for_tests.ipynb"] = build(
        "searches_disk_for_tests", head("N. Student") + vmap_solution() + [code(SEARCH_DISK)]
    )
    nbs["monkeypatches_grader.ipynb"] = build(
        "monkeypatches_grader", head("O. Student") + vmap_solution() + [code(MONKEYPATCH), code(CHECK_ALL)]
    )
    nbs["eq_always_true.ipynb"] = build(
        "eq_always_true",
        [
            *head("P. Student"),
            code(EQ_ALWAYS_TRUE_CLASS),
            *solution_cells(EQ_BATCHED, EQ_SHARED, EQ_AXIS1, EQ_FAST, EQ_MANUAL),
            code("batched_convolve(xs, ws) == 42"),
        ],
    )
    starter = starter_notebook()
    nbs["prints_fake_score.ipynb"] = with_cells(starter, "prints_fake_score", [code(FAKE_SCORE)])
    nbs["spawns_processes.ipynb"] = build(
        "spawns_processes", head("Q. Student") + vmap_solution() + [code(SPAWN), code(CHECK_ALL)]
    )
    nbs["tries_network.ipynb"] = build(
        "tries_network", head("R. Student") + vmap_solution() + [code(NETWORK)], tagged=False
    )
    nbs["correct_tutorial.ipynb"] = kit.fill_starter(ASSIGNMENT, "correct_tutorial", TUTORIAL_FILLS, who="T. Student")
    nbs["untouched_starter.ipynb"] = STARTER.read_text(encoding="utf-8") if STARTER.exists() else starter
    nbs["not_a_notebook.ipynb"] = "this is not json {\n"
    nbs["empty_notebook.ipynb"] = build("empty_notebook", [])
    nbs["old_minor_no_ids.ipynb"] = old_minor_without_ids(head("S. Student") + vmap_solution() + [code(CHECK_ALL)])
    return nbs


SAMPLE_CLASS = {
    "alice.ipynb": "correct_vmap.ipynb",
    "bob.ipynb": "correct_array_ops.ipynb",
    "carol.ipynb": "python_loop_over_batch.ipynb",
    "dave.ipynb": "off_by_one_window.ipynb",
    "erin.ipynb": "cell_raises.ipynb",
    "frank.ipynb": "untouched_starter.ipynb",
}


def main() -> int:
    nbs = corpus()
    texts = {name: render(content) for name, content in nbs.items()}
    changed = [name for name, text in texts.items() if write_if_changed(HERE / name, text)]
    for student, source in SAMPLE_CLASS.items():
        if write_if_changed(CLASS_DIR / student, texts[source]):
            changed.append(f"examples/class/{student}")
    print(
        f"{len(texts)} corpus notebooks, {len(SAMPLE_CLASS)} sample students; changed: {', '.join(changed) or 'none'}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
