#!/usr/bin/env python3
"""Seconds per notebook and memory, for each of the nine assignments.

Each assignment's class is taken from its test corpus (``tests/corpus/<name>/``): every
``correct*`` notebook and up to ``--wrong`` of the others (typical mistakes, crashes, the
untouched starter).  Each class is graded with ``jaxgrade grade --jobs J`` into a fresh output
folder and a fresh compilation cache, so the figures are a first run (warming included).
``--next-class`` grades each class once more into another output folder with the cache its
first run warmed, and prints that table too (against the same nbconvert baseline).  It is a
best case for the next class or section: the same notebooks also find every evaluator answer
kept (grader/host/eval_cache.py), which different students share only for identical code.

The baseline, in the same run: the same notebooks executed only, by ``jupyter nbconvert
--execute`` at the same parallelism (``--skip-nbconvert`` leaves it out; it needs the ``bench``
extra), and the ratio of jaxgrade's seconds per notebook to it (the issue's target: at most 1).

Per assignment it prints: notebooks, wall seconds, seconds per notebook, the mean seconds a
correct notebook spends in tests (the issue's target: at most 3), the largest
``peak_memory_bytes`` of one submission's sandbox, and the peak resident memory of the whole
batch (every process of ``jaxgrade grade`` and its sandboxes, sampled every 0.2 s; the target:
under 4 GiB for 2 jobs).  It never asserts: it prints what it measured.

    python bench/assignments.py --jobs 2 [--only vmap_convolve,pmap] [--wrong 3] [--skip-nbconvert] [--next-class]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare import executable, nbconvert_commands, run_all, warn_failures  # noqa: E402  (bench/compare.py)

CORPUS = ROOT / "tests" / "corpus"
ASSIGNMENTS = (
    "vmap_convolve",
    "jit_control_flow",
    "prng_keys",
    "autodiff",
    "per_example_grads",
    "pytrees",
    "stop_gradient",
    "functional_updates",
    "pmap",
)
GiB = 1 << 30


def pick(name: str, wrong: int) -> list[Path]:
    notebooks = sorted((CORPUS / name).glob("*.ipynb"))
    correct = [p for p in notebooks if p.stem.startswith("correct")]
    others = [p for p in notebooks if not p.stem.startswith("correct")]
    return correct + others[:wrong]


def tree_rss(root_pid: int) -> int:
    """Resident bytes of ``root_pid`` and every descendant (sandboxes included)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    page = os.sysconf("SC_PAGE_SIZE")
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            fields = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid, ppid = int(d), int(fields[1])
        children.setdefault(ppid, []).append(pid)
        rss[pid] = int(fields[21]) * page
    total, todo = 0, [root_pid]
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        todo += children.get(pid, [])
    return total


def read_results(out: Path) -> tuple[list[dict], list[dict], list[float]]:
    """A batch's records (``out/results``), those of the corpus's ``correct*`` notebooks, and the
    seconds each of those spent in tests."""
    records = [json.loads(f.read_text(encoding="utf-8")) for f in (out / "results").glob("*.json")]
    correct = [r for r in records if r["student"].startswith("correct")]
    return records, correct, [r["timings"].get("tests", 0.0) for r in correct]


