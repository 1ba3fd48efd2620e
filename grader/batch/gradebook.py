"""The gradebook: every graded submission, in SQLite, committed the moment it is graded.

``DIR/gradebook.db`` holds one row per graded submission, keyed by (assignment, student, the
submission's sha256, the assignment version; see :meth:`grader.course.config.Assignment.version`).  A
student's current result is their most recently graded row.  The database runs in WAL mode with
``synchronous=FULL``: each :meth:`Gradebook.put` is one transaction that survives the process
being killed (even with SIGKILL) the moment it returns, and a killed run leaves at most the
submissions that were being graded undone.  Re-running the same batch skips every submission
whose key is already stored (:meth:`Gradebook.has`), so a rerun completes the batch with every
student exactly once.

A submission that is not a result (``lost``: its trusted process died twice) is never stored
there; the ``losses`` table counts the runs in a row that lost it (:meth:`Gradebook.note_loss`),
so that a submission lost run after run is told apart from a one-off, until it is graded.

The ``assignments`` table keeps what exports need (title, LMS ids, points possible), so exports
are derived from the stored results alone, without the course directory.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from grader.grading.record import Record

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS assignments (
    name TEXT PRIMARY KEY,
    title TEXT NOT NULL,
    course TEXT NOT NULL,
    canvas_id TEXT,
    moodle_id TEXT,
    points_possible REAL NOT NULL,
    version TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS results (
    assignment TEXT NOT NULL,
    student TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    version TEXT NOT NULL,
    status TEXT NOT NULL,
    score REAL NOT NULL,
    max_score REAL NOT NULL,
    graded_at TEXT NOT NULL,
    seq INTEGER NOT NULL,
    record TEXT NOT NULL,
    PRIMARY KEY (assignment, student, sha256, version)
);
CREATE INDEX IF NOT EXISTS results_by_student ON results (assignment, student, seq);
CREATE TABLE IF NOT EXISTS losses (
    assignment TEXT NOT NULL,
    student TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    version TEXT NOT NULL,
    runs INTEGER NOT NULL,
    PRIMARY KEY (assignment, student, sha256, version)
);
"""


class GradebookError(Exception):
    """The gradebook file cannot be used (not a jaxgrade gradebook, or from a newer jaxgrade)."""


@dataclass(frozen=True)
class AssignmentInfo:
    name: str
    title: str
    course: str
    canvas_id: str | None
    moodle_id: str | None
    points_possible: float
    version: str


