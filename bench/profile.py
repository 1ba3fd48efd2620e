#!/usr/bin/env python3
"""Where a grading run's seconds go: one notebook, phase by phase.

Grades NOTEBOOK (default: examples/class/alice.ipynb, a correct vmap_convolve) in this process,
the way a trusted pool worker does, and prints for each run:

- ``startup``: the sandbox, its worker, the kernel and ``import jax`` (the record's timing);
- ``notebook``: executing the student's cells;
- the tests, split into the time spent waiting for the sandbox, by request (``call``: the
  student's function run in the kernel on hidden inputs; ``export``: tracing it to a module;
  ``eval``/``grad``/``analyze``: the evaluator compiling and running a module; ``probe`` and the
  rest) and the trusted process's own time (pytest, references, comparisons);
- ``cpu``: the CPU seconds of the sandboxes' own processes (cgroups).

Runs, in order: a cold trusted process without the compilation cache; the same process again
(references and pytest warm, as in a batch after its first notebook), and once more in it with
pytest's long report of each failed test, as grading did before session 12 (the baseline of
the native reports it uses now: a notebook that fails many tests shows the difference); then with the trusted
compilation cache (warmed first if needed); then twice with the evaluator's answers kept
(grader/host/eval_cache.py), as for two students whose notebooks export the same modules.
Figures only, never asserted.

    python bench/profile.py [--assignment vmap_convolve] [NOTEBOOK]
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grader.course.config import load_course  # noqa: E402
from grader.grading import plugin  # noqa: E402
from grader.grading.grade import grade_notebook, trusted_cache_dir, warm_cache  # noqa: E402
from grader.host import session as session_mod  # noqa: E402
from grader.host import xla_cache  # noqa: E402
from grader.host.eval_cache import EvalCache  # noqa: E402

SPENT: dict[str, float] = defaultdict(float)
COUNT: dict[str, int] = defaultdict(int)


def _timed(method_name: str, kind: str | None) -> None:
    original = getattr(session_mod.Session, method_name)

    def wrapper(self, op, *args, **kwargs):  # type: ignore[no-untyped-def]
        t0 = time.perf_counter()
        try:
            return original(self, op, *args, **kwargs)
        finally:
            key = kind or getattr(op, "NAME", op)  # a request object (the evaluator's) or its name
            SPENT[key] += time.perf_counter() - t0
            COUNT[key] += 1

    setattr(session_mod.Session, method_name, wrapper)


@contextlib.contextmanager
def _long_failure_reports() -> Iterator[None]:
    """Grading as before session 12: pytest builds its long report of every failed test (it
    parses the source file of each frame), where the grading plugin asks for Python's own."""
    configure = plugin.GradingPlugin.pytest_configure

    def long_reports(self, config):  # type: ignore[no-untyped-def]
        configure(self, config)
        config.option.tbstyle = "long"

    plugin.GradingPlugin.pytest_configure = long_reports  # type: ignore[method-assign]
    try:
        yield
    finally:
        plugin.GradingPlugin.pytest_configure = configure  # type: ignore[method-assign]


def run(label: str, assignment, notebook: Path, cache, answers=None) -> None:  # type: ignore[no-untyped-def]
    SPENT.clear()
    COUNT.clear()
    if answers is not None:
        answers.hits = answers.misses = 0
    t0 = time.perf_counter()
    rec = grade_notebook(assignment, notebook, xla_cache=cache, eval_cache=answers)
    wall = time.perf_counter() - t0
    t = rec.timings
    waited = sum(SPENT.values())
    print(f"\n{label}: {rec.score:g}/{rec.max_score:g}, {wall:.2f}s")
    print(f"  startup {t.get('startup', 0):.2f}  notebook {t.get('execute', 0):.2f}  tests {t.get('tests', 0):.2f}")
    for key in sorted(SPENT, key=lambda k: -SPENT[k]):
        print(f"    waiting on {key:9} {SPENT[key]:6.2f}s  ({COUNT[key]} requests)")
    print(f"    trusted side      {t.get('tests', 0) - waited:6.2f}s  (pytest, references, comparisons)")
    if "cpu" in t:
        print(f"  cpu of the sandboxes {t['cpu']:.2f}s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("notebook", nargs="?", type=Path, default=ROOT / "examples" / "class" / "alice.ipynb")
    ap.add_argument("--assignment", default="vmap_convolve")
    args = ap.parse_args()
    _timed("_request", None)
    # the evaluator's requests are counted under their op (eval, grad, analyze); the kernel's
    # requests that ask the evaluator nothing are counted under theirs (call, export, probe, ...)
    _timed("_evaluator_request", None)
    assignment = load_course(ROOT).assignment(args.assignment, staff=True)
    run("cold trusted process, no compilation cache", assignment, args.notebook, None)
    run("warm trusted process, no compilation cache", assignment, args.notebook, None)
    with _long_failure_reports():
        run(
            "  the same, with pytest's long report of each failure (before session 12)", assignment, args.notebook, None
        )
    final = trusted_cache_dir(assignment)
    if xla_cache.ready(final) is None:
        t0 = time.perf_counter()
        n = warm_cache(assignment, "auto", final)
        print(f"\n(warmed {final}: {n} entries in {time.perf_counter() - t0:.1f}s)")
    run("warm trusted process, trusted compilation cache", assignment, args.notebook, xla_cache.ready(final))
    with tempfile.TemporaryDirectory() as tmp:
        answers = EvalCache(Path(tmp) / "evals")
        for who in ("first student", "next student who exports the same modules"):
            run(f"+ evaluator answers kept, {who}", assignment, args.notebook, xla_cache.ready(final), answers)
            print(f"  evaluator answers: {answers.hits} kept, {answers.misses} asked")


if __name__ == "__main__":
    main()