def grade(name: str, notebooks: list[Path], jobs: int, work: Path, run: str = "first") -> dict:
    """``run``: "first" (a fresh compilation cache, warmed during the run) or "next" (the same
    notebooks again, as the next class or section would be, with the cache the first run left)."""
    folder = work / f"{name}-class"
    if run == "first":
        folder.mkdir()
        for nb in notebooks:
            shutil.copy(nb, folder / nb.name)
    out = work / f"{name}-out-{run}"
    env = {**os.environ, "JAXGRADE_CACHE_DIR": str(work / f"{name}-cache")}
    cmd = [sys.executable, "-m", "grader", "--course", str(ROOT), "grade", "--assignment", name]
    cmd += ["--out", str(out), "--jobs", str(jobs), str(folder)]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peak = [0]

    def sample() -> None:
        while proc.poll() is None:
            peak[0] = max(peak[0], tree_rss(proc.pid))
            time.sleep(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, err = proc.communicate()
    wall = time.monotonic() - t0
    sampler.join()
    if proc.returncode != 0:
        print(f"warning: jaxgrade grade --assignment {name} exited {proc.returncode}: {err[-500:]}", file=sys.stderr)
    records, correct, tests = read_results(out)
    return {
        "assignment": name,
        "notebooks": len(notebooks),
        "wall_s": wall,
        "per_notebook_s": wall / max(1, len(notebooks)),
        "correct_tests_s": sum(tests) / len(tests) if tests else float("nan"),
        "correct_tests_max_s": max(tests) if tests else float("nan"),
        "sandbox_peak_bytes": max((r.get("peak_memory_bytes", 0) for r in records), default=0),
        "batch_peak_bytes": peak[0],
        "full_marks": sum(1 for r in correct if r["score"] == r["max_score"]),
        "correct": len(correct),
    }


def nbconvert(name: str, notebooks: list[Path], jobs: int, jupyter: str, work: Path) -> float:
    """Wall seconds for nbconvert to execute ``notebooks``, ``jobs`` at a time (the baseline)."""
    out = work / f"{name}-nbconvert"
    out.mkdir()
    wall, done = run_all(nbconvert_commands(jupyter, notebooks, out), jobs)
    warn_failures("nbconvert", notebooks, done)
    return wall


def table(title: str, rows: list[dict]) -> None:
    print(f"{title}; targets: tests <= 3 s, batch < 4 GiB")
    head = f"{'assignment':20} {'nbs':>4} {'wall s':>7} {'s/nb':>6} {'nbconvert s/nb':>15} {'ratio':>6}"
    head += f" {'tests s (correct)':>18} {'max':>6}"
    print(head + f" {'sandbox peak':>13} {'batch peak':>11} {'full marks':>11}")
    for r in rows:
        print(
            f"{r['assignment']:20} {r['notebooks']:4d} {r['wall_s']:7.1f} {r['per_notebook_s']:6.1f} "
            f"{r['nbconvert_per_notebook_s']:15.2f} {r['vs_nbconvert']:5.1f}x "
            f"{r['correct_tests_s']:18.1f} {r['correct_tests_max_s']:6.1f} "
            f"{r['sandbox_peak_bytes'] / GiB:10.2f} GiB {r['batch_peak_bytes'] / GiB:7.2f} GiB "
            f"{r['full_marks']:>5}/{r['correct']}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--wrong", type=int, default=3, help="wrong notebooks per class, besides every correct one")
    ap.add_argument("--only", default="", help="comma-separated assignments (default: all nine)")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--skip-nbconvert", action="store_true", help="leave out the nbconvert baseline")
    ap.add_argument(
        "--next-class",
        action="store_true",
        help="grade each class a second time with the compilation cache its first run warmed (the next class)",
    )
    args = ap.parse_args()
    names = [n for n in args.only.split(",") if n] or list(ASSIGNMENTS)
    jupyter = None if args.skip_nbconvert else executable("jupyter", "nbconvert", "nbconvert", "nbconvert")
    first: list[dict] = []
    later: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="jaxgrade-bench-") as tmp:
        for name in names:
            notebooks = pick(name, args.wrong)
            runs = [grade(name, notebooks, args.jobs, Path(tmp))]
            print(f"  {name}: {len(notebooks)} notebooks in {runs[0]['wall_s']:.1f}s", file=sys.stderr, flush=True)
            if args.next_class:
                runs.append(grade(name, notebooks, args.jobs, Path(tmp), run="next"))
                print(f"  {name}, next class: {runs[1]['wall_s']:.1f}s", file=sys.stderr, flush=True)
            base = nbconvert(name, notebooks, args.jobs, jupyter, Path(tmp)) if jupyter else float("nan")
            for r in runs:
                r["nbconvert_per_notebook_s"] = base / max(1, len(notebooks))
                r["vs_nbconvert"] = r["per_notebook_s"] / r["nbconvert_per_notebook_s"]
            first.append(runs[0])
            later += runs[1:]
    table(f"first run, {args.jobs} job(s), {os.cpu_count()} CPU(s)", first)
    if later:
        print()
        table("next class: the same notebooks again, with the compilation cache the first run warmed", later)
    if args.json:
        args.json.write_text(json.dumps({"first": first, "next": later} if later else first, indent=2))


if __name__ == "__main__":
    main()
