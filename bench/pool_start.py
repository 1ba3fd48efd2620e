#!/usr/bin/env python3
"""Trusted workers forked from a fork server (grader/batch/forkserver.py) against spawned ones,
side by side in one run.  The baseline is ``JAXGRADE_FORKSERVER=0``: every worker spawned, as
before session 35.

Two measures, each alternating the two ways in processes of their own (``--rounds``), so that the
machine's drift falls on both:

1. **Pools** (``--pools N``): one Python starts N pools in a row, as a long-lived process does
   (a test session's worker; ``jaxgrade grade`` starts one), each of ``--jobs`` workers set up
   as ``grade_many``'s are, each worker given one task that imports what a grading imports.
   Printed: the wall seconds of the first pool and of the next ones (mean), and the CPU seconds
   of the whole process tree (the workers, the fork server, the resource tracker and the Python
   itself), from the rusage of its reaped descendants (this script is their subreaper, so the
   fork server, which outlives its Python, counts too), and its ratio to the baseline's.  A run
   of the "now" way whose workers were not forked after all stops the script.
2. **The sample class** (``--class-rounds``, 0 to skip): ``jaxgrade grade --assignment
   vmap_convolve --jobs J examples/class`` with a fresh cache home each run: wall seconds and
   their ratio to the baseline's; the host side's CPU seconds (the command, its trusted workers
   and the fork server, from the same rusage: the sandboxes' processes are not in it, as they
   end killed inside their PID namespace, with nobody to hand their rusage up); the sandboxes'
   own CPU seconds from the records (their cgroups'); and whether every record is the same.

    python bench/pool_start.py                       # 3 rounds of each
    python bench/pool_start.py --rounds 5 --class-rounds 0

Figures only, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from compare import class_side_by_side, subreaper, tree_cpu  # noqa: E402
from machine import reading  # noqa: E402

BASELINE = "JAXGRADE_FORKSERVER=0 (baseline)"
WAYS = {"forked from the fork server (now)": {}, BASELINE: {"JAXGRADE_FORKSERVER": "0"}}

POOLS = """
import json, os, sys, time
sys.path.insert(0, {root!r})
from grader.batch import forkserver
from grader.batch.pool import TrustedPool
from grader.grading.grade import _init_worker

def like_a_grading():
    import jax.numpy, pytest, nbformat  # noqa: F401
    import grader.grading.grade, grader.grading.plugin, grader.testing  # noqa: F401

if __name__ == "__main__":
    walls = []
    for _ in range({pools}):
        t = time.monotonic()
        with TrustedPool({jobs}, initializer=_init_worker, initargs=(1, None, False), preload=forkserver.GRADING) as pool:
            list(pool.run(like_a_grading, [(i, ()) for i in range({jobs})]))
        walls.append(time.monotonic() - t)
    print(json.dumps({{"walls": walls, "forked": forkserver._server is not None and forkserver._off is None}}))
"""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3, help="runs of each way for the pools (default 3)")
    p.add_argument("--pools", type=int, default=4, help="pools started in a row in one Python (default 4)")
    p.add_argument("--jobs", type=int, default=2, help="workers per pool, notebooks at once (default 2)")
    p.add_argument("--class-rounds", type=int, default=3, help="sample-class runs of each way (default 3; 0 skips)")
    args = p.parse_args(argv)
    subreaper()
    print(reading())
    base_env = {k: v for k, v in os.environ.items() if k not in ("JAXGRADE_FORKSERVER", "PYTHONSAFEPATH")}

    with tempfile.TemporaryDirectory(prefix="jaxgrade-pool-start-") as tmp:
        script = Path(tmp) / "pools.py"
        script.write_text(textwrap.dedent(POOLS).format(root=str(ROOT), pools=args.pools, jobs=args.jobs))
        pools: dict[str, list[dict[str, float]]] = {w: [] for w in WAYS}
        for _ in range(args.rounds):
            for way, extra in WAYS.items():
                done, _, cpu = tree_cpu([sys.executable, str(script)], {**base_env, **extra}, Path(tmp))
                got = json.loads(done.stdout.strip().splitlines()[-1])
                if got["forked"] != (not extra):
                    sys.exit(f"{way}: the workers were {'' if got['forked'] else 'not '}forked: {done.stderr[-2000:]}")
                pools[way].append(
                    {"first": got["walls"][0], "next": statistics.mean(got["walls"][1:] or [0.0]), "cpu": cpu}
                )
        print(
            f"\n{args.pools} pools in a row in one Python, {args.jobs} workers each (grade_many's setup), "
            f"one task each that imports what a grading imports; {args.rounds} round(s), alternating"
        )
        print(f"{'workers':<40} {'first pool s':>12} {'next pools s':>12} {'tree CPU s':>10} {'CPU vs base':>11}")
        base = statistics.mean(r["cpu"] for r in pools[BASELINE])
        for way, runs in pools.items():
            first = statistics.mean(r["first"] for r in runs)
            nxt = statistics.mean(r["next"] for r in runs)
            cpu = statistics.mean(r["cpu"] for r in runs)
            print(f"{way:<40} {first:12.2f} {nxt:12.2f} {cpu:10.2f} {cpu / base:10.2f}x")

        if args.class_rounds <= 0:
            return 0
        return class_side_by_side(WAYS, BASELINE, args.class_rounds, args.jobs, base_env, Path(tmp))


if __name__ == "__main__":
    sys.exit(main())
