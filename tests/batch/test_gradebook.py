"""The SQLite gradebook: keys, resume, current records, durability across a killed writer."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from grader.batch.gradebook import AssignmentInfo, Gradebook, GradebookError
from grader.grading.record import Record, TestResult


def rec(student: str, sha: str = "a" * 64, version: str = "v1", score: float = 1.0, **kw) -> Record:
    r = Record(
        assignment="hw",
        student=student,
        submission_sha256=sha,
        status="graded",
        score=score,
        max_score=2.0,
        tests=[TestResult("test_a", "numerics", score, 2.0, "passed" if score == 2 else "failed")],
        assignment_version=version,
        graded_at="2026-11-21T10:00:00+00:00",
        **kw,
    )
    return r


def test_put_and_has_use_the_full_key(tmp_path):
    with Gradebook(tmp_path / "gradebook.db") as gb:
        gb.put(rec("alice"))
        assert gb.has("hw", "alice", "a" * 64, "v1")
        assert not gb.has("hw", "alice", "b" * 64, "v1")  # a new submission
        assert not gb.has("hw", "alice", "a" * 64, "v2")  # a new assignment or grader version
        assert not gb.has("other", "alice", "a" * 64, "v1")


def test_records_are_each_students_latest_and_round_trip(tmp_path):
    with Gradebook(tmp_path / "gradebook.db") as gb:
        gb.put(rec("bob", score=1.0, identity={"lms": "canvas", "id": "7"}))
        gb.put(rec("alice", score=2.0))
        gb.put(rec("bob", sha="b" * 64, score=2.0))  # bob resubmitted
        got = gb.records("hw")
        assert [(r.student, r.score) for r in got] == [("alice", 2.0), ("bob", 2.0)]
        assert got[0].tests[0].status == "passed"
        assert gb.count("hw") == 3  # the older submission is kept as history
        assert [r.student for r in gb.records("hw", students={"bob"})] == ["bob"]
        assert gb.assignments() == ["hw"]


def test_regrading_the_same_key_replaces_the_row(tmp_path):
    with Gradebook(tmp_path / "gradebook.db") as gb:
        gb.put(rec("alice", score=1.0))
        gb.put(rec("alice", score=2.0))
        assert gb.count("hw") == 1
        assert gb.records("hw")[0].score == 2.0


def test_assignment_info_round_trips(tmp_path):
    info = AssignmentInfo("hw", "Homework", "JAX 101", "101", None, 40.0, "0.1.0+abc")
    with Gradebook(tmp_path / "g.db") as gb:
        gb.set_assignment(info)
        gb.set_assignment(info)
        assert gb.assignment("hw") == info
        assert gb.assignment("nope") is None


def test_wal_mode(tmp_path):
    Gradebook(tmp_path / "g.db").close()
    assert sqlite3.connect(tmp_path / "g.db").execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_not_a_gradebook_is_refused(tmp_path):
    bad = tmp_path / "gradebook.db"
    bad.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(GradebookError, match="not a jaxgrade gradebook"):
        Gradebook(bad)


def test_a_commit_survives_sigkill(tmp_path):
    """What put() returned from is on disk, even if the writer dies with SIGKILL right after."""
    script = textwrap.dedent(
        f"""
        import os, sys
        sys.path.insert(0, {str(os.getcwd())!r})
        from tests.batch.test_gradebook import rec
        from grader.batch.gradebook import Gradebook
        gb = Gradebook({str(tmp_path / "g.db")!r})
        for i in range(50):
            gb.put(rec(f"s{{i:02d}}"))
        print("committed", flush=True)
        os.kill(os.getpid(), 9)
        """
    )
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=os.getcwd())
    assert p.returncode == -signal.SIGKILL, p.stderr
    assert "committed" in p.stdout
    with Gradebook(tmp_path / "g.db") as gb:
        assert len(gb.records("hw")) == 50
