"""The command line: exact messages for bad input, and check/grade/list on real notebooks."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from grader.cli import main

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "corpus" / "vmap_convolve"
REAL = ROOT / "tests" / "corpus" / "real" / "jax_basics_colab.ipynb"
FUNCTIONS = [
    "batched_convolve",
    "batched_convolve_shared_w",
    "batched_convolve_axis1",
    "fast_batched_convolve",
    "manually_vectorized_convolve",
]


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["--course", str(ROOT), *argv], out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def test_check_missing_file() -> None:
    code, _, err = run("check", "nope.ipynb")
    assert code == 2
    assert err == (
        "jaxgrade: error: nope.ipynb: no such file\n"
        "TIP: Pass the path of your notebook, e.g. `jaxgrade check hw.ipynb`.\n"
    )


def test_check_without_metadata_asks_for_assignment(tmp_path: Path) -> None:
    nb = tmp_path / "hw.ipynb"
    shutil.copy(REAL, nb)
    code, _, err = run("check", str(nb))
    assert code == 2
    assert err == (
        f"jaxgrade: error: {nb}: the notebook does not say which assignment it is (no 'jaxgrade' metadata)\n"
        "TIP: Pass it explicitly: `jaxgrade check NOTEBOOK --assignment NAME` (see `jaxgrade list`).\n"
    )


def test_check_not_a_notebook(tmp_path: Path) -> None:
    bad = tmp_path / "hw.ipynb"
    bad.write_text("this is not json {")
    code, _, err = run("check", str(bad))
    assert code == 2
    assert err.startswith(f"jaxgrade: error: {bad}: is not a notebook: invalid JSON at line 1, column 1")


def test_unknown_assignment_suggests(tmp_path: Path) -> None:
    code, _, err = run("grade", "--assignment", "vmap_convolv", "--out", str(tmp_path), str(tmp_path))
    assert code == 2
    assert "assignments.vmap_convolv: no such assignment; did you mean 'vmap_convolve'?" in err


def test_a_fast_compile_setting_naming_no_flag_stops_every_command_before_it_starts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("JAXGRADE_FAST_COMPILE", "O0")
    for argv in (["list"], ["grade", "--assignment", "vmap_convolve", "--out", str(tmp_path / "out"), str(tmp_path)]):
        code, _, err = run(*argv)
        assert code == 2 and "JAXGRADE_FAST_COMPILE='O0' names o0" in err and "TIP: Unset it" in err, err
    assert not (tmp_path / "out").exists()


def test_grade_missing_path(tmp_path: Path) -> None:
    code, _, err = run("grade", "--assignment", "vmap_convolve", "--out", str(tmp_path / "o"), str(tmp_path / "none"))
    assert code == 2
    assert err.endswith(
        f"jaxgrade: error: {tmp_path / 'none'}: no such file or directory\n"
        "TIP: Pass notebooks (.ipynb), folders of notebooks, or the zip your LMS gave you.\n"
    )
    assert not (tmp_path / "o").exists()  # nothing left behind by a run that graded nothing


def test_a_run_with_nothing_to_grade_leaves_no_output_folder(tmp_path: Path) -> None:
    """An ``--out`` made for a run that found no notebook is removed; one that was there stays."""
    empty = tmp_path / "class"
    (empty / "alice").mkdir(parents=True)
    (empty / "alice" / "report.pdf").write_bytes(b"%PDF-1.4")
    code, _, err = run("grade", "--assignment", "vmap_convolve", "--out", str(tmp_path / "o"), str(empty))
    assert code == 2 and "no submissions found" in err, err
    assert not (tmp_path / "o").exists()
    (tmp_path / "kept").mkdir()
    code, _, err = run("grade", "--assignment", "vmap_convolve", "--out", str(tmp_path / "kept"), str(empty))
    assert code == 2 and (tmp_path / "kept").is_dir()
    # a stop after the download was extracted (the metadata stop), into an --out two folders deep
    import zipfile

    with zipfile.ZipFile(tmp_path / "canvas.zip", "w") as z:
        for i in range(3):
            z.writestr(
                f"s{i}_{100 + i}_{200 + i}_vmap_convolve.ipynb", (ROOT / "examples/class/alice.ipynb").read_bytes()
            )
    deep = tmp_path / "new" / "deeper" / "o"
    code, _, err = run("grade", "--assignment", "pytrees", "--out", str(deep), str(tmp_path / "canvas.zip"))
    assert code == 2 and "vmap_convolve" in err, err
    assert not (tmp_path / "new").exists()


def test_grade_two_notebooks_for_one_student_grades_the_latest(tmp_path: Path) -> None:
    from tests.minicourse import make_minicourse, notebook

    course = make_minicourse(tmp_path / "course")
    for d, kind, mtime in (("a", "full", 2_000_000_000), ("b", "zero", 1_000_000_000)):
        (tmp_path / d).mkdir()
        (tmp_path / d / "alice.ipynb").write_text(notebook(kind))
        os.utime(tmp_path / d / "alice.ipynb", (mtime, mtime))
    out = tmp_path / "o"
    code, _, err = run(
        "--course",
        str(course),
        "grade",
        "--assignment",
        "double",
        "--out",
        str(out),
        str(tmp_path / "a"),
        str(tmp_path / "b"),
    )
    assert code == 0, err
    assert f"set aside 1 older: {tmp_path / 'b' / 'alice.ipynb'}" in err
    alice = json.loads((out / "results" / "alice.json").read_text())
    assert alice["score"] == 4.0
    assert "graded the latest of several notebooks" in alice["message"]


def test_list_shows_points_per_category() -> None:
    code, out, _ = run("list")
    assert code == 0
    line = next(ln for ln in out.splitlines() if ln.startswith("vmap_convolve"))
    assert "Vectorization with vmap" in line
    for cat in ("numerics", "jit", "vectorization", "purity"):
        assert cat in line


@pytest.mark.slow
def test_check_starter_names_every_missing_function() -> None:
    code, out, _ = run("check", str(ROOT / "assignments" / "vmap_convolve" / "vmap_convolve.ipynb"))
    assert code == 1
    missing = next(ln for ln in out.splitlines() if ln.strip().startswith("missing:"))
    for name in FUNCTIONS:
        assert name in missing
    for name in FUNCTIONS:
        assert f"`{name}` is not defined in the notebook" in out


@pytest.mark.slow
def test_check_correct_notebook_passes_and_json() -> None:
    code, out, _ = run("check", str(CORPUS / "correct_vmap.ipynb"), "--json")
    assert code == 0
    rec = json.loads(out)
    assert rec["status"] == "graded" and rec["score"] == rec["max_score"] > 0
    assert {t["visibility"] for t in rec["tests"]} == {"visible"}  # public tests only


@pytest.mark.slow
def test_check_real_colab_notebook_does_not_crash() -> None:
    """The seed tutorial's Colab export: pip cells, display, errors on purpose, Korean text."""
    code, out, _ = run("check", str(REAL), "--assignment", "vmap_convolve")
    assert code == 1
    missing = next(ln for ln in out.splitlines() if ln.strip().startswith("missing:"))
    assert all(name in missing for name in FUNCTIONS)
    assert "TypeError" in out  # the cell that raises on purpose (jax.grad of a tuple-valued function)


