"""HTML pages rendered from result records: one feedback page per student and a report for the class.

Both pages are self-contained (inline CSS, the histogram as a data URI, no script, no external
resource) and rendered by Jinja2 with autoescaping on, because student-controlled text (values in
failure messages, cell errors, names taken from LMS file names) lands in them.  A Content-Security-
Policy meta tag forbids scripts besides, so a slip in escaping could not run code.

The student's page never shows what a hidden test was run on: for every test whose visibility is
not ``"visible"`` the parametrization id in its name (``test_x[3-4]``) becomes a case number
(``test_x[case 2]``), and only its title, verdict, message and hint are shown.

Stable hooks for tests and scripts (numbers in ``data-*`` attributes are exact decimals, the text
is for people):

- feedback page: ``#course``, ``#assignment``, ``#assignment-title``, ``#student-name``,
  ``#student-id``, ``#score`` / ``#max-score`` (``data-value``), ``#status`` (``data-status``),
  ``#message``, ``#late`` (``data-days``, ``data-percent``, ``data-raw-score``, ``data-final-score``)
  with ``#late-days``, ``#late-percent``, ``#raw-score``, ``#final-score``; ``#passed-count``,
  ``#test-count``; ``tr.category`` (``data-category``, ``data-score``, ``data-max-score``);
  ``#tests tr.test`` (``data-name``, ``data-category``, ``data-status``, ``data-score``,
  ``data-max-score``, ``data-visibility``); ``#cells li.cell`` (``data-index``, ``data-status``,
  ``data-ename``, ``data-line``); ``#cells-hidden`` (``data-count``: cells not shown, the page
  being capped); ``#truncated`` (the record was cut: see its ``truncated``); ``#missing
  li.missing`` (``data-name``).
- report: ``#count``, ``#mean``, ``#median``, ``#max``, ``#min``, ``#possible`` (each with
  ``data-value``), ``#errored``, ``#timed-out``, ``img#histogram``; ``tr.test-rate`` (``data-name``,
  ``data-passed``, ``data-total``, ``data-rate``), ``tr.category-rate`` (``data-category``,
  ``data-score``, ``data-max-score``, ``data-rate``), ``tr.slow`` (``data-student``,
  ``data-seconds``), ``tr.failed-submission`` (``data-student``, ``data-status``), ``tr.student``
  (``data-student``, ``data-score``, ``data-max-score``, ``data-status``) with ``a.feedback-link``.
"""

from __future__ import annotations

import base64
import io
import statistics
import urllib.parse
from collections import Counter
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2

from grader import __version__
from grader.errors import cell_paths_named
from grader.grading.record import CATEGORIES, Record, TestResult
from grader.publish.output import safe_name, write_atomic

SLOWEST = 10  # notebooks listed in the report's "slowest" table
REVIEW_SHOWN = 5  # findings listed per notebook in the report's "Notebooks to read" table
CLIP = 4000  # characters of one message, error value or output shown on a page
PAGE_CELLS = 50  # failing cells listed on a page; the rest are counted (#cells-hidden)
PAGE_MAX_BYTES = 400_000  # a feedback page's cap: fewer cells are shown until it fits
HIST_SIZE = (640, 300)  # pixels

STATUS_TEXT = {
    "graded": "graded",
    "error": "not graded: the notebook could not be run",
    "timeout": "not graded: the notebook ran out of time",
    "lost": "not graded: the grader lost its own process (not a score; graded again by the next run)",
}
VERDICT_TEXT = {"passed": "passed", "failed": "failed", "error": "error"}


# --------------------------------------------------------------------------- helpers


def num(x: float) -> str:
    """An exact-enough decimal for a data attribute: 36, 0.5, 12.333333 (never 1e+01 or 36.0)."""
    value = round(float(x), 6)
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.15g}"


def fmt(x: float) -> str:
    """A number for people, as the command line prints scores."""
    return f"{round(float(x), 6):g}"


def clip(text: Any, limit: int = CLIP) -> str:
    text = "" if text is None else str(text)
    return text if len(text) <= limit else text[:limit] + "… (cut)"


