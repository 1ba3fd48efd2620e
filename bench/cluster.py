#!/usr/bin/env python3
"""Grading the sample class locally and on a Dask LocalCluster of 1 and of 2 workers.

Rows, all on the same copies of the sample class (examples/class, assignment vmap_convolve),
each `jaxgrade grade` into a fresh --out with the compilation cache that a first, untimed run
warmed (so every row pays the same, warm, compile costs):

- local --jobs 1 and local --jobs 2: the trusted pool on this machine;
- dask, 1 worker and dask, 2 workers: `--scheduler` on a `distributed.LocalCluster` of worker
  processes (1 thread each) on loopback, started before the row (not timed).

    pip install -e '.[dask]'
    python bench/cluster.py [--copies N] [--json figures.json]

Prints wall seconds, seconds per notebook and the ratio to `local --jobs 1`, and checks that every
row gave each notebook the same score.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import distributed

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare import make_class

ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENT = "vmap_convolve"


def grade(folder: Path, out: Path, cache: Path, *extra: str) -> float:
    """Wall seconds of one `jaxgrade grade` (this checkout's, run from the repository root)."""
    cmd = [sys.executable, "-m", "grader", "grade", "--assignment", ASSIGNMENT, "--out", str(out), *extra, str(folder)]
    env = {**os.environ, "JAXGRADE_CACHE_DIR": str(cache)}
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        sys.exit(f"`{' '.join(cmd)}` failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return wall


def scores(out: Path) -> dict[str, float]:
    return {p.stem: json.loads(p.read_text())["score"] for p in sorted((out / "results").glob("*.json"))}


def on_cluster(workers: int, folder: Path, out: Path, cache: Path) -> float:
    # the workers (spawned: they take this process's sys.path and environment) import this
    # checkout's grader and use the bench's cache, as the coordinator does
    os.environ["JAXGRADE_CACHE_DIR"] = str(cache)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    with distributed.LocalCluster(
        n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
    ) as cluster:
        return grade(folder, out, cache, "--scheduler", cluster.scheduler_address)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=1, help="copies of the 6-notebook sample class")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="jaxgrade-bench-cluster-") as tmp:
        work = Path(tmp)
        paths = make_class(work / "class", args.copies)
        cache = work / "cache"
        warm = grade(work / "class", work / "warm", cache, "--jobs", "2")
        rows: list[tuple[str, float, dict[str, float]]] = []
        for jobs in (1, 2):
            out = work / f"local{jobs}"
            rows.append((f"local --jobs {jobs}", grade(work / "class", out, cache, "--jobs", str(jobs)), scores(out)))
        for workers in (1, 2):
            out = work / f"dask{workers}"
            wall = on_cluster(workers, work / "class", out, cache)
            rows.append((f"dask, {workers} worker(s) x 1 thread", wall, scores(out)))
    n = len(paths)
    base = rows[0][1] / n
    print(f"{n} notebooks of {ASSIGNMENT}; the first run (warming the cache, --jobs 2) took {warm:.1f} s")
    print(f"{'row':34} {'wall s':>8} {'s/notebook':>11} {'vs local -j1':>13}")
    for name, wall, _ in rows:
        print(f"{name:34} {wall:8.1f} {wall / n:11.2f} {wall / n / base:12.2f}x")
    same = all(r[2] == rows[0][2] for r in rows)
    print("scores: the same in every row" if same else "scores DIFFER between rows: " + repr([r[2] for r in rows]))
    if args.json:
        figures = {"notebooks": n, "warm_s": warm, "rows": [{"row": r, "wall_s": w} for r, w, _ in rows]}
        args.json.write_text(json.dumps(figures, indent=2))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
