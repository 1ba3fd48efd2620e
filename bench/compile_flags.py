#!/usr/bin/env python3
"""The sandboxes' fast-compile flags, side by side in one run: a class graded with each choice of
``JAXGRADE_FAST_COMPILE`` (grader/host/xla_flags.py).

Each run is ``jaxgrade grade --assignment A --out OUT --jobs J CLASS`` in a process of its own,
with a fresh cache home (``JAXGRADE_CACHE_DIR``): the first run (which warms the trusted
compilation cache beside the first submissions), then the same class into another ``OUT`` with
that cache and the evaluator's answers the first run kept ("next class", as in
bench/compare.py: the same notebooks, so every module the evaluator ran is answered from what
it kept, a best case for a later class).  The choices alternate (``--rounds``; each round starts
with the next choice), so that the machine's drift falls on each.  Printed: the wall time of
each run, the sandboxes' CPU seconds and the seconds in tests summed over the records, the ratio
to the baseline's wall time, and whether every record (its status, score, and each test's name,
status and score) is the same under every choice; the exit status is 1 where one is not, or
where a run did not grade every notebook of the class.  On a jaxlib without the older emitters
(0.11 and later) the baseline is the same as ``none``.  Figures only.

    python bench/compile_flags.py                                  # the sample class
    python bench/compile_flags.py --assignment prng_keys --class tests/corpus/prng_keys
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from compare import class_figures, jaxgrade, same_records, wall_columns  # noqa: E402  (bench/compare.py)

from grader.host.xla_flags import FAST_COMPILE_FLAGS, SWITCH  # noqa: E402

EMITTERS = "xla_cpu_use_fusion_emitters"
#: label -> JAXGRADE_FAST_COMPILE; the first is the baseline
CHOICES = {
    "older emitters only (session 24; baseline)": EMITTERS,
    "every fast-compile flag (the default)": "1",
    "none (JAXGRADE_FAST_COMPILE=0)": "0",
}


def one_run(value: str, assignment: str, klass: Path, out: Path, cache: Path, jobs: int) -> dict[str, object]:
    env = {**os.environ, SWITCH: value, "JAXGRADE_CACHE_DIR": str(cache)}
    cmd = jaxgrade("grade", "--assignment", assignment, "--out", str(out), "--jobs", str(jobs), str(klass))
    t0 = time.monotonic()
    done = subprocess.run(cmd, env=env, cwd=ROOT, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if done.returncode not in (0, 1):  # 1: some submission failed to grade cleanly, still a result
        sys.exit(f"{' '.join(cmd)} ended with {done.returncode}:\n{done.stderr[-2000:]}")
    return {"wall": wall, **class_figures(out)}


def main() -> int:
    p = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    p.add_argument("--assignment", default="vmap_convolve")
    p.add_argument(
        "--class", dest="klass", type=Path, default=ROOT / "examples" / "class", help="a folder of notebooks"
    )
    p.add_argument("--jobs", type=int, default=2, help="notebooks at once (default 2)")
    p.add_argument("--rounds", type=int, default=2, help="runs of each choice, alternating (default 2)")
    p.add_argument("--skip-none", action="store_true", help="leave out the run with no fast-compile flag")
    args = p.parse_args()
    choices = {k: v for k, v in CHOICES.items() if not (args.skip_none and v == "0")}
    runs: dict[tuple[str, str], list[dict[str, object]]] = {}
    with tempfile.TemporaryDirectory(prefix="jaxgrade-flags-") as tmp:
        order = list(choices.items())
        for r in range(args.rounds):
            for i, (label, value) in enumerate(order[r % len(order) :] + order[: r % len(order)]):
                home = Path(tmp) / f"{r}-{i}"
                for phase in ("first run", "next class"):
                    out = home / phase.replace(" ", "-")
                    got = one_run(value, args.assignment, args.klass.resolve(), out, home / "cache", args.jobs)
                    runs.setdefault((label, phase), []).append(got)
                    print(f"  round {r + 1}, {label}, {phase}: {got['wall']:.1f} s", file=sys.stderr, flush=True)
    n = len(list(args.klass.glob("*.ipynb")))
    print(
        f"{args.assignment}, {n} notebooks of {args.klass}, --jobs {args.jobs}, {os.cpu_count()} CPU(s), "
        f"{args.rounds} round(s); flags: {', '.join(FAST_COMPILE_FLAGS)}"
    )
    print(
        f"{'choice':44} {'run':11} {'wall s (each round)':>22} {'mean s':>7} {'vs baseline':>11} {'cpu s':>7} {'tests s':>8}"
    )
    base = {
        phase: statistics.mean(g["wall"] for g in runs[(next(iter(choices)), phase)])
        for phase in ("first run", "next class")
    }
    for (label, phase), got in runs.items():
        print(
            f"{label:44} {phase:11} {wall_columns([g['wall'] for g in got], base[phase])} "
            f"{statistics.mean(g['cpu'] for g in got):7.1f} {statistics.mean(g['tests'] for g in got):8.1f}"
        )
    return 0 if same_records([g["verdicts"] for got in runs.values() for g in got], n) else 1


if __name__ == "__main__":
    sys.exit(main())