@pytest.mark.slow
def test_grade_folder_with_a_broken_file(tmp_path: Path) -> None:
    subs = tmp_path / "subs"
    subs.mkdir()
    shutil.copy(CORPUS / "correct_vmap.ipynb", subs / "alice.ipynb")
    (subs / "bob.ipynb").write_text("this is not json {")
    out_dir = tmp_path / "out"
    code, _, err = run("grade", "--assignment", "vmap_convolve", "--out", str(out_dir), "--jobs", "1", str(subs))
    assert code == 0, err
    assert out_dir.stat().st_mode & 0o777 == 0o700  # students' notebooks, names and grades: private
    alice = json.loads((out_dir / "results" / "alice.json").read_text())
    bob = json.loads((out_dir / "results" / "bob.json").read_text())
    assert alice["status"] == "graded" and alice["score"] == alice["max_score"] == 40
    assert {t["category"] for t in alice["tests"]} == {"numerics", "jit", "vectorization", "purity"}
    # bob's page names his file, not where the TA keeps it, and what it was out of
    assert bob["status"] == "error" and bob["message"].startswith("bob.ipynb: ") and str(subs) not in bob["message"]
    assert bob["max_score"] == 40
    rows = list(csv.DictReader((out_dir / "grades.csv").open()))
    assert [(r["student"], r["score"], r["status"]) for r in rows] == [("alice", "40", "graded"), ("bob", "0", "error")]
    assert "[2/2]" in err
    assert "done: 2 submission(s) (graded 1, errors 1, timeouts 0) in " in err


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (("grading.yaml", "seed: 1\n", "sed: 1\n"), "grading.yaml: sed: unknown key; did you mean 'seed'?"),
        (
            (
                "assignments/double/assignment.yaml",
                "functions: [double]\n",
                "functions: [double]\ntolerances: {rtol: 0.1}\n",
            ),
            "assignments/double/assignment.yaml: tolerances: unknown key; did you mean 'tolerance'?",
        ),
        (
            (
                "assignments/double/assignment.yaml",
                "functions: [double]\n",
                "functions: [double]\ntolerance: {rtol: loose}\n",
            ),
            "assignments/double/assignment.yaml: tolerance.rtol: expected a number, got 'loose'",
        ),
        (("grading.yaml", "late_policy: {", "late_policy: ["), "grading.yaml: line"),
    ],
    ids=["unknown-key", "unknown-assignment-key", "bad-tolerance", "malformed-yaml"],
)
def test_grade_refuses_bad_configuration(tmp_path: Path, edit: tuple[str, str, str], expected: str) -> None:
    from tests.minicourse import make_minicourse, notebook

    course = make_minicourse(tmp_path / "course")
    path, old, new = edit
    text = (course / path).read_text()
    assert old in text
    (course / path).write_text(text.replace(old, new, 1))
    (tmp_path / "a.ipynb").write_text(notebook("full"))
    code, _, err = run(
        "--course",
        str(course),
        "grade",
        "--assignment",
        "double",
        "--out",
        str(tmp_path / "o"),
        str(tmp_path / "a.ipynb"),
    )
    assert code == 2
    assert err.startswith(f"jaxgrade: error: {expected}"), err
    assert "TIP: " in err
    assert not (tmp_path / "o").exists()  # nothing graded, nothing written


