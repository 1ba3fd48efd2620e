#!/usr/bin/env python3
"""Fairness in time: an honest notebook's grading time alone, and next to a CPU-heavy neighbour.

The neighbour starts ``--children`` busy processes in each of ``--cells`` cells, each spinning
until the cell's time limit.  Without a CPU share per sandbox, the kernel shares the CPU per
process, so the honest submission next to it gets about 1/children of a core and its wall-time
limits come into reach.  With the sandbox cgroups' equal ``cpu_weight`` it keeps about its share.

Three rows, on the tiny ``double`` course of the test suite (tests/minicourse.py), 2 jobs:
honest notebooks alone; honest next to the neighbour; the same without cgroups
(``JAXGRADE_NO_CGROUPS=1``, which is what a host without them gets).  Needs root and cgroups for
the second row to mean anything (as on CI); prints what it measured, never asserts.

    python bench/neighbours.py --children 120 --cells 3
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import nbformat  # noqa: E402

from tests.minicourse import make_minicourse, notebook  # noqa: E402

BUSY = """import os, time
end = time.time() + {seconds}
pids = []
for _ in range({children}):
    pid = os.fork()
    if pid == 0:
        while time.time() < end:
            pass
        os._exit(0)
    pids.append(pid)
for pid in pids:
    os.waitpid(pid, 0)
"""


def busy_notebook(children: int, cells: int, seconds: float) -> str:
    """``cells`` busy cells, then a correct ``double``."""
    nb = nbformat.reads(notebook("full"), as_version=4)
    busy = [nbformat.v4.new_code_cell(BUSY.format(children=children, seconds=seconds)) for _ in range(cells)]
    nb.cells = busy + nb.cells
    return nbformat.writes(nb)


def grade(course: Path, folder: Path, out: Path, env: dict[str, str]) -> tuple[float, dict[str, dict]]:
    cmd = [sys.executable, "-m", "grader", "--course", str(course), "grade", "--assignment", "double"]
    cmd += ["--out", str(out), "--jobs", "2", str(folder)]
    t0 = time.monotonic()
    subprocess.run(cmd, env=env, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.monotonic() - t0
    recs = {}
    for f in (out / "results").glob("*.json"):
        rec = json.loads(f.read_text(encoding="utf-8"))
        recs[rec["student"]] = rec
    return wall, recs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--children", type=int, default=120, help="busy processes per cell of the neighbour")
    ap.add_argument("--cells", type=int, default=3, help="busy cells in the neighbour's notebook")
    ap.add_argument("--honest", type=int, default=3, help="honest notebooks graded beside it")
    args = ap.parse_args()
    seconds = 20.0  # each busy cell spins this long (under the cell limit below)
    with tempfile.TemporaryDirectory() as tmp_:
        tmp = Path(tmp_)
        course = make_minicourse(tmp / "course", "{cell_timeout: 30, call_timeout: 30, wall_timeout: 600}")
        rows = []
        for label, with_busy, env_extra in (
            ("honest alone", False, {}),
            ("next to the CPU-heavy neighbour", True, {}),
            ("next to it, no cgroups", True, {"JAXGRADE_NO_CGROUPS": "1"}),
        ):
            folder = tmp / f"class-{len(rows)}"
            folder.mkdir()
            for i in range(args.honest):
                (folder / f"honest{i}.ipynb").write_text(notebook("full", salt=str(i)))
            if with_busy:
                (folder / "busy.ipynb").write_text(busy_notebook(args.children, args.cells, seconds))
            wall, recs = grade(course, folder, tmp / f"out-{len(rows)}", {**os.environ, **env_extra})
            honest = [r for k, r in recs.items() if k.startswith("honest")]
            mean = sum(r["timings"].get("total", 0.0) for r in honest) / max(1, len(honest))
            scores = sorted({r["score"] for r in honest})
            busy = recs.get("busy", {}).get("timings", {})
            rows.append((label, mean, scores, wall, busy.get("cpu")))
        base = rows[0][1]
        print(f"{args.honest} honest notebook(s); neighbour: {args.cells} cell(s) x {args.children} busy processes")
        print(
            f"{'':34} {'honest s/notebook':>18} {'ratio':>6} {'honest scores':>14} {'batch s':>8} {'neighbour cpu s':>16}"
        )
        for label, mean, scores, wall, cpu in rows:
            cpu_text = f"{cpu:.1f}" if cpu is not None else "-"
            print(f"{label:34} {mean:18.1f} {mean / base:6.2f} {scores!s:>14} {wall:8.1f} {cpu_text:>16}")


if __name__ == "__main__":
    main()
