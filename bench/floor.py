#!/usr/bin/env python3
"""How much of a correct notebook's time in tests is the student's own code: the floor.

The issue's target is at most 3 s in tests for a correct notebook of every assignment.  The
tests must run the student's functions on the hidden inputs, so no grader can spend less time
than those functions take.  This bench grades every ``correct*`` notebook of each assignment's
corpus (``tests/corpus/<name>/``) in this process, the way a trusted pool worker does, and splits
its seconds in tests into:

- ``student``: inside the student's functions, by the kernel's own clock (the ``elapsed`` of each
  call, the way ``grader.sandboxed.kernel_side`` times them: compilations of the student's code
  included, the request's round trip not).  Only a bench reads this clock: the kernel is the
  student's, and it decides no verdict;
- ``grader``: everything else in tests: the requests' round trips, exports, the evaluator, probes,
  counts, pytest, the references and the comparisons on the trusted side.

Each assignment is graded in a process of its own, set up as a trusted pool worker is (its
device count, the sandboxes' compile flags, its own compilations kept).  Each notebook is graded
twice in a row, with the assignment's trusted compilation cache (warmed first if it is not there
yet, as a first batch would) and without kept evaluator answers; the second grading is the one
printed (a warm trusted process: references compiled, pytest loaded), with the first one's
``tests`` beside it.  Figures only, never asserted.

    python bench/floor.py [--only prng_keys,autodiff]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from assignments import ASSIGNMENTS  # noqa: E402  (bench/assignments.py: the nine, in the curriculum's order)
from grader.course.config import load_course  # noqa: E402
from grader.grading.grade import _init_worker, grade_notebook, trusted_cache_dir, warm_cache  # noqa: E402
from grader.host import session as session_mod  # noqa: E402
from grader.host import xla_cache  # noqa: E402
from grader.host.sandbox import choose_isolation  # noqa: E402

TARGET_S = 3.0

#: over the calls of the grading under way: "calls" (how many) and "seconds" (the kernel's clock)
INSIDE: dict[str, float] = defaultdict(float)


def _count_student_time() -> None:
    original = session_mod.Session.call

    def call(self, name, *args, **kwargs):  # type: ignore[no-untyped-def]
        result = original(self, name, *args, **kwargs)
        INSIDE["calls"] += 1
        INSIDE["seconds"] += sum(result.elapsed)
        return result

    session_mod.Session.call = call  # type: ignore[method-assign]


def grade(assignment, notebook: Path, cache) -> tuple[float, float, float, int]:  # type: ignore[no-untyped-def]
    """(tests s, inside the student's functions s, score fraction, calls) of one grading."""
    INSIDE.clear()
    rec = grade_notebook(assignment, notebook, xla_cache=cache)
    frac = rec.score / rec.max_score if rec.max_score else 0.0
    return rec.timings.get("tests", 0.0), INSIDE["seconds"], frac, int(INSIDE["calls"])


HEADER = f"{'notebook':48} {'marks':>5} {'calls':>5} {'tests s':>8} {'student s':>9} {'grader s':>8}  (first grading: tests s)"


def child(name: str) -> None:
    """One assignment's correct notebooks, in this process (set up as a pool worker is); prints a
    row per notebook, then a JSON line: [notebooks, max tests s, max grader s]."""
    course = load_course(ROOT)
    assignment = course.assignment(name, staff=True)
    # as the pool sets its workers up: the compilation caches only where sandboxes are bubblewrap's
    bwrap = choose_isolation("auto") == "bwrap"
    _init_worker(assignment.config.devices, os.getppid(), trusted_cache=bwrap)
    _count_student_time()
    cache = None
    if bwrap:
        final = trusted_cache_dir(assignment)
        if xla_cache.ready(final) is None:
            t0 = time.perf_counter()
            n = warm_cache(assignment, "bwrap", final)
            print(f"(warmed {name}'s compilation cache: {n} entries in {time.perf_counter() - t0:.1f}s)", flush=True)
        cache = xla_cache.ready(final)
    else:
        print(f"({name}: no bubblewrap here, so no compilation cache: slower than a batch would be)", flush=True)
    rows = []
    for nb in sorted((ROOT / "tests" / "corpus" / name).glob("correct*.ipynb")):
        first, *_ = grade(assignment, nb, cache)
        tests, student, frac, calls = grade(assignment, nb, cache)
        rows.append((tests, student))
        print(
            f"{name + '/' + nb.stem:48} {frac:5.0%} {calls:5d} {tests:8.2f} {student:9.2f} "
            f"{tests - student:8.2f}  ({first:.2f})",
            flush=True,
        )
    print(json.dumps([len(rows), max((t for t, _ in rows), default=0.0), max((t - s for t, s in rows), default=0.0)]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated assignments (default: all nine)")
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)  # one assignment, in this process
    args = ap.parse_args()
    if args.child:
        child(args.child)
        return
    names = [n for n in args.only.split(",") if n] or list(ASSIGNMENTS)
    unknown = sorted(set(names) - set(ASSIGNMENTS))
    if unknown:
        ap.error(f"unknown assignment(s): {', '.join(unknown)}")
    print(HEADER, flush=True)
    summary = []
    for name in names:
        proc = subprocess.Popen(
            [sys.executable, __file__, "--child", name], stdout=subprocess.PIPE, text=True, cwd=ROOT
        )
        last = ""
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("["):
                last = line
            else:
                print(line, end="", flush=True)
        if proc.wait() != 0 or not last:
            why = f"exited {proc.returncode}" if proc.returncode else "printed no summary"
            print(f"warning: {name}: the grading process {why}", file=sys.stderr)
            continue
        n, worst, worst_grader = json.loads(last)
        summary.append((name, n, worst, worst_grader))
    print(f"\nper assignment, correct notebooks (target: at most {TARGET_S:g} s in tests):")
    print(f"{'assignment':20} {'notebooks':>9} {'max tests s':>11} {'max grader s':>12}")
    for name, n, worst, worst_grader in summary:
        print(f"{name:20} {n:9d} {worst:11.2f} {worst_grader:12.2f}")


if __name__ == "__main__":
    main()