@pytest.mark.parametrize("command", ["grade", "check", "validate"])
def test_an_assignment_the_installed_packages_cannot_grade_is_refused_before_anything_runs(
    tmp_path: Path, command: str
) -> None:
    """An assignment's ``requires`` not met here (the pmap assignment on JAX before 0.8, so on
    Python 3.10): grading, checking and validating refuse at once, with what is installed and
    what to install, and `list` says so, instead of grades the installed JAX cannot back."""
    from importlib import metadata

    from tests.minicourse import make_minicourse, notebook

    course = make_minicourse(tmp_path / "course")
    yaml_file = course / "assignments" / "double" / "assignment.yaml"
    yaml_file.write_text(yaml_file.read_text() + "requires: ['jax>=999']\n")
    nb = tmp_path / "a.ipynb"
    nb.write_text(notebook("full"))
    args = {
        "grade": ["grade", "--assignment", "double", "--out", str(tmp_path / "o"), str(nb)],
        "check": ["check", "--assignment", "double", str(nb)],
        "validate": ["validate", "double"],
    }[command]
    code, out, err = run("--course", str(course), *args)
    jax = metadata.version("jax")
    assert code == 2, err
    python = "; JAX 0.7 and later need Python 3.11 or newer" if sys.version_info < (3, 11) else ""
    assert err.splitlines() == [
        f"jaxgrade: error: double cannot be graded here: it needs jax>=999 (jax {jax} is installed)",
        f"TIP: install it where jaxgrade runs (`pip install 'jax>=999'`{python}).",
    ], err
    assert out == "" and not (tmp_path / "o").exists()
    code, out, _ = run("--course", str(course), "list")
    assert code == 0 and out.rstrip().endswith(f"cannot be graded here: needs jax>=999 (jax {jax} is installed)"), out


# --------------------------------------------------------------------------- check --watch


def _read_line(proc, timeout: float) -> str:  # type: ignore[no-untyped-def]
    import selectors

    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    assert sel.select(timeout), "no check within the time allowed"
    line = proc.stdout.readline()
    assert line, proc.stderr.read()[-2000:]
    return line


