"""grader/batch/pool.py: a trusted worker lost mid-task costs only that task, and the batch goes on.

The unit tests kill workers from inside their task (SIGKILL, as the OOM killer sends it).  The
batch tests kill the trusted grading process of a real `jaxgrade grade` run from outside, the
way the OOM killer or an operator would, and check the retry, the "lost" status, the exit code,
the gradebook and the rerun."""

from __future__ import annotations

import io
import json
import logging
import os
import resource
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from grader.batch.pool import Lost, Raised, TrustedPool
from grader.cli import main
from grader.grading import grade as grading
from tests.conftest import build_notebook
from tests.minicourse import make_minicourse, notebook, procs_with

# ----------------------------------------------------------------------------- unit: the pool


def double(x: int) -> int:
    return 2 * x


def die_once(marker: str, x: int) -> int:
    """Killed the first time it runs for ``x`` (a marker file remembers), then answers."""
    path = Path(marker) / str(x)
    if not path.exists():
        path.write_text("died")
        os.kill(os.getpid(), signal.SIGKILL)
    return 2 * x


def die_on_three(x: int) -> int:
    if x == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    return 2 * x


def exit_on_three(x: int) -> int:
    if x == 3:
        os._exit(7)
    return 2 * x


def raise_on_three(x: int) -> int:
    if x == 3:
        raise ValueError("a grader bug")
    return 2 * x


def tasks(n: int) -> list[tuple[int, tuple[int]]]:
    return [(i, (i,)) for i in range(n)]


def test_after_each_lost_worker_on_death_is_called_beside_the_batch_and_awaited_at_its_end() -> None:
    """What a lost worker left (its sandboxes' scratch and cgroups) is swept once it is gone, in
    a thread of its own, so that a slow sweep keeps no other worker's result waiting, and before
    the pool is closed.  Here each sweep waits until the batch has handed out every other
    result: a sweep run in the batch's own loop would wait in vain."""
    import threading

    others = threading.Event()  # every result but the lost task's has been handed out
    waited: list[tuple[str, bool]] = []
    finished: list[str] = []

    def on_death() -> None:
        waited.append((threading.current_thread().name, others.wait(timeout=20)))
        time.sleep(1)
        finished.append("swept")

    got = {}
    with TrustedPool(2, on_death=on_death) as pool:
        for key, result in pool.run(die_on_three, tasks(6)):
            got[key] = result
            if {0, 1, 2, 4, 5} <= set(got):
                others.set()
    assert finished == ["swept", "swept"]  # closing waited for both
    assert waited == [("jaxgrade-sweep", True), ("jaxgrade-sweep", True)]  # two tries, two deaths
    assert isinstance(got.pop(3), Lost) and got == {i: 2 * i for i in range(6) if i != 3}


def test_results_come_back_for_every_task() -> None:
    with TrustedPool(2) as pool:
        assert dict(pool.run(double, tasks(6))) == {i: 2 * i for i in range(6)}
        assert dict(pool.run(double, tasks(3))) == {i: 2 * i for i in range(3)}  # the same workers again
        assert pool.started == 2 and len(pool.pids()) == 2
    assert pool.pids() == []  # closed with the block


def test_a_worker_killed_once_is_replaced_and_its_task_graded_again(tmp_path: Path) -> None:
    with TrustedPool(2) as pool:
        got = dict(pool.run(die_once, [(i, (str(tmp_path), i)) for i in range(4)]))
    assert got == {i: 2 * i for i in range(4)}  # every task answered, each after one loss
    # a fresh process replaces a lost one when a task waits for it; the last retries may go to a
    # worker that is already idle instead
    assert 2 + 1 <= pool.started <= 2 + 4


def test_a_task_lost_twice_is_reported_and_the_others_go_on() -> None:
    with TrustedPool(2) as pool:
        got = dict(pool.run(die_on_three, tasks(6)))
    assert {k: v for k, v in got.items() if k != 3} == {i: 2 * i for i in range(6) if i != 3}
    lost = got[3]
    assert isinstance(lost, Lost) and lost.attempts == 2 and lost.exitcode == -signal.SIGKILL
    assert "killed by SIGKILL" in lost.cause and "out-of-memory killer" in lost.cause


