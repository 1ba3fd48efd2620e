"""Grading on a Dask cluster (grader/batch/cluster.py): the same records as a local run, a worker killed
mid-batch, a worker with another course version refused.

The cluster is a ``distributed.LocalCluster`` of two worker processes on loopback, grading the
tiny ``double`` course of ``tests/minicourse.py`` through the real command line and real sandboxes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import os
import signal
import sqlite3
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import distributed
import pytest

import grader
from grader.batch.cluster import (
    LOCK,
    ClusterError,
    CourseBundle,
    CourseMismatch,
    _check,
    _Child,
    _in_child,
    _lock,
    _private_dir,
    _received,
    _submission_folder,
    _sweep,
    _unpack,
    differences,
    fingerprint,
)
from grader.batch.gradebook import Gradebook
from grader.batch.pool import Lost, Raised
from grader.cli import main
from grader.course.config import load_course
from grader.grading.grade import trusted_limits
from grader.grading.record import Record
from grader.host.memory import memory_in_words
from tests.conftest import build_notebook
from tests.minicourse import EXPECTED, make_minicourse, notebook

pytestmark = pytest.mark.slow

SLOW = build_notebook("import time\ntime.sleep(3)", "def double(x):\n    return 2 * x")  # 4/4, after 3 s


def run(*argv: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out, err)
    return code, err.getvalue()


@pytest.fixture(scope="module")
def cluster() -> Iterator[distributed.LocalCluster]:
    # a Nanny sets its workers' variables (OPENBLAS_NUM_THREADS=1 and others: distributed's
    # `pre-spawn-environ`) in THIS process's environment as it starts one: put it back after, or
    # every process the later tests of this pytest worker start inherits them (a check server
    # then had no OpenBLAS thread, and test_check_server's tgkill test skipped in some runs)
    saved = dict(os.environ)
    try:
        with distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
        ) as c:
            yield c
    finally:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture
def course(tmp_path: Path) -> Path:
    return make_minicourse(tmp_path / "course")


def make_class(folder: Path, notebooks: dict[str, str]) -> Path:
    folder.mkdir(parents=True)
    for name, text in notebooks.items():
        (folder / f"{name}.ipynb").write_text(text)
    return folder


def grade(course: Path, out: Path, folder: Path, *extra: str) -> tuple[int, str]:
    return run("--course", str(course), "grade", "--assignment", "double", "--out", str(out), *extra, str(folder))


def comparable(out: Path) -> dict[str, dict]:
    """Each student's record, less what differs between any two runs (times, paths, memory), tests and cells included."""
    with Gradebook(out / "gradebook.db") as gb:
        records = gb.records("double")
    skip = {"timings", "graded_at", "source", "peak_memory_bytes", "duration"}

    def strip(value: object) -> object:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in skip}
        return [strip(v) for v in value] if isinstance(value, list) else value

    return {r.student: strip(dataclasses.asdict(r)) for r in records}


def test_cluster_grades_as_a_local_run_does(cluster: distributed.LocalCluster, course: Path, tmp_path: Path) -> None:
    folder = make_class(tmp_path / "class", {k: notebook(k, salt=k) for k in ("half", "zero")})
    code, err = grade(course, tmp_path / "local", folder, "--jobs", "1", "--no-cache")
    assert code == 0, err
    code, err = grade(course, tmp_path / "dask", folder, "--scheduler", cluster.scheduler_address, "--no-cache")
    assert code == 0, err
    assert "2 to grade on the Dask cluster at tcp://127.0.0.1:" in err and "[2/2]" in err, err
    local, dask = comparable(tmp_path / "local"), comparable(tmp_path / "dask")
    assert {s: (r["score"], r["status"]) for s, r in dask.items()} == {k: EXPECTED[k] for k in ("half", "zero")}
    assert dask == local
    assert all(r["isolation"] == "bwrap" for r in dask.values())


def _children(pid: int) -> list[int]:
    found = []
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(d.name))
        except (OSError, ValueError, IndexError):
            pass
    return found


def _sandboxes(pid: int) -> list[int]:
    """``pid``'s children but its zygote (grader/host/zygote.py, which lives from its first
    evaluator on): the sandboxes it runs now."""
    found = []
    for child in _children(pid):
        try:
            if b"grader/host/zygote.py" not in Path(f"/proc/{child}/cmdline").read_bytes():
                found.append(child)
        except OSError:
            pass
    return found