def test_check_watch_checks_each_saved_version_with_a_sandbox_started_ahead(tmp_path: Path) -> None:
    """A student's loop: save, read the result, save again.  A touch that changes nothing is
    not checked; an edit is, in a sandbox that was started while the student edited; Ctrl-C
    stops it and leaves nothing running."""
    import signal
    import subprocess
    import sys
    import time
    import uuid

    from tests.minicourse import as_from_a_terminal, make_minicourse, notebook, procs_with

    course = make_minicourse(tmp_path / "course")
    nb = tmp_path / "hw.ipynb"
    nb.write_text(notebook("full"), encoding="utf-8")
    scratch = tmp_path / "tmp"  # the sandboxes' scratch folders (jaxgrade-sub-*, jaxgrade-eval-*) land here
    scratch.mkdir()
    tag = uuid.uuid4().hex
    cmd = [sys.executable, "-m", "grader", "--course", str(course), "check", "--assignment", "double"]
    proc = subprocess.Popen(
        as_from_a_terminal([*cmd, "--watch", "--json", str(nb)]),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "JAXGRADE_TEST_TAG": tag, "TMPDIR": str(scratch)},
    )

    def sandboxes() -> list[str]:
        return sorted(p.name.split("-")[1] for p in scratch.iterdir() if p.name.startswith("jaxgrade-"))

    try:
        first = json.loads(_read_line(proc, 180))
        assert (first["score"], first["max_score"]) == (2.0, 2.0)
        deadline = time.monotonic() + 60
        while sandboxes() != ["eval", "sub"] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert sandboxes() == ["eval", "sub"], "no sandbox was started ahead for the next save"
        os.utime(nb)  # saved again, same bytes: nothing to check
        time.sleep(1.0)  # five polls
        nb.write_text(notebook("zero"), encoding="utf-8")
        second = json.loads(_read_line(proc, 180))
        assert second["score"] == 0.0 and second["missing"] == ["double"]  # the edit, not the touch
        assert second["submission_sha256"] != first["submission_sha256"]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
        assert "stopped" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    deadline = time.monotonic() + 20
    while (procs_with(tag) or sandboxes()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert procs_with(tag) == [] and sandboxes() == []  # the sandbox started ahead went with it


def test_check_watch_stops_on_a_sigterm_handled_inside_a_garbage_collector_callback(tmp_path: Path) -> None:
    """A signal's handler may run inside a garbage collector's callback (JAX registers one),
    which drops the exception it raises: the watch must stop all the same (a check that is
    running stops at its next wait on the sandbox), not watch on with its sandbox."""
    import subprocess
    import sys
    import time
    import uuid

    from tests.minicourse import make_minicourse, notebook, procs_with, signal_inside_a_gc_callback

    course = make_minicourse(tmp_path / "course")
    nb = tmp_path / "hw.ipynb"
    nb.write_text(notebook("full"), encoding="utf-8")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    tag = uuid.uuid4().hex
    # the watch's own handler is installed
    script = signal_inside_a_gc_callback(
        "grader.cli:main", "getattr(signal.getsignal(signal.SIGTERM), '__name__', '') == 'stop'"
    )
    args = ["--course", str(course), "check", "--assignment", "double", "--watch", "--json", str(nb)]
    proc = subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "JAXGRADE_TEST_TAG": tag, "TMPDIR": str(scratch)},
    )
    try:
        _, err = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"--watch did not stop on its SIGTERM; stderr: {err[-2000:]}")
    assert proc.returncode == 0 and "stopped" in err, err[-2000:]

    def sandboxes() -> list[str]:
        return [p.name for p in scratch.iterdir() if p.name.startswith("jaxgrade-")]

    deadline = time.monotonic() + 20
    while (procs_with(tag) or sandboxes()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert procs_with(tag) == [] and sandboxes() == []


def test_check_stops_on_a_ctrl_c_handled_inside_a_garbage_collector_callback(tmp_path: Path) -> None:
    """A Ctrl-C whose KeyboardInterrupt a gc callback drops (JAX registers one, and `check` grades
    in its own process, which loads JAX) still stops the check, and the notebook's sandbox with it
    (grader/host/interrupts.py): exit 130. (`jaxgrade grade` did too until session 30, when it
    graded `--jobs 1` in its own process; it now grades in trusted workers, and its Ctrl-C is the
    next test's.)"""
    import subprocess
    import sys
    import time
    import uuid

    from tests.minicourse import as_from_a_terminal, make_minicourse, notebook, procs_with, signal_inside_a_gc_callback

    course = make_minicourse(tmp_path / "course")
    nb = tmp_path / "hw.ipynb"
    nb.write_text(notebook("full"), encoding="utf-8")
    # sent once grading is under way in this process: JAX loaded for the trusted side
    script = signal_inside_a_gc_callback("grader.cli:main", "'jax' in sys.modules", "SIGINT")
    args = ["--course", str(course), "check", "--no-server", "--assignment", "double", str(nb)]
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    tag = uuid.uuid4().hex
    proc = subprocess.run(
        as_from_a_terminal([sys.executable, "-c", script, *args]),
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "JAXGRADE_TEST_TAG": tag, "TMPDIR": str(scratch)},
    )
    assert proc.returncode == 130 and "jaxgrade: interrupted" in proc.stderr, proc.stderr[-2000:]
    # the interrupted notebook's sandbox went with it
    deadline = time.monotonic() + 20
    while (procs_with(tag) or list(scratch.glob("jaxgrade-*"))) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert procs_with(tag) == [] and list(scratch.glob("jaxgrade-*")) == []