def feedback_file_name(student: str) -> str:
    """The feedback page's file name for a student, in DIR/feedback/."""
    return f"{safe_name(student)}.html"


def feedback_href(student: str) -> str:
    """The link from DIR/report.html to a student's feedback page."""
    return "feedback/" + urllib.parse.quote(feedback_file_name(student))


def shown_names(tests: list[TestResult]) -> list[str]:
    """The names a student sees: hidden tests' parametrization ids replaced by case numbers.

    ``test_x[3-4]`` -> ``test_x[case 2]`` when it is the second case of ``test_x`` in the record;
    visible tests keep their full names.
    """
    counts: Counter[str] = Counter()
    out: list[str] = []
    for t in tests:
        base, bracket, _ = t.name.partition("[")
        if t.visibility == "visible" or not bracket:
            out.append(t.name)
        else:
            counts[base] += 1
            out.append(f"{base}[case {counts[base]}]")
    return out


@lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("grader.publish", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["num"] = num
    env.filters["fmt"] = fmt
    env.globals["version"] = __version__
    return env


def _render(template: str, **context: Any) -> str:
    return _env().get_template(template).render(**context)


# --------------------------------------------------------------------------- one student


def _identity(record: Record) -> dict[str, str]:
    ident = record.identity or {}
    return {
        "name": str(ident.get("name") or ""),
        "id": str(record.student),
        "email": str(ident.get("email") or ""),
        "original": str(ident.get("original") or ""),
    }


def _late(record: Record) -> dict[str, Any] | None:
    late = record.late or {}
    if not late:
        return None
    days = int(late.get("days") or 0)
    percent = float(late.get("percent") or 0.0)
    raw = late.get("raw_score")
    raw_score = float(raw) if raw is not None else float(record.score)
    return {
        "days": days,
        "days_text": f"{days} day" + ("" if days == 1 else "s"),
        "percent": percent,
        "raw_score": raw_score,
        "final_score": float(record.score),
        "submitted_at": str(late.get("submitted_at") or ""),
        "due": str(late.get("due") or ""),
        "flag": bool(late.get("flag")),
    }


def _cell(c: dict[str, Any]) -> dict[str, Any]:
    index = int(c.get("index", 0))
    where = f"cell {index + 1}"
    line = c.get("line")
    if line and c.get("line_cell") is not None:
        where += f" (line {line} of cell {int(c['line_cell']) + 1})"
    elif line:
        where += f", line {line}"
    status = str(c.get("status", ""))
    ename = str(c.get("ename") or "")
    if ename:
        what = f"{ename}: {cell_paths_named(str(c.get('evalue', '')))}"
    else:
        what = str(c.get("message") or status)
    return {
        "index": index,
        "where": where,
        "status": status,
        "ename": ename,
        "line": "" if line is None else str(line),
        "what": clip(what),
        "source": clip(c.get("source") or "", 500),
        "strays": int(c.get("strays") or 0),
        "output": clip(c.get("output") or "", 2000),
    }


def _tests(record: Record) -> list[dict[str, Any]]:
    rows = []
    for t, shown in zip(record.tests, shown_names(record.tests)):
        message = t.message or ""
        if shown != t.name:
            message = message.replace(t.name, shown)
        rows.append(
            {
                "name": shown,
                "title": t.title,
                "category": t.category,
                "score": t.score,
                "max_score": t.max_score,
                "status": t.status,
                "verdict": VERDICT_TEXT.get(t.status, t.status),
                "visibility": "visible" if t.visibility == "visible" else "hidden",
                "message": clip(message),
                "hint": clip(t.hint or ""),
            }
        )
    return rows


def feedback_context(record: Record, *, course: str, title: str) -> dict[str, Any]:
    """What the feedback page shows, as plain data (the template only lays it out)."""
    tests = _tests(record)
    cats = record.categories()
    return {
        "course": course,
        "title": title,
        "assignment": record.assignment,
        "student": _identity(record),
        "score": record.score,
        "max_score": record.max_score,
        "status": record.status,
        "status_text": STATUS_TEXT.get(record.status, record.status),
        "message": clip(record.message),
        "late": _late(record),
        "tests": tests,
        "passed": sum(t["status"] == "passed" for t in tests),
        "categories": [{"name": c, "score": s, "max_score": m} for c, (s, m) in cats.items()],
        "cells": [_cell(c) for c in record.cells[:PAGE_CELLS]],
        "cells_hidden": max(0, len(record.cells) - PAGE_CELLS) + int(record.truncated.get("cells_dropped", 0)),
        "truncated": bool(record.truncated),
        "missing": [str(m) for m in record.missing],
        "graded_at": record.graded_at,
        "grader_version": record.grader_version,
    }


def feedback_html(record: Record, *, course: str, title: str) -> str:
    """One student's feedback page, under PAGE_MAX_BYTES however many cells failed."""
    ctx = feedback_context(record, course=course, title=title)
    html = _render("feedback.html", **ctx)
    while len(html.encode("utf-8")) > PAGE_MAX_BYTES and len(ctx["cells"]) > 1:
        keep = len(ctx["cells"]) // 2
        ctx["cells_hidden"] += len(ctx["cells"]) - keep
        ctx["cells"] = ctx["cells"][:keep]
        html = _render("feedback.html", **ctx)
    return html


def write_feedback(out_dir: Path, records: Iterable[Record], *, course: str, title: str) -> list[Path]:
    """Write DIR/feedback/<student>.html for each record (atomically); returns the paths written."""
    paths: list[Path] = []
    for record in records:
        path = Path(out_dir) / "feedback" / feedback_file_name(record.student)  # one file per id (safe_name)
        write_atomic(path, feedback_html(record, course=course, title=title))
        if path not in paths:
            paths.append(path)
    return paths


# --------------------------------------------------------------------------- the class


def histogram_png(scores: list[float], max_score: float) -> bytes:
    """A PNG histogram of the scores over [0, max_score] (matplotlib, no global backend)."""
    import numpy as np
    from matplotlib.figure import Figure

    top = max([float(max_score), *scores, 1.0])
    if float(top).is_integer() and top <= 40:
        edges = np.arange(-0.5, top + 1.0, 1.0)  # one bar per whole point, centred on it
    else:
        edges = np.linspace(0.0, top, 21)
    dpi = 100
    fig = Figure(figsize=(HIST_SIZE[0] / dpi, HIST_SIZE[1] / dpi), dpi=dpi, layout="constrained")
    ax = fig.add_subplot()
    ax.hist(scores, bins=edges, color="#3b6ea8", edgecolor="white")
    if scores:
        mean = statistics.fmean(scores)
        ax.axvline(mean, color="#b23b3b", linestyle="--", linewidth=1.2, label=f"mean {mean:.2f}")
        ax.legend(loc="upper left", frameon=False)
    ax.set_xlim(edges[0], edges[-1])
    ax.set_xlabel(f"score (of {fmt(max_score)} points)")
    ax.set_ylabel("submissions")
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.spines[["top", "right"]].set_visible(False)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, metadata={"Software": None})
    return buf.getvalue()


