#!/usr/bin/env python3
"""Evaluators forked by the zygote (grader/host/zygote.py) against evaluators started plainly,
side by side in one run.  The baseline is ``JAXGRADE_ZYGOTE=0``: every evaluator a Python of its
own that imports JAX, as before session 36.  Root and bubblewrap only (where the zygote works).

Two measures, each alternating the two ways in processes of their own (``--rounds``), so that the
machine's drift falls on both:

1. **Evaluator starts** (``--starts N``): one Python starts N evaluator sandboxes in a row, as a
   grading process does over its submissions, each until it says it is ready, then ends it.
   Printed: the wall seconds of the first start and of the next ones (mean), the sandboxes' CPU
   seconds per start (their cgroups'), and the CPU seconds of the Python and its zygote (the
   rusage of its reaped descendants).
2. **A class** (``--class-rounds``, 0 to skip): ``jaxgrade grade --assignment vmap_convolve
   --jobs J FOLDER`` (``--class-folder``, the sample class by default) with a fresh cache home
   each run (first runs: an evaluator starts for every student whose modules the evaluator cache
   does not hold yet), as ``bench/pool_start.py`` prints it, with the machine's CPU seconds over
   each run: the total to read, since a forked evaluator's CPU reaches the host side's rusage
   through the zygote that reaps it, besides its cgroup's.

    sudo python bench/zygote.py                      # 3 rounds of each
    sudo python bench/zygote.py --starts 8 --class-rounds 0

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

BASELINE = "JAXGRADE_ZYGOTE=0 (baseline)"
WAYS = {"forked by the zygote (now)": {}, BASELINE: {"JAXGRADE_ZYGOTE": "0"}}

STARTS = """
import json, sys, time
sys.path.insert(0, {root!r})
from grader.host import zygote
from grader.host.sandbox import Limits, SandboxProcess, make_scratch, remove_scratch

walls, cpus, forked = [], [], []
for _ in range({starts}):
    scratch = make_scratch("jaxgrade-eval-", Limits().scratch_bytes)
    proc = SandboxProcess(zygote.EVALUATOR, scratch, Limits(), "bwrap")
    t = time.monotonic()
    proc.start()
    header, _ = proc.recv(120)
    walls.append(time.monotonic() - t)
    assert header.get("op") == "ready" and header.get("ok"), header
    forked.append(proc.forked is not None)
    proc.kill()
    remove_scratch(scratch)
    cpus.append(proc.cpu_seconds or 0.0)
print(json.dumps({{"walls": walls, "cpus": cpus, "forked": forked}}))
"""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3, help="runs of each way for the starts (default 3)")
    p.add_argument("--starts", type=int, default=6, help="evaluators started in a row in one Python (default 6)")
    p.add_argument("--jobs", type=int, default=2, help="notebooks at once in the sample class (default 2)")
    p.add_argument("--class-rounds", type=int, default=3, help="sample-class runs of each way (default 3; 0 skips)")
    p.add_argument(
        "--class-folder",
        type=Path,
        default=ROOT / "examples" / "class",
        help="vmap_convolve notebooks to grade (default examples/class, whose six students make only four or five "
        "evaluators start: the evaluator cache answers the others; a class of distinct students: the notebooks of "
        "tests/corpus/vmap_convolve but infinite_loop_after_defs.ipynb, which waits out a 60 s cell)",
    )
    args = p.parse_args(argv)
    if os.geteuid() != 0:
        sys.exit("the zygote works as root only: run this as root")
    subreaper()
    print(reading())
    base_env = {k: v for k, v in os.environ.items() if k != "JAXGRADE_ZYGOTE"}

    with tempfile.TemporaryDirectory(prefix="jaxgrade-zygote-bench-") as tmp:
        script = Path(tmp) / "starts.py"
        script.write_text(textwrap.dedent(STARTS).format(root=str(ROOT), starts=args.starts))
        starts: dict[str, list[dict[str, float]]] = {w: [] for w in WAYS}
        for _ in range(args.rounds):
            for way, extra in WAYS.items():
                done, _, cpu = tree_cpu([sys.executable, str(script)], {**base_env, **extra}, Path(tmp))
                got = json.loads(done.stdout.strip().splitlines()[-1])
                if any(got["forked"]) == bool(extra):
                    sys.exit(
                        f"{way}: the evaluators were {'' if any(got['forked']) else 'not '}forked: {done.stderr[-2000:]}"
                    )
                starts[way].append(
                    {
                        "first": got["walls"][0],
                        "next": statistics.mean(got["walls"][1:] or [0.0]),
                        "sandbox": statistics.mean(got["cpus"]),
                        "host": cpu,
                    }
                )
        print(
            f"\n{args.starts} evaluator sandboxes started in a row in one Python, each until ready; "
            f"{args.rounds} round(s), alternating"
        )
        print(
            f"{'evaluators':<40} {'first s':>8} {'next s':>8} {'sandbox CPU s':>13} {'host CPU s':>10} {'CPU vs base':>11}"
        )

        def total(r: dict[str, float]) -> float:
            return r["sandbox"] * args.starts + r["host"]

        base = statistics.mean(total(r) for r in starts[BASELINE])
        for way, runs in starts.items():
            first = statistics.mean(r["first"] for r in runs)
            nxt = statistics.mean(r["next"] for r in runs)
            sandbox = statistics.mean(r["sandbox"] for r in runs)
            host = statistics.mean(r["host"] for r in runs)
            cpu = statistics.mean(total(r) for r in runs)
            print(f"{way:<40} {first:8.2f} {nxt:8.2f} {sandbox:13.2f} {host:10.2f} {cpu / base:10.2f}x")
        print("(sandbox CPU s: per start; CPU vs base: all of it, the sandboxes' and the host's)")

        if args.class_rounds <= 0:
            return 0
        folder = args.class_folder.resolve()
        return class_side_by_side(WAYS, BASELINE, args.class_rounds, args.jobs, base_env, Path(tmp), folder)


if __name__ == "__main__":
    sys.exit(main())