def test_grade_at_one_job_stops_on_a_ctrl_c_and_its_trusted_worker_and_sandbox_with_it(tmp_path: Path) -> None:
    """`jaxgrade grade --jobs 1` grades in a trusted worker process (grade_many's in_workers): a
    Ctrl-C while a notebook is graded stops the batch (exit 130), keeps nothing of that notebook,
    and leaves neither the worker nor the sandbox behind."""
    import signal
    import sqlite3
    import subprocess
    import sys
    import time
    import uuid

    from tests.minicourse import as_from_a_terminal, make_minicourse, notebook, procs_with

    course = make_minicourse(tmp_path / "course")
    folder = tmp_path / "class"
    folder.mkdir()
    (folder / "s0.ipynb").write_text(notebook("full"), encoding="utf-8")
    out = tmp_path / "out"
    args = ["--course", str(course), "grade", "--assignment", "double", "--jobs", "1", "--out", str(out), str(folder)]
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    tag = uuid.uuid4().hex
    proc = subprocess.Popen(
        as_from_a_terminal([sys.executable, "-m", "grader", *args]),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "JAXGRADE_TEST_TAG": tag, "TMPDIR": str(scratch)},
    )
    try:
        deadline = time.monotonic() + 300
        # a notebook's sandbox: its scratch (the worker's probe for a tmpfs comes first, and a kill
        # there is tests/host/test_sandbox.py's)
        while not list(scratch.glob("jaxgrade-sub-*")) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None, "graded before its sandbox was seen"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130 and "interrupted; results written so far are kept" in err, err[-2000:]
    kept = sqlite3.connect(out / "gradebook.db").execute("SELECT student FROM results").fetchall()
    assert kept == [], kept
    deadline = time.monotonic() + 20
    while (procs_with(tag) or list(scratch.glob("jaxgrade-*"))) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert procs_with(tag) == [] and list(scratch.glob("jaxgrade-*")) == []


def test_a_sandbox_started_ahead_is_used_only_as_it_would_be_started_now_and_while_alive() -> None:
    """grade.ready_ahead (`check --watch`, the check server): the same limits, sandbox
    environment (the device count), hidden folders (another notebook folder is not hidden by a
    sandbox started for the first) and isolation, and both processes alive; else it is closed."""
    from types import SimpleNamespace

    from grader.grading.grade import _hidden_from_sandbox, ready_ahead
    from grader.host.sandbox import Limits

    alive = SimpleNamespace(alive=lambda: True)
    dead = SimpleNamespace(alive=lambda: False)

    def assignment(devices: int = 1) -> SimpleNamespace:
        return SimpleNamespace(
            limits=Limits(),
            config=SimpleNamespace(devices=devices),
            course=SimpleNamespace(root=Path("/c")),
            reference_dir=Path("/c/reference/double"),
        )

    nb = Path("/home/s/hw/a.ipynb")
    ok = {
        "limits": Limits(),
        "env": {},
        "protect": _hidden_from_sandbox(assignment(), nb),
        "isolation": "process",
        "worker": alive,
        "evaluator": alive,
    }

    def used(changes: dict, *, a: SimpleNamespace | None = None, path: Path = nb, isolation: str = "process") -> bool:
        closed: list[bool] = []
        session = SimpleNamespace(**{**ok, **changes}, close=lambda: closed.append(True))
        got = ready_ahead(session, a or assignment(), path, isolation)
        assert (got is session) != bool(closed), "a sandbox not used is closed, and only then"
        return got is session

    assert used({}) and used({}, path=Path("/home/s/hw/b.ipynb"))  # another notebook of the same folder
    assert not used({}, path=Path("/home/s/other/a.ipynb"))  # another folder: it would see it
    assert not used({"limits": Limits(cell_timeout=5)})
    assert not used({"evaluator": dead}) and not used({"evaluator": None})
    assert not used({}, a=assignment(devices=2))  # grading.yaml now says 2 devices
    assert not used({"isolation": "bwrap"})
    assert ready_ahead(None, assignment(), nb, "process") is None


def test_a_pre_started_session_takes_its_notebook_once() -> None:
    from grader.host.session import Session

    with pytest.raises(RuntimeError, match="not started"):
        Session("").load("{}")
    with pytest.raises(RuntimeError, match="notebook already"):
        Session('{"cells": []}').load("{}")


def test_the_command_hands_a_check_to_a_server_before_it_loads_the_cli(monkeypatch: pytest.MonkeyPatch) -> None:
    """grader.entry: a check a server answered is done (its exit code); anything else (no
    server, declined, another command) goes to grader.cli.main with the same arguments."""
    import grader.cli
    from grader import entry
    from grader.grading import check_server

    ran: list[list[str]] = []
    monkeypatch.setattr(grader.cli, "main", lambda argv: ran.append(argv) or 7)
    monkeypatch.setattr(check_server, "client_main", lambda argv: 1 if argv[0] == "check" else None)
    assert entry.main(["check", "hw.ipynb"]) == 1 and ran == []
    assert entry.main(["list"]) == 7 and ran == [["list"]]


