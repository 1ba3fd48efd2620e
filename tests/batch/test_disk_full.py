"""A full disk and a failed commit must not cost results or leave work running (issue 11).

- a failed commit (simulated ``database or disk is full``) stops ``jaxgrade grade`` promptly, with
  a message and a non-zero exit, with no trusted worker or sandbox left running, and a rerun
  grades only the rest;
- on a real full disk (a small tmpfs, as root) the reserve lets the last result through, the
  batch stops, and a rerun once there is room completes it with every student exactly once;
- before the batch, too little free space is a clear error with the numbers.

They grade the tiny ``double`` course of ``tests/minicourse.py``.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from grader.batch.gradebook import Gradebook
from grader.batch.run import Batch, DiskFull
from grader.course.config import load_course
from grader.intake.collect import collect
from tests.minicourse import EXPECTED, make_minicourse, notebook, procs_with

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
REQUIRE_ROOT = os.environ.get("JAXGRADE_REQUIRE_BWRAP", "") not in ("", "0")  # CI runs as root: fail, never skip
SLEEPER = "import time\ntime.sleep(600)"

# jaxgrade grade, with the gradebook's second and later commits failing as on a full disk
DRIVER = """
import sqlite3, sys
from grader.batch import gradebook
calls = [0]
real_put = gradebook.Gradebook.put
def put(self, record):
    calls[0] += 1
    if calls[0] >= 2:
        raise sqlite3.OperationalError("database or disk is full")
    real_put(self, record)
gradebook.Gradebook.put = put
from grader.cli import main
sys.exit(main(sys.argv[1:]))
"""


def scores(out: Path) -> dict[str, tuple[float, str]]:
    with Gradebook(out / "gradebook.db") as gb:
        return {r.student: (r.score, r.status) for r in gb.records("double")}


def keys(out: Path) -> list[str]:
    con = sqlite3.connect(out / "gradebook.db")
    try:
        return sorted(s for (s,) in con.execute("SELECT student FROM results WHERE assignment='double'"))
    finally:
        con.close()


def test_failed_commit_stops_promptly_kills_the_work_in_flight_and_a_rerun_resumes(tmp_path: Path) -> None:
    course = make_minicourse(tmp_path / "course", limits="{cell_timeout: 300, wall_timeout: 900}")
    klass = tmp_path / "class"
    klass.mkdir()
    (klass / "a_full.ipynb").write_text(notebook("full", salt="a"))
    (klass / "b_half.ipynb").write_text(notebook("half", salt="b"))
    from tests.conftest import build_notebook

    (klass / "c_sleeper.ipynb").write_text(build_notebook(SLEEPER, "# c"))
    out = tmp_path / "out"
    tag = uuid.uuid4().hex
    env = {**os.environ, "JAXGRADE_TEST_TAG": tag, "PYTHONPATH": str(REPO)}
    args = ["--course", str(course), "grade", "--assignment", "double", "--out", str(out), "--jobs", "2", str(klass)]
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, *args], env=env, capture_output=True, text=True, timeout=240, cwd=REPO
    )
    elapsed = time.monotonic() - t0
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "jaxgrade: error:" in proc.stderr and "the disk is full" in proc.stderr, proc.stderr[-3000:]
    assert "TIP: Free space on that disk" in proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    # the sleeper's cell may run 300 s: returning well before means the work in flight was ended
    assert elapsed < 150, f"jaxgrade grade took {elapsed:.0f} s after a failed commit"
    deadline = time.monotonic() + 15
    while procs_with(tag) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert procs_with(tag) == [], "trusted workers or sandboxes outlived the aborted batch"
    assert not (out / ".jaxgrade-reserve").exists()
    saved = keys(out)
    assert len(saved) == 1  # the first commit; the second failed even after the reserve was released

    # a rerun (room made: no failing commits now) grades only the rest, everyone exactly once
    (klass / "c_sleeper.ipynb").write_text(notebook("zero", salt="c"))
    from grader.cli import main

    code = main(args)
    assert code == 0
    assert scores(out) == {"a_full": EXPECTED["full"], "b_half": EXPECTED["half"], "c_sleeper": EXPECTED["zero"]}
    assert keys(out) == ["a_full", "b_half", "c_sleeper"]


def test_too_little_free_space_is_refused_before_grading(tmp_path: Path) -> None:
    course = make_minicourse(tmp_path / "course")
    (tmp_path / "class").mkdir()
    (tmp_path / "class" / "a.ipynb").write_text(notebook("full", salt="a"))
    assignment = load_course(course).assignment("double")
    report = collect([tmp_path / "class"], tmp_path / "out" / "submissions")
    with Batch(assignment, tmp_path / "out", reserve_bytes=1 << 60) as batch:
        with pytest.raises(DiskFull) as info:
            batch.run(report.submissions)
    assert "free on its disk, but grading 1 submission(s) needs up to" in info.value.message
    assert "reserve" in info.value.message and info.value.tip.startswith("Free space")
    with Gradebook(tmp_path / "out" / "gradebook.db") as gb:
        assert gb.count("double") == 0


@pytest.fixture
def small_disk(tmp_path: Path):  # type: ignore[no-untyped-def]
    if os.geteuid() != 0:
        if REQUIRE_ROOT:
            pytest.fail("root is required for the tmpfs test (JAXGRADE_REQUIRE_BWRAP is set)")
        pytest.skip("mounting a small tmpfs needs root; the simulated failed commit is tested above")
    mnt = tmp_path / "disk"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if done.returncode != 0:
        if REQUIRE_ROOT:
            pytest.fail(f"cannot mount a tmpfs: {done.stderr}")
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(folder: Path) -> Path:
    """Fill the disk, as a student's runaway files or another program would."""
    filler = folder / "filler"
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"x" * 65536)
                f.flush()
        except OSError:
            pass
    return filler