def _grading(worker: int) -> int | None:
    """The trusted process (``python -m grader.batch.cluster``) of a Dask worker, while it has a sandbox."""
    for child in _children(worker):
        with_sandbox = bool(_sandboxes(child))
        try:
            if with_sandbox and b"grader.batch.cluster" in Path(f"/proc/{child}/cmdline").read_bytes():
                return child
        except OSError:
            pass
    return None


def _scratch_of(pid: int) -> list[Path]:
    """The scratch folders (``$TMPDIR/jaxgrade-<hex>``) named on the command lines of ``pid``'s children."""
    found = set()
    for child in _children(pid):
        try:
            args = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        for arg in args:
            path = Path(os.fsdecode(arg))
            if path.name.startswith("jaxgrade-") and path.parent == Path(tempfile.gettempdir()):
                found.add(path)
    return sorted(found)


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_a_worker_killed_mid_batch_costs_nothing(
    cluster: distributed.LocalCluster, course: Path, tmp_path: Path
) -> None:
    students = {"s0_slow": SLOW, "s1_slow": SLOW.replace("sleep(3)", "sleep(3.5)"), "s2_zero": notebook("zero")}
    folder = make_class(tmp_path / "class", students)
    out = tmp_path / "out"
    args = ("--scheduler", cluster.scheduler_address, "--no-cache")
    result: list[tuple[int, str]] = []
    batch = threading.Thread(target=lambda: result.append(grade(course, out, folder, *args)))
    with distributed.Client(cluster, set_as_default=False) as client:
        pids = client.run(os.getpid)
        batch.start()
        deadline, victim, child = time.monotonic() + 60, None, None
        while child is None and time.monotonic() < deadline:
            victim, child = next(((pid, c) for pid in pids.values() if (c := _grading(pid))), (None, None))
            time.sleep(0.1)
        assert victim is not None and child is not None, "no worker started grading"
        copies = set(_private_dir().glob("nb-*"))  # the notebooks being graded: the victim's among them
        assert copies, "the workers keep no copy of the notebooks they grade in their private folder"
        os.kill(victim, signal.SIGKILL)  # mid-task: Dask gives its submission to another worker
        batch.join(timeout=120)
    assert result and result[0][0] == 0, result
    deadline = time.monotonic() + 10
    while not _gone(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _gone(child), "the killed worker's grading process lived on"
    # the killed worker's copy of the notebook it was grading went with the next task
    assert not [p for p in copies if p.exists()], "a submission's notebook was left on the worker"
    expected = {"s0_slow": (4.0, "graded"), "s1_slow": (4.0, "graded"), "s2_zero": EXPECTED["zero"]}
    assert {s: (r["score"], r["status"]) for s, r in comparable(out).items()} == expected

    code, err = grade(course, out, folder, *args)
    assert code == 0 and "3 already graded" in err, err
    rows = sqlite3.connect(out / "gradebook.db").execute("SELECT student FROM results").fetchall()
    assert sorted(rows) == [(s,) for s in sorted(students)]  # every student exactly once


def test_a_batch_stopped_early_stops_the_notebooks_being_graded_too(
    cluster: distributed.LocalCluster, course: Path, tmp_path: Path
) -> None:
    """A Ctrl-C on the coordinator while a worker grades a notebook of long cells: the task stops
    its grading process's grading (the sandbox closed, its scratch folder removed) and ends the
    process, at its next look at the run's stop event, instead of grading that notebook to its
    end for a result nobody waits for."""
    from grader.batch.cluster import STOP_GRACE, STOP_POLL, grade_on_cluster

    long = build_notebook("import time\ntime.sleep(50)", "def double(x):\n    return 2 * x")
    folder = make_class(tmp_path / "class", {"s0_long": long, "s1_zero": notebook("zero")})
    assignment = load_course(course).assignment("double", staff=True)
    with distributed.Client(cluster, set_as_default=False) as client:
        pids = client.run(os.getpid)
    grading: list[int] = []
    sandbox: list[int] = []
    scratch: list[Path] = []

    def ctrl_c(path: Path, rec: Record) -> None:  # at s1_zero's result, s0_long is in its long cell
        deadline = time.monotonic() + 30
        while not grading and time.monotonic() < deadline:
            grading.extend(c for pid in pids.values() if (c := _grading(pid)))
            time.sleep(0.1)
        if grading:
            sandbox.extend(_sandboxes(grading[0]))
            scratch.extend(_scratch_of(grading[0]))
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        grade_on_cluster(
            assignment,
            sorted(folder.glob("*.ipynb")),
            scheduler=cluster.scheduler_address,
            isolation="bwrap",
            on_result=ctrl_c,
            cache=False,
        )
    assert len(grading) == 1 and sandbox, "s0_long's grading process, with its sandbox, was not found"
    assert scratch, "the sandbox's scratch folder was not found"
    deadline = time.monotonic() + STOP_POLL + STOP_GRACE + 10
    while not all(_gone(p) for p in [*grading, *sandbox]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _gone(grading[0]), "the notebook went on being graded after the batch stopped"
    assert all(_gone(p) for p in sandbox), "the sandbox outlived the stop"
    assert not [p for p in scratch if p.exists()], "the stopped grading left its scratch folder"


def test_a_coordinator_killed_mid_batch_stops_the_notebooks_being_graded(
    cluster: distributed.LocalCluster, course: Path, tmp_path: Path
) -> None:
    """`kill -9` of the coordinator (`jaxgrade grade --scheduler`) while a worker grades a
    notebook of long cells: nobody sets the run's stop event, but the scheduler drops the dead
    coordinator's client and the task it wanted, and the task, at its next look, stops its
    grading (the sandbox closed, its scratch folder removed) instead of grading that notebook
    for a result nobody will receive."""
    from grader.batch.cluster import STOP_GRACE, STOP_POLL

    long = build_notebook("import time\ntime.sleep(60)", "def double(x):\n    return 2 * x")
    folder = make_class(tmp_path / "class", {"s0_long": long})
    with distributed.Client(cluster, set_as_default=False) as client:
        pids = client.run(os.getpid)
    argv = ["--course", str(course), "grade", "--assignment", "double", "--out", str(tmp_path / "out")]
    argv += ["--scheduler", cluster.scheduler_address, "--no-cache", str(folder)]
    log = tmp_path / "coordinator.log"
    with log.open("wb") as err:
        coordinator = subprocess.Popen(
            [sys.executable, "-m", "grader", *argv],
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        grading: int | None = None
        deadline = time.monotonic() + 60
        while grading is None and time.monotonic() < deadline and coordinator.poll() is None:
            grading = next((c for pid in pids.values() if (c := _grading(pid))), None)
            time.sleep(0.1)
        assert grading is not None, f"s0_long's grading process was not found: {log.read_text()}"
        time.sleep(1)  # into the long cell
        sandbox, scratch = _sandboxes(grading), _scratch_of(grading)
        assert sandbox and scratch, "s0_long's sandbox and its scratch folder were not found"
        coordinator.kill()
        coordinator.wait(timeout=10)
        deadline = time.monotonic() + STOP_POLL + STOP_GRACE + 15
        while not all(_gone(p) for p in [grading, *sandbox]) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _gone(grading), "the notebook went on being graded after its coordinator died"
        assert all(_gone(p) for p in sandbox), "the sandbox outlived the coordinator"
        assert not [p for p in scratch if p.exists()], "the stopped grading left its scratch folder"
    finally:
        coordinator.kill()
        coordinator.wait(timeout=10)


def _pretend_jaxgrade(version: str) -> None:
    grader.__version__ = version  # Assignment.version() reads it at each call


def test_a_worker_with_another_course_version_refuses(cluster: distributed.LocalCluster, tmp_path: Path) -> None:
    course = make_minicourse(tmp_path / "other", limits="{cell_timeout: 30}")  # a version no worker has seen
    folder = make_class(tmp_path / "class", {"s0": notebook("full")})
    with distributed.Client(cluster, set_as_default=False) as client:
        client.run(_pretend_jaxgrade, "0.0.1-old")
        try:
            code, err = grade(course, tmp_path / "out", folder, "--scheduler", cluster.scheduler_address)
        finally:
            client.run(_pretend_jaxgrade, grader.__version__)
    assert code == 1, err
    assert "refuses to grade double: its course version is 0.0.1-old+" in err, err
    assert f"jaxgrade 0.0.1-old on the worker, {grader.__version__} on the coordinator" in err, err
    assert "TIP: Install on the workers the same jaxgrade, jax and jaxlib as here" in err, err
    with Gradebook(tmp_path / "out" / "gradebook.db") as gb:
        assert gb.count("double") == 0


def test_differences_name_the_file_and_the_setting(tmp_path: Path) -> None:
    ours = load_course(make_minicourse(tmp_path / "a")).assignment("double")
    theirs_root = make_minicourse(tmp_path / "b", limits="{cell_timeout: 5}")
    (theirs_root / "reference" / "double" / "solution.py").write_text("def double(x):\n    return x + x\n")
    theirs = load_course(theirs_root).assignment("double")
    diff = differences(fingerprint(theirs), fingerprint(ours))
    assert diff == [
        "setting limits.cell_timeout: 5.0 on the worker, 60.0 on the coordinator",
        "reference/double/solution.py differs",
    ]


def test_a_bundle_path_outside_the_course_is_refused(tmp_path: Path) -> None:
    bundle = CourseBundle.build(load_course(make_minicourse(tmp_path / "c")).assignment("double"))
    assert "grading.yaml" in bundle.files and "reference/double/tests/test_hidden.py" in bundle.files
    evil = dataclasses.replace(bundle, files={"../escaped.py": b"x"}, sha256={})
    with pytest.raises(CourseMismatch, match=r"a path outside the course: '\.\./escaped\.py'"):
        _unpack(evil)


def test_a_worker_whose_packages_cannot_grade_the_assignment_refuses(tmp_path: Path) -> None:
    """The coordinator's packages meet the assignment's ``requires``; a worker checks its own
    (another machine, another JAX) and refuses the course, naming what it lacks, instead of
    grading every notebook into a grader error."""
    from importlib import metadata

    root = make_minicourse(tmp_path / "c")
    yaml_file = root / "assignments" / "double" / "assignment.yaml"
    yaml_file.write_text(yaml_file.read_text() + "requires: ['jax>=999']\n")
    bundle = CourseBundle.build(load_course(root).assignment("double"))
    with pytest.raises(CourseMismatch) as info:
        _check(bundle, _unpack(bundle))
    assert str(info.value).endswith(
        f"refuses to grade: double cannot be graded here: it needs jax>=999 (jax {metadata.version('jax')} is installed)"
    ), info.value


def test_courses_of_dead_worker_processes_are_swept(tmp_path: Path) -> None:
    """A course is swept when no process holds its lock (its worker died, even by SIGKILL, even
    in another PID namespace), or when it is old and never got one; never while it is held."""
    dead, mine, fresh, stale = (tmp_path / f"course-{n}" for n in ("dead", "mine", "fresh", "stale"))
    for folder in (dead, mine, fresh, stale):
        (folder / "reference").mkdir(parents=True)
    code = "import sys; from pathlib import Path; from grader.batch import cluster; cluster._lock(Path(sys.argv[1]))"
    subprocess.run([sys.executable, "-c", code, str(dead)], check=True, cwd=Path(__file__).resolve().parents[2])
    held = _lock(mine)  # this process: alive
    os.utime(stale, (time.time() - 3600, time.time() - 3600))
    _sweep(tmp_path)
    assert not dead.exists() and not stale.exists()
    assert mine.is_dir() and fresh.is_dir()
    os.close(held)


def test_the_notebook_of_a_worker_killed_mid_task_is_removed_by_the_next_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker keeps the notebook it grades in a private folder, removed after the task; one
    killed mid-task (SIGKILL: no cleanup runs) leaves it, and the next task on the machine removes
    it. A folder in use by a live process is never removed."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # what _private_dir() is under
    code = (
        "import os, signal, sys\n"
        "from grader.batch import cluster\n"
        "with cluster._submission_folder() as folder:\n"
        "    (folder / 'submission.ipynb').write_text('a student notebook')\n"
        "    print(folder, flush=True)\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2]
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    left = Path(done.stdout.strip())
    assert left.parent == _private_dir() and (left / "submission.ipynb").is_file()
    assert stat.S_IMODE(left.stat().st_mode) == 0o700
    with _submission_folder() as mine:
        assert not left.exists(), "the killed worker's notebook was not removed"
        assert [p.name for p in mine.iterdir()] == [LOCK]  # locked under another name, then renamed
        with _submission_folder() as other:  # another task of this process (a thread) meanwhile
            assert mine.is_dir() and other != mine
        assert mine.is_dir()
    assert not mine.exists() and not other.exists()
    assert not list(_private_dir().glob("nb-*"))


def _pretend_no_bwrap(missing: bool) -> None:
    import grader.batch.cluster
    from grader.host.sandbox import choose_isolation

    def refuse(requested: str) -> str:
        raise RuntimeError(f"--isolation {requested} was requested but bwrap is not installed")

    grader.batch.cluster.choose_isolation = refuse if missing else choose_isolation


def test_a_worker_without_bubblewrap_refuses(cluster: distributed.LocalCluster, course: Path, tmp_path: Path) -> None:
    folder = make_class(tmp_path / "class", {"s0": notebook("full")})
    with distributed.Client(cluster, set_as_default=False) as client:
        client.run(_pretend_no_bwrap, True)
        try:
            code, err = grade(course, tmp_path / "out", folder, "--scheduler", cluster.scheduler_address)
        finally:
            client.run(_pretend_no_bwrap, False)
    assert code == 1, err
    assert "cannot sandbox with bubblewrap: --isolation bwrap was requested but bwrap is not installed" in err, err
    assert "TIP: Install bubblewrap on the workers" in err and "or pass --isolation process" in err, err


def _unpack_inside_the_user_site(home: str | None, tmp: str | None) -> None:
    """On a worker: HOME for the grading children it starts (their user site-packages, which every
    sandbox mounts) and the folder it unpacks courses into (``None``: unset, the default)."""
    import tempfile

    _set_worker_env("HOME", home)
    tempfile.tempdir = tmp


def test_a_worker_that_cannot_sandbox_anyone_stops_the_batch_with_what_to_do(
    cluster: distributed.LocalCluster, tmp_path: Path
) -> None:
    """A sandbox that a worker cannot build is that machine's problem, not a submission's: as on
    a local pool (tests/batch/test_pool.py), the batch stops with the reason, the worker named,
    and what to do (exit 2), and keeps nothing. Here the worker unpacks the course inside its
    grading children's user site-packages, which every sandbox mounts, so reference/ would be
    exposed: the child's SandboxSetupError comes back as the task's reply and is raised again
    in the task (grader.batch.cluster.grade_task), then in the coordinator."""
    course = make_minicourse(tmp_path / "course")
    hidden = course / "reference" / "double" / "tests" / "test_hidden.py"
    hidden.write_text(hidden.read_text() + "\n# a course version of its own: the workers unpack it afresh\n")
    from tests.batch.test_pool import user_site

    home = tmp_path / "home"
    site_packages = user_site(home)
    site_packages.mkdir(parents=True)
    folder = make_class(tmp_path / "class", {name: notebook("full", name) for name in ("a", "b", "c")})
    with distributed.Client(cluster, set_as_default=False) as client:
        saved = client.run(lambda: (os.environ.get("HOME"), tempfile.tempdir))
        client.run(_unpack_inside_the_user_site, str(home), str(site_packages))
        try:
            code, err = grade(course, tmp_path / "out", folder, "--scheduler", cluster.scheduler_address)
        finally:
            for address, (old_home, old_tmp) in saved.items():
                client.run(_unpack_inside_the_user_site, old_home, old_tmp, workers=[address])
    assert code == 2, err
    assert "on worker tcp://127.0.0.1:" in err and "the sandbox would expose" in err, err
    assert 'See the README\'s section "The sandbox"' in err, err
    assert "bug in jaxgrade" not in err and "grader_error" not in err, err
    with Gradebook(tmp_path / "out" / "gradebook.db") as gb:
        assert gb.records("double") == []


def _set_worker_env(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def test_a_worker_whose_fast_compile_setting_names_no_flag_refuses(
    cluster: distributed.LocalCluster, course: Path, tmp_path: Path
) -> None:
    """The coordinator checks its own environment before it starts; a worker's is its own, and a
    bad setting there is named with the worker, not a traceback or a class of lost results."""
    folder = make_class(tmp_path / "class", {"s0": notebook("full")})
    with distributed.Client(cluster, set_as_default=False) as client:
        client.run(_set_worker_env, "JAXGRADE_FAST_COMPILE", "O0")
        try:
            code, err = grade(course, tmp_path / "out", folder, "--scheduler", cluster.scheduler_address)
        finally:
            client.run(_set_worker_env, "JAXGRADE_FAST_COMPILE", None)
    assert code == 1, err
    assert "refuses to grade: JAXGRADE_FAST_COMPILE='O0' names o0: it takes 0" in err, err
    assert "TIP: Set it on the workers as on this machine, or unset it there" in err, err
    assert "Traceback" not in err, err


class _Answered:
    """What a finished future gives back (a value, or the exception Dask raises)."""

    def __init__(self, value: object = None, exc: Exception | None = None) -> None:
        self.value, self.exc = value, exc

    def result(self) -> object:
        if self.exc is not None:
            raise self.exc
        return self.value


def test_a_result_is_checked_and_a_killed_worker_gives_a_lost_record(tmp_path: Path) -> None:
    assignment = load_course(make_minicourse(tmp_path / "c")).assignment("double")
    path = tmp_path / "s0.ipynb"
    path.write_text(notebook("full"))
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    killed = distributed.KilledWorker("jaxgrade-double-s0", SimpleNamespace(address="tcp://10.0.0.9:4000"), 3)
    rec = _received(assignment, path, "s0", sha, _Answered(exc=killed))
    assert (rec.status, rec.student, rec.submission_sha256) == ("lost", "s0", sha)
    assert "every Dask worker that graded this notebook died" in rec.message and "tcp://10.0.0.9:4000" in rec.message

    other = Record(assignment="double", student="s1", submission_sha256=sha, status="graded", score=4.0).to_dict()
    with pytest.raises(ClusterError, match=r"sent back s1's result for double \(sha256 \w+\) when asked for s0's"):
        _received(assignment, path, "s0", sha, _Answered({"record": other, "worker": "tcp://10.0.0.9:4000"}))
    with pytest.raises(ClusterError, match="something that is not a result record"):
        _received(assignment, path, "s0", sha, _Answered({"record": {"assignment": "double"}}))
    with pytest.raises(ClusterError, match="stopped grading s0: this batch's stop event was set while it ran"):
        _received(assignment, path, "s0", sha, _Answered({"stopped": True, "worker": "tcp://10.0.0.9:4000"}))
    mine = dict(other, student="s0", source="/tmp/jaxgrade-nb-x/submission.ipynb")
    assert _received(assignment, path, "s0", sha, _Answered({"record": mine})).source == str(path)


def test_a_grader_bug_on_a_worker_costs_only_that_submission(tmp_path: Path) -> None:
    """The worker's grading child raises (here: a course folder that is not there): the reply
    carries the traceback, and the coordinator makes it a grader_error record, as a local run
    does (never kept; the batch goes on) instead of stopping the class."""
    assignment = load_course(make_minicourse(tmp_path / "c")).assignment("double")
    path = tmp_path / "s0.ipynb"
    path.write_text(notebook("full"))
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    args = ["grade", str(tmp_path / "gone"), "double", str(path), "s0", "process", False, None]
    result = _in_child(1, args, trusted_cache=False)
    assert isinstance(result, Raised) and "ConfigError" in result.traceback, result
    rec = _received(assignment, path, "s0", sha, _Answered({"raised": result.traceback}))
    assert (rec.status, rec.student, rec.submission_sha256) == ("grader_error", "s0", sha)
    assert "a bug in the grader" in rec.message and "ConfigError" in rec.message


def test_a_workers_grading_child_has_the_trusted_limits_of_a_local_pool(tmp_path: Path) -> None:
    """As a local pool's workers (tests/batch/test_pool.py): a task that makes the child grow
    past its memory limit ends it and is tried once more, then lost with the limit named; a task
    past its deadline is killed, once, and lost with the deadline named; the child after either
    grades the next notebook."""
    from tests.batch.test_pool import GREEDY_SOURCE, GREEDY_TEST

    root = make_minicourse(tmp_path / "c")
    hidden = root / "reference" / "double" / "tests" / "test_hidden.py"
    hidden.write_text(hidden.read_text() + GREEDY_TEST)
    assignment = load_course(root).assignment("double")
    memory, _ = trusted_limits(assignment)
    greedy, slow, full = tmp_path / "greedy.ipynb", tmp_path / "slow.ipynb", tmp_path / "full.ipynb"
    greedy.write_text(build_notebook(GREEDY_SOURCE))
    slow.write_text(SLOW)
    full.write_text(notebook("full"))

    def args(path: Path) -> list[object]:
        return ["grade", str(root), "double", str(path), path.stem, "process", False, None]

    lost = _in_child(1, args(greedy), trusted_cache=False, limits=(memory, 600.0))
    assert isinstance(lost, Lost) and lost.attempts == 2
    assert lost.cause == f"it ran past its {memory_in_words(memory)} memory limit"
    started = time.monotonic()
    lost = _in_child(1, args(slow), trusted_cache=False, limits=(memory, 2.0))
    assert isinstance(lost, Lost) and lost == Lost(1, -signal.SIGKILL, "its 2 s time limit"), lost
    assert time.monotonic() - started < 60
    rec = _received(assignment, slow, "slow", "", _Answered({"lost": dataclasses.asdict(lost)}))
    assert rec.status == "lost" and "ran past its 2 s time limit" in rec.message
    record = _in_child(1, args(full), trusted_cache=False, limits=(memory, 600.0))
    assert (record["status"], record["score"]) == ("graded", 5.0)


def test_a_grading_child_stopped_with_the_batch_is_swept_after(monkeypatch: pytest.MonkeyPatch) -> None:
    """A child stopped mid-notebook (the batch stopped) may have been killed past its grace,
    its sandboxes' scratch and cgroups left: they are swept then, as after a lost child, not at
    the worker's next start. A stop before anything was sent keeps the child and sweeps nothing."""
    from grader.batch import cluster

    swept: list[int] = []
    monkeypatch.setattr(cluster, "sweep_after_lost_grader", lambda: swept.append(1))
    for sent in (False, True):

        class Stopping:
            def __init__(self, *args: object) -> None:
                pass

            def call(self, *args: object, _sent: bool = sent) -> None:
                raise cluster._Stopped(sent=_sent)

        monkeypatch.setattr(cluster, "_Child", Stopping)
        cluster._THREAD.__dict__.pop("children", None)
        with pytest.raises(cluster._Stopped):
            _in_child(1, ["grade"], trusted_cache=False, stopped=lambda: True)
        assert len(swept) == int(sent) and bool(cluster._THREAD.children) != sent
    cluster._THREAD.__dict__.pop("children", None)


def test_a_workers_grading_child_keeps_its_compilations_only_when_told(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A Dask worker's grading child (``_in_child``) with ``trusted_cache`` keeps what it
    compiles (here: vmap_convolve's reference on the hidden inputs) in <root>/trusted, as the
    local pool's workers do; one without it keeps nothing, and the two are different children."""
    from grader.batch import cluster as cluster_mod
    from grader.host import xla_cache
    from grader.host.sandbox import choose_isolation

    if choose_isolation("auto") != "bwrap":
        pytest.skip("the kept compilations go with bubblewrap sandboxes")
    repo = Path(grader.__file__).resolve().parents[1]
    notebook_path = tmp_path / "alice.ipynb"
    notebook_path.write_bytes((repo / "examples" / "class" / "alice.ipynb").read_bytes())
    children = cluster_mod._THREAD.__dict__.setdefault("children", {})
    for keep in (False, True):
        monkeypatch.setenv("JAXGRADE_CACHE_DIR", str(tmp_path / f"cache-{keep}"))  # the child's environment
        args = ["grade", str(repo), "vmap_convolve", str(notebook_path), "alice", "bwrap", False, None]
        try:
            record = _in_child(1, args, trusted_cache=keep)
        finally:
            child = children.pop((1, keep), None)
            if child is not None:
                child.proc.kill()
                child.proc.wait()
        assert record["status"] == "graded" and record["score"] == record["max_score"], record
        kept = tmp_path / f"cache-{keep}" / "trusted" / xla_cache._host_key()
        assert (kept.is_dir() and any(p.name.endswith("-cache") for p in kept.iterdir())) == keep


def test_a_task_stops_asking_for_the_stop_only_after_failures_in_a_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """A slow scheduler (one ask timed out) does not turn the stop off for the rest of the task:
    only STOP_ASK_FAILURES failures in a row do; an answer other than True is no stop."""
    from grader.batch import cluster

    answers: list[object] = [TimeoutError(), TimeoutError(), False, TimeoutError(), True]
    asked: list[str] = []

    class Client:
        scheduler = SimpleNamespace(event_is_set="event_is_set")

        def sync(self, func: object, *, name: str, callback_timeout: float) -> object:
            asked.append(name)
            answer = answers.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return answer

    monkeypatch.setattr(cluster.distributed, "get_client", lambda timeout: Client())
    stopped = cluster._stop_event("jaxgrade-stop-x")
    assert stopped is not None
    assert [stopped() for _ in range(5)] == [False, False, False, False, True]
    assert len(asked) == 5

    answers[:] = [TimeoutError()] * cluster.STOP_ASK_FAILURES + [True]
    asked.clear()
    stopped = cluster._stop_event("jaxgrade-stop-y")
    assert stopped is not None
    assert [stopped() for _ in range(cluster.STOP_ASK_FAILURES + 2)] == [False] * (cluster.STOP_ASK_FAILURES + 2)
    assert len(asked) == cluster.STOP_ASK_FAILURES  # it stopped asking
    assert cluster._stop_event(None) is None


def test_a_task_stops_only_when_the_scheduler_no_longer_wants_its_result(monkeypatch: pytest.MonkeyPatch) -> None:
    """Besides the event, a task asks for its own key's state: released or forgotten (its
    coordinator dropped or cancelled it) stops it; processing, or an answer it cannot read,
    grades on."""
    from grader.batch import cluster

    state: list[object] = []

    class Client:
        scheduler = SimpleNamespace(event_is_set="event_is_set", get_task_status="get_task_status")

        def sync(self, func: str, *, callback_timeout: float, **kwargs: object) -> object:
            if func == "event_is_set":
                return False
            assert kwargs == {"keys": ["jaxgrade-double-s0-1"]}
            return state[0]

    monkeypatch.setattr(cluster.distributed, "get_client", lambda timeout: Client())
    monkeypatch.setattr(
        cluster.distributed, "get_worker", lambda: SimpleNamespace(get_current_task=lambda: "jaxgrade-double-s0-1")
    )
    stopped = cluster._stop_event("jaxgrade-stop-z")
    assert stopped is not None
    for answer, stops in [
        ({"jaxgrade-double-s0-1": "processing"}, False),
        *[({"jaxgrade-double-s0-1": other}, False) for other in ("waiting", "queued", "no-worker", "memory", "erred")],
        ({"jaxgrade-double-s0-1": "released"}, True),
        ({"jaxgrade-double-s0-1": "forgotten"}, True),
        ({"jaxgrade-double-s0-1": None}, True),  # the scheduler has forgotten the key
        ({}, False),  # not an answer about this key
        (None, False),
    ]:
        state[:] = [answer]
        assert stopped() is stops, answer


def test_a_grading_child_imports_nothing_from_the_dask_workers_current_folder(tmp_path: Path, monkeypatch) -> None:
    """`python -m` puts the current folder first on the child's path: a ``yaml`` planted in the
    folder the Dask worker runs in (which grader imports) would run in the trusted child, as root.
    The child starts with PYTHONSAFEPATH (it failed on the code before: the child died)."""
    planted, marker = tmp_path / "folder", tmp_path / "PLANTED"
    (planted / "yaml").mkdir(parents=True)
    (planted / "yaml" / "__init__.py").write_text(
        f"open({str(marker)!r}, 'a').write('yaml')\nraise ImportError('planted')\n", encoding="utf-8"
    )
    monkeypatch.chdir(planted)
    child = _Child(1, False)
    try:
        got = child.call(["no such task"])
    finally:
        child.close()
    assert isinstance(got, Raised) and "unknown trusted task" in got.traceback, got
    assert not marker.exists()
