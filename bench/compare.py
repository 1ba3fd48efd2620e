#!/usr/bin/env python3
"""Side by side: the same notebooks executed by nbconvert, graded by otter-grader and by jaxgrade.

Rows, all on the same copies of the sample class (examples/class, assignment vmap_convolve)
and with the same --jobs:

- nbconvert: `jupyter nbconvert --to notebook --execute`, executing only (the baseline);
- otter: `otter run` (otter-grader's grading without containers) of each notebook, with tests
  equivalent to vmap_convolve's public and hidden ones (bench/otter/), run in the notebook's kernel;
- grade: `jaxgrade grade` into a fresh --out (sandboxes, 49 tests), then again on the same --out
  (nothing to regrade);
- check: one nbconvert run of examples/class/alice.ipynb (the one-notebook baseline), then
  `jaxgrade check --no-server` on it twice (7 public tests, each in a process of its own), then
  `jaxgrade check` once (it leaves a check server) and three more times, 4 s apart (answered by
  the server), then `jaxgrade check --watch`.

    pip install -e '.[bench]'          # nbconvert and otter-grader
    python bench/compare.py --copies 1 --jobs 2 [--skip otter] [--json figures.json]

Prints the table (wall seconds, seconds per notebook, ratios to nbconvert and to otter), the mean
`timings` of jaxgrade's records, and otter's and jaxgrade's scores per notebook side by side.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime as dt
import importlib.util
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CLASS = ROOT / "examples" / "class"
OTTER = ROOT / "bench" / "otter"
ASSIGNMENT = "vmap_convolve"
CHECKED = CLASS / "alice.ipynb"  # a correct notebook: `jaxgrade check` passes all 7 public tests
METHODS = ("nbconvert", "otter", "grade", "check")
TIMINGS = ("startup", "execute", "tests", "cpu", "total")  # a jaxgrade record's `timings`


def make_class(dest: Path, copies: int) -> list[Path]:
    """``copies`` distinct copies (different bytes, so different sha256) of the sample class."""
    dest.mkdir(parents=True)
    out = []
    for i in range(copies):
        for nb in sorted(CLASS.glob("*.ipynb")):
            data = json.loads(nb.read_text())
            data.setdefault("metadata", {})["bench_copy"] = i
            target = dest / f"{nb.stem}{i:03d}.ipynb"
            target.write_text(json.dumps(data))
            out.append(target)
    return out


def executable(name: str, module: str, row: str, package: str) -> str:
    """The console script ``name`` of this interpreter's environment (else on PATH), or a clear error."""
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if importlib.util.find_spec(module) is None or found is None:
        raise SystemExit(f"the {row} row needs {package}: pip install -e '.[bench]' (or --skip {row})")
    return found


def run_all(commands: list[list[str]], jobs: int) -> tuple[float, list[subprocess.CompletedProcess[str]]]:
    """Run ``commands``, ``jobs`` at a time; the wall seconds of the whole and each one's result."""

    def one(cmd: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)

    t0 = time.monotonic()
    with ThreadPoolExecutor(jobs) as pool:
        done = list(pool.map(one, commands))
    return time.monotonic() - t0, done


def warn_failures(what: str, paths: list[Path], done: list[subprocess.CompletedProcess[str]]) -> None:
    for path, proc in zip(paths, done):
        if proc.returncode:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            print(
                f"warning: {what} failed on {path.name} (exit {proc.returncode}): {' | '.join(tail)}", file=sys.stderr
            )


def nbconvert_commands(jupyter: str, paths: list[Path], out: Path) -> list[list[str]]:
    cmd = [jupyter, "nbconvert", "--to", "notebook", "--execute", "--allow-errors"]
    cmd += ["--ExecutePreprocessor.timeout=600", "--output-dir", str(out)]
    return [[*cmd, str(p)] for p in paths]


def build_otter_autograder(otter: str, work: Path) -> Path:
    """otter's autograder zip, made by `otter generate` from bench/otter/tests, with the checks
    and the reference solution as support files."""
    work.mkdir(parents=True)
    shutil.copytree(OTTER / "tests", work / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(OTTER / "vmap_convolve_checks.py", work)
    shutil.copy(ROOT / "reference" / ASSIGNMENT / "solution.py", work / "vmap_convolve_solution.py")
    cmd = [otter, "generate", "-t", "tests", "-o", "autograder.zip", "--no-config", "--no-requirements"]
    cmd += ["--no-environment", "vmap_convolve_checks.py", "vmap_convolve_solution.py"]
    proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"otter generate failed (exit {proc.returncode}):\n{proc.stderr or proc.stdout}")
    return work / "autograder.zip"