def test_an_exit_is_a_loss_too_and_the_attempts_are_configurable() -> None:
    with TrustedPool(1, attempts=3) as pool:
        got = dict(pool.run(exit_on_three, tasks(5)))
    assert got[3] == Lost(3, 7) and got[3].cause == "exit code 7"
    assert got[4] == 8 and pool.started == 1 + 3


def test_a_task_that_raises_costs_only_that_task() -> None:
    """A grader bug in one task is reported with its traceback; the others go on, in the same
    (still healthy) workers, and it is not tried again."""
    with TrustedPool(2) as pool:
        got = dict(pool.run(raise_on_three, tasks(6)))
    bug = got.pop(3)
    assert isinstance(bug, Raised) and bug.last_line == "ValueError: a grader bug"
    assert "raise_on_three" in bug.traceback
    assert got == {i: 2 * i for i in range(6) if i != 3} and pool.started == 2


def hog_on_three(x: int) -> int:
    """Asks for 2 GiB on task 3 (more than the workers' limit in the test below)."""
    if x == 3:
        block = bytearray(2 * 1024**3)
        return len(block)
    return 2 * x


def test_a_task_past_the_workers_memory_limit_is_a_loss_and_the_others_go_on() -> None:
    """The workers are protected from the OOM killer: a task that grew without bound would have
    everything else on the machine killed first.  Under the pool's address-space limit it gets
    a MemoryError instead, which ends its worker; it is tried once more in a fresh one (it may
    have been the worker's own state), then reported with the limit it ran past."""
    with TrustedPool(2, memory_bytes=1536 * 1024**2) as pool:
        got = dict(pool.run(hog_on_three, tasks(6)))
        lost = got.pop(3)
        assert got == {i: 2 * i for i in range(6) if i != 3}
        assert isinstance(lost, Lost) and lost.attempts == 2
        assert lost.cause == "it ran past its 1.5 GiB memory limit"
        assert 2 + 1 <= pool.started <= 2 + 2  # each MemoryError ended its worker (the retry may go to an idle one)
        # the limit is soft: what a worker starts (a sandbox) may set its own
        limits = set(dict(pool.run(address_space_limit, tasks(4))).values())
        assert limits == {(1536 * 1024**2, resource.RLIM_INFINITY)}


def address_space_limit(x: int) -> tuple[int, int]:
    return resource.getrlimit(resource.RLIMIT_AS)


JAX_OUT_OF_MEMORY = """
import re, resource
import jax, jax.numpy as jnp
from grader.host.memory import is_out_of_memory
from grader.errors import StudentRaised
jax.jit(lambda a: a + 1)(jnp.ones(3)).block_until_ready()
held = int(re.search(r"VmSize:\\s+(\\d+)", open("/proc/self/status").read()).group(1)) * 1024
resource.setrlimit(resource.RLIMIT_AS, (held + 2**30, resource.RLIM_INFINITY))
try:
    jax.jit(lambda x: jnp.broadcast_to(x, (2**29,)) + 1)(jnp.ones(1)).block_until_ready()
except Exception as exc:
    print(type(exc).__name__, is_out_of_memory(exc), str(exc)[:18])
print(is_out_of_memory(StudentRaised("double", "MemoryError", "RESOURCE_EXHAUSTED: theirs", None)))
"""


def test_jaxs_own_out_of_memory_error_is_running_out_of_memory_and_a_students_is_not() -> None:
    """Under the limit, JAX's allocations fail with its own RuntimeError, not a MemoryError: a
    test that hit it must not be scored as failed (is_out_of_memory); a student's MemoryError
    reaches the trusted process as StudentRaised, never as one of ours."""
    out = subprocess.run([sys.executable, "-c", JAX_OUT_OF_MEMORY], capture_output=True, text=True, timeout=120)
    assert out.stdout.split("\n")[:2] == ["JaxRuntimeError True RESOURCE_EXHAUSTED", "False"], out.stderr


