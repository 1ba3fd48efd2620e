"""Resource limits (rlimits) that a sandboxed process sets on itself before it reads any input.

Runs inside the sandbox: the worker and the evaluator call :func:`apply_limits` first thing, and
the student's kernel inherits the limits from the worker.  :func:`drop_start_folder` keeps their
scratch folder off their module path.
"""

from __future__ import annotations

import argparse
import resource
import sys


def parser(prog: str) -> argparse.ArgumentParser:
    """The command line every sandboxed process takes: its scratch folder and its limits
    (``grader.host.sandbox.Limits.worker_args`` writes them)."""
    p = argparse.ArgumentParser(prog=prog)
    p.add_argument("--scratch", required=True)
    p.add_argument("--as-bytes", type=int)
    p.add_argument("--fsize", type=int)
    p.add_argument("--cpu", type=int)
    p.add_argument("--nproc", type=int)
    p.add_argument("--nofile", type=int)
    p.add_argument("--pid-namespace", action="store_true", help="every process in /proc belongs to this sandbox")
    return p


def apply_limits(args: argparse.Namespace) -> None:
    """Lower this process's resource limits; the kernel inherits them."""
    pairs = [
        (resource.RLIMIT_AS, args.as_bytes),
        (resource.RLIMIT_FSIZE, args.fsize),
        (resource.RLIMIT_CPU, args.cpu),
        (resource.RLIMIT_NPROC, args.nproc),
        (resource.RLIMIT_NOFILE, args.nofile),
        (resource.RLIMIT_CORE, 0),
    ]
    for which, value in pairs:
        if value is None:
            continue
        _, hard = resource.getrlimit(which)
        new = value if hard == resource.RLIM_INFINITY else min(value, hard)
        try:
            resource.setrlimit(which, (new, new))
        except (ValueError, OSError):
            # RLIMIT_NPROC can fail when the user already has more processes; keep going
            print(f"jaxgrade worker: could not set limit {which} to {new}", file=sys.stderr)


def drop_start_folder() -> None:
    """Take the folder Python put first on ``sys.path`` as the program started off it again,
    where ``PYTHONSAFEPATH`` (Python 3.11+, set in the sandbox's environment) did not keep it
    off.  Under ``python -m`` (the worker, the evaluator) it is the working directory, the
    scratch folder, which student code can write: a module the process imports later, after
    student code ran, is then never one planted there (their scratch folder holds nothing yet
    as they start).  For a script run by its path (the kernel's launcher) it is the script's own
    folder, whose modules would shadow a student's helper module of the same name."""
    if sys.path and not getattr(sys.flags, "safe_path", False):
        del sys.path[0]
