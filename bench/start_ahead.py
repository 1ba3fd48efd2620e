#!/usr/bin/env python3
"""A batch whose trusted workers start each next submission's sandbox while they grade one,
against one whose workers start it when the submission comes (``JAXGRADE_START_AHEAD=0``, the
baseline), side by side in one run.

Both grade the same copies of the sample class (``examples/class``, vmap_convolve) with
``jaxgrade grade --jobs N`` into a fresh ``--out``, reading one compilation cache, warmed once
before the first round (what every class after the first reads).  The two alternate
(``--rounds``), so that the machine's drift falls on both.  Prints each round's wall time, the
mean ratio, and the records' mean ``timings`` (``startup`` is the wait for the sandbox).

    python bench/start_ahead.py --copies 2 --jobs 2 --rounds 3
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODES = {"1": "sandboxes started ahead", "0": "JAXGRADE_START_AHEAD=0 (baseline)"}


def _compare():  # bench/compare.py's helpers (bench/ is not a package)
    spec = importlib.util.spec_from_file_location("bench_compare", HERE / "compare.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_compare"] = module
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    p.add_argument("--copies", type=int, default=2, help="copies of the 6-notebook sample class (default 2)")
    p.add_argument("--jobs", type=int, default=2, help="notebooks at once (default 2)")
    p.add_argument("--rounds", type=int, default=3, help="runs of each, alternating (default 3)")
    args = p.parse_args(argv)
    compare = _compare()
    walls: dict[str, list[float]] = {mode: [] for mode in MODES}
    timings: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    scores: dict[str, set[tuple[tuple[str, float], ...]]] = {mode: set() for mode in MODES}
    with tempfile.TemporaryDirectory(prefix="jaxgrade-start-ahead-") as tmp:
        work = Path(tmp)
        paths = compare.make_class(work / "class", args.copies)
        cache = work / "cache"
        compare.jaxgrade_grade(work / "class", work / "warming", args.jobs, cache)  # warms the cache once
        for r in range(args.rounds):
            for mode in MODES:
                out = work / f"out-{mode}-{r}"
                walls[mode].append(
                    compare.jaxgrade_grade(
                        work / "class", out, args.jobs, cache, env_extra={"JAXGRADE_START_AHEAD": mode}
                    )
                )
                got = compare.jaxgrade_scores(out)
                timings[mode] += [s["timings"] for s in got.values()]
                scores[mode].add(tuple(sorted((k, s["score"]) for k, s in got.items())))
    n = len(paths)
    print(
        f"{n} notebooks of vmap_convolve ({args.copies} copies of examples/class), --jobs {args.jobs}, "
        f"{os.cpu_count()} CPU(s), {args.rounds} round(s), the compilation cache warm"
    )
    print(f"{'batch':40} {'wall s (each round)':>26} {'mean s':>7} {'s/notebook':>10} {'vs baseline':>12}")
    base = statistics.mean(walls["0"])
    for mode, label in MODES.items():
        mean = statistics.mean(walls[mode])
        each = " ".join(f"{w:.1f}" for w in walls[mode])
        print(f"{label:40} {each:>26} {mean:>7.1f} {mean / n:>10.2f} {mean / base:>11.2f}x")
    print("\nrecords' mean timings, seconds per notebook:")
    for mode, label in MODES.items():
        compare.print_timings(label, compare.mean_timings(timings[mode]))
    same = len(scores["1"] | scores["0"]) == 1
    print(f"\nevery round of both gave the same score to every notebook: {'yes' if same else 'NO'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
