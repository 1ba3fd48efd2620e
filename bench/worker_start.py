#!/usr/bin/env python3
"""The sandboxed worker's own start, as the worker makes it now and as it did until session 27
(the baseline), side by side in one run.

Every submission starts a worker (``grader.sandboxed.worker``), which drives the student's kernel
with nbclient and relays the trusted side's frames to it.  Until session 27 it also

- imported NumPy (through ``grader.wire.protocol``), though it never decodes an array; now only
  the functions that handle arrays import it;
- compiled nbformat's fastjsonschema validator of whole notebooks, to validate the notebook it
  reads (which only logged what it found: the trusted side had judged it) and at its first
  output; now it reads the notebook without that validation and checks its cells and outputs
  with jsonschema, as they were checked before (``worker.validate_cells_only``).

Each run is a fresh Python that makes the worker's imports (its module, then nbclient, nbformat,
jupyter_client and ZeroMQ, which it imports as it starts the kernel), reads a notebook (the
sample class's ``alice.ipynb``) and builds one output, with the sandboxes' environment (one BLAS
thread); the figure is that process's CPU seconds, interpreter start included.  The two
alternate, so that the machine's drift falls on both.  The first line is ``bench/machine.py``'s
reading of how fast this machine is today.  Figures only, never asserted.

    python bench/worker_start.py [--runs 20]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from machine import alternate, reading, side_by_side  # noqa: E402

NOTEBOOK = ROOT / "examples" / "class" / "alice.ipynb"
#: What the worker imports, in the order it does (its module; then, starting the kernel,
#: nbclient's client and the modules it uses of nbformat, jupyter_client and ZeroMQ).
IMPORTS = (
    "from nbclient import NotebookClient; from nbclient.util import ensure_async, run_sync; "
    "from nbclient.exceptions import DeadKernelError; import nbformat, zmq, jupyter_client.manager; "
)
OUTPUT = "nbformat.v4.new_output('stream', name='stdout', text='1'); "
KINDS = {
    "before session 27 (baseline)": (
        "import numpy; import grader.sandboxed.worker; "
        + IMPORTS
        + f"nbformat.read({str(NOTEBOOK)!r}, as_version=4); "
        + OUTPUT
    ),
    "the worker now": (
        "import grader.sandboxed.worker as w; w.validate_cells_only(); "
        + IMPORTS
        + f"w.read_notebook({str(NOTEBOOK)!r}); "
        + OUTPUT
    ),
}


def cpu_of(code: str) -> float:
    """CPU seconds (user and system) of a fresh Python that runs ``code``."""
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "OPENBLAS_NUM_THREADS": "1",  # as in a sandbox (grader.host.sandbox.sandbox_env)
        "OMP_NUM_THREADS": "1",
    }
    proc = subprocess.Popen([sys.executable, "-c", code], env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"the worker's start failed (exit {proc.returncode}): {code}")
    return usage.ru_utime + usage.ru_stime


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=20, help="fresh processes of each kind (default 20)")
    args = p.parse_args(argv)
    print(reading())
    got = alternate(KINDS, cpu_of, args.runs)
    print(f"{args.runs} fresh processes of each, alternating; CPU seconds, interpreter start included")
    side_by_side(got, "worker", 30)


if __name__ == "__main__":
    main()
