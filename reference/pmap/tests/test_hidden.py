"""Hidden tests for `pmap` (curriculum §9), graded with 4 devices (`devices: 4`).

Inputs are random (the `rng` fixture, seeded per grading run and test), never the public ones:
D = 4 rows (one per device), signal lengths N of 3 (the shortest), 5 and 17 for
`parallel_convolve`, row lengths n of 1, 6 and 33 for `global_mean`.

Parallelism: `check_parallel` asks the sandbox how many devices the result is laid out
across; `jax.vmap` or a Python loop computes the right numbers on one device and fails it.

jit — a choice, documented here. `grader.checks.check_jit` cannot grade a pmap'd function
today: in jax 0.10 `jax.export(jax.jit(jax.pmap(f)))` works (pmap lowers to a 4-device
shard_map; the module has nr_devices == 4), but the evaluator runs the module with
`exp.call(*args)` on plain NumPy inputs, which JAX refuses for a multi-device module
("exported for 4 devices and is called in a context with 1 devices"), so even the reference
fails. (Fix, in grader/evaluator.py: when `exp.nr_devices > 1`, place the arguments on a
`Mesh(jax.devices()[:exp.nr_devices])` before calling; then use `check_jit` here.) The
per-device function cannot be tested instead: the contract does not ask students to expose
it. So the jit tests below check what can be checked without running the module: the
function traces under `jax.jit` for concrete shapes (`jax.export` in the sandbox), which fails
for code that needs concrete values (`float(x)`, `np.asarray(x)`, a Python `if` on a value).
The module's numbers are not compared; wrong numbers belong to numerics anyway.

Points: numerics 7, parallelism 4, jit 2 (13; with the public tests' 4, 17).
"""

import numpy as np
import pytest

from grader.checks import CheckFailure, assert_close, check_parallel
from grader.hints import hint_for
from grader.session import StudentRaised

D = 4  # devices, and rows: one row per device
# the mean of many float32 values, combined across devices in whatever order: a little looser
MEAN_TOL = {"rtol": 1e-5, "atol": 1e-5}


def normal(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def convolve_args(rng, N):
    """xs (D, N) and ws (D, 3): one signal and one window per device."""
    return normal(rng, D, N), normal(rng, D, 3)


def mean_args(rng, n):
    """xs (D, n), with an offset per row so that every row's own mean differs from the global one."""
    return ((normal(rng, D, n) + np.arange(D, dtype=np.float32)[:, None]),)


ARGS = {"parallel_convolve": lambda rng: convolve_args(rng, 8), "global_mean": lambda rng: mean_args(rng, 10)}


def check_traces_under_jit(submission, name, args):
    """`name` traces under jax.jit for the shapes of `args` (see the module docstring)."""
    try:
        submission.export(name, example=tuple(args))
    except StudentRaised as exc:
        where = exc.location.describe() if exc.location else ""
        first = next((ln for ln in str(exc.evalue).splitlines() if ln.strip()), "")[:300]
        raise CheckFailure(
            f"`{name}` does not work under jax.jit: {exc.ename}{' at ' + where if where else ''}: {first}",
            exc.hint or hint_for(exc.ename, exc.evalue, exc.location),
        ) from None


def diagnose_mean(got, xs):
    """(what, hint) when a wrong global_mean is one of the classic slips with collectives."""
    got, xs = np.asarray(got), np.asarray(xs, dtype=np.float64)
    if got.shape != (xs.shape[0],):
        return None
    known = [
        (
            xs.mean(axis=1),
            "each entry is the mean of its own row only",
            "Each device must combine its row's mean with the others': `lax.psum` over the pmapped axis "
            "(give `jax.pmap` an `axis_name=` and use the same name in the psum), then divide by the "
            "number of devices.",
        ),
        (
            np.full(xs.shape[0], xs.mean(axis=1).sum()),
            "each entry is the sum of the row means, not their mean",
            "After `lax.psum` of the row means, divide by the number of devices: `lax.psum(1, axis_name)`.",
        ),
    ]
    for value, what, hint in known:
        if np.allclose(got, value, rtol=1e-4, atol=1e-5):
            return what, hint
    return None


# --------------------------------------------------------------------------- numerics (7)


@pytest.mark.category("numerics")
@pytest.mark.points(3)
@pytest.mark.parametrize("N", [3, 5, 17])
def test_parallel_convolve_numerics(submission, reference, rng, N):
    """parallel_convolve(xs, ws) gives convolve(xs[d], ws[d]) in row d, for D = 4 rows."""
    args = convolve_args(rng, N)
    got = submission.parallel_convolve(*args)
    assert_close(got, reference.parallel_convolve(*args), name=f"parallel_convolve with D={D}, N={N}")


@pytest.mark.category("numerics")
@pytest.mark.points(4)
@pytest.mark.parametrize("n", [1, 6, 33])
def test_global_mean_numerics(submission, reference, rng, n):
    """Every entry of global_mean(xs) is the mean of all of xs (not the mean of its own row)."""
    args = mean_args(rng, n)
    got = submission.global_mean(*args)
    try:
        assert_close(got, reference.global_mean(*args), name=f"global_mean with D={D}, n={n}", **MEAN_TOL)
    except CheckFailure as exc:
        what = diagnose_mean(got, args[0])
        if not what:
            raise
        raise CheckFailure(f"{exc.message}; {what[0]}", what[1]) from None


# --------------------------------------------------------------------------- parallelism (4)


@pytest.mark.category("parallelism")
@pytest.mark.points(4)
@pytest.mark.parametrize("name", ["parallel_convolve", "global_mean"])
def test_runs_on_every_device(submission, rng, name):
    """The result is laid out across the 4 devices: one row computed on each (jax.pmap)."""
    check_parallel(submission, name, ARGS[name](rng), devices=D)


# --------------------------------------------------------------------------- jit (2)


@pytest.mark.category("jit")
@pytest.mark.points(2)
@pytest.mark.parametrize("name", ["parallel_convolve", "global_mean"])
def test_traces_under_jit(submission, rng, name):
    """The function traces under jax.jit (no Python code that needs concrete values)."""
    check_traces_under_jit(submission, name, ARGS[name](rng))
