"""What runs inside Gradescope for each submission: ``python -m grader.gradescope.runtime ROOT``.

:func:`run` picks the notebook in ``ROOT/submission`` (:func:`find_notebook`), reads
``submission_metadata.json`` for who submitted and when, grades it as ``jaxgrade grade`` would,
and writes ``ROOT/results/results.json`` (:func:`grader.publish.exports.gradescope_results`).
Whatever goes wrong, a results.json is written: score 0 and what happened in ``output``; details
for the instructor go to stdout, which Gradescope shows only to staff.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grader import __version__
from grader.batch.run import stamp
from grader.course.config import COURSE_FILE, ConfigError, check_requirements, load_course
from grader.course.late import apply_late
from grader.gradescope.bundle import SKIP_DIRS
from grader.grading.grade import grade_many
from grader.host.sandbox import choose_isolation, isolation_warning, resource_warning
from grader.intake.collect import parse_time
from grader.intake.notebook import NotebookError, load_notebook
from grader.publish.exports import gradescope_results
from grader.publish.output import write_atomic

if TYPE_CHECKING:
    from grader.course.config import Assignment, Course
    from grader.grading.record import Record

log = logging.getLogger(__name__)

ROOT_ENV = "JAXGRADE_AUTOGRADER_ROOT"
ISOLATION_ENV = "JAXGRADE_ISOLATION"


class NoSubmission(Exception):
    """The submission has no notebook to grade, or several and no way to choose; for the student."""


@dataclass(frozen=True)
class SubmissionInfo:
    """What Gradescope says about a submission (``submission_metadata.json``), for the late policy."""

    student: str
    identity: dict[str, str]
    submitted_at: datetime | None = None
    due: datetime | None = None
    late_due: datetime | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


# The late-policy hook: called with the graded record (before results.json is written), the
# assignment and what Gradescope said; it may change ``record.score`` and set ``record.late``.
LateHook = Callable[["Record", "Assignment", SubmissionInfo], object]


def find_notebook(submission: Path, starter_name: str, assignment: str) -> Path:
    """The notebook to grade in ``submission`` (searched recursively).

    Rule: checkpoints, ``__MACOSX`` copies, hidden files and links are ignored. One notebook:
    that one. Several: the one named like the starter notebook (``starter_name``, any case);
    else the one whose jaxgrade metadata names ``assignment``; else :class:`NoSubmission`."""
    found = sorted(
        p
        for p in submission.rglob("*.ipynb")
        if not any(part in SKIP_DIRS or part.startswith(".") for part in p.relative_to(submission).parts)
        and p.is_file()
        and not p.is_symlink()
    )
    if not found:
        others = sorted(p.relative_to(submission).as_posix() for p in submission.rglob("*") if p.is_file())
        seen = f" (found: {', '.join(others[:10])})" if others else " (it is empty)"
        raise NoSubmission(
            f"No notebook (.ipynb) was found in your submission{seen}. "
            f"Upload your notebook, {starter_name}, and submit again."
        )
    if len(found) == 1:
        return found[0]
    named = [p for p in found if p.name.lower() == starter_name.lower()]
    if len(named) == 1:
        return named[0]

    def names_assignment(p: Path) -> bool:
        try:
            return load_notebook(p).assignment == assignment
        except NotebookError:
            return False

    tagged = [p for p in (named or found) if names_assignment(p)]
    if len(tagged) == 1:
        return tagged[0]
    listed = ", ".join(p.relative_to(submission).as_posix() for p in found)
    raise NoSubmission(
        f"Your submission has {len(found)} notebooks ({listed}) and the autograder cannot tell which "
        f"one to grade. Submit only your {starter_name} and submit again."
    )


def read_metadata(root: Path, notebook: Path | None) -> SubmissionInfo:
    """Who submitted and when, from ``root/submission_metadata.json`` (absent: the file's stem)."""
    path = root / "submission_metadata.json"
    meta: dict[str, Any] = {}
    if path.is_file():
        try:
            loaded = json.loads(path.read_text(encoding="utf-8"))
            meta = loaded if isinstance(loaded, dict) else {}
        except (OSError, ValueError) as exc:
            log.warning("%s could not be read: %s", path, exc)
    stem = notebook.stem if notebook is not None else "submission"
    original = notebook.name if notebook is not None else ""
    if not meta:
        identity = {"lms": "file", "id": stem}
        if original:
            identity["original"] = original
        return SubmissionInfo(student=stem, identity=identity)
    users = [u for u in meta.get("users") or [] if isinstance(u, dict)]
    first = users[0] if users else {}
    sid = str(first.get("sid") or "").strip()
    email = str(first.get("email") or "").strip()
    sub_id = str(meta.get("id") or "").strip()
    student = sid or email or (f"submission-{sub_id}" if sub_id else stem)
    identity = {"lms": "gradescope", "id": student}
    for key, value in (("name", first.get("name")), ("email", email), ("original", original)):
        if value:
            identity[key] = str(value)
    if sub_id:
        identity["submission_id"] = sub_id
    info = meta.get("assignment") if isinstance(meta.get("assignment"), dict) else {}
    return SubmissionInfo(
        student=student,
        identity=identity,
        submitted_at=parse_time(meta.get("created_at")),
        due=parse_time(info.get("due_date")),
        late_due=parse_time(info.get("late_due_date")),
        metadata=meta,
    )


def error_results(output: str) -> dict[str, Any]:
    """A results.json for a submission that could not be graded: score 0 and why."""
    return {
        "score": 0.0,
        "execution_time": 0,
        "output": output,
        "output_format": "text",
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": [],
    }


def _write_results(root: Path, results: dict[str, Any]) -> Path:
    path = root / "results" / "results.json"
    write_atomic(path, json.dumps(results, indent=2, ensure_ascii=False, allow_nan=False) + "\n")
    return path


def _pick_assignment(course: Course, name: str | None) -> str:
    if name:
        return name
    names = list(course.assignments)
    if len(names) != 1:
        raise ConfigError(
            f"{COURSE_FILE}: assignments: the autograder bundle must list exactly one assignment, "
            f"got {len(names)} ({', '.join(names) or 'none'}); rebuild it for one assignment"
        )
    return names[0]


def _bundled_assignment(root: Path, name: str | None = None) -> Assignment:
    """The assignment of the bundle unpacked in ``root/source`` (its only one, unless named)."""
    course = load_course(Path(root) / "source")
    return course.assignment(_pick_assignment(course, name))


def preflight(root: Path = Path("/autograder")) -> str:
    """What setup.sh checks once the image is built, so that a bundle the image cannot grade
    fails its build instead of giving every submission a score of 0: the bundled course loads,
    and the installed packages meet its assignment's ``requires`` (the pmap assignment needs JAX
    0.8, which an image's Python 3.10 cannot install).  Returns the line setup.sh prints; raises
    :class:`ConfigError` (an :class:`UnmetRequirementError` for ``requires``)."""
    import jax

    assignment = _bundled_assignment(root)
    check_requirements(assignment)
    return f"jaxgrade {__version__}, jax {jax.__version__}: ready to grade {assignment.name}"


def run(
    root: Path = Path("/autograder"),
    *,
    isolation: str = "auto",
    assignment_name: str | None = None,
    late: LateHook | None = None,
) -> int:
    """Grade the submission in ``root/submission`` and write ``root/results/results.json``.

    ``root/source`` is the unpacked bundle (the course subset). ``late`` is the late policy
    (see :data:`LateHook`); by default :func:`course_late_policy`. Returns 0 when a results.json was written (whatever the
    submission earned, including score 0 for a missing notebook or a grader failure), 1 when not
    even that was possible."""
    root = Path(root)
    try:
        assignment = _bundled_assignment(root, assignment_name)
        name = assignment.name
        try:
            notebook = find_notebook(root / "submission", assignment.starter.name, name)
        except NoSubmission as exc:
            print(f"jaxgrade autograder: not graded: {exc}")
            _write_results(root, error_results(str(exc)))
            return 0
        info = read_metadata(root, notebook)
        print(f"jaxgrade autograder {__version__}: grading {notebook} as {info.student} ({name})", flush=True)
        rec = _grade(assignment, notebook, info, isolation)
        (late or course_late_policy)(rec, assignment, info)
        print(f"jaxgrade autograder: {rec.score:g}/{rec.max_score:g} {rec.status} ({rec.isolation})", flush=True)
        _write_results(root, gradescope_results(rec))
        return 0
    except BaseException as exc:  # never leave Gradescope without results
        traceback.print_exc(file=sys.stdout)
        text = (
            "The autograder failed, so this submission was not graded "
            f"({type(exc).__name__}: {str(exc)[:500]}). Please tell your instructor."
        )
        try:
            _write_results(root, error_results(text))
        except Exception:
            traceback.print_exc(file=sys.stdout)
            return 1
        if isinstance(exc, KeyboardInterrupt):
            raise
        return 0


def course_late_policy(rec: Record, assignment: Assignment, info: SubmissionInfo) -> None:
    """The default late hook: grading.yaml's late policy, against grading.yaml's due date when it
    has one, else Gradescope's (``assignment.due_date`` in the submission metadata)."""
    apply_late(rec, assignment.late_policy, assignment.due or info.due, submitted_at=info.submitted_at)


def _grade(assignment: Assignment, notebook: Path, info: SubmissionInfo, isolation: str) -> Record:
    warning = isolation_warning(choose_isolation(isolation))
    if warning:
        print(f"jaxgrade autograder: {warning}", flush=True)
    for line in (resource_warning() or "").splitlines():
        print(f"jaxgrade autograder: {line}", flush=True)
    rec = grade_many(assignment, [notebook], jobs=1, students={notebook: info.student}, isolation=isolation)[notebook]
    return stamp(rec, info.identity, assignment.version())


def main(argv: list[str] | None = None) -> int:
    """``python -m grader.gradescope.runtime [ROOT] [--isolation auto|bwrap|process] [--assignment NAME]``."""
    p = argparse.ArgumentParser(prog="python -m grader.gradescope.runtime", description=__doc__.splitlines()[0])
    p.add_argument("root", nargs="?", default=os.environ.get(ROOT_ENV, "/autograder"))
    p.add_argument("--isolation", choices=("auto", "bwrap", "process"), default=os.environ.get(ISOLATION_ENV) or "auto")
    p.add_argument("--assignment", help="the assignment to grade (default: the only one in the bundle)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stdout)
    return run(Path(args.root), isolation=args.isolation, assignment_name=args.assignment)


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["LateHook", "NoSubmission", "SubmissionInfo", "find_notebook", "main", "run"]
