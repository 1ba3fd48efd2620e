"""A first run's timeline, with the trusted compilation cache warmed beside the first submissions
and without the cache (the baseline), side by side in one run.

Each run grades the sample class (``examples/class``) with ``grade_many`` (``--jobs`` at a
time) in a process of its own, with a fresh cache home, and notes the second at which each
notebook's result arrives and, with the cache, the second at which the warmed cache is
published.  The two runs alternate (``--rounds``), so that the machine's drift falls on both.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODES = {"cache": "cache warmed beside the first submissions", "none": "--no-cache (baseline)"}


def one_run(mode: str, assignment_name: str, jobs: int) -> dict[str, object]:
    """Grade the class once in this process (JAXGRADE_CACHE_DIR is the caller's fresh folder)."""
    sys.path.insert(0, str(ROOT))
    from grader.course.config import load_course
    from grader.grading import grade

    assignment = load_course(ROOT).assignment(assignment_name, staff=True)
    paths = sorted((ROOT / "examples" / "class").glob("*.ipynb"))
    plan = grade.cache_plan(assignment, len(paths))
    events: list[tuple[float, str]] = []
    t0 = time.monotonic()
    done = threading.Event()

    def watch_publish() -> None:
        while not done.is_set() and not plan.folder.exists():
            time.sleep(0.05)
        if plan.folder.exists():
            events.append((time.monotonic() - t0, "cache published"))

    if mode == "cache":
        threading.Thread(target=watch_publish, daemon=True).start()

    def on_result(path: Path, rec: object) -> None:
        events.append((time.monotonic() - t0, f"{path.stem} {getattr(rec, 'score', 0):g}"))

    grade.grade_many(assignment, paths, jobs=jobs, on_result=on_result, cache=mode == "cache")
    wall = time.monotonic() - t0
    done.set()
    return {"wall": wall, "events": sorted(events)}


def main() -> int:
    p = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    p.add_argument("--jobs", type=int, default=2, help="notebooks at once (default 2)")
    p.add_argument("--rounds", type=int, default=1, help="runs of each, alternating (default 1)")
    p.add_argument("--assignment", default="vmap_convolve", help=argparse.SUPPRESS)
    p.add_argument("--one", choices=sorted(MODES), help=argparse.SUPPRESS)  # a single run, as JSON
    args = p.parse_args()
    if args.one:
        print(json.dumps(one_run(args.one, args.assignment, args.jobs)))
        return 0
    runs: dict[str, list[dict[str, object]]] = {mode: [] for mode in MODES}
    for _ in range(args.rounds):
        for mode in MODES:
            with tempfile.TemporaryDirectory(prefix="jaxgrade-bench-cache-") as home:
                env = {**os.environ, "JAXGRADE_CACHE_DIR": home}
                cmd = [
                    sys.executable,
                    __file__,
                    "--one",
                    mode,
                    "--jobs",
                    str(args.jobs),
                    "--assignment",
                    args.assignment,
                ]
                out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
                runs[mode].append(json.loads(out.strip().splitlines()[-1]))
    print(f"{args.assignment}, examples/class, --jobs {args.jobs}, {os.cpu_count()} CPU(s), {args.rounds} round(s)")
    print(f"{'first run':48} {'wall s (each round)':>24} {'vs baseline':>12}")
    base = sum(float(r["wall"]) for r in runs["none"]) / args.rounds
    for mode, label in MODES.items():
        walls = [float(r["wall"]) for r in runs[mode]]
        mean = sum(walls) / len(walls)
        print(f"{label:48} {' '.join(f'{w:.1f}' for w in walls):>24} {mean / base:>11.2f}x")
    print("\nlast round, seconds from the start:")
    last = {mode: runs[mode][-1]["events"] for mode in MODES}
    width = max(len(v) for v in last.values())
    print(f"  {MODES['cache']:>44}   {MODES['none']}")
    for i in range(width):
        cells = []
        for mode in MODES:
            events = last[mode]
            cells.append(f"{events[i][0]:6.1f} {events[i][1]}" if i < len(events) else "")  # type: ignore[index]
        print(f"  {cells[0]:>44}   {cells[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