def test_running_out_of_memory_without_a_limit_of_ours_is_a_grader_error_not_a_crash(
    tmp_path: Path, course: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """grade_one lets running out of memory through only under the grader's own limit (which
    makes it a loss); elsewhere (`jaxgrade check --watch`, a check server) it is a grader_error
    record, as any bug of ours, and the loop goes on."""
    from grader.course.config import load_course

    assignment = load_course(course).assignment("double")
    path = tmp_path / "s.ipynb"
    path.write_text(notebook("full"))

    def out_of_memory(*args: object, **kwargs: object) -> None:
        raise MemoryError

    monkeypatch.setattr(grading, "grade_notebook", out_of_memory)
    assert grading.grade_one(assignment, path).status == "grader_error"
    with pytest.raises(MemoryError), grading.memory_limit(64 * 1024**3):
        grading.grade_one(assignment, path)
    assert grading.grade_one(assignment, path).status == "grader_error"  # the limit is gone with the block


def sleep_on_three(x: int) -> int:
    if x == 3:
        time.sleep(600)
    return 2 * x


def test_a_task_past_its_deadline_is_killed_and_not_tried_again() -> None:
    """A task that never ends (a grader bug, a submission that attacks the grader) would hold
    the batch: past its deadline its worker is killed and it is reported, once; the rest go on."""
    start = time.monotonic()
    with TrustedPool(2) as pool:
        got = dict(pool.run(sleep_on_three, tasks(6), deadline=lambda key: 3.0 if key == 3 else None))
        lost = got.pop(3)
        assert got == {i: 2 * i for i in range(6) if i != 3}
        assert lost == Lost(1, -signal.SIGKILL, "its 3 s time limit")
        assert lost.cause == "it ran past its 3 s time limit"
        assert pool.started == 2 + (1 if len(pool.pids()) == 2 else 0)
    assert time.monotonic() - start < 300  # not the task's 600 s


def test_closing_the_run_early_kills_the_workers() -> None:
    pool = TrustedPool(2)
    run = pool.run(double, tasks(10))
    next(run)
    pids = pool.pids()
    assert pids
    run.close()  # what an exception in the caller's loop (Ctrl-C, a full disk) does
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()


def sleep_then_double(x: int) -> int:
    time.sleep(60)
    return 2 * x


def test_a_stop_asked_of_the_process_ends_the_wait_and_kills_the_workers() -> None:
    """A stop asked while the tasks run (a Ctrl-C whose KeyboardInterrupt a gc callback dropped:
    grader/host/interrupts.py) ends the wait for results as the Ctrl-C would have, not at the
    next result (60 s away here), and every worker is killed."""
    import threading

    from grader.host import interrupts

    pool = TrustedPool(2)
    pids: list[int] = []

    def ask() -> None:
        pids.extend(pool.pids())  # the workers, busy with their tasks
        interrupts.request()

    timer = threading.Timer(2.0, ask)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            for _ in pool.run(sleep_then_double, tasks(2)):
                pass
    finally:
        timer.cancel()
        interrupts.clear()
    assert len(pids) == 2
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError):
        TrustedPool(0)


# ----------------------------------------------------------------------------- a real batch

SLEEPY = "import time\ntime.sleep(12)\ndef double(x):\n    return 2 * x"


def trusted_workers(tag: str) -> list[int]:
    """The batch's trusted grading processes (pool workers, spawned or forked from the fork
    server) that have started a sandbox: not the fork server, whose children are the workers, and
    not counting a worker's evaluator zygote (grader/host/zygote.py), which outlives its sandboxes."""
    out = []
    for pid in procs_with(tag):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            kinds = [Path(f"/proc/{c}/cmdline").read_bytes() for c in children]
            sandboxes = [k for k in kinds if b"multiprocessing" not in k and b"grader/host/zygote.py" not in k]
        except OSError:
            continue
        if b"multiprocessing" in cmdline and sandboxes:
            out.append(pid)
    return out


