"""One TA batch: intake results in, gradebook rows, result files, feedback and the report out.

The command line (``jaxgrade grade``) is a thin layer over :class:`Batch`:

1. :meth:`Batch.plan` drops every submission whose (student, sha256, assignment version) the
   gradebook already holds, unless ``regrade``, and applies the due date and late policy as they
   are now to those results (they are not part of the version: a moved deadline regrades nobody);
2. :meth:`Batch.run` grades the rest, ``jobs`` at a time, and commits each record to the
   gradebook the moment it arrives (with its result JSON and feedback page), so a killed run
   loses only what was being graded;
   A submission whose trusted grading process died twice (the OOM killer, a kill) gets the
   status ``lost``: it is reported (:attr:`Batch.lost`) but never committed, so the next run
   grades it again; so does one whose grading raised (a grader bug: status ``grader_error``,
   :attr:`Batch.bugs`), while the rest of the class is graded;
   with ``scheduler`` (a Dask scheduler's address) the grading happens on that cluster's workers
   (grader/batch/cluster.py), and everything else here stays the same;
3. :meth:`Batch.finish` rebuilds ``grades.csv``, every feedback page and ``report.html`` from the
   gradebook's current records, never from memory.

**A full disk** (a student's files, another program) must not cost results: before grading,
:meth:`Batch.run` checks the free space of the output folder (a :class:`DiskFull` error with the
numbers) and holds a preallocated reserve file, ``DIR/.jaxgrade-reserve``.  When a commit fails
because the disk is full, the reserve is released, that result is committed again into the room
it leaves, and the batch stops with :class:`DiskFull`: the gradebook holds every result committed
so far, and a rerun (once there is room) grades only the rest.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import sqlite3
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from grader.batch.gradebook import AssignmentInfo, Gradebook
from grader.course.late import apply_late
from grader.grading.grade import LOST_ONCE, collect_points, grade_many
from grader.grading.record import Record, cap_record, finite
from grader.intake.collect import Incoming, parse_time
from grader.intake.notebook import sha256_file
from grader.publish.exports import ExportMeta, plain_csv
from grader.publish.feedback import write_feedback, write_report
from grader.publish.output import write_atomic, write_record

if TYPE_CHECKING:
    from grader.course.config import Assignment


MiB = 1 << 20
RESERVE_NAME = ".jaxgrade-reserve"
RESERVE_BYTES = 64 * MiB  # room for the last commits, grades.csv, the report and the stop message
# a record is capped at 256 KiB (grader/grading/record.py): its gradebook row and WAL copy, result JSON and page
PER_SUBMISSION_BYTES = 1 * MiB
#: Statuses that are not a result: reported, never committed, graded again by the next run.
UNKEPT = ("lost", "grader_error")


class DiskFull(Exception):
    """The output folder's disk is (nearly) full: ``message`` says how full, ``tip`` what to do."""

    def __init__(self, message: str, tip: str) -> None:
        super().__init__(f"{message}. TIP: {tip}")
        self.message, self.tip = message, tip


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` says the disk (or the user's quota) is full."""
    if isinstance(exc, OSError):
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    if isinstance(exc, sqlite3.Error):
        # SQLITE_FULL (13); Python < 3.11 has neither the code nor the constant, only the text
        code = getattr(exc, "sqlite_errorcode", None)
        return code == getattr(sqlite3, "SQLITE_FULL", 13) or "disk is full" in str(exc)
    return False


def _mib(n: float) -> str:
    return f"{n / MiB:.1f} MiB"


def stamp(rec: Record, identity: dict[str, str], version: str) -> Record:
    """What the trusted side knows of a record beyond its tests: who (as the LMS names them),
    which assignment version graded it, and when.  Batches and the Gradescope runtime both use it."""
    rec.identity = dict(identity)
    rec.assignment_version = version
    rec.graded_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return rec


class Batch:
    def __init__(
        self,
        assignment: Assignment,
        out_dir: Path,
        *,
        isolation: str = "auto",
        reserve_bytes: int = RESERVE_BYTES,
        per_submission_bytes: int = PER_SUBMISSION_BYTES,
        cache: bool = True,
        scheduler: str | None = None,
    ) -> None:
        self.assignment = assignment
        self.scheduler = scheduler  # a Dask scheduler's address: grade on its workers (grader/batch/cluster.py)
        self.cache = cache  # the trusted compilation cache (grader/host/xla_cache.py)
        self.out_dir = Path(out_dir)
        self.isolation = isolation
        self.version = assignment.version()
        self.reserve_bytes = reserve_bytes
        self.per_submission_bytes = per_submission_bytes
        self._gb: Gradebook | None = None
        self.lost: list[Record] = []  # submissions whose trusted process died: not kept, graded next run
        self.lost_runs: dict[str, int] = {}  # student -> runs in a row that lost their submission
        self.bugs: list[Record] = []  # submissions whose grading raised (a grader bug): not kept either
        self.late_changed: list[Record] = []  # results kept whose late deduction changed (see plan)

    @property
    def reserve_path(self) -> Path:
        return self.out_dir / RESERVE_NAME

    def check_space(self, n: int) -> None:
        """Refuse to start grading ``n`` submissions without room for their results and the reserve."""
        free = shutil.disk_usage(self.out_dir).free
        with contextlib.suppress(OSError):
            free += self.reserve_path.stat().st_size  # a reserve left by a killed run is ours to reuse
        needed = self.reserve_bytes + n * self.per_submission_bytes
        if free < needed:
            raise DiskFull(
                f"{self.out_dir}: {_mib(free)} free on its disk, but grading {n} submission(s) needs up to "
                f"{_mib(needed)} ({_mib(self.reserve_bytes)} reserve + {_mib(self.per_submission_bytes)} "
                "per submission)",
                "Free space on that disk, or pass --out on a disk with more room; results already in the "
                "gradebook are kept and not graded again.",
            )

    def hold_reserve(self) -> None:
        """Preallocate the reserve file (blocks really taken, not a sparse file)."""
        if self.reserve_bytes <= 0:
            return
        fd = os.open(self.reserve_path, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            try:
                os.posix_fallocate(fd, 0, self.reserve_bytes)
            except OSError as exc:
                if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                    raise
                chunk = b"\0" * MiB  # a file system without fallocate: write it
                for _ in range(0, self.reserve_bytes, MiB):
                    os.write(fd, chunk)
        except OSError as exc:
            os.close(fd)
            self.release_reserve()
            if is_disk_full(exc):
                raise DiskFull(
                    f"{self.out_dir}: no room for the {_mib(self.reserve_bytes)} reserve that keeps results safe "
                    "when the disk fills",
                    "Free space on that disk, or pass --out on a disk with more room.",
                ) from None
            raise
        os.close(fd)

    def release_reserve(self) -> bool:
        """Give the reserve's room back; whether there was one."""
        try:
            self.reserve_path.unlink()
        except FileNotFoundError:
            return False
        return True

    @property
    def gradebook(self) -> Gradebook:
        if self._gb is None:
            raise RuntimeError("use the batch inside `with`")
        return self._gb

    def __enter__(self) -> Batch:
        a = self.assignment
        points = round(sum(collect_points(a).values()), 6)  # a broken test file stops here, before any file is made
        self._gb = Gradebook(self.out_dir / "gradebook.db")
        entry = a.course.assignments[a.name]
        self._gb.set_assignment(
            AssignmentInfo(
                name=a.name,
                title=a.title,
                course=a.course.course,
                canvas_id=entry.canvas_id,
                moodle_id=entry.moodle_id,
                points_possible=points,
                version=self.version,
            )
        )
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(OSError):
            self.release_reserve()
        if self._gb is not None:
            self._gb.close()
            self._gb = None

    def plan(self, incoming: list[Incoming], *, regrade: bool = False) -> list[Incoming]:
        """The submissions that still need grading.  Those kept get the due date and late policy
        as they are now (:meth:`reapply_late`); the records whose deduction that changed are in
        :attr:`late_changed`."""
        if regrade:
            return list(incoming)
        name, todo = self.assignment.name, []
        for inc in incoming:
            kept = self.gradebook.get(name, inc.student, sha256_file(inc.path), self.version)
            if kept is None:
                todo.append(inc)
            elif self.reapply_late(kept, inc):
                self.late_changed.append(kept)
        return todo

    def reapply_late(self, rec: Record, inc: Incoming) -> bool:
        """Apply the late policy and due date as they are now to a kept record, from its score
        before any deduction, and store it where that changes it (without making it the
        student's current record if another one is).  True when its deduction changed (days,
        percent or score).  They decide no test's verdict, so moving a deadline regrades nobody.

        The submission's time and the LMS's late flag come from this run's input; where it
        carries neither and the record was late, the record's own are kept (the same notebook
        passed without its LMS's names must not forgive a deduction)."""
        late = dict(rec.late)
        if late and "raw_score" not in late:
            return False  # not a record this version wrote: its score before the deduction is unknown
        submitted_at, flag = inc.submitted_at, inc.late_flag
        if submitted_at is None and not flag and late:
            submitted_at, flag = parse_time(late.get("submitted_at")), bool(late.get("flag"))
        before = (rec.score, late)
        rec.score = finite(late["raw_score"]) if late else rec.score
        apply_late(rec, self.assignment.late_policy, self.assignment.due, submitted_at=submitted_at, flag=flag)
        if (rec.score, rec.late) == before:
            return False
        try:
            # the files first: a disk that fills up between them leaves the gradebook behind,
            # and the next run finds the difference again
            self.write_files(rec)
            self.gradebook.update(rec)
        except (OSError, sqlite3.Error) as exc:
            if not is_disk_full(exc):
                raise
            raise DiskFull(
                f"{self.out_dir}: the disk is full ({exc}) while applying the late policy to the results kept",
                "Free space on that disk (or pass --out elsewhere) and run the same command again.",
            ) from exc
        days = (late.get("days", 0), late.get("percent", 0))
        return before[0] != rec.score or days != (rec.late.get("days", 0), rec.late.get("percent", 0))

    def commit(self, rec: Record) -> None:
        """Store a result: the gradebook first (from then on it is never graded again), then its
        record file and feedback page."""
        self.gradebook.put(rec)
        self.write_files(rec)

    def write_files(self, rec: Record) -> None:
        """A result's record file and feedback page."""
        write_record(self.out_dir, rec)
        write_feedback(self.out_dir, [rec], course=self.assignment.course.course, title=self.assignment.title)

    def run(self, todo: list[Incoming], *, jobs: int = 1, on_record: Callable[[Record], None] | None = None) -> None:
        if not todo:
            return
        self.check_space(len(todo))
        self.hold_reserve()
        by_path = {inc.path: inc for inc in todo}

        commit = self.commit

        def store(path: Path, rec: Record) -> None:
            self.complete(rec, by_path[path])
            if rec.status in UNKEPT:  # not a result: the next run grades it again
                if rec.status == "lost":
                    self.note_loss(rec)
                (self.lost if rec.status == "lost" else self.bugs).append(rec)
                if on_record:
                    on_record(rec)
                return
            try:
                commit(rec)
            except (OSError, sqlite3.Error) as exc:
                if not is_disk_full(exc):
                    raise
                # the disk is full: the reserve's room lets this result through, then stop (the
                # abort ends the work in flight); a rerun grades the rest
                free = shutil.disk_usage(self.out_dir).free
                released = self.release_reserve()
                saved = False
                if released:
                    with contextlib.suppress(OSError, sqlite3.Error):
                        commit(rec)  # put() is keyed, so a second commit of the same record is harmless
                        saved = True
                if saved and on_record:
                    on_record(rec)
                raise DiskFull(
                    f"{self.out_dir}: the disk is full ({_mib(free)} free; {exc}); stopped grading. "
                    + (
                        f"{rec.student}'s result was saved from the reserve; "
                        if saved
                        else f"{rec.student} was not saved; "
                    )
                    + f"the gradebook holds {self.gradebook.count(self.assignment.name)} result(s)",
                    "Free space on that disk (or pass --out elsewhere) and run the same command again: "
                    "it grades only the submissions not yet in the gradebook.",
                ) from exc
            if on_record:
                on_record(rec)

        paths, students = [inc.path for inc in todo], {inc.path: inc.student for inc in todo}
        if self.scheduler:
            # the optional `dask` extra: imported only by a batch that asks for a cluster
            from grader.batch.cluster import grade_on_cluster

            grade_on_cluster(
                self.assignment,
                paths,
                scheduler=self.scheduler,
                students=students,
                isolation=self.isolation,
                on_result=store,
                cache=self.cache,
            )
        else:
            # in trusted worker processes even at one job: each notebook then has a deadline, and
            # one that takes its process down costs only itself (grade_many)
            grade_many(
                self.assignment,
                paths,
                jobs=jobs,
                students=students,
                isolation=self.isolation,
                on_result=store,
                cache=self.cache,
                in_workers=True,
            )
        self.release_reserve()  # its room is for finish(): grades.csv, the pages and the report

    def note_loss(self, rec: Record) -> None:
        """Count the runs that lost this submission (the gradebook remembers); from the second,
        its message says so: a one-off (a neighbour's memory, a kill) is then unlikely."""
        with contextlib.suppress(sqlite3.Error):  # only a better message: never stop the batch for it
            runs = self.gradebook.note_loss(rec)
            self.lost_runs[rec.student] = runs
            if runs > 1:
                rec.message = rec.message.replace(
                    LOST_ONCE,
                    f", and on {runs} runs in a row: it is probably this notebook that takes the grader's process "
                    "down (its memory or its output), not a one-off. It is not a score and is not kept: grade it "
                    "alone (--jobs 1), and lower its sandbox's limits in grading.yaml (limits: memory_total_bytes) "
                    "so that it fails by itself",
                )

    def complete(self, rec: Record, inc: Incoming) -> Record:
        """Add what the trusted side knows beyond the tests: identity, version, time, lateness."""
        stamp(rec, inc.identity, self.version)
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
        return cap_record(rec)  # the note above can be long (many notebooks set aside)

    def finish(self, incoming: list[Incoming] | None = None) -> list[Record]:
        """Write grades.csv, the feedback pages and report.html from the gradebook; return its records."""
        a = self.assignment
        records = self.gradebook.records(a.name)
        info = self.gradebook.assignment(a.name)
        assert info is not None  # set in __enter__
        meta = ExportMeta(name=a.name, title=a.title, points_possible=info.points_possible)
        write_atomic(self.out_dir / "grades.csv", plain_csv(records, meta))
        write_feedback(self.out_dir, records, course=a.course.course, title=a.title)
        write_report(self.out_dir, records, course=a.course.course, title=a.title, assignment=a.name)
        return records
