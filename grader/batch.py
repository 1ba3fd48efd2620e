"""One TA batch: intake results in, gradebook rows, result files, feedback and the report out.

The command line (``jaxgrade grade``) is a thin layer over :class:`Batch`:

1. :meth:`Batch.plan` drops every submission whose (student, sha256, assignment version) the
   gradebook already holds, unless ``regrade``;
2. :meth:`Batch.run` grades the rest, ``jobs`` at a time, and commits each record to the
   gradebook the moment it arrives (with its result JSON and feedback page), so a killed run
   loses only what was being graded;
3. :meth:`Batch.finish` rebuilds ``grades.csv``, every feedback page and ``report.html`` from the
   gradebook's current records, never from memory.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from grader.gradebook import AssignmentInfo, Gradebook
from grader.late import apply_late
from grader.notebook import sha256_file
from grader.record import Record

if TYPE_CHECKING:
    from grader.config import Assignment
    from grader.intake import Incoming


class Batch:
    def __init__(self, assignment: Assignment, out_dir: Path, *, isolation: str = "auto") -> None:
        self.assignment = assignment
        self.out_dir = Path(out_dir)
        self.isolation = isolation
        self.version = assignment.version()
        self._gb: Gradebook | None = None

    @property
    def gradebook(self) -> Gradebook:
        if self._gb is None:
            raise RuntimeError("use the batch inside `with`")
        return self._gb

    def __enter__(self) -> Batch:
        from grader.grading import collect_points

        a = self.assignment
        self._gb = Gradebook(self.out_dir / "gradebook.db")
        entry = a.course.assignments[a.name]
        self._gb.set_assignment(
            AssignmentInfo(
                name=a.name,
                title=a.title,
                course=a.course.course,
                canvas_id=entry.canvas_id,
                moodle_id=entry.moodle_id,
                points_possible=round(sum(collect_points(a).values()), 6),
                version=self.version,
            )
        )
        return self

    def __exit__(self, *exc: object) -> None:
        if self._gb is not None:
            self._gb.close()
            self._gb = None

    def plan(self, incoming: list[Incoming], *, regrade: bool = False) -> list[Incoming]:
        """The submissions that still need grading."""
        if regrade:
            return list(incoming)
        name = self.assignment.name
        return [
            inc for inc in incoming if not self.gradebook.has(name, inc.student, sha256_file(inc.path), self.version)
        ]

    def run(self, todo: list[Incoming], *, jobs: int = 1, on_record: Callable[[Record], None] | None = None) -> None:
        from grader.feedback import write_feedback
        from grader.grading import grade_many
        from grader.output import write_record

        if not todo:
            return
        by_path = {inc.path: inc for inc in todo}

        def store(path: Path, rec: Record) -> None:
            self.complete(rec, by_path[path])
            self.gradebook.put(rec)  # committed: from here on this submission is never graded again
            write_record(self.out_dir, rec)
            write_feedback(self.out_dir, [rec], course=self.assignment.course.course, title=self.assignment.title)
            if on_record:
                on_record(rec)

        grade_many(
            self.assignment,
            [inc.path for inc in todo],
            jobs=jobs,
            students={inc.path: inc.student for inc in todo},
            isolation=self.isolation,
            on_result=store,
        )

    def complete(self, rec: Record, inc: Incoming) -> Record:
        """Add what the trusted side knows beyond the tests: identity, version, time, lateness."""
        rec.identity = dict(inc.identity)
        rec.assignment_version = self.version
        rec.graded_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        if inc.ignored:
            note = f"graded the latest of several notebooks; also submitted: {', '.join(inc.ignored)}"
            rec.message = f"{rec.message}; {note}" if rec.message else note
        apply_late(
            rec,
            self.assignment.late_policy,
            self.assignment.due,
            submitted_at=inc.submitted_at,
            flag=inc.late_flag,
        )
        return rec

    def finish(self, incoming: list[Incoming] | None = None) -> list[Record]:
        """Write grades.csv, the feedback pages and report.html from the gradebook; return its records."""
        from grader.exports import ExportMeta, plain_csv
        from grader.feedback import write_feedback, write_report
        from grader.output import write_atomic

        a = self.assignment
        records = self.gradebook.records(a.name)
        info = self.gradebook.assignment(a.name)
        assert info is not None  # set in __enter__
        meta = ExportMeta(name=a.name, title=a.title, points_possible=info.points_possible)
        write_atomic(self.out_dir / "grades.csv", plain_csv(records, meta))
        write_feedback(self.out_dir, records, course=a.course.course, title=a.title)
        write_report(self.out_dir, records, course=a.course.course, title=a.title, assignment=a.name)
        return records