def start_grade(tmp: Path, course: Path, folder: Path, tag: str) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "grader", "--course", str(course), "grade", "--assignment", "double"]
    # without the compilation cache's warm task, whose worker kill_busy_worker could pick instead
    cmd += ["--out", str(tmp / "out"), "--jobs", "2", "--no-cache", str(folder)]
    env = {**os.environ, "JAXGRADE_TEST_TAG": tag}
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def kill_busy_worker(proc: subprocess.Popen[str], tag: str, seen: set[int]) -> int:
    """SIGKILL a trusted worker that is grading (not one killed before), as the OOM killer would."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        busy = [p for p in trusted_workers(tag) if p not in seen]
        if busy:
            time.sleep(1.0)  # inside the notebook's sleep
            os.kill(busy[0], signal.SIGKILL)
            seen.add(busy[0])
            return busy[0]
        time.sleep(0.2)
    raise AssertionError("no trusted worker was seen grading")


def left_by(pids: set[int]) -> list[str]:
    """The scratch tmpfs mounts and sandbox cgroups of these (dead) grading processes still there."""
    from grader.host import cgroups
    from grader.host.sandbox import SCRATCH_SOURCE

    def made_by_them(owner: str) -> bool:  # cgroups.owner_tag: "PID.START.PIDNS"
        return owner.split(".")[0] in {str(p) for p in pids}

    found = [
        fields[1]
        for line in Path("/proc/self/mounts").read_text().splitlines()
        if (fields := line.split())[0].startswith(SCRATCH_SOURCE) and made_by_them(fields[0][len(SCRATCH_SOURCE) :])
    ]
    hier, _ = cgroups.host_hierarchy()
    for parent in hier.parents.values() if hier is not None else []:
        found += [str(d) for d in parent.glob("sbx-*") if made_by_them(d.name.split("-")[1])]
    return found


def results(out: Path) -> dict[str, dict]:
    return {
        (rec := json.loads(f.read_text(encoding="utf-8")))["student"]: rec for f in (out / "results").glob("*.json")
    }


def gradebook_students(out: Path) -> list[str]:
    with sqlite3.connect(out / "gradebook.db") as db:
        return sorted(r[0] for r in db.execute("SELECT student FROM results"))


@pytest.fixture
def course(tmp_path: Path) -> Path:
    return make_minicourse(tmp_path / "course", "{cell_timeout: 60, call_timeout: 20, wall_timeout: 300}")


@pytest.mark.slow
def test_a_trusted_process_killed_mid_batch_costs_nothing(tmp_path: Path, course: Path) -> None:
    """The worker grading one submission is killed; that submission is graded again in a fresh
    process, and every student gets what they get alone."""
    folder = tmp_path / "class"
    folder.mkdir()
    (folder / "sleepy.ipynb").write_text(notebook("full").replace("def double(x):", SLEEPY.replace("\n", "\\n")))
    (folder / "full.ipynb").write_text(notebook("full"))
    (folder / "half.ipynb").write_text(notebook("half"))
    tag = uuid.uuid4().hex
    proc = start_grade(tmp_path, course, folder, tag)
    killed: set[int] = set()
    kill_busy_worker(proc, tag, killed)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    # what its sandbox left (a scratch tmpfs, cgroups) is swept at once, not at the next run
    assert not left_by(killed)
    recs = results(tmp_path / "out")
    assert {k: (r["status"], r["score"]) for k, r in recs.items()} == {
        "sleepy": ("graded", 4.0),
        "full": ("graded", 4.0),
        "half": ("graded", recs["half"]["score"]),
    }
    assert recs["half"]["score"] < 4
    assert "was lost" in err and "grading it again" in err
    assert gradebook_students(tmp_path / "out") == ["full", "half", "sleepy"]
    assert not procs_with(tag)


@pytest.mark.slow
def test_a_submission_whose_trusted_process_is_lost_twice_is_not_kept_and_the_rerun_grades_it(
    tmp_path: Path, course: Path
) -> None:
    folder = tmp_path / "class"
    folder.mkdir()
    (folder / "sleepy.ipynb").write_text(notebook("full").replace("def double(x):", SLEEPY.replace("\n", "\\n")))
    tag = uuid.uuid4().hex
    proc = start_grade(tmp_path, course, folder, tag)
    seen: set[int] = set()
    kill_busy_worker(proc, tag, seen)
    kill_busy_worker(proc, tag, seen)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 1, err
    assert not left_by(seen)
    assert "1 submission(s) not graded: the grader's own process was lost while grading them (sleepy)" in err
    assert "TIP: Run the same command again: it grades only these." in err
    assert "lost 1" in err  # the progress counts
    assert results(tmp_path / "out") == {} and gradebook_students(tmp_path / "out") == []
    rerun = start_grade(tmp_path, course, folder, uuid.uuid4().hex)
    _, err = rerun.communicate(timeout=600)
    assert rerun.returncode == 0, err
    assert results(tmp_path / "out")["sleepy"]["score"] == 4.0


# ----------------------------------------------------------------------------- a grader bug, a repeated loss


def raise_for_buggy(kind: str, *args: object) -> object:
    """The pool task, raising for the student "buggy" as a grader bug would (a module-level
    function: the spawned workers import it by name)."""
    if kind == "grade" and args[3] == "buggy":
        raise KeyError("a grader bug")
    return grading.TASKS[kind](*args)


def grade_cli(course: Path, folder: Path, out: Path, *more: str) -> tuple[int, str]:
    err = io.StringIO()
    argv = ["--course", str(course), "grade", "--assignment", "double", "--out", str(out), "--no-cache", *more]
    return main([*argv, str(folder)], out=io.StringIO(), err=err), err.getvalue()


@pytest.mark.parametrize("jobs", ["1", "2"])  # a pool of one worker, or of two (grade_one's own: test_grading)
def test_a_grader_bug_in_one_submission_is_reported_and_the_batch_goes_on(
    tmp_path: Path, course: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, jobs: str
) -> None:
    folder = tmp_path / "class"
    folder.mkdir()
    (folder / "buggy.ipynb").write_text(notebook("full", "b"))
    (folder / "full.ipynb").write_text(notebook("full"))
    monkeypatch.setattr(grading, "_task", raise_for_buggy)  # the pool sends it to spawned workers by name
    with caplog.at_level(logging.ERROR, logger="grader.grading"):
        code, err = grade_cli(course, folder, tmp_path / "out", "--jobs", jobs)
    assert code == 1, err
    assert "1 submission(s) not graded: grading them raised, a bug in jaxgrade (buggy)" in err
    assert "TIP: The traceback is in the log above." in err
    assert "buggy: 0/0 grader_error" in err and "KeyError: 'a grader bug'" in err  # the progress line
    assert "graded 1, errors 0, timeouts 0, grader bugs 1" in err  # the progress counts
    assert "raise_for_buggy" in caplog.text and "Traceback" in caplog.text  # the whole traceback, in the log
    assert {k: r["status"] for k, r in results(tmp_path / "out").items()} == {"full": "graded"}
    assert gradebook_students(tmp_path / "out") == ["full"]  # not kept: the next run grades it


def user_site(home: Path) -> Path:
    """The user site-packages of this Python for ``HOME=home`` (``site.getusersitepackages()``,
    which every sandbox mounts, as part of the Python installation)."""
    return home / ".local" / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_machine_that_cannot_sandbox_anyone_stops_the_batch_with_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jobs: str
) -> None:
    """A sandbox that cannot be built is the machine's problem, not a submission's: the batch
    stops with the reason and what to do (exit 2) and keeps nothing, as grading in the command's
    own process did. Here the course lies inside the user's site-packages, which every sandbox
    mounts, so its reference/ would be exposed. Session 30's first pool at one job (and every
    pool before it) made each submission a "bug in jaxgrade" instead, the class graded through."""
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))  # the spawned workers' site.getusersitepackages()
    monkeypatch.delenv("PYTHONUSERBASE", raising=False)
    course = make_minicourse(user_site(home) / "course")
    folder = tmp_path / "class"
    folder.mkdir()
    for name in ("a", "b", "c"):
        (folder / f"{name}.ipynb").write_text(notebook("full", name))
    code, err = grade_cli(course, folder, tmp_path / "out", "--jobs", jobs)
    assert code == 2, err
    assert "the sandbox would expose" in err and 'See the README\'s section "The sandbox"' in err, err
    assert "bug in jaxgrade" not in err and "grader_error" not in err
    assert gradebook_students(tmp_path / "out") == []


#: A hidden test that a submission can make the trusted process ask for 12 GiB (a stand-in for
#: a bug of the grader's that a notebook reaches: every known one is bounded).  np.empty touches
#: nothing, so without a limit it succeeds at no cost and the test passes.
GREEDY_TEST = '''

@pytest.mark.points(1)
@pytest.mark.category("numerics")
def test_double_of_seven(submission):
    """double(7.0) is 14.0."""
    if float(submission.double(np.float64(7.0))) == 7.0:
        np.empty(12 * 1024**3, np.uint8)
    assert float(submission.double(np.float64(7.0))) == 14.0
'''

GREEDY_SOURCE = "import numpy as np\ndef double(x):\n    x = np.asarray(x)\n    return x if x.shape == () and float(x) == 7.0 else 2 * x"


def class_with_a_trap(course: Path, tmp_path: Path, hidden_test: str, name: str) -> Path:
    """A class of two: ``name``, whose double(7.0) is 7.0 and so springs ``hidden_test`` (added to
    the hidden tests), and a full one."""
    hidden = course / "reference" / "double" / "tests" / "test_hidden.py"
    hidden.write_text(hidden.read_text() + hidden_test)
    folder = tmp_path / "class"
    folder.mkdir()
    (folder / f"{name}.ipynb").write_text(build_notebook(GREEDY_SOURCE))
    (folder / "full.ipynb").write_text(notebook("full"))
    return folder


@pytest.mark.parametrize("jobs", ["1", "2"])  # graded in this process (check's way), or by the pool
def test_a_notebook_that_makes_the_trusted_process_grow_past_its_limit_is_not_scored(
    tmp_path: Path, course: Path, jobs: str
) -> None:
    """The trusted process runs under an address-space limit (grade.trusted_limits): what a
    notebook makes it ask for past that is a MemoryError, which ends that submission's grading
    as not graded, with the limit named, and never a failed test (the student's points) or the
    machine's memory; the rest of the class is graded. At one job, grade_many grades in its
    caller's process (`jaxgrade check`, Gradescope's one notebook: `jaxgrade grade` grades in a
    pool worker at any number of jobs)."""
    folder = class_with_a_trap(course, tmp_path, GREEDY_TEST, "greedy")
    if jobs == "1":
        from grader.course.config import load_course

        assignment = load_course(course).assignment("double")
        got = grading.grade_many(assignment, sorted(folder.iterdir()), jobs=1, cache=False)
        by = {p.stem: (r.status, r.score) for p, r in got.items()}
        assert by == {"full": ("graded", 5.0), "greedy": ("lost", 0.0)}, by
        assert "memory limit" in got[folder / "greedy.ipynb"].message
        assert resource.getrlimit(resource.RLIMIT_AS)[0] == resource.RLIM_INFINITY  # this process's, set back
        return
    code, err = grade_cli(course, folder, tmp_path / "out", "--jobs", jobs)
    assert code == 1, err
    assert "1 submission(s) not graded: the grader's own process ran past its memory or time limit" in err
    assert "(greedy); nothing of theirs was kept" in err and "TIP: Read these notebooks before grading" in err
    assert "Run the same command again" not in err  # another try costs as much
    assert {k: (r["status"], r["score"]) for k, r in results(tmp_path / "out").items()} == {"full": ("graded", 5.0)}
    assert gradebook_students(tmp_path / "out") == ["full"]  # not kept
    assert resource.getrlimit(resource.RLIMIT_AS)[0] == resource.RLIM_INFINITY  # this process's, set back


#: A hidden test that a submission can make the trusted process sleep for minutes (a stand-in
#: for a bug of the grader's that a notebook reaches, by which the trusted side runs without end).
SLEEPY_TEST = """

