"""Where a whole run's CPU goes, process by process, from Linux process accounting.

Collect (as root; Debian's ``acct`` package), then read::

    touch /tmp/pacct && accton /tmp/pacct
    bash .ci/run                      # or any jaxgrade run
    accton off
    python bench/acct.py /tmp/pacct

Every process that exited while accounting was on has a record: its command name, CPU
seconds, uid and average virtual memory.  The sandboxes run as uids of their own (from
``SANDBOX_UID_BASE``), so the trusted side and the sandboxes part cleanly.  Inside a sandbox the
three Pythons are told apart by their average virtual memory: a kernel holds JAX and the
student's compilations (1.3 GB and more), an evaluator JAX (0.9 to 1.3 GB), a worker neither
(under 0.9 GB).  That split is approximate; the totals are not.
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from grader.host.sandbox import SANDBOX_UID_BASE, SANDBOX_UID_COUNT


def kind_of(comm: str, uid: int, vsz_kb: float) -> str:
    sandbox = SANDBOX_UID_BASE <= uid < SANDBOX_UID_BASE + SANDBOX_UID_COUNT
    if not comm.startswith("python"):
        return f"{'sandbox' if sandbox else 'host'} {comm}"
    if not sandbox:
        return "host Python (pytest, pool workers, commands)"
    if vsz_kb >= 1.3e6:
        return "sandbox kernels"
    if vsz_kb >= 0.9e6:
        return "sandbox evaluators"
    return "sandbox workers"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("pacct", help="the accounting file accton wrote")
    p.add_argument("--top", type=int, default=12, help="rows to print (default 12)")
    args = p.parse_args()
    dump = subprocess.run(["dump-acct", args.pacct], capture_output=True, text=True, check=True).stdout
    cpu: collections.Counter[str] = collections.Counter()
    count: collections.Counter[str] = collections.Counter()
    for line in dump.splitlines():
        f = [x.strip() for x in line.split("|")]
        if len(f) < 11:
            continue
        # comm | version | utime | stime | etime | uid | gid | mem | io | pid | ppid ... (ticks of 1/100 s)
        kind = kind_of(f[0], int(f[5]), float(f[7]))
        cpu[kind] += (float(f[2]) + float(f[3])) / 100
        count[kind] += 1
    total = sum(cpu.values())
    print(f"{'what':46s} {'CPU s':>8s} {'processes':>10s} {'s each':>7s} {'share':>6s}")
    for kind, seconds in cpu.most_common(args.top):
        print(f"{kind:46s} {seconds:8.1f} {count[kind]:10d} {seconds / count[kind]:7.2f} {seconds / total:6.0%}")
    print(f"{'all processes':46s} {total:8.1f} {sum(count.values()):10d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