def otter_commands(otter: str, autograder: Path, paths: list[Path], out: Path) -> list[list[str]]:
    commands = []
    for p in paths:
        (out / p.stem).mkdir(parents=True)  # each run writes results.json
        commands.append([otter, "run", "-a", str(autograder), "-o", str(out / p.stem), "--no-logo", str(p)])
    return commands


def otter_scores(out: Path, paths: list[Path]) -> dict[str, dict[str, Any]]:
    """Per notebook, otter's total and its questions' scores (one question per jaxgrade category)."""
    scores = {}
    for p in paths:
        results = out / p.stem / "results.json"
        if not results.exists():
            continue
        tests = [t for t in json.loads(results.read_text())["tests"] if t.get("max_score") is not None]
        categories = {t["name"]: float(t["score"]) for t in tests}
        scores[p.stem] = {"score": sum(categories.values()), "categories": categories}
    return scores


def jaxgrade(*args: str) -> list[str]:
    # run from the repository root, so that `-m grader` is this checkout's package
    return [sys.executable, "-m", "grader", "--course", str(ROOT), *args]


def jaxgrade_grade(
    folder: Path, out: Path, jobs: int, cache: Path, *extra: str, env_extra: dict[str, str] | None = None
) -> float:
    cmd = jaxgrade("grade", "--assignment", ASSIGNMENT, "--out", str(out), "--jobs", str(jobs), *extra, str(folder))
    t0 = time.monotonic()
    env = {**os.environ, "JAXGRADE_CACHE_DIR": str(cache), **(env_extra or {})}  # the bench's own compilation cache
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    seconds = time.monotonic() - t0
    if proc.returncode:
        raise SystemExit(f"jaxgrade grade failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return seconds


def jaxgrade_check(notebook: Path, cache: Path, *extra: str) -> tuple[float, dict[str, Any]]:
    cmd = jaxgrade("check", "--assignment", ASSIGNMENT, "--json", *extra, str(notebook))
    t0 = time.monotonic()
    # the bench's own folder, so the check server (grader/grading/check_server.py) is the bench's
    env = {**os.environ, "JAXGRADE_CACHE_DIR": str(cache), "JAXGRADE_CHECK_SERVER": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    seconds = time.monotonic() - t0
    try:
        record = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise SystemExit(f"jaxgrade check failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}") from None
    if proc.returncode:
        print(f"warning: jaxgrade check {notebook.name}: {record['score']:g}/{record['max_score']:g}", file=sys.stderr)
    return seconds, record


WATCH_SAVES = 3
WATCH_PAUSE = 4.0  # seconds between a result and the next save: a student reading it
SERVED_CHECKS = 3


def stop_check_servers(cache: Path) -> None:
    """SIGTERM the check servers the bench's checks left: the pid in a lock file that a server
    still holds (a lock nobody holds names a process that is gone)."""
    import fcntl

    for lock in (cache / "run").glob("check-*.lock"):
        try:
            fd = os.open(lock, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            continue  # not held: no server
        except OSError:
            pass
        finally:
            os.close(fd)
        try:
            os.kill(int(lock.read_text().split()[0]), signal.SIGTERM)
        except (OSError, ValueError, IndexError):
            pass


def jaxgrade_check_watch(notebook: Path, work: Path) -> tuple[float, list[float], dict[str, Any]]:
    """`jaxgrade check --watch` on a copy of ``notebook``: the first check's seconds (from the
    command's start), then, for each of WATCH_SAVES saves made WATCH_PAUSE s after the previous
    result (each save changes the bytes), the seconds from the save to its result."""
    import selectors

    copy = work / "watched" / notebook.name
    copy.parent.mkdir(parents=True, exist_ok=True)
    nb = json.loads(notebook.read_text(encoding="utf-8"))
    copy.write_text(json.dumps(nb), encoding="utf-8")
    cmd = jaxgrade("check", "--assignment", ASSIGNMENT, "--json", "--watch", str(copy))
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    sel = selectors.DefaultSelector()
    assert proc.stdout is not None
    sel.register(proc.stdout, selectors.EVENT_READ)

    def result() -> dict[str, Any]:
        if not sel.select(300):
            proc.kill()
            raise SystemExit("jaxgrade check --watch gave no result within 300 s")
        line = proc.stdout.readline()  # type: ignore[union-attr]
        if not line:
            raise SystemExit(f"jaxgrade check --watch stopped:\n{proc.stderr.read()[-3000:]}")  # type: ignore[union-attr]
        return json.loads(line)

    try:
        record = result()
        first = time.monotonic() - t0
        saves = []
        for k in range(WATCH_SAVES):
            time.sleep(WATCH_PAUSE)
            nb.setdefault("metadata", {})["bench_save"] = k  # new bytes, same code
            t = time.monotonic()
            copy.write_text(json.dumps(nb), encoding="utf-8")
            record = result()
            saves.append(time.monotonic() - t)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    return first, saves, record


def jaxgrade_scores(out: Path) -> dict[str, dict[str, Any]]:
    """Per student, the record's score, points per category and timings."""
    scores = {}
    for path in sorted((out / "results").glob("*.json")):
        record = json.loads(path.read_text())
        categories: dict[str, float] = {}
        for test in record["tests"]:
            categories[test["category"]] = categories.get(test["category"], 0.0) + float(test["score"])
        scores[record["student"]] = {
            "score": float(record["score"]),
            "categories": categories,
            "timings": record["timings"],
            "isolation": record.get("isolation", ""),
        }
    return scores


def class_figures(out: Path) -> dict[str, Any]:
    """A graded class's records in ``out``: their number, the sums of their ``cpu``, ``startup``
    and ``tests`` timings, and each student's verdicts (status, score, and each test's name,
    status and score), for the benches that grade a class several ways (compile_flags.py,
    versions.py)."""
    records = [json.loads(p.read_text()) for p in sorted((out / "results").glob("*.json"))]
    timings = [r.get("timings", {}) for r in records]
    return {
        "n": len(records),
        **{k: sum(t.get(k, 0.0) for t in timings) for k in ("cpu", "startup", "tests")},
        "verdicts": {
            r["student"]: [
                r.get("status"),
                r.get("score"),
                [(t.get("name"), t.get("status"), t.get("score")) for t in r.get("tests", [])],
            ]
            for r in records
        },
    }


def same_records(verdicts: list[dict[str, Any]], n: int) -> bool:
    """Print whether every run gave every student the same record (``class_figures``'s
    verdicts), and who differs; True where all ``n`` notebooks were graded alike in every run."""
    students = set().union(*verdicts)
    same = [s for s in sorted(students) if all(s in v and v[s] == verdicts[0].get(s) for v in verdicts)]
    print(
        "every record (status, score, and each test's name, status and score) the same in every run: "
        f"{len(same)} of {n} notebooks"
    )
    for s in sorted(students - set(same)):
        print(f"  differs: {s}: " + ", ".join(str(v[s][:2]) if s in v else "missing" for v in verdicts))
    return len(same) == n and all(len(v) == n for v in verdicts)


def subreaper() -> None:
    """This process reaps its orphaned descendants, so that their CPU time reaches its rusage."""
    pr_set_child_subreaper = 36
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_child_subreaper, 1)


def _reap(timeout: float = 60.0) -> None:
    """Wait for every descendant left to this process (the fork server ends once its clients do)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.05)


def tree_cpu(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[subprocess.CompletedProcess, float, float]:
    """Run ``cmd``; its output, wall seconds, and the CPU seconds of its whole process tree."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.monotonic()
    done = subprocess.run(cmd, env=env, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    wall = time.monotonic() - t
    _reap()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode not in (0, 1):
        sys.exit(f"{' '.join(cmd)} ended with {done.returncode}:\n{done.stderr[-3000:]}")
    return done, wall, cpu


def machine_cpu() -> float:
    """CPU seconds the whole machine has spent so far, every process's (``/proc/stat``: all but
    idle and I/O wait), to subtract from a later reading: what a run cost, whatever reaped what."""
    with open("/proc/stat", encoding="ascii") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    busy = sum(fields[:8]) - fields[3] - fields[4]  # user nice system idle iowait irq softirq steal
    return busy / os.sysconf("SC_CLK_TCK")


def class_side_by_side(
    ways: dict[str, dict[str, str]],
    baseline: str,
    rounds: int,
    jobs: int,
    base_env: dict[str, str],
    tmp: Path,
    klass: Path = CLASS,
) -> int:
    """``jaxgrade grade --assignment vmap_convolve`` of ``klass`` (examples/class) each of ``ways`` (extra
    environment variables), alternating, ``rounds`` times, with a fresh cache home each run (first
    runs): wall seconds and their ratio to ``baseline``'s, the host side's CPU seconds (the command
    and every trusted process under it, from the rusage of reaped descendants: call
    :func:`subreaper` first; not the sandboxes', which end killed in their PID namespace, but for
    evaluators a zygote forked and reaped: grader/host/zygote.py), the sandboxes' own CPU seconds
    from the records (their cgroups'), the whole machine's CPU seconds over the run (the total to
    read: it counts every process once, whoever reaped it; another job on the machine adds to
    it), and whether every record is the same.  0 where they are."""
    runs: dict[str, list[dict]] = {w: [] for w in ways}
    for i in range(rounds):
        for j, (way, extra) in enumerate(ways.items()):
            out, cache = tmp / f"out-{i}-{j}", tmp / f"cache-{i}-{j}"
            cmd = [sys.executable, "-m", "grader", "--course", str(ROOT), "grade", "--assignment", "vmap_convolve"]
            cmd += ["--out", str(out), "--jobs", str(jobs), str(klass)]
            env = {**base_env, **extra, "JAXGRADE_CACHE_DIR": str(cache)}
            machine = machine_cpu()
            _, wall, cpu = tree_cpu(cmd, env, ROOT)
            machine = machine_cpu() - machine
            # its "cpu": the sandboxes'
            runs[way].append({**class_figures(out), "wall": wall, "tree": cpu, "machine": machine})
    n = runs[next(iter(ways))][0]["n"]
    print(
        f"\nvmap_convolve, {n} notebooks of {klass.relative_to(ROOT) if klass.is_relative_to(ROOT) else klass}, --jobs {jobs}, first runs (fresh cache homes), "
        f"{rounds} round(s), alternating"
    )
    print(
        f"{'':<40} {'wall s (each run)':>22} {'mean s':>7} {'host CPU s':>10} {'sandbox CPU s':>13} "
        f"{'machine CPU s':>13} {'wall vs base':>12}"
    )
    base_wall = statistics.mean(r["wall"] for r in runs[baseline])
    for way, rs in runs.items():
        walls = " ".join(f"{r['wall']:.1f}" for r in rs)
        mean = statistics.mean(r["wall"] for r in rs)
        cpu = statistics.mean(r["tree"] for r in rs)
        sandbox = statistics.mean(r["cpu"] for r in rs)
        machine = statistics.mean(r["machine"] for r in rs)
        print(
            f"{way:<40} {walls:>22} {mean:7.1f} {cpu:10.1f} {sandbox:13.1f} {machine:13.1f} {mean / base_wall:11.2f}x"
        )
    same = same_records([r["verdicts"] for rs in runs.values() for r in rs], n)
    return 0 if same else 1


def wall_columns(walls: list[float], base: float) -> str:
    """The wall-time columns of compile_flags.py's and versions.py's tables: each run's seconds,
    their mean, and the mean's ratio to the baseline's (``base``)."""
    mean = statistics.mean(walls)
    return f"{' '.join(f'{w:.1f}' for w in walls):>22} {mean:7.1f} {mean / base:10.2f}x"


def mean_timings(records: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.mean(r[k] for r in records) for k in TIMINGS if records and all(k in r for r in records)}


@dataclass
class Row:
    method: str  # one of METHODS
    label: str
    notebooks: int
    wall_s: float
    baseline: str = ""  # the label of the nbconvert row this one is compared with
    vs_nbconvert: float | None = None
    vs_otter: float | None = None

    @property
    def per_notebook(self) -> float:
        return self.wall_s / self.notebooks


def ratios(rows: list[Row]) -> None:
    """Seconds per notebook over the baseline's (nbconvert) and, for `jaxgrade grade`, over otter's."""
    by_label = {r.label: r for r in rows}
    otter = next((r for r in rows if r.method == "otter"), None)
    for r in rows:
        base = by_label.get(r.baseline)
        if base is not None:
            r.vs_nbconvert = r.per_notebook / base.per_notebook
        if r.method == "grade" and otter is not None:
            r.vs_otter = r.per_notebook / otter.per_notebook


def fmt_ratio(x: float | None) -> str:
    return "" if x is None else f"{x:.2f}x"


def print_table(rows: list[Row], header: str) -> None:
    print(header)
    print(f"{'method':50} {'notebooks':>9} {'wall s':>8} {'s/notebook':>11} {'vs nbconvert':>13} {'vs otter':>9}")
    for r in rows:
        line = f"{r.label:50} {r.notebooks:9d} {r.wall_s:8.1f} {r.per_notebook:11.2f} "
        print(f"{line}{fmt_ratio(r.vs_nbconvert):>13} {fmt_ratio(r.vs_otter):>9}".rstrip())


def print_timings(label: str, timings: dict[str, float]) -> None:
    if timings:
        names = {"execute": "notebook"}
        print(f"  {label:40} " + ", ".join(f"{names.get(k, k)} {v:.2f}" for k, v in timings.items()))


def print_scores(grade: dict[str, dict[str, Any]], otter: dict[str, dict[str, Any]], copies: int) -> None:
    """Both graders' totals per notebook; where they differ, the categories that differ.

    The otter tests check what jaxgrade's do, but from inside the student's kernel and not
    always the same way (bench/README.md, "What the otter tests do not check"): a notebook can
    score differently, and then this table shows it rather than smoothing it over."""
    print("\nscores per notebook (out of 40; otter's questions are jaxgrade's categories):")
    print(f"  {'notebook':12} {'jaxgrade':>9} {'otter':>7}  differs in")
    names = sorted(set(grade) | set(otter))
    first = [n for n in names if n.endswith("000")] if copies > 1 else names
    for name in first:
        g, o = grade.get(name), otter.get(name)
        diff = ""
        if g and o:
            diff = ", ".join(
                f"{c} {g['categories'].get(c, 0.0):g} vs {o['categories'].get(c, 0.0):g}"
                for c in sorted(set(g["categories"]) | set(o["categories"]))
                if abs(g["categories"].get(c, 0.0) - o["categories"].get(c, 0.0)) > 1e-6
            )
        gs = f"{g['score']:g}" if g else "-"
        os_ = f"{o['score']:g}" if o else "-"
        print(f"  {name:12} {gs:>9} {os_:>7}  {diff}".rstrip())
    agree = sum(1 for n in names if n in grade and n in otter and abs(grade[n]["score"] - otter[n]["score"]) < 1e-6)
    print(f"  the two graders give the same total to {agree} of {len(names)} notebooks")
    if agree < len(names):
        print("  (otter's tests cannot check everything jaxgrade's do the same way: see bench/README.md)")
    if copies > 1:
        same = all(
            grade.get(n, {}).get("score") == grade.get(n[:-3] + "000", {}).get("score")
            and otter.get(n, {}).get("score") == otter.get(n[:-3] + "000", {}).get("score")
            for n in names
        )
        print(f"  (copies 001-{copies - 1:03d}: {'the same scores as copy 000' if same else 'SOME SCORES DIFFER'})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copies", type=int, default=1, help="copies of the 6-notebook sample class (default 1)")
    ap.add_argument("--jobs", type=int, default=2, help="notebooks at once, for every method (default 2)")
    ap.add_argument(
        "--skip", default="", help=f"comma-separated rows to leave out: {', '.join(METHODS)} (e.g. --skip otter)"
    )
    ap.add_argument("--json", metavar="FILE", help="also write the figures to FILE as JSON")
    args = ap.parse_args(argv)
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    if skip - set(METHODS):
        ap.error(f"--skip: unknown row(s) {sorted(skip - set(METHODS))}; choose from {', '.join(METHODS)}")
    if args.copies < 1 or args.jobs < 1:
        ap.error("--copies and --jobs must be at least 1")
    # every tool is looked for before anything runs
    jupyter = executable("jupyter", "nbconvert", "nbconvert", "nbconvert") if "nbconvert" not in skip else ""
    otter = executable("otter", "otter", "otter", "otter-grader") if "otter" not in skip else ""

    rows: list[Row] = []
    figures: dict[str, Any] = {}
    grade: dict[str, dict[str, Any]] = {}
    otter_graded: dict[str, dict[str, Any]] = {}
    base = "nbconvert --execute (executes only, no tests)"
    single = f"nbconvert --execute, 1 notebook ({CHECKED.name})"
    with tempfile.TemporaryDirectory(prefix="jaxgrade-compare-") as tmp:
        work = Path(tmp)
        paths = make_class(work / "class", args.copies)
        n = len(paths)
        cache = work / "jaxgrade-cache"  # the bench's compilation cache, kept answers and check server
        if "nbconvert" not in skip:
            secs, done = run_all(nbconvert_commands(jupyter, paths, work / "nbconvert"), args.jobs)
            warn_failures("nbconvert", paths, done)
            rows.append(Row("nbconvert", base, n, secs, base))
        if "otter" not in skip:
            t0 = time.monotonic()
            autograder = build_otter_autograder(otter, work / "otter")
            figures["otter_generate_s"] = time.monotonic() - t0
            secs, done = run_all(otter_commands(otter, autograder, paths, work / "otter-out"), args.jobs)
            warn_failures("otter run", paths, done)
            rows.append(Row("otter", "otter run (execute + 49 tests, in the kernel)", n, secs, base))
            otter_graded = otter_scores(work / "otter-out", paths)
        if "grade" not in skip:
            out = work / "jaxgrade-out"
            secs = jaxgrade_grade(work / "class", out, args.jobs, cache)
            rows.append(Row("grade", "jaxgrade grade, first run (warms the cache)", n, secs, base))
            grade = jaxgrade_scores(out)  # read now: the rerun grades nothing and changes no record
            figures["grade_timings"] = mean_timings([s["timings"] for s in grade.values()])
            secs = jaxgrade_grade(work / "class", work / "jaxgrade-out-2", args.jobs, cache)
            rows.append(Row("grade", "jaxgrade grade, next class (cache warm)", n, secs, base))
            figures["grade_warm_timings"] = mean_timings(
                [s["timings"] for s in jaxgrade_scores(work / "jaxgrade-out-2").values()]
            )
            secs = jaxgrade_grade(work / "class", work / "jaxgrade-out-3", args.jobs, cache, "--no-cache")
            rows.append(Row("grade", "jaxgrade grade --no-cache", n, secs, base))
            # the sandboxes' newer XLA emitters (grader/host/xla_flags.py), from a cache of their own
            secs = jaxgrade_grade(
                work / "class",
                work / "jaxgrade-out-4",
                args.jobs,
                work / "jaxgrade-cache-newer-emitters",
                env_extra={"JAXGRADE_FAST_COMPILE": "0"},
            )
            rows.append(Row("grade", "jaxgrade grade, first run, JAXGRADE_FAST_COMPILE=0", n, secs, base))
            figures["grade_newer_emitters_timings"] = mean_timings(
                [s["timings"] for s in jaxgrade_scores(work / "jaxgrade-out-4").values()]
            )
            # what a TA who validated the assignment on this machine gets: the cache warmed by
            # validate (the staff's solutions), no answers kept from these notebooks
            validated = work / "jaxgrade-cache-validated"
            t0 = time.monotonic()
            env = {**os.environ, "JAXGRADE_CACHE_DIR": str(validated)}
            proc = subprocess.run(jaxgrade("validate", ASSIGNMENT), capture_output=True, text=True, cwd=ROOT, env=env)
            if proc.returncode:
                raise SystemExit(f"jaxgrade validate failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}")
            figures["validate_seconds"] = time.monotonic() - t0
            secs = jaxgrade_grade(work / "class", work / "jaxgrade-out-5", args.jobs, validated)
            rows.append(Row("grade", "jaxgrade grade, first run after jaxgrade validate", n, secs, base))
            figures["grade_validated_timings"] = mean_timings(
                [s["timings"] for s in jaxgrade_scores(work / "jaxgrade-out-5").values()]
            )
            secs = jaxgrade_grade(work / "class", out, args.jobs, cache)
            rows.append(Row("grade", "jaxgrade grade, rerun (nothing to regrade)", n, secs, base))
        if "check" not in skip:
            if "nbconvert" not in skip:
                secs, done = run_all(nbconvert_commands(jupyter, [CHECKED], work / "nbconvert-1"), 1)
                warn_failures("nbconvert", [CHECKED], done)
                rows.append(Row("nbconvert", single, 1, secs, single))
            for run in ("1st", "2nd"):  # each in a process of its own, as before the check server
                secs, record = jaxgrade_check(CHECKED, cache, "--no-server")
                rows.append(Row("check", f"jaxgrade check --no-server {CHECKED.name}, {run} run", 1, secs, single))
                figures[f"check_{run}_timings"] = {k: record["timings"][k] for k in TIMINGS if k in record["timings"]}
                figures[f"check_{run}_score"] = record["score"]
                figures["check_isolation"] = record.get("isolation", "")
            try:
                secs, record = jaxgrade_check(CHECKED, cache)
                rows.append(Row("check", "jaxgrade check, 1st run (leaves a check server)", 1, secs, single))
                served = []
                for _ in range(SERVED_CHECKS):
                    time.sleep(WATCH_PAUSE)  # the student reads the result, and edits
                    secs, record = jaxgrade_check(CHECKED, cache)
                    served.append(secs)
                rows.append(
                    Row("check", "jaxgrade check, next runs (the server; median)", 1, statistics.median(served), single)
                )
                figures["check_served_s"] = served
                figures["check_served_timings"] = {k: record["timings"][k] for k in TIMINGS if k in record["timings"]}
            finally:
                stop_check_servers(cache)
            first, saves, record = jaxgrade_check_watch(CHECKED, work)
            rows.append(Row("check", "jaxgrade check --watch, first check", 1, first, single))
            rows.append(Row("check", "jaxgrade check --watch, a save (median)", 1, statistics.median(saves), single))
            figures["check_watch_saves_s"] = saves
            figures["check_watch_timings"] = {k: record["timings"][k] for k in TIMINGS if k in record["timings"]}

    ratios(rows)
    now = dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    copies = f"{args.copies} cop{'y' if args.copies == 1 else 'ies'} of examples/class"
    header = f"{n} notebooks of {ASSIGNMENT} ({copies}), --jobs {args.jobs}, {os.cpu_count()} CPU(s), {now}"
    print_table(rows, header)
    if "otter_generate_s" in figures:
        print(
            f"(not in the otter row: building its autograder zip with `otter generate`, {figures['otter_generate_s']:.1f} s)"
        )
    if grade or "check_1st_timings" in figures:
        isolation = sorted(({s["isolation"] for s in grade.values()} | {figures.get("check_isolation", "")}) - {""})
        print(f"\njaxgrade records' `timings`, seconds per notebook (sandbox: {', '.join(isolation) or '?'}):")
        print_timings(f"jaxgrade grade, first run, mean of {len(grade)}", figures.get("grade_timings", {}))
        print_timings("jaxgrade grade, next class (cache warm)", figures.get("grade_warm_timings", {}))
        if "validate_seconds" in figures:
            print_timings("jaxgrade grade, after validate", figures.get("grade_validated_timings", {}))
            print(f"  (jaxgrade validate {ASSIGNMENT} itself, before that row: {figures['validate_seconds']:.1f} s)")
        print_timings("jaxgrade grade, JAXGRADE_FAST_COMPILE=0", figures.get("grade_newer_emitters_timings", {}))
        for run in ("1st", "2nd"):
            print_timings(f"jaxgrade check --no-server, {run} run", figures.get(f"check_{run}_timings", {}))
        print_timings("jaxgrade check, served, last run", figures.get("check_served_timings", {}))
        if "check_served_s" in figures:
            each = ", ".join(f"{x:.2f}" for x in figures["check_served_s"])
            print(f"  (check server: seconds per check: {each}; each {WATCH_PAUSE:g} s after the last result)")
        print_timings("jaxgrade check --watch, last save", figures.get("check_watch_timings", {}))
        if "check_watch_saves_s" in figures:
            each = ", ".join(f"{x:.2f}" for x in figures["check_watch_saves_s"])
            print(f"  (--watch: seconds from each save to its result: {each}; saves {WATCH_PAUSE:g} s after a result)")
    if grade and otter_graded:
        print_scores(grade, otter_graded, args.copies)
    if args.json:
        figures.update(
            header=header,
            notebooks=n,
            copies=args.copies,
            jobs=args.jobs,
            cpus=os.cpu_count(),
            date=now,
            rows=[asdict(r) | {"s_per_notebook": r.per_notebook} for r in rows],
            scores={"jaxgrade": grade, "otter": otter_graded},
        )
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