class Gradebook:
    """``with Gradebook(path) as gb: ...``; one writer (the grading process) at a time."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(self.path, timeout=60, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_SCHEMA)
            row = self._db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        except sqlite3.DatabaseError as exc:
            raise GradebookError(f"{self.path}: not a jaxgrade gradebook ({exc})") from None
        if row is None:
            self._db.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        elif int(row[0]) > SCHEMA_VERSION:
            raise GradebookError(f"{self.path}: written by a newer jaxgrade (gradebook schema {row[0]})")

    def __enter__(self) -> Gradebook:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._db.close()

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        try:
            self._db.execute("COMMIT")
        except BaseException:
            # a COMMIT that failed (disk full) can leave the transaction open: end it, so that
            # the gradebook stays usable (a retry once room is made, the stop message)
            if self._db.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    self._db.execute("ROLLBACK")
            raise

    # -- assignments
    def set_assignment(self, info: AssignmentInfo) -> None:
        with self._transaction():
            self._db.execute(
                "INSERT INTO assignments VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(name) DO UPDATE SET "
                "title=excluded.title, course=excluded.course, canvas_id=excluded.canvas_id, "
                "moodle_id=excluded.moodle_id, points_possible=excluded.points_possible, version=excluded.version",
                (
                    info.name,
                    info.title,
                    info.course,
                    info.canvas_id,
                    info.moodle_id,
                    info.points_possible,
                    info.version,
                ),
            )

    def assignment(self, name: str) -> AssignmentInfo | None:
        row = self._db.execute("SELECT * FROM assignments WHERE name=?", (name,)).fetchone()
        return AssignmentInfo(*row) if row else None

    def assignments(self) -> list[str]:
        """Names of the assignments that have results, sorted."""
        return [r[0] for r in self._db.execute("SELECT DISTINCT assignment FROM results ORDER BY assignment")]

    # -- results
    def has(self, assignment: str, student: str, sha256: str, version: str) -> bool:
        row = self._db.execute(
            "SELECT 1 FROM results WHERE assignment=? AND student=? AND sha256=? AND version=?",
            (assignment, student, sha256, version),
        ).fetchone()
        return row is not None

    def get(self, assignment: str, student: str, sha256: str, version: str) -> Record | None:
        """The record kept for that submission graded by that version, or None."""
        row = self._db.execute(
            "SELECT record FROM results WHERE assignment=? AND student=? AND sha256=? AND version=?",
            (assignment, student, sha256, version),
        ).fetchone()
        return Record.from_dict(json.loads(row[0])) if row else None

    def put(self, record: Record) -> None:
        """Store one graded submission (replacing a regrade of the same key) and commit."""
        with self._transaction():
            seq = self._db.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM results").fetchone()[0]
            self._db.execute(
                "INSERT INTO results VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT(assignment, student, sha256, version) DO UPDATE SET status=excluded.status, "
                "score=excluded.score, max_score=excluded.max_score, graded_at=excluded.graded_at, "
                "seq=excluded.seq, record=excluded.record",
                (
                    record.assignment,
                    record.student,
                    record.submission_sha256,
                    record.assignment_version,
                    record.status,
                    record.score,
                    record.max_score,
                    record.graded_at,
                    seq,
                    record.to_json(),
                ),
            )
            self._db.execute(
                "DELETE FROM losses WHERE assignment=? AND student=? AND sha256=? AND version=?", self._key(record)
            )

    def update(self, record: Record) -> None:
        """Store a kept record again (its late deduction re-applied) in its row, which stays where
        it was in the student's history: the student's current record is still the most recently
        graded one."""
        with self._transaction():
            self._db.execute(
                "UPDATE results SET status=?, score=?, max_score=?, record=? "
                "WHERE assignment=? AND student=? AND sha256=? AND version=?",
                (record.status, record.score, record.max_score, record.to_json(), *self._key(record)),
            )

    @staticmethod
    def _key(record: Record) -> tuple[str, str, str, str]:
        return record.assignment, record.student, record.submission_sha256, record.assignment_version

    def note_loss(self, record: Record) -> int:
        """Count one more run that lost ``record``'s submission (never graded since); returns how
        many runs in a row have lost it (1 the first time)."""
        with self._transaction():
            self._db.execute(
                "INSERT INTO losses VALUES (?, ?, ?, ?, 1) ON CONFLICT(assignment, student, sha256, version) "
                "DO UPDATE SET runs = runs + 1",
                self._key(record),
            )
            row = self._db.execute(
                "SELECT runs FROM losses WHERE assignment=? AND student=? AND sha256=? AND version=?", self._key(record)
            ).fetchone()
        return int(row[0])

    def records(self, assignment: str, students: set[str] | None = None) -> list[Record]:
        """Each student's current (most recently graded) record, sorted by student."""
        rows = self._db.execute(
            "SELECT student, record FROM results r WHERE assignment=? AND seq = "
            "(SELECT MAX(seq) FROM results WHERE assignment=r.assignment AND student=r.student) ORDER BY student",
            (assignment,),
        ).fetchall()
        return [Record.from_dict(json.loads(rec)) for student, rec in rows if students is None or student in students]

    def count(self, assignment: str) -> int:
        """Rows stored for ``assignment`` (every graded submission, not only current ones)."""
        return self._db.execute("SELECT COUNT(*) FROM results WHERE assignment=?", (assignment,)).fetchone()[0]
