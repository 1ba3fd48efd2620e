#!/usr/bin/env python3
"""The trusted process's own CPU per notebook, with and without the reference's kept outputs.

Grades one notebook ``--gradings`` times in a fresh process, the way a trusted pool worker grades
a class (its references, pytest and compilations warm after the first), and prints the trusted
process's own CPU seconds for each grading (``time.process_time``: the sandboxes are other
processes). Two kinds of process, alternating ``--rounds`` times: one as grading runs now, whose
reference module keeps its outputs (grader/grading/kept_reference.py), and the baseline, whose
tests get the reference module itself. Every record must be the same. Figures only, never
asserted.

    python bench/trusted_side.py [--assignment vmap_convolve] [--notebook PATH] [--gradings 4] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import reading  # noqa: E402

CHILD = """
import json, sys, time
sys.path.insert(0, {root!r})
from pathlib import Path
from grader.course.config import load_course
from grader.grading import grade
from grader.host import xla_cache
if {baseline!r}:
    grade.KeptModule = lambda module, version: module  # the tests get the module itself
assignment = load_course(Path({root!r})).assignment({assignment!r}, staff=True)
final = grade.trusted_cache_dir(assignment)
if xla_cache.ready(final) is None:
    grade.warm_cache(assignment, "auto", final)
cache = xla_cache.ready(final)
out = []
for _ in range({gradings}):
    c0 = time.process_time()
    rec = grade.grade_notebook(assignment, Path({notebook!r}), xla_cache=cache)
    out.append([time.process_time() - c0, rec.score, [(t.name, t.status, t.score) for t in rec.tests]])
print(json.dumps(out))
"""


def run(assignment: str, notebook: Path, gradings: int, baseline: bool) -> list:
    code = CHILD.format(
        root=str(ROOT), baseline=baseline, assignment=assignment, notebook=str(notebook), gradings=gradings
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--assignment", default="vmap_convolve")
    ap.add_argument("--notebook", type=Path, default=None, help="default: the corpus's first correct notebook")
    ap.add_argument("--gradings", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    notebook = args.notebook or sorted((ROOT / "tests" / "corpus" / args.assignment).glob("correct*.ipynb"))[0]
    print(reading())
    print(f"{args.assignment}: {notebook.name} graded {args.gradings} times per process, {args.rounds} round(s)")
    rows: dict[str, list[list[float]]] = {"kept outputs (now)": [], "baseline: the module itself": []}
    records = set()
    start = time.strftime("%H:%M UTC", time.gmtime())
    for _ in range(args.rounds):
        for label, baseline in (("baseline: the module itself", True), ("kept outputs (now)", False)):
            got = run(args.assignment, notebook, args.gradings, baseline)
            rows[label].append([g[0] for g in got])
            records |= {json.dumps(g[1:]) for g in got}
    print(f"trusted CPU s per grading ({start}); the first grading of a process imports and compiles")
    print(f"{'process':32} " + " ".join(f"{'#' + str(i + 1):>6}" for i in range(args.gradings)) + "  mean of #3+")
    means = {}
    for label, runs in rows.items():
        for r in runs:
            later = r[2:] or r[1:]
            means.setdefault(label, []).append(statistics.mean(later))
            print(f"{label:32} " + " ".join(f"{x:6.2f}" for x in r) + f"  {statistics.mean(later):10.3f}")
    base = statistics.mean(means["baseline: the module itself"])
    now = statistics.mean(means["kept outputs (now)"])
    print(f"from the third grading on: {now:.3f} s against {base:.3f} s ({now / base:.2f}x)")
    print("the same record in every grading" if len(records) == 1 else f"RECORDS DIFFER: {len(records)} different")


if __name__ == "__main__":
    main()