@pytest.mark.points(1)
@pytest.mark.category("numerics")
def test_double_of_seven(submission):
    \"\"\"double(7.0) is 14.0.\"\"\"
    if float(submission.double(np.float64(7.0))) == 7.0:
        import time

        time.sleep(150)
    assert float(submission.double(np.float64(7.0))) == 14.0
"""


def test_at_one_job_a_notebook_that_holds_the_trusted_process_is_killed_past_its_deadline(
    tmp_path: Path, course: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`jaxgrade grade --jobs 1` grades in a trusted worker process too (grade_many's
    in_workers), so a notebook that makes the trusted side run on is killed past the deadline
    (grade.trusted_limits; 20 s here) and not kept, and the rest of the class is graded. Before
    session 30 one job graded in the command's own process, with no deadline: the batch waited
    as long as the notebook held it (here 150 s, then 4/5 for a wrong answer)."""
    folder = class_with_a_trap(course, tmp_path, SLEEPY_TEST, "sleepy")
    real = grading.trusted_limits
    monkeypatch.setattr(grading, "trusted_limits", lambda assignment: (real(assignment)[0], 20.0))
    start = time.monotonic()
    code, err = grade_cli(course, folder, tmp_path / "out", "--jobs", "1")
    assert code == 1, err
    assert "1 submission(s) not graded: the grader's own process ran past its memory or time limit" in err
    assert "(sleepy); nothing of theirs was kept" in err and "its 20 s time limit" in err
    assert {k: (r["status"], r["score"]) for k, r in results(tmp_path / "out").items()} == {"full": ("graded", 5.0)}
    assert gradebook_students(tmp_path / "out") == ["full"]  # not kept
    assert time.monotonic() - start < 150  # not the notebook's 150 s


