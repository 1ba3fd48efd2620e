#!/usr/bin/env python3
"""This checkout against another commit of jaxgrade (the baseline), side by side in one run: a
class graded by each.

The baseline is extracted with ``git archive`` into a temporary folder (nothing in the repository
changes) and runs with this checkout's Python environment, its folder first on ``PYTHONPATH``
(checked before the runs: each version's ``import grader`` must come from its own folder).  Each run is ``python -m grader
--course C grade --assignment A --out OUT --jobs J CLASS`` in a process of its own, started in
its version's folder (so ``-m grader`` is that version's package and the course its
assignments), with a fresh cache home (``JAXGRADE_CACHE_DIR``): a first run, as a TA's first
batch.  The versions alternate (``--rounds``; each round starts with the next one), so that the
machine's drift falls on both.  Printed: ``bench/machine.py``'s reading of the machine, then for
each version the wall time of each run, and over the records the sandboxes' CPU seconds and the
seconds of startup (sandbox, worker, kernel) and in tests, per notebook; and whether every record
(its status, score, and each test's name, status and score) is the same in every run.  The exit
status is 1 where one is not, or where a run did not grade every notebook.  Figures only.

    python bench/versions.py --baseline HEAD~3                      # the sample class
    python bench/versions.py --baseline v0.1 --assignment prng_keys --class tests/corpus/prng_keys
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from compare import class_figures, same_records, wall_columns  # noqa: E402
from machine import reading  # noqa: E402


def extract(rev: str, dest: Path) -> str:
    """The tree of ``rev`` in ``dest``; its full commit id."""
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--verify", f"{rev}^{{commit}}"], capture_output=True, text=True
    )
    if commit.returncode:
        sys.exit(f"not a commit of this repository: {rev!r}")
    tar = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", commit.stdout.strip()], capture_output=True
    )
    if tar.returncode:
        sys.exit(f"git archive {rev} failed: {tar.stderr.decode(errors='replace')[-2000:]}")
    dest.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(tar.stdout)) as archive:
        if hasattr(tarfile, "data_filter"):  # Python 3.10.12, 3.11.4 and later
            archive.extractall(dest, filter="data")
        else:  # git's own archive of this repository
            archive.extractall(dest)
    return commit.stdout.strip()


def env_for(tree: Path, cache: Path) -> dict[str, str]:
    """The environment a run of ``tree``'s grader gets: its folder first on ``sys.path`` (not
    only as the working directory, which ``PYTHONSAFEPATH`` would take off), so that ``grader``
    is that version's package, not this checkout's editable install."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONSAFEPATH"}
    return {**env, "PYTHONPATH": str(tree), "JAXGRADE_CACHE_DIR": str(cache)}


def check_package(tree: Path) -> None:
    """Stop unless ``python -m grader`` started in ``tree`` imports ``tree``'s package (and its
    ``grader.wire``, a subpackage an older tree could lack and this checkout's install supply)."""
    probe = "import grader, grader.wire; print(grader.__file__); print(grader.wire.__file__)"
    got = subprocess.run(
        [sys.executable, "-c", probe], env=env_for(tree, tree), cwd=tree, capture_output=True, text=True
    )
    paths = [Path(line).resolve() for line in got.stdout.split()]
    if got.returncode or len(paths) != 2 or not all(p.is_relative_to(tree.resolve()) for p in paths):
        sys.exit(f"a run in {tree} would not import that tree's grader: {got.stdout.strip()} {got.stderr[-500:]}")


def one_run(tree: Path, assignment: str, klass: Path, out: Path, cache: Path, jobs: int) -> dict[str, object]:
    env = env_for(tree, cache)
    cmd = [sys.executable, "-m", "grader", "--course", str(tree), "grade", "--assignment", assignment]
    cmd += ["--out", str(out), "--jobs", str(jobs), str(klass)]
    t0 = time.monotonic()
    done = subprocess.run(cmd, env=env, cwd=tree, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if done.returncode not in (0, 1):  # 1: some submission failed to grade cleanly, still a result
        sys.exit(f"{' '.join(cmd)} (in {tree}) ended with {done.returncode}:\n{done.stderr[-2000:]}")
    return {"wall": wall, **class_figures(out)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    p.add_argument("--baseline", required=True, help="a commit, branch or tag of this repository")
    p.add_argument("--assignment", default="vmap_convolve")
    p.add_argument(
        "--class", dest="klass", type=Path, default=ROOT / "examples" / "class", help="a folder of notebooks"
    )
    p.add_argument("--jobs", type=int, default=2, help="notebooks at once (default 2)")
    p.add_argument("--rounds", type=int, default=3, help="runs of each version, alternating (default 3)")
    args = p.parse_args(argv)
    klass = args.klass.resolve()
    n = len(list(klass.glob("*.ipynb")))
    if not n:
        sys.exit(f"no notebooks in {klass}")
    print(reading(), flush=True)
    runs: dict[str, list[dict[str, object]]] = {}
    with tempfile.TemporaryDirectory(prefix="jaxgrade-versions-") as tmp:
        commit = extract(args.baseline, Path(tmp) / "baseline")
        versions = [(f"baseline {args.baseline} ({commit[:9]})", Path(tmp) / "baseline"), ("this checkout", ROOT)]
        for _, tree in versions:
            check_package(tree)
        for r in range(args.rounds):
            for i, (label, tree) in enumerate(versions[r % 2 :] + versions[: r % 2]):
                home = Path(tmp) / f"{r}-{i}"
                got = one_run(tree, args.assignment, klass, home / "out", home / "cache", args.jobs)
                runs.setdefault(label, []).append(got)
                print(f"  round {r + 1}, {label}: {got['wall']:.1f} s", file=sys.stderr, flush=True)
    print(f"{args.assignment}, {n} notebooks of {klass}, --jobs {args.jobs}, {os.cpu_count()} CPU(s), first runs")
    print(
        f"{'version':34} {'wall s (each round)':>22} {'mean s':>7} {'vs baseline':>11}"
        f" {'cpu s/nb':>9} {'startup s/nb':>12} {'tests s/nb':>10}"
    )
    base = statistics.mean(g["wall"] for g in next(iter(runs.values())))
    for label, got in runs.items():
        per_nb = {k: statistics.mean(g[k] / max(1, g["n"]) for g in got) for k in ("cpu", "startup", "tests")}
        print(
            f"{label:34} {wall_columns([g['wall'] for g in got], base)}"
            f" {per_nb['cpu']:9.2f} {per_nb['startup']:12.2f} {per_nb['tests']:10.2f}"
        )
    return 0 if same_records([g["verdicts"] for got in runs.values() for g in got], n) else 1


if __name__ == "__main__":
    sys.exit(main())
