#!/usr/bin/env python3
"""What warming the compilation cache with the alternative solutions costs and saves, in one run.

A class of ``--copies`` copies of every ``correct*`` notebook of an assignment's corpus (with
different bytes, so each is a submission of its own) and ``--wrong`` of its other notebooks is
graded twice, first runs both, each with a fresh compilation cache, against two copies of the
course: one as it is (``reference/<name>/alternatives/`` in it, so a batch of 50 or more warms
the wider cache), and the baseline without that folder (the reference's cache only).  It prints
both rows side by side and the ratio.  The copies share the evaluator's kept answers in both
runs alike, so neither row is a class of that many different students.  It never asserts.

    python bench/alternatives.py [--assignment prng_keys] [--copies 10] [--wrong 3] [--jobs 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from assignments import read_results  # bench/assignments.py

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "corpus"


def make_class(assignment: str, copies: int, wrong: int, dest: Path) -> list[Path]:
    notebooks = sorted((CORPUS / assignment).glob("*.ipynb"))
    correct = [p for p in notebooks if p.stem.startswith("correct")]
    others = [p for p in notebooks if not p.stem.startswith("correct")][:wrong]
    dest.mkdir()
    out = []
    for i in range(copies):
        for p in correct:
            data = json.loads(p.read_text(encoding="utf-8"))
            data["metadata"]["bench_copy"] = i  # other bytes, another submission
            out.append(dest / f"{p.stem}_{i:03d}.ipynb")
            out[-1].write_text(json.dumps(data), encoding="utf-8")
    for p in others:
        out.append(dest / p.name)
        shutil.copy(p, out[-1])
    return out


def copy_course(dest: Path, assignment: str, alternatives: bool) -> Path:
    """The course's own files (grading.yaml, assignments/, reference/), without the assignment's
    alternative solutions unless ``alternatives``."""
    dest.mkdir()
    shutil.copy(ROOT / "grading.yaml", dest / "grading.yaml")
    for folder in ("assignments", "reference"):
        shutil.copytree(ROOT / folder, dest / folder, ignore=shutil.ignore_patterns("__pycache__"))
    if not alternatives:
        shutil.rmtree(dest / "reference" / assignment / "alternatives", ignore_errors=True)
    return dest


def grade(course: Path, assignment: str, folder: Path, jobs: int, work: Path, label: str) -> dict:
    out = work / f"out-{label}"
    env = {**os.environ, "JAXGRADE_CACHE_DIR": str(work / f"cache-{label}")}
    cmd = [sys.executable, "-m", "grader", "--course", str(course), "grade", "--assignment", assignment]
    cmd += ["--jobs", str(jobs), "--out", str(out), str(folder)]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, env=env, cwd=str(ROOT), capture_output=True, text=True)  # this checkout's grader
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        print(f"warning: jaxgrade grade ({label}) exited {proc.returncode}: {proc.stderr[-500:]}", file=sys.stderr)
    records, correct, tests = read_results(out)
    return {
        "notebooks": len(records),
        "wall_s": wall,
        "tests_s": sum(tests) / len(tests) if tests else float("nan"),
        "full_marks": sum(r["score"] == r["max_score"] for r in correct),
        "correct": len(correct),
        "cache": next((line for line in proc.stderr.splitlines() if line.startswith("compilation cache")), ""),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--assignment", default="prng_keys")
    ap.add_argument("--copies", type=int, default=10, help="copies of each correct notebook (default 10)")
    ap.add_argument("--wrong", type=int, default=3, help="other notebooks of the corpus, once each (default 3)")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    if not (ROOT / "reference" / args.assignment / "alternatives").is_dir():
        sys.exit(f"{args.assignment} has no alternative solutions (reference/{args.assignment}/alternatives/)")
    rows = []
    with tempfile.TemporaryDirectory(prefix="jaxgrade-bench-alt-") as tmp:
        work = Path(tmp)
        folder = work / "class"
        n = len(make_class(args.assignment, args.copies, args.wrong, folder))
        for label, alternatives in (("with the alternatives", True), ("the reference's cache only", False)):
            course = copy_course(work / f"course-{alternatives}", args.assignment, alternatives)
            rows.append((label, grade(course, args.assignment, folder, args.jobs, work, str(alternatives))))
            print(f"  {label}: {rows[-1][1]['wall_s']:.1f}s", file=sys.stderr, flush=True)
    base = rows[1][1]
    print(f"{args.assignment}: {n} notebooks, first runs, {args.jobs} job(s), {os.cpu_count()} CPU(s)")
    print(f"{'':28} {'wall s':>7} {'s/nb':>6} {'vs baseline':>12} {'tests s (correct)':>18} {'full marks':>11}")
    for label, r in rows:
        print(
            f"{label:28} {r['wall_s']:7.1f} {r['wall_s'] / max(1, r['notebooks']):6.2f} "
            f"{r['wall_s'] / base['wall_s']:11.2f}x {r['tests_s']:18.2f} {r['full_marks']:>5}/{r['correct']}"
        )
    for label, r in rows:
        print(f"  {label}: {r['cache']}")


if __name__ == "__main__":
    main()