def test_grade_refuses_an_out_folder_that_holds_another_assignment(tmp_path: Path) -> None:
    """Its results/, feedback/, report and grades table are named by student only: grading a
    second assignment there would replace the first one's pages (a TA's walkthrough)."""
    from grader.batch.gradebook import Gradebook
    from grader.grading.record import Record

    out = tmp_path / "o"
    out.mkdir()
    with Gradebook(out / "gradebook.db") as gb:
        gb.put(Record(assignment="pytrees", student="alice", submission_sha256="x", status="graded", score=28.0))
    code, _, err = run(
        "grade", "--assignment", "vmap_convolve", "--out", str(out), str(ROOT / "examples/class/alice.ipynb")
    )
    assert code == 2
    assert f"jaxgrade: error: {out} holds the results of 'pytrees'" in err
    assert f"--out {tmp_path / 'o-vmap_convolve'}" in err
    assert not (out / "results").exists() and not (out / "submissions").exists()  # nothing was started


def test_grade_refuses_notebooks_that_say_they_are_another_assignment(tmp_path: Path) -> None:
    """A wrong --assignment: graded as it, every student would get 0, with a note in the grades
    table only.  The notebooks' metadata says which assignment they are."""
    code, _, err = run(
        "grade", "--assignment", "pytrees", "--out", str(tmp_path / "o"), str(ROOT / "examples" / "class")
    )
    assert code == 2
    assert "jaxgrade: error: 5 of the 5 notebook(s) checked say they are assignment 'vmap_convolve'" in err
    assert (
        "TIP: Grade them with --assignment vmap_convolve; or, if they are 'pytrees' whatever their metadata says, add --any-metadata."
        in err
    )
    assert not (tmp_path / "o" / "results").exists()
    # a minority that names another assignment is graded (its record says so), and so is a class
    # whose notebooks name none
    from grader.cli import _named_as_asked
    from grader.course.config import load_course
    from grader.intake.collect import Incoming

    pytrees = load_course(ROOT).assignment("pytrees")
    alice = Incoming(ROOT / "examples/class/alice.ipynb", "alice", {})
    starter = Incoming(pytrees.starter, "s", {})
    _named_as_asked(pytrees, [alice, starter, starter], io.StringIO())
    # one or two are graded as asked, with a warning: the metadata is the students' to write, and
    # one must not keep their own notebook from being graded
    warned = io.StringIO()
    _named_as_asked(pytrees, [alice, alice], warned)
    assert warned.getvalue().startswith(
        "warning: 2 of the 2 notebook(s) checked say they are assignment 'vmap_convolve'"
    )
    bare = tmp_path / "bare.ipynb"
    doc = json.loads(alice.path.read_text())
    doc["metadata"].pop("jaxgrade")
    bare.write_text(json.dumps(doc))
    quiet = io.StringIO()
    _named_as_asked(pytrees, [Incoming(bare, "b", {})] * 3, quiet)
    assert quiet.getvalue() == ""
    # a student's file nested deeper than the JSON parser goes is skipped, not a traceback
    deep = tmp_path / "deep.ipynb"
    deep.write_text('{"metadata": ' + "[" * 100_000 + "]" * 100_000 + "}")
    _named_as_asked(pytrees, [Incoming(deep, "d", {})] * 3, quiet)
    # nor is a file over NAMED_MAX_BYTES read: 64 MiB of small JSON values is 1.4 GB parsed, in a
    # process with no memory limit of its own (it is graded all the same, in a sandbox's worker)
    from grader.cli import NAMED_MAX_BYTES

    big = tmp_path / "big.ipynb"
    doc = json.loads(alice.path.read_text())
    doc["metadata"]["padding"] = [[]] * (NAMED_MAX_BYTES // 3)
    big.write_text(json.dumps(doc, separators=(",", ":")))
    assert NAMED_MAX_BYTES < big.stat().st_size < 2 * NAMED_MAX_BYTES
    _named_as_asked(pytrees, [Incoming(big, "g", {})] * 3, quiet)
    assert quiet.getvalue() == ""
    # ...and the next file under the size is read in its place: a class whose first notebooks are
    # large still has NAMED_SAMPLE of them read, so three small ones are not a majority of nothing
    import grader.cli as cli_module

    many = [Incoming(big, "g", {})] * 25 + [alice] * 2 + [Incoming(bare, "b", {})] * (cli_module.NAMED_SAMPLE - 2)
    _named_as_asked(pytrees, many, quiet)  # 2 of 20 read name vmap_convolve: a minority, a warning
    assert quiet.getvalue().startswith("warning: 2 of the 2 notebook(s) checked"), quiet.getvalue()
    quiet = io.StringIO()
    with pytest.raises(cli_module.CliError, match="3 of the 3 notebook"):  # past the sample's first 20 files
        _named_as_asked(pytrees, [Incoming(big, "g", {})] * 25 + [alice] * 3, quiet)
    from grader.intake.notebook import NotebookError, load_notebook

    with pytest.raises(NotebookError, match="nested too deeply"):
        load_notebook(deep)


def test_course_is_taken_after_the_command_too_and_a_folder_without_a_course_is_named(tmp_path: Path) -> None:
    """`jaxgrade grade --course DIR ...` as the README writes options after the command; a typo'd
    name or folder gets a tip that fits it, not "fix the named setting" (a TA's walkthrough)."""
    out, err = io.StringIO(), io.StringIO()
    assert main(["list", "--course", str(ROOT)], out=out, err=err) == 0, err.getvalue()
    assert "vmap_convolve" in out.getvalue()
    err = io.StringIO()
    assert main(["list", "--course", str(tmp_path)], out=io.StringIO(), err=err) == 2
    assert err.getvalue().startswith(
        f"jaxgrade: error: --course {tmp_path}: no grading.yaml there\nTIP: Pass the course"
    )
    code, _, err_text = run("grade", "--assignment", "vmap_convolv", "--out", str(tmp_path / "o"), str(tmp_path))
    assert code == 2 and "TIP: check the assignment's name (`jaxgrade list`" in err_text


def test_check_of_a_renamed_notebook_in_its_release_folder(tmp_path: Path) -> None:
    """Students are often asked to put their name in the file: with the handed-out notebook gone,
    check said the starter was missing (a student's walkthrough).  It needs no starter."""
    assert run("release", "vmap_convolve", "--out", str(tmp_path))[0] == 0
    folder = tmp_path / "vmap_convolve"
    mine = folder / "vmap_convolve_JaneDoe.ipynb"
    shutil.copy(ROOT / "examples/class/alice.ipynb", mine)
    (folder / "vmap_convolve.ipynb").unlink()
    out, err = io.StringIO(), io.StringIO()
    assert main(["check", "--no-server", str(mine)], out=out, err=err) == 0, err.getvalue()
    assert "7/7 public tests passed" in out.getvalue()


def test_check_of_another_assignments_notebook_names_it(tmp_path: Path) -> None:
    """A pytrees notebook checked in the autodiff folder was blamed on grading.yaml ("no such
    assignment") (a student's walkthrough): it names the notebook's assignment and the folder's."""
    assert run("release", "autodiff", "--out", str(tmp_path))[0] == 0
    nb = tmp_path / "autodiff" / "pytrees.ipynb"
    shutil.copy(ROOT / "assignments/pytrees/pytrees.ipynb", nb)
    err = io.StringIO()
    assert main(["check", "--no-server", str(nb)], out=io.StringIO(), err=err) == 2
    assert err.getvalue().startswith("jaxgrade: error: pytrees.ipynb says it is assignment 'pytrees' (its metadata)")
    assert "it has autodiff\nTIP: Check it in the folder your course gave you for 'pytrees'" in err.getvalue()


def test_a_negative_jobs_count_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        run("grade", "--assignment", "vmap_convolve", "--out", str(tmp_path / "o"), "--jobs", "-1", str(tmp_path))
    assert stop.value.code == 2 and "--jobs: expected 1 or more" in capsys.readouterr().err


def _slow_check(tmp_path: Path) -> tuple[Path, Path]:
    """A course whose cells stop after 5 s, and a right notebook with a cell that takes 2 s."""
    from tests.minicourse import make_minicourse, notebook

    course = make_minicourse(tmp_path / "course", "{cell_timeout: 5}")
    doc = json.loads(notebook("full"))
    doc["cells"].append({"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
                         "source": "import time\ntime.sleep(2)"})  # fmt: skip
    nb = tmp_path / "slow.ipynb"
    nb.write_text(json.dumps(doc))
    return course, nb


def test_a_long_check_says_it_is_still_checking(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A student whose cell loops forever waited a minute without a word (a walkthrough): past
    STILL_CHECKING_AFTER the check says it is going on, when such a cell is stopped, and Ctrl-C."""
    from grader.grading import check_server

    course, nb = _slow_check(tmp_path)
    monkeypatch.setattr(check_server, "STILL_CHECKING_AFTER", 0.5)
    code, _, err = run("--course", str(course), "check", "--no-server", "--assignment", "double", str(nb))
    assert code == 0, err
    assert "(still checking after 0.5 s: a cell that does not finish is stopped after 5 s" in err
    monkeypatch.setattr(check_server, "STILL_CHECKING_AFTER", 60.0)
    code, _, err = run("--course", str(course), "check", "--no-server", "--assignment", "double", str(nb))
    assert code == 0 and "still checking" not in err


def test_a_long_check_under_watch_says_it_is_still_checking(tmp_path: Path) -> None:
    """`check --watch` says it too: a save that starts a cell looping forever was met with silence."""
    import signal
    import subprocess
    import sys

    from tests.minicourse import as_from_a_terminal

    course, nb = _slow_check(tmp_path)
    argv = ["--course", str(course), "check", "--assignment", "double", "--watch", "--json", str(nb)]
    start = (
        "import sys; from grader.grading import check_server; check_server.STILL_CHECKING_AFTER = 0.5; "
        f"from grader.entry import main; sys.exit(main({argv!r}))"
    )
    proc = subprocess.Popen(
        as_from_a_terminal([sys.executable, "-c", start]), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert json.loads(_read_line(proc, 180))["score"] == 2.0
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "(still checking after 0.5 s: a cell that does not finish is stopped after 5 s" in err


def test_any_metadata_grades_notebooks_that_say_they_are_another_assignment(tmp_path: Path) -> None:
    """The stop is the TA's to lift: the metadata is the students' to write."""
    subs = tmp_path / "subs"
    subs.mkdir()
    for who in ("a", "b", "c"):
        shutil.copy(ROOT / "examples/class/alice.ipynb", subs / f"{who}.ipynb")
    argv = ["grade", "--assignment", "pytrees", "--out", str(tmp_path / "o"), "--jobs", "2", str(subs)]
    assert run(*argv)[0] == 2
    code, _, err = run(*argv, "--any-metadata")
    assert code == 0, err
    assert "done: 3 submission(s) (graded 3," in err


def test_course_is_taken_by_a_command_of_a_command(tmp_path: Path) -> None:
    """`jaxgrade post canvas --from o --course C` said "unrecognized arguments" (a review)."""
    from grader.cli import build_parser

    args = build_parser().parse_args(["post", "canvas", "--from", "o", "--course", str(tmp_path)])
    assert args.course == str(tmp_path)
    assert build_parser().parse_args(["list"]).course is None


def test_a_course_found_where_jaxgrade_is_installed_is_noted_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outside a course folder, an editable install uses its repository's course: it says so."""
    from grader import cli

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cli, "_NOTED", set())
    for _ in range(2):
        assert main(["list"], out=io.StringIO(), err=io.StringIO()) == 0
    note = f"note: no grading.yaml in {tmp_path.resolve()} or its parents: using the course jaxgrade is installed from, {ROOT}"
    assert capsys.readouterr().err.count(note) == 1


def test_broken_tests_get_a_tip_for_who_can_fix_them() -> None:
    """The staff are sent to `jaxgrade validate`; a student, whose bundle has no reference, to the staff."""
    from grader.cli import _fail
    from grader.course.config import BrokenTestsError

    for staff, tip in ((True, "`jaxgrade validate toy` checks the tests"), (False, "tell the course staff")):
        err = io.StringIO()
        assert _fail(BrokenTestsError("toy", "could not collect tests/test_public.py: ...", staff=staff), err) == 2
        assert err.getvalue().startswith("jaxgrade: error: could not collect") and tip in err.getvalue()


def test_what_students_named_reaches_the_tas_terminal_written_out(tmp_path: Path) -> None:
    """A file name (and the id made from it), a PDF's name, a notebook's error: the student chose
    them, and an escape sequence in one would retitle or rewrite the TA's terminal.  Every
    character a terminal acts on is written out (``\\x1b``)."""
    from grader.publish.output import terminal_safe
    from tests.minicourse import make_minicourse, notebook

    course = make_minicourse(tmp_path / "course")
    subs = tmp_path / "subs"
    for who in ("alice", "bob"):
        (subs / who).mkdir(parents=True)
    (subs / "alice" / "double.ipynb").write_text(notebook("full"))
    (subs / "bob" / "\x1b]0;pwned\x07\u202eevil.pdf").write_bytes(b"%PDF")  # bob sent no notebook
    (subs / "carol\x1b[2J\r.ipynb").write_text(notebook("crash", salt="carol"))
    code, _, err = run(
        "--course", str(course), "grade", "--assignment", "double", "--out", str(tmp_path / "o"), str(subs)
    )
    assert code == 0, err
    assert "\x1b" not in err and "\r" not in err and "\u202e" not in err and "\x07" not in err
    assert "carol\\x1b[2J\\x0d" in err and "\\x1b]0;pwned\\x07\\u202eevil.pdf" in err
    assert terminal_safe("tab\tand\nnewline stay; é, 日本 too") == "tab\tand\nnewline stay; é, 日本 too"
