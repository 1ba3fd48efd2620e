"""The student's kernel's start, with ipykernel's debugger (``python -m ipykernel_launcher``, the
baseline) and without it (``python grader/sandboxed/kernel_launcher.py``, what the worker starts),
side by side in one run.

Each start is a real kernel, started by jupyter_client and waited for until it answers, then
shut down; the figure is the kernel process's CPU seconds up to then, as in a sandbox
(``OPENBLAS_NUM_THREADS=1``).  The two alternate, so that the machine's drift falls on both.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from machine import alternate, side_by_side  # noqa: E402

COMMANDS = {
    "ipykernel_launcher (baseline: debugpy imported)": ["-m", "ipykernel_launcher"],
    "grader.sandboxed.kernel_launcher (no debugger)": [str(ROOT / "grader" / "sandboxed" / "kernel_launcher.py")],
}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_once(command: list[str]) -> float:
    """CPU seconds of one kernel, from its start to its first answer."""
    from jupyter_client import KernelManager

    km = KernelManager(kernel_name="python3")
    km.kernel_spec.argv = [sys.executable, *command, "-f", "{connection_file}"]
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    km.start_kernel(env=env, stderr=subprocess.DEVNULL)
    try:
        kc = km.client()
        kc.start_channels()
        kc.wait_for_ready(timeout=60)
        seconds = cpu_seconds(km.provisioner.process.pid)
        kc.stop_channels()
        return seconds
    finally:
        km.shutdown_kernel(now=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=20, help="kernel starts of each kind (default 20)")
    args = p.parse_args()
    got = alternate(COMMANDS, start_once, args.runs)
    print(f"{args.runs} kernel starts of each, alternating; CPU seconds of the kernel until it answers")
    side_by_side(got, "kernel", 50)


if __name__ == "__main__":
    main()