def test_real_full_disk_reserve_saves_the_last_result_and_a_rerun_completes(tmp_path: Path, small_disk: Path) -> None:
    course = make_minicourse(tmp_path / "course")
    klass = tmp_path / "class"
    klass.mkdir()
    kinds = {"s0": "full", "s1": "half", "s2": "zero", "s3": "full"}
    for s, k in kinds.items():
        (klass / f"{s}.ipynb").write_text(notebook(k, salt=s))
    assignment = load_course(course).assignment("double")
    out = small_disk / "out"
    report = collect([klass], tmp_path / "staging")
    fillers: list[Path] = []

    def after_first(rec: object) -> None:
        if not fillers:
            fillers.append(fill(small_disk))

    settings = {"reserve_bytes": 2 << 20, "per_submission_bytes": 64 << 10}
    with Batch(assignment, out, **settings) as batch:
        with pytest.raises(DiskFull) as info:
            batch.run(batch.plan(report.submissions), on_record=after_first)
        assert "the disk is full" in info.value.message and "saved from the reserve" in info.value.message
    first = keys(out)
    assert len(first) == 2, first  # the first result, and the one whose commit hit the full disk
    for s in first:
        assert (out / "results" / f"{s}.json").is_file() and (out / "feedback" / f"{s}.html").is_file()

    # still full: the next run refuses before grading, with the numbers, and loses nothing
    with Batch(assignment, out, **settings) as batch:
        with pytest.raises(DiskFull, match="free on its disk"):
            batch.run(batch.plan(report.submissions))
    assert keys(out) == first

    fillers[0].unlink()  # room made: the rerun grades only the rest
    with Batch(assignment, out, **settings) as batch:
        todo = batch.plan(report.submissions)
        assert sorted(i.student for i in todo) == sorted(set(kinds) - set(first))
        batch.run(todo)
        batch.finish(report.submissions)
    assert scores(out) == {s: EXPECTED[k] for s, k in kinds.items()}
    assert keys(out) == sorted(kinds)
    assert not (out / ".jaxgrade-reserve").exists()
