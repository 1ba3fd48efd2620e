#!/usr/bin/env python3
"""Batch throughput: `jaxgrade grade` against executing the same notebooks with nbconvert.

The baseline, `jupyter nbconvert --to notebook --execute`, only runs each notebook in a fresh
kernel: it is a lower bound on what an in-kernel grader (tests appended to the student's
notebook) pays, before any test runs. jaxgrade runs each notebook in a sandbox *and* its public
and hidden tests (for vmap_convolve, 40 points of checks, including jit and vectorization
exports). The resume row is a second `jaxgrade grade` on the same class: nothing to regrade.

    pip install -e '.[bench]'            # nbconvert, for the baseline
    python bench/batch.py --copies 2 --jobs 2

Prints one row per method: notebooks, wall seconds, seconds per notebook, notebooks per minute.
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLASS = ROOT / "examples" / "class"


def make_class(dest: Path, copies: int) -> list[Path]:
    """``copies`` distinct copies (different bytes, so different sha256) of the sample class."""
    dest.mkdir(parents=True)
    out = []
    for i in range(copies):
        for nb in sorted(CLASS.glob("*.ipynb")):
            data = json.loads(nb.read_text())
            data.setdefault("metadata", {})["bench_copy"] = i
            target = dest / f"{nb.stem}{i:03d}.ipynb"
            target.write_text(json.dumps(data))
            out.append(target)
    return out


def nbconvert(paths: list[Path], jobs: int, work: Path) -> float:
    jupyter = shutil.which("jupyter", path=str(Path(sys.executable).parent)) or shutil.which("jupyter")
    if jupyter is None:
        raise SystemExit("the baseline needs nbconvert: pip install -e '.[bench]'")

    def one(p: Path) -> int:
        cmd = [jupyter, "nbconvert", "--to", "notebook", "--execute", "--allow-errors"]
        cmd += ["--ExecutePreprocessor.timeout=600", "--output-dir", str(work / "nbconvert"), str(p)]
        return subprocess.run(cmd, capture_output=True).returncode

    t0 = time.monotonic()
    with ThreadPoolExecutor(jobs) as pool:
        codes = list(pool.map(one, paths))
    if any(codes):
        print(f"warning: nbconvert failed on {sum(1 for c in codes if c)} notebook(s)", file=sys.stderr)
    return time.monotonic() - t0


def jaxgrade(folder: Path, out: Path, jobs: int) -> float:
    cmd = [sys.executable, "-m", "grader", "--course", str(ROOT), "grade", "--assignment", "vmap_convolve"]
    cmd += ["--out", str(out), "--jobs", str(jobs), str(folder)]
    t0 = time.monotonic()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copies", type=int, default=1, help="copies of the 6-notebook sample class")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="jaxgrade-bench-") as tmp:
        work = Path(tmp)
        paths = make_class(work / "class", args.copies)
        n = len(paths)
        rows = [
            ("nbconvert --execute (baseline, no tests)", nbconvert(paths, args.jobs, work)),
            ("jaxgrade grade (execute + 49 tests)", jaxgrade(work / "class", work / "out", args.jobs)),
            ("jaxgrade grade, rerun (resume)", jaxgrade(work / "class", work / "out", args.jobs)),
        ]
    print(f"{n} notebooks of vmap_convolve, {args.jobs} job(s), {os.cpu_count()} CPU(s)")
    print(f"{'method':44} {'wall s':>8} {'s/notebook':>11} {'notebooks/min':>14}")
    for name, secs in rows:
        print(f"{name:44} {secs:8.1f} {secs / n:11.2f} {60 * n / secs:14.1f}")


if __name__ == "__main__":
    main()
