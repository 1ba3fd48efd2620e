#!/usr/bin/env python3
"""Seconds of the in-notebook self-check, `jc.check()`, beside `jaxgrade check`, on a correct notebook.

The assignment is released (`jaxgrade release`) into a temporary folder; a kernel (nbclient)
runs the release's first cell (its ``%pip install`` recorded, not run: no network here), the
cells of a correct notebook from the test corpus, then the self-check ``--calls`` times, each
timed inside the kernel.  The same notebook is then checked twice with ``jaxgrade check --json``
(a fresh process each time, as a student runs it).  It never asserts: it prints what it measured.

    python bench/selfcheck.py [--assignment vmap_convolve] [--calls 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grader.course.config import load_course  # noqa: E402 - after the checkout is on the path
from grader.course.release import SETUP_TAG, build_release  # noqa: E402

FAKE_PIP = "get_ipython().register_magic_function(lambda line: None, 'line', 'pip')"
TIMED = """\
import json as _json, time as _time
_seconds = []
for _ in range({calls}):
    _t = _time.perf_counter()
    _ok = jc.run().ok
    _seconds.append(_time.perf_counter() - _t)
print(_json.dumps({{"seconds": _seconds, "ok": _ok}}))
"""


def kernel_seconds(setup: str, cells: list[str], calls: int, cwd: Path) -> tuple[float, dict[str, object]]:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    sources = [FAKE_PIP, "import time as _time\n_t0 = _time.perf_counter()", setup]
    sources += ["print(_time.perf_counter() - _t0)", *cells, TIMED.format(calls=calls)]
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    os.environ["PYTHONPATH"] = str(ROOT)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}).execute()
    setup_s = float("".join(o["text"] for o in nb.cells[3].outputs if o["output_type"] == "stream"))
    return setup_s, json.loads("".join(o["text"] for o in nb.cells[-1].outputs if o["output_type"] == "stream"))


def check_seconds(notebook: Path, name: str, cwd: Path) -> tuple[float, int]:
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "grader", "check", str(notebook), "--assignment", name, "--json"],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    return time.perf_counter() - t0, proc.returncode


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--assignment", default="vmap_convolve")
    ap.add_argument("--calls", type=int, default=5, help="self-checks timed in one kernel (the first included)")
    args = ap.parse_args()
    correct = sorted((ROOT / "tests" / "corpus" / args.assignment).glob("correct*.ipynb"))[0]
    cells = [c.source for c in nbformat.read(correct, as_version=4).cells if c.cell_type == "code"]
    with tempfile.TemporaryDirectory() as tmp:
        folder = build_release(load_course(ROOT), args.assignment, Path(tmp))
        released = nbformat.read(folder / f"{args.assignment}.ipynb", as_version=4)
        setup = next(c.source for c in released.cells if SETUP_TAG in c.metadata.get("tags", []))
        setup_s, timed = kernel_seconds(setup, cells, args.calls, Path(tmp))
        nb = nbformat.read(folder / f"{args.assignment}.ipynb", as_version=4)
        nb.cells = [nbformat.v4.new_code_cell(setup)] + [nbformat.v4.new_code_cell(s) for s in cells]
        nbformat.write(nb, folder / "correct.ipynb")
        checks = [check_seconds(folder / "correct.ipynb", args.assignment, folder) for _ in range(2)]
    seconds = timed["seconds"]
    assert isinstance(seconds, list)
    later = seconds[1:] or seconds
    print(f"{args.assignment}: {correct.name}, all public tests passed: {timed['ok']}")
    print(f"  first cell (install recorded, setup)       {setup_s:7.2f} s")
    print(f"  jc.check(), first call                     {seconds[0]:7.2f} s")
    print(
        f"  jc.check(), later calls (median, max of {len(later)}) {statistics.median(later):5.2f} s, {max(later):.2f} s"
    )
    for i, (s, code) in enumerate(checks, 1):
        print(f"  jaxgrade check (run {i}, exit {code})            {s:7.2f} s")


if __name__ == "__main__":
    main()
