"""Grade exports for the LMS, derived from stored result records only (nothing is regraded).

Every export keeps one row per student (the most recently graded record, :func:`one_per_student`),
passes every text cell through :func:`grader.publish.output.spreadsheet_safe` (a cell that
begins with ``=``, ``+``, ``-`` or ``@`` is quoted and never runs as a formula), and writes
scores as plain decimals (``40``, ``33.5``).  Each format's columns are in its function's docstring.
"""

from __future__ import annotations

import csv
import html
import io
import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from grader.course.late import days_text, describe
from grader.grading.record import CATEGORIES, Record, finite, format_score
from grader.publish.feedback import shown_names
from grader.publish.output import safe_name, spreadsheet_safe, write_atomic

CANVAS_FIXED = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")
MOODLE_COLUMNS = (
    "Identifier",
    "Full name",
    "Email address",
    "Grade",
    "Maximum Grade",
    "Last modified (grade)",
    "Feedback comments",
)
MOODLE_PARTICIPANT = "Participant "  # Moodle's get_string('hiddenuser', 'assign')
GRADESCOPE_VISIBILITY = ("visible", "after_due_date")  # kept; anything else is "after_published"


class ExportError(Exception):
    """An export cannot be written from these records; the message names the setting to fix.
    ``setting`` is the grading.yaml key to set under the assignment, when that is the fix."""

    def __init__(self, message: str, *, setting: str | None = None) -> None:
        super().__init__(message)
        self.setting = setting


@dataclass(frozen=True)
class ExportMeta:
    """What an export needs to know about the assignment."""

    name: str
    title: str
    points_possible: float
    canvas_id: str | None = None
    moodle_id: str | None = None


# --------------------------------------------------------------------------- helpers


_num = finite  # a finite float of an untrusted JSON value


def _cell(value: Any) -> str:
    return spreadsheet_safe("" if value is None else str(value))