def test_a_submission_lost_again_on_the_next_run_says_so(
    tmp_path: Path, course: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gradebook counts the runs that lost a submission: the second run's message and TIP
    say it is no one-off and how to grade it; once graded, the count is gone."""
    folder = tmp_path / "class"
    folder.mkdir()
    (folder / "sleepy.ipynb").write_text(notebook("full"))

    made = []  # the lost records, as the batch left them (they are written nowhere)

    def lose_everyone(assignment: object, paths: list[Path], *, on_result: object, **_: object) -> None:
        for p in paths:
            made.append(grading._lost_record(assignment, p, "sleepy", Lost(2, -9)))  # type: ignore[arg-type]
            on_result(p, made[-1])  # type: ignore[operator]

    monkeypatch.setattr("grader.batch.run.grade_many", lose_everyone)
    code, err = grade_cli(course, folder, tmp_path / "out")
    assert code == 1 and "TIP: Run the same command again" in err
    assert "lost 2 time(s)" in made[-1].message and "this is not the student's doing" in made[-1].message
    code, err = grade_cli(course, folder, tmp_path / "out")
    assert code == 1 and "TIP: sleepy were lost on earlier runs too: grade each alone (--jobs 1" in err
    assert "not the student's doing" not in made[-1].message and "on 2 runs in a row" in made[-1].message
    assert "lost 2 time(s)" in made[-1].message and "--jobs 1" in made[-1].message
    monkeypatch.undo()
    code, err = grade_cli(course, folder, tmp_path / "out")
    assert code == 0, err
    with sqlite3.connect(tmp_path / "out" / "gradebook.db") as db:
        assert db.execute("SELECT COUNT(*) FROM losses").fetchone() == (0,)
