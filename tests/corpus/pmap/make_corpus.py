"""Writes the ``pmap`` submission corpus.

Each notebook is named for its behaviour and looks like something a student could hand in:
the cell that asks for 4 CPU devices, imports, the given ``convolve``, one cell per function,
some chatter.  ``expected.yaml`` (written by hand, beside this script) gives the verdict each
one must get, category by category.  The assignment is graded with 4 devices.

Run from anywhere; the output is deterministic (cell ids are derived from the file name and
the cell's position), so re-running only changes files whose content changed::

    python tests/corpus/pmap/make_corpus.py

``untouched_starter.ipynb`` is a copy of ``assignments/pmap/pmap.ipynb``.
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
STARTER = REPO / "assignments" / "pmap" / "pmap.ipynb"
ASSIGNMENT = "pmap"
build = partial(kit.build, ASSIGNMENT)

# ---------------------------------------------------------------------------------------------
# Cell sources shared by many notebooks

INTRO = """\
# Homework 9: `jax.pmap`

Name: {student}

One row per device, and a mean that every device agrees on."""

SETUP = """\
import os

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4").strip()

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

jax.devices()"""

SETUP_PLAIN = """\
# the grader starts JAX with 4 devices already
import jax
import jax.numpy as jnp
from jax import lax

print(jax.device_count())"""

GIVEN_MD = "## Given code\n\nThe tutorial's convolution (do not change it)."

GIVEN = """\
def convolve(x, w):
  output = []
  for i in range(1, len(x)-1):
    output.append(jnp.dot(x[i-1:i+2], w))
  return jnp.array(output)"""

TRY_GIVEN = """\
xs = jnp.arange(20.0).reshape(4, 5)
ws = jnp.array([[2.0, 3.0, 4.0], [1.0, 0.0, -1.0], [0.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
convolve(xs[0], ws[0])"""

CHECK_ALL = """\
out = parallel_convolve(xs, ws)
print(out, out.sharding)
m = global_mean(xs)
print(m, jnp.mean(xs))"""

# -- correct: the reference style (pmap of convolve, psum over a named axis) ------------------

PMAP_CONVOLVE = """\
parallel_convolve = jax.pmap(convolve)"""

PSUM_MEAN = """\
def device_mean(x):
    # x is this device's row; psum adds the row means of all devices, psum(1) counts them
    return lax.psum(jnp.mean(x), axis_name="i") / lax.psum(1, axis_name="i")


global_mean = jax.pmap(device_mean, axis_name="i")"""

# -- correct: a wrapper function, a @partial(jax.pmap, ...) decorator with pmean ---------------

WRAPPED_CONVOLVE = """\
def parallel_convolve(xs, ws):
    # one (signal, window) pair per device
    return jax.pmap(convolve)(xs, ws)"""

PMEAN_MEAN = """\
@partial(jax.pmap, axis_name="devices")
def global_mean(x):
    return lax.pmean(jnp.mean(x), axis_name="devices")"""

# -- correct: explicit in_axes, a psum of sums divided by the total size, extra cells ---------

IN_AXES_CONVOLVE = """\
parallel_convolve = jax.pmap(convolve, in_axes=(0, 0), out_axes=0)"""

SUM_MEAN = """\
def global_mean(xs):
    total = xs.size  # D * n, known from the shape

    def per_device(row):
        return lax.psum(jnp.sum(row), "rows") / total

    return jax.pmap(per_device, axis_name="rows")(xs)"""

EXTRA_MD = """\
## Where do the results live?"""

EXTRA_SHARDS = """\
out = parallel_convolve(xs, ws)
for shard in out.addressable_shards:
    print(shard.device, shard.data)"""

EXTRA_JIT = """\
print(jax.jit(global_mean)(xs))
print(jax.make_jaxpr(global_mean)(xs))"""

EXTRA_TIMEIT = "%timeit -n 5 -r 2 parallel_convolve(xs, ws).block_until_ready()"

# -- mutants of the reference -----------------------------------------------------------------

VMAP_CONVOLVE = """\
parallel_convolve = jax.vmap(convolve)"""

VMAP_MEAN = """\
def device_mean(x):
    return lax.psum(jnp.mean(x), axis_name="i") / lax.psum(1, axis_name="i")


# vmap understands axis_name too
global_mean = jax.vmap(device_mean, axis_name="i")"""

NO_PSUM_MEAN = """\
# each device averages its own row
global_mean = jax.pmap(jnp.mean)"""

NO_AXIS_NAME_MEAN = """\
def device_mean(x):
    return lax.psum(jnp.mean(x), axis_name="i") / lax.psum(1, axis_name="i")


global_mean = jax.pmap(device_mean)"""

LOOP_CONVOLVE = """\
def parallel_convolve(xs, ws):
    rows = []
    for x, w in zip(xs, ws):
        rows.append(convolve(x, w))
    return jnp.stack(rows)"""

# -- typical mistakes -------------------------------------------------------------------------

PSUM_NO_DIVIDE_MEAN = """\
def device_mean(x):
    return lax.psum(jnp.mean(x), axis_name="i")  # combine the means of all devices


global_mean = jax.pmap(device_mean, axis_name="i")"""

HOST_MEAN = """\
def global_mean(xs):
    # the mean is the same for every row anyway
    return jnp.full((xs.shape[0],), jnp.mean(xs))"""

HOST_COMBINE_MEAN = """\
row_mean = jax.pmap(jnp.mean)


def global_mean(xs):
    means = row_mean(xs)                 # one mean per device
    overall = float(np.mean(means))      # combine them here
    return jax.pmap(lambda m: m * 0 + overall)(means)"""

SHARED_W_CONVOLVE = """\
# the window is the same kind of thing for every row, so don't split it
parallel_convolve = jax.pmap(convolve, in_axes=(0, None))"""

GATHER_MEAN = """\
def device_mean(x):
    # every device gets all the row means, and averages them
    means = lax.all_gather(jnp.mean(x), axis_name="rows")
    return jnp.mean(means)


global_mean = jax.pmap(device_mean, axis_name="rows")"""

# -- forged parallelism: computed on one device, the result then spread over the devices -------

VMAP_PLACED_CONVOLVE = """\
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

mesh = Mesh(np.array(jax.devices()), ("d",))


def parallel_convolve(xs, ws):
    out = jax.vmap(convolve)(xs, ws)
    # one row on each device, so it counts as parallel
    return jax.device_put(out, NamedSharding(mesh, P("d")))"""

CLOSED_OVER_MEAN = """\
def global_mean(xs):
    # every device computes the mean of all of xs: no need to combine anything
    return jax.pmap(lambda row: jnp.mean(xs))(xs)"""

TODO = """\
# TODO"""

# ---------------------------------------------------------------------------------------------
# Assembling notebooks


def head(student: str, setup: str = SETUP) -> list[tuple[str, str]]:
    return [md(INTRO.format(student=student)), code(setup), md(GIVEN_MD), code(GIVEN), code(TRY_GIVEN)]


def solution_cells(convolve: str, mean: str) -> list[tuple[str, str]]:
    cells = [md("## My solutions")]
    for title, source in [("parallel_convolve", convolve), ("global_mean", mean)]:
        cells += [md(f"### `{title}`"), code(source)]
    return cells


def pmap_solution(**override: str) -> list[tuple[str, str]]:
    parts = {"convolve": PMAP_CONVOLVE, "mean": PSUM_MEAN}
    parts.update(override)
    return solution_cells(**parts)


def mistake(name: str, student: str, check: str = CHECK_ALL, **override: str) -> nbformat.NotebookNode:
    """The reference style with some functions replaced; the last cell tries them all."""
    return build(name, head(student) + pmap_solution(**override) + [code(check)])


# the seed tutorial (Parallel evaluation in JAX): jax.pmap(convolve), and a collective with an
# axis_name inside a pmapped function, divided by the device count
TUTORIAL_FILLS = {
    "todo1": """\
parallel_convolve = jax.pmap(convolve)""",
    "todo2": """\
n_devices = jax.local_device_count()


def device_mean(x):
  return jax.lax.psum(jnp.mean(x), axis_name='p') / n_devices


def global_mean(xs):
  return jax.pmap(device_mean, axis_name='p')(xs)""",
}


def corpus() -> dict[str, nbformat.NotebookNode | str]:
    nbs: dict[str, nbformat.NotebookNode | str] = {}

    # correct, in three styles
    nbs["correct_pmap_psum.ipynb"] = mistake("correct_pmap_psum", "A. Student")
    nbs["correct_decorator_pmean.ipynb"] = build(
        "correct_decorator_pmean",
        head("B. Student") + solution_cells(WRAPPED_CONVOLVE, PMEAN_MEAN) + [code(CHECK_ALL)],
        tagged=False,
    )
    nbs["correct_psum_of_sums.ipynb"] = build(
        "correct_psum_of_sums",
        [
            *head("C. Student", setup=SETUP_PLAIN),
            *solution_cells(IN_AXES_CONVOLVE, SUM_MEAN),
            code(CHECK_ALL),
            md(EXTRA_MD),
            code(EXTRA_SHARDS),
            code(EXTRA_JIT),
            code(EXTRA_TIMEIT),
        ],
    )

    # the reference's mutants, as a student would write them
    nbs["vmap_instead_of_pmap.ipynb"] = mistake(
        "vmap_instead_of_pmap", "D. Student", convolve=VMAP_CONVOLVE, mean=VMAP_MEAN
    )
    nbs["missing_psum.ipynb"] = mistake("missing_psum", "E. Student", mean=NO_PSUM_MEAN)
    nbs["psum_without_axis_name.ipynb"] = mistake(
        "psum_without_axis_name",
        "F. Student",
        check="print(parallel_convolve(xs, ws))",  # global_mean raises: the student left it out
        mean=NO_AXIS_NAME_MEAN,
    )
    nbs["python_loop_over_rows.ipynb"] = mistake("python_loop_over_rows", "G. Student", convolve=LOOP_CONVOLVE)

    # typical mistakes
    nbs["psum_not_divided.ipynb"] = mistake("psum_not_divided", "H. Student", mean=PSUM_NO_DIVIDE_MEAN)
    nbs["mean_on_one_device.ipynb"] = mistake("mean_on_one_device", "I. Student", mean=HOST_MEAN)
    nbs["mean_combined_on_host.ipynb"] = mistake("mean_combined_on_host", "J. Student", mean=HOST_COMBINE_MEAN)
    nbs["convolve_window_not_split.ipynb"] = mistake(
        "convolve_window_not_split",
        "K. Student",
        check="print(global_mean(xs))",  # parallel_convolve raises: the student left it out
        convolve=SHARED_W_CONVOLVE,
    )
    # issue 10: a collective other than psum passes; parallelism forged by placement, and a mean
    # that every device computes from the whole closed-over array, lose the parallelism points
    nbs["correct_all_gather.ipynb"] = build(
        "correct_all_gather",
        head("M. Student") + solution_cells(WRAPPED_CONVOLVE, GATHER_MEAN) + [code(CHECK_ALL)],
    )
    nbs["vmap_then_device_put.ipynb"] = mistake("vmap_then_device_put", "N. Student", convolve=VMAP_PLACED_CONVOLVE)
    nbs["mean_closed_over_no_psum.ipynb"] = mistake("mean_closed_over_no_psum", "O. Student", mean=CLOSED_OVER_MEAN)
    nbs["partial_submission.ipynb"] = mistake(
        "partial_submission", "L. Student", check="print(parallel_convolve(xs, ws))", mean=TODO
    )
    nbs["correct_tutorial.ipynb"] = kit.fill_starter(ASSIGNMENT, "correct_tutorial", TUTORIAL_FILLS, who="T. Student")
    nbs["untouched_starter.ipynb"] = STARTER.read_text(encoding="utf-8")
    return nbs


if __name__ == "__main__":
    kit.write_corpus(HERE, corpus())