def _csv(rows: Iterable[list[str]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    for row in rows:
        w.writerow(row)
    return buf.getvalue()


def one_per_student(records: list[Record]) -> list[Record]:
    """One record per student key (the most recently graded), sorted by student key."""
    best: dict[str, tuple[str, int, Record]] = {}
    for i, r in enumerate(records):
        key = (r.graded_at or "", i)
        if r.student not in best or key >= best[r.student][:2]:
            best[r.student] = (*key, r)
    return [best[s][2] for s in sorted(best)]


def _name(r: Record) -> str:
    return r.identity.get("name") or r.student


def _iso_utc(text: str) -> str:
    """``text`` (ISO 8601) as ``YYYY-MM-DDTHH:MM:SS+00:00``; unparsable text is kept as is."""
    if not text:
        return ""
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return text
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.astimezone(timezone.utc).isoformat(timespec="seconds")


def late_text(record: Record) -> str:
    """One line on the late deduction, e.g. ``2 days late: -20% (40 -> 32)``; "" when on time."""
    return describe(record.late or {}, record.score)


def summary(record: Record) -> str:
    """A short plain-text summary: score, status, late deduction, failed tests by name.

    Students read it (a Canvas or Moodle comment), so tests are named as on the feedback page
    (:func:`grader.publish.feedback.shown_names`): a hidden test's parametrization id, which can
    carry its inputs, becomes a case number."""
    parts = [f"Score {format_score(record.score)}/{format_score(record.max_score)}."]
    if record.status != "graded":
        why = " ".join(record.message.split())[:200]
        parts.append(f"Status: {record.status}" + (f" ({why})." if why else "."))
    late = late_text(record)
    if late:
        parts.append(f"Late: {late}.")
    if record.missing:
        parts.append(f"Missing: {', '.join(record.missing)}.")
    failed = [shown for t, shown in zip(record.tests, shown_names(record.tests)) if t.status != "passed"]
    if failed:
        parts.append(f"Failed {len(failed)} of {len(record.tests)} tests: {', '.join(failed)}.")
    elif record.tests:
        parts.append(f"All {len(record.tests)} tests passed.")
    return " ".join(parts)


# --------------------------------------------------------------------------- Canvas


def canvas_user_id(record: Record) -> str:
    """The Canvas user id of ``record``'s student, "" when its identity is not from Canvas (an id
    from another system could be another Canvas user's)."""
    ident = record.identity
    return ident.get("id", "") if ident.get("lms") == "canvas" else ""


def canvas_csv(records: list[Record], meta: ExportMeta) -> str:
    """Canvas's gradebook import CSV for one assignment.

    Canvas: the gradebook import CSV (Grades > Import)
        ``Student,ID,SIS User ID,SIS Login ID,Section,<title> (<canvas_id>)``, then a
        ``Points Possible`` row (``Points Possible,,,,,<points>``), then one row per student:

        ==================  ==========================================================
        Canvas column       from the record
        ==================  ==========================================================
        Student             ``identity.name``, else the student key
        ID                  ``identity.id`` when ``identity.lms`` is ``canvas`` (the
                            Canvas user id), else empty: an id from another system
                            could match the wrong Canvas user, and Canvas's import
                            preview matches a row without an id by name instead
        SIS User ID         ``identity.sis_id``
        SIS Login ID        ``identity.sis_login_id``
        Section             ``identity.section``
        <title> (<id>)      ``record.score`` (after any late deduction); Canvas finds
                            the assignment by the id in parentheses
        ==================  ==========================================================

        Needs ``canvas_id`` in the assignment's entry in ``grading.yaml``
        (:class:`ExportError` otherwise).
    """
    if not meta.canvas_id:
        raise ExportError(
            f'assignment {meta.name!r} has no Canvas id: add `canvas_id: "<id>"` under '
            f"assignments.{meta.name} in grading.yaml (the number in the Canvas assignment's URL, "
            ".../assignments/<id>), then export again",
            setting="canvas_id",
        )
    rows = [
        [*CANVAS_FIXED, _cell(f"{meta.title} ({meta.canvas_id})")],
        ["Points Possible", "", "", "", "", format_score(meta.points_possible)],
    ]
    for r in one_per_student(records):
        ident = r.identity
        rows.append(
            [
                _cell(_name(r)),
                _cell(canvas_user_id(r)),
                _cell(ident.get("sis_id", "")),
                _cell(ident.get("sis_login_id", "")),
                _cell(ident.get("section", "")),
                format_score(r.score),
            ]
        )
    return _csv(rows)


# --------------------------------------------------------------------------- Moodle


def moodle_participant(record: Record) -> str | None:
    """Moodle's participant number for ``record`` (digits), or None when it has none.

    Only an identity from Moodle (``identity.lms == "moodle"``) counts: a number from another
    system could be another Moodle participant's."""
    ident = record.identity
    if ident.get("lms") != "moodle":
        return None
    pid = (ident.get("id") or "").strip().removeprefix(MOODLE_PARTICIPANT).strip()
    return pid if pid.isdigit() else None


def moodle_csv(records: list[Record], meta: ExportMeta) -> str:
    """Moodle's offline grading worksheet for one assignment.

    Moodle: the assignment's offline grading worksheet (Assignment > View all submissions >
    Grading action: Upload grading worksheet; the assignment's "Offline grading worksheet"
    feedback type must be enabled)
        ``Identifier,Full name,Email address,Grade,Maximum Grade,Last modified (grade),Feedback comments``.
        Moodle reads its columns by their (English) names: ``Identifier`` (required),
        ``Grade`` (required), ``Last modified (grade)`` (required: Moodle refuses a worksheet
        without it, and skips a row whose grade was changed in Moodle more than a minute after
        this time unless "Allow updating records that have been modified more recently in Moodle
        than in the spreadsheet" is ticked), and ``Feedback comments`` (read when the "Feedback
        comments" feedback type is enabled); the other columns are for people.

        =======================  =====================================================
        Moodle column            from the record
        =======================  =====================================================
        Identifier               ``Participant <identity.id>`` (Moodle's participant
                                 number, from the ``..._<id>_assignsubmission_file_``
                                 folder of Moodle's download; only when
                                 ``identity.lms`` is ``moodle``); a record without one
                                 is an :class:`ExportError`, because Moodle would
                                 silently skip its row
        Full name                ``identity.name``, else the student key
        Email address            ``identity.email``
        Grade                    ``record.score`` (after any late deduction)
        Maximum Grade            ``meta.points_possible`` (Moodle skips a grade above
                                 the assignment's own maximum grade)
        Last modified (grade)    ``record.graded_at`` (ISO 8601, UTC)
        Feedback comments        plain text: score, status, late deduction, failed
                                 tests by name as on the feedback page (a hidden
                                 test's parameter ids replaced by a case number;
                                 HTML special characters escaped, since Moodle
                                 shows comments as HTML)
        =======================  =====================================================

        ``moodle_id`` is not part of the worksheet (it is uploaded into the assignment it came from).
    """
    chosen = one_per_student(records)
    ids = {r.student: moodle_participant(r) for r in chosen}
    lacking = [s for s, pid in ids.items() if pid is None]
    if lacking:
        shown = ", ".join(lacking[:5]) + (f" and {len(lacking) - 5} more" if len(lacking) > 5 else "")
        raise ExportError(
            f"{len(lacking)} record(s) of assignment {meta.name!r} have no Moodle participant number "
            f"({shown}); Moodle matches worksheet rows by 'Participant <number>' and would skip them. "
            "Grade the submissions from Moodle's 'Download all submissions' zip, whose folder names "
            "carry the participant numbers"
        )
    rows = [list(MOODLE_COLUMNS)]
    for r in chosen:
        rows.append(
            [
                f"{MOODLE_PARTICIPANT}{ids[r.student]}",
                _cell(_name(r)),
                _cell(r.identity.get("email", "")),
                format_score(r.score),
                format_score(meta.points_possible),
                _iso_utc(r.graded_at),
                _cell(html.escape(summary(r), quote=False)),
            ]
        )
    return _csv(rows)


# --------------------------------------------------------------------------- plain CSV


def plain_csv(records: list[Record], meta: ExportMeta) -> str:
    """The grades table, one row per student, with name, email and the late deduction."""
    chosen = one_per_student(records)
    cats = [c for c in CATEGORIES if any(c in r.categories() for r in chosen)]
    rows = [
        [
            "student",
            "name",
            "email",
            "assignment",
            "score",
            "max_score",
            "status",
            *cats,
            "raw_score",
            "late_days",
            "late_percent",
            "submitted_at",
            "graded_at",
            "submission_sha256",
            "message",
        ]
    ]
    for r in chosen:
        per = r.categories()
        late = r.late or {}
        rows.append(
            [
                _cell(r.student),
                _cell(r.identity.get("name", "")),
                _cell(r.identity.get("email", "")),
                _cell(r.assignment or meta.name),
                format_score(r.score),
                format_score(r.max_score),
                _cell(r.status),
                *(format_score(per[c][0]) if c in per else "" for c in cats),
                format_score(late.get("raw_score", r.score)),
                str(int(_num(late.get("days", 0)))),
                format_score(late.get("percent", 0)),
                _cell(late.get("submitted_at") or ""),
                _cell(r.graded_at),
                _cell(r.submission_sha256),
                _cell(r.message[:300]),
            ]
        )
    return _csv(rows)


# --------------------------------------------------------------------------- Gradescope


def _gradescope_visibility(value: str) -> str:
    """Public tests stay visible; hidden tests show once the grades are published (Gradescope's
    "hidden" would also hide the student's total score, so it is never used)."""
    return value if value in GRADESCOPE_VISIBILITY else "after_published"


def _overall_output(record: Record) -> str:
    """The submission-level text. Students see it at once, so while hidden tests wait for the
    grades to be published it gives only what the public tests show (Gradescope likewise hides
    the total score then)."""
    public = [t for t in record.tests if _gradescope_visibility(t.visibility) == "visible"]
    held = len(record.tests) - len(public)
    passed = sum(t.status == "passed" for t in public)
    if held:
        earned = format_score(sum(_num(t.score) for t in public))
        possible = format_score(sum(_num(t.max_score) for t in public))
        lines = [
            f"{record.assignment}: {passed}/{len(public)} public tests passed ({earned}/{possible} points); "
            f"the results of {held} hidden test{'s' if held != 1 else ''} and the total score are shown "
            "when grades are published."
        ]
    elif record.tests:
        lines = [
            f"{record.assignment}: {format_score(record.score)}/{format_score(record.max_score)} points; "
            f"{passed}/{len(public)} tests passed."
        ]
    else:
        lines = [f"{record.assignment}: {format_score(record.score)}/{format_score(record.max_score)} points."]
    late = record.late or {}
    if late.get("days") and late.get("percent"):  # late without a policy that deducts: nothing to say
        if held:
            lines.append(f"Late deduction: {days_text(late)}: -{format_score(late.get('percent'))}%.")
        else:
            lines.append(f"Late deduction: {late_text(record)}.")
    if record.status == "timeout":
        lines.append("Grading ran out of time; tests that did not run earn no points.")
    elif record.status == "error":
        lines.append("Your notebook could not be graded completely.")
    if record.message:
        lines.append(record.message)
    if record.missing:
        lines.append(f"Not defined when the notebook runs top to bottom: {', '.join(record.missing)}.")
    for c in record.cells:
        where = f"cell {int(_num(c.get('index', 0))) + 1}"
        if c.get("line") and c.get("line_cell") is not None:
            where += f" (line {c['line']} of cell {int(_num(c['line_cell'])) + 1})"
        elif c.get("line"):
            where += f", line {c['line']}"
        what = f"{c.get('ename')}: {c.get('evalue', '')}" if c.get("ename") else c.get("message", c.get("status", ""))
        first = str(what).splitlines()[0] if what else ""
        lines.append(f"{where}: {c.get('status', '')}: {first}")
    return "\n".join(lines)


def _test_output(t: Any) -> str:
    lines = [t.title] if t.title else []
    if t.status != "passed":
        if t.message:
            lines.append(t.message)
        if t.hint:
            lines.append(f"Hint: {t.hint}")
        if t.status == "error":
            lines.append("(This test could not run: a problem in the grader, not in your work.)")
    return "\n".join(lines)


def gradescope_results(record: Record) -> dict[str, Any]:
    """One submission's Gradescope ``results.json`` (a JSON-ready dict; never NaN).

    Gradescope: one ``results.json`` per submission (the autograder specification)
        ``score`` (``record.score``, after any late deduction; Gradescope takes it over the sum
        of the tests), ``execution_time`` (seconds), ``output`` (status, late deduction, missing
        functions, cells that failed; while hidden tests wait for publication it states only the
        public tests' points, never the total), ``output_format``/``test_output_format``/``test_name_format``
        ``text`` (nothing a student wrote is rendered as HTML), ``visibility`` ``visible``,
        ``stdout_visibility`` ``hidden``, ``extra_data`` (record keys), and ``tests[]``: ``name``
        (as on the feedback page: a hidden test's parameter ids become a case number),
        ``number``, ``score``, ``max_score``, ``status`` (``passed``, else ``failed``), ``output``
        (title, message, hint), ``tags`` (the category) and ``visibility`` (public tests
        ``visible``, hidden tests ``after_published``).  Non-finite numbers are written as 0.
    """
    tests = [
        {
            "name": shown,
            "number": str(i),
            "score": _num(t.score),
            "max_score": _num(t.max_score),
            "status": "passed" if t.status == "passed" else "failed",
            "output": _test_output(t),
            "tags": [t.category] if t.category else [],
            "visibility": _gradescope_visibility(t.visibility),
        }
        for i, (t, shown) in enumerate(zip(record.tests, shown_names(record.tests)), start=1)
    ]
    return {
        "score": _num(record.score),
        "execution_time": round(_num(record.timings.get("total", 0.0))),
        "output": _overall_output(record),
        "output_format": "text",
        "test_output_format": "text",
        "test_name_format": "text",
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "extra_data": {
            "assignment": record.assignment,
            "student": record.student,
            "status": record.status,
            "max_score": _num(record.max_score),
            "raw_score": _num((record.late or {}).get("raw_score", record.score)),
            "submission_sha256": record.submission_sha256,
            "grader_version": record.grader_version,
            "assignment_version": record.assignment_version,
            "isolation": record.isolation,
        },
        "tests": tests,
    }


def gradescope_json(record: Record) -> str:
    """:func:`gradescope_results` as JSON text (NaN is refused, never written)."""
    return json.dumps(gradescope_results(record), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def write_gradescope(records: list[Record], out: Path) -> list[Path]:
    """``out/<student>/results.json`` for each student (file names from :func:`safe_name`)."""
    paths = []
    for r in one_per_student(records):  # safe_name gives each id a folder of its own
        path = Path(out) / safe_name(r.student) / "results.json"
        write_atomic(path, gradescope_json(r))
        paths.append(path)
    return paths


__all__ = [
    "ExportError",
    "ExportMeta",
    "canvas_csv",
    "canvas_user_id",
    "format_score",
    "gradescope_json",
    "gradescope_results",
    "moodle_csv",
    "one_per_student",
    "plain_csv",
    "summary",
    "write_gradescope",
]