def _stats(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"mean": None, "median": None, "max": None, "min": None}
    return {
        "mean": statistics.fmean(values),
        "median": float(statistics.median(values)),
        "max": max(values),
        "min": min(values),
    }


def report_context(records: list[Record], *, course: str, title: str, assignment: str) -> dict[str, Any]:
    """What the class report shows, as plain data (the template only lays it out)."""
    records = sorted(records, key=lambda r: r.student)
    scores = [float(r.score) for r in records]
    possible = max((float(r.max_score) for r in records), default=0.0)
    stats = _stats(scores)

    rates: dict[str, dict[str, Any]] = {}
    for r in records:
        for t in r.tests:
            e = rates.setdefault(
                t.name,
                {
                    "name": t.name,
                    "title": t.title,
                    "category": t.category,
                    "max_score": t.max_score,
                    "visibility": "visible" if t.visibility == "visible" else "hidden",
                    "passed": 0,
                    "total": 0,
                },
            )
            e["total"] += 1
            e["passed"] += t.status == "passed"
    for e in rates.values():
        e["rate"] = 100.0 * e["passed"] / e["total"]

    per_cat: dict[str, list[float]] = {}
    for r in records:
        for c, (s, m) in r.categories().items():
            acc = per_cat.setdefault(c, [0.0, 0.0])
            acc[0] += s
            acc[1] += m
    order = [c for c in CATEGORIES if c in per_cat] + sorted(c for c in per_cat if c not in CATEGORIES)
    categories = [
        {
            "name": c,
            "score": per_cat[c][0],
            "max_score": per_cat[c][1],
            "rate": 100.0 * per_cat[c][0] / per_cat[c][1] if per_cat[c][1] else 0.0,
        }
        for c in order
    ]

    timed = [r for r in records if "total" in (r.timings or {})]
    slowest = sorted(timed, key=lambda r: (-float(r.timings["total"]), r.student))[:SLOWEST]

    def row(r: Record) -> dict[str, Any]:
        late = r.late or {}
        return {
            "student": r.student,
            "name": str((r.identity or {}).get("name") or ""),
            "score": r.score,
            "max_score": r.max_score,
            "status": r.status,
            "message": clip(r.message, 600),
            "late_days": int(late.get("days") or 0) if late else None,
            "seconds": float((r.timings or {}).get("total", 0.0)),
            "href": feedback_href(r.student),
        }

    histogram = None
    if records:
        png = histogram_png(scores, possible)
        histogram = {
            "src": "data:image/png;base64," + base64.b64encode(png).decode("ascii"),
            "alt": (
                f"Histogram of the scores of {len(records)} submission(s) out of {fmt(possible)} points: "
                f"mean {stats['mean']:.2f}, median {fmt(stats['median'] or 0)}, "
                f"lowest {fmt(stats['min'] or 0)}, highest {fmt(stats['max'] or 0)}."
            ),
            "width": HIST_SIZE[0],
            "height": HIST_SIZE[1],
        }

    return {
        "course": course,
        "title": title,
        "assignment": assignment,
        "count": len(records),
        "possible": possible,
        "stats": stats,
        "errored": sum(r.status == "error" for r in records),
        "timed_out": sum(r.status == "timeout" for r in records),
        "graded": sum(r.status == "graded" for r in records),
        "histogram": histogram,
        "tests": list(rates.values()),
        "categories": categories,
        "slowest": [row(r) for r in slowest],
        "failed": [row(r) for r in records if r.status in ("error", "timeout")],
        "review": [
            {
                **row(r),
                "findings": [_finding(f) for f in r.review[:REVIEW_SHOWN]],
                "more": max(0, len(r.review) - REVIEW_SHOWN),
            }
            for r in records
            if r.review
        ],
        "students": [row(r) for r in records],
    }


def _finding(f: dict[str, Any]) -> dict[str, Any]:
    """One review finding (grader/intake/review.py) as the report shows it: plain, clipped text."""
    return {
        "cell": int(f.get("cell") or 0),
        "line": int(f.get("line") or 0),
        "why": clip(f.get("why", ""), 80),
        "what": clip(f.get("what", ""), 80),
        "code": clip(f.get("code", ""), 200),
    }


def report_html(records: list[Record], *, course: str, title: str, assignment: str) -> str:
    """The class report: summary, histogram, pass rates, slow and failed submissions, every student."""
    ctx = report_context(list(records), course=course, title=title, assignment=assignment)
    return _render("report.html", **ctx)


def write_report(out_dir: Path, records: Iterable[Record], *, course: str, title: str, assignment: str) -> Path:
    """Write DIR/report.html (atomically); its links point at DIR/feedback/<student>.html."""
    path = Path(out_dir) / "report.html"
    write_atomic(path, report_html(list(records), course=course, title=title, assignment=assignment))
    return path


__all__ = [
    "feedback_context",
    "feedback_file_name",
    "feedback_href",
    "feedback_html",
    "histogram_png",
    "report_context",
    "report_html",
    "shown_names",
    "write_feedback",
    "write_report",
]
