#!/usr/bin/env python3
"""How fast this machine is today: a reading to print beside any benchmark's figures.

The machine these benchmarks ran on is a virtual one whose speed changed from day to day by
more than any change measured here (``import jax`` took 0.49 to 0.58 CPU s in session 26 and
1.1 to 1.8 s the next day, on the same code).  Figures from different days are comparable only
through such a reading; figures side by side in one run do not need it.  It measures, each the
median of three:

- ``loop``: a pure-Python loop of 10,000,000 additions, in this process (CPU seconds);
- ``import numpy``, ``import jax``: a fresh Python that imports it, with one BLAS thread as in a
  sandbox (CPU seconds, interpreter start included).

Figures only, never asserted.  ``alternate`` and ``side_by_side`` measure and print for the benches
that alternate two or more ways of doing one thing (kernel_start.py, worker_start.py).

    python bench/machine.py
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any


def _loop() -> float:
    t = time.process_time()
    total = 0
    for i in range(10_000_000):
        total += i
    return time.process_time() - t


def _import(module: str) -> float:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-c", f"import {module}"], env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        return float("nan")
    return usage.ru_utime + usage.ru_stime


def reading(repeat: int = 3) -> str:
    """One line: this machine's speed today (CPU seconds, medians of ``repeat``)."""
    loop = statistics.median(_loop() for _ in range(repeat))
    numpy = statistics.median(_import("numpy") for _ in range(repeat))
    jax = statistics.median(_import("jax") for _ in range(repeat))
    return f"machine today: loop {loop:.2f} s, import numpy {numpy:.2f} s, import jax {jax:.2f} s (CPU, medians of {repeat})"


def alternate(kinds: dict[str, Any], measure: Callable[[Any], float], runs: int) -> dict[str, list[float]]:
    """``measure(kind)`` ``runs`` times for each of ``kinds`` (label -> kind), alternating, so
    that the machine's drift falls on each: label -> the measurements."""
    got: dict[str, list[float]] = {label: [] for label in kinds}
    for _ in range(runs):
        for label, kind in kinds.items():
            got[label].append(measure(kind))
    return got


def side_by_side(got: dict[str, list[float]], column: str, width: int) -> None:
    """Print measurements taken alternating (label -> values, the first label the baseline):
    each label's mean, its standard error and its ratio to the baseline's mean."""
    base = statistics.mean(next(iter(got.values())))
    print(f"{column:{width}s} {'mean s':>7s} {'± se':>6s} {'vs baseline':>12s}")
    for label, values in got.items():
        mean = statistics.mean(values)
        se = statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else 0.0
        print(f"{label:{width}s} {mean:7.3f} {se:6.3f} {mean / base:11.2f}x")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=3, help="measurements of each, the median printed (default 3)")
    args = p.parse_args(argv)
    print(reading(args.repeat))


if __name__ == "__main__":
    main()
