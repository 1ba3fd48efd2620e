"""The result record of one graded submission, and scoring as a pure function of test outcomes."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

Category = Literal["numerics", "jit", "vectorization", "purity", "prng", "structure", "parallelism"]
CATEGORIES: tuple[str, ...] = ("numerics", "jit", "vectorization", "purity", "prng", "structure", "parallelism")
TestStatus = Literal["passed", "failed", "error"]
Visibility = Literal["visible", "hidden", "after_due_date", "after_published"]
RECORD_VERSION = 1


@dataclass
class TestResult:
    name: str
    category: str
    score: float
    max_score: float
    status: str  # passed | failed | error
    message: str = ""
    hint: str = ""
    visibility: str = "visible"
    title: str = ""
    duration: float = 0.0

    __test__ = False  # not a pytest test class, despite the name


@dataclass
class Record:
    assignment: str
    student: str
    submission_sha256: str
    # graded | error | timeout | lost (the grader's own process died) | grader_error (grading it
    # raised: a grader bug); the last two are not a score, never kept in the gradebook, and are
    # graded again by the next run
    status: str
    score: float = 0.0
    max_score: float = 0.0
    message: str = ""
    tests: list[TestResult] = field(default_factory=list)
    cells: list[dict[str, Any]] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    grader_version: str = ""
    isolation: str = ""
    source: str = ""
    record_version: int = RECORD_VERSION
    # who submitted, as the LMS names them: lms (canvas|moodle|gradescope|file), id, name, email,
    # sis_id, original (the file name the student uploaded); see grader/intake/collect.py
    identity: dict[str, str] = field(default_factory=dict)
    # the late policy's verdict, {} when on time or no due date: days, percent (deducted),
    # raw_score (before the deduction), flag (the LMS said late), submitted_at, due
    late: dict[str, Any] = field(default_factory=dict)
    assignment_version: str = ""  # digest of the assignment's tests, reference and settings
    graded_at: str = ""  # ISO 8601, UTC
    # what cap_record cut to keep the record under RECORD_MAX_BYTES, {} when nothing: counts of
    # texts trimmed ("cell_texts", "test_texts", "message") and "cells_dropped", and the sizes
    # "original_bytes", "limit_bytes"
    truncated: dict[str, int] = field(default_factory=dict)
    # the most memory one of its sandboxes (the kernel's or the evaluator's, each a process tree)
    # held at once, from their cgroups; 0 when not accounted (no cgroups)
    peak_memory_bytes: int = 0
    # code a TA should read before trusting the score, found in the notebook's source on the
    # trusted side (grader/intake/review.py): per finding cell, line, code, kind, what and why;
    # it changes no score
    review: list[dict[str, Any]] = field(default_factory=list)

    def categories(self) -> dict[str, tuple[float, float]]:
        """category -> (score, max_score), over the categories this assignment tests."""
        out: dict[str, tuple[float, float]] = {}
        for t in self.tests:
            s, m = out.get(t.category, (0.0, 0.0))
            out[t.category] = (s + t.score, m + t.max_score)
        return {c: out[c] for c in CATEGORIES if c in out}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False, allow_nan=False, default=str)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Record:
        data = dict(data)
        data["tests"] = [TestResult(**t) for t in data.get("tests", [])]
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def total(tests: list[TestResult]) -> tuple[float, float]:
    """(score, max_score), rounded so that split points add up cleanly."""
    return round(sum(t.score for t in tests), 6), round(sum(t.max_score for t in tests), 6)


# --------------------------------------------------------------------------- the size cap

RECORD_MAX_BYTES = 250_000  # the whole record as JSON (result file, gradebook row): under 256 KiB
_CELL_TEXTS = ("output", "evalue", "message", "source")
_STEPS = (16_000, 8_000, 4_000, 2_000, 1_000, 500, 200)  # characters a text keeps, tighter each round


def _trim(text: str, keep: int) -> str:
    cut = len(text) - keep
    return f"{text[:keep]}… [{cut} characters cut: the result record is capped]"


def _size(rec: Record) -> int:
    return len(rec.to_json().encode("utf-8"))


def cap_record(rec: Record, limit: int = RECORD_MAX_BYTES) -> Record:
    """Keep ``rec`` (as JSON) under ``limit`` bytes, whatever the notebook printed, and say in
    ``rec.truncated`` what was cut.

    A notebook of hundreds of failing cells, each printing a lot, stays under the per-cell clips
    but not under any total (issue 11: 330 cells, 7.4 MB).  Scores and verdicts are never cut;
    texts are, largest first: the cells' outputs and errors, the tests' messages and hints and
    the record's message, shortened a step at a time; then whole cells, from the last."""
    size = _size(rec)
    if size <= limit:
        return rec
    cut: dict[str, int] = dict(rec.truncated)
    cut.setdefault("original_bytes", size)
    cut["limit_bytes"] = limit

    trimmed: set[tuple[str, int, str]] = set()  # each text counts once, however many rounds cut it

    def count(key: str, n: int = 1) -> None:
        cut[key] = cut.get(key, 0) + n

    def trimmed_once(kind: str, i: int, key: str) -> None:
        if (kind, i, key) not in trimmed:
            trimmed.add((kind, i, key))
            count(kind)

    for keep in _STEPS:
        for i, c in enumerate(rec.cells):
            for key in _CELL_TEXTS:
                v = c.get(key)
                if isinstance(v, str) and len(v) > keep * 1.1:  # 10% slack: no re-trimming a trimmed text
                    c[key] = _trim(v, keep)
                    trimmed_once("cell_texts", i, key)
        for i, t in enumerate(rec.tests):
            for key in ("message", "hint"):
                v = getattr(t, key)
                if len(v) > keep * 1.1:
                    setattr(t, key, _trim(v, keep))
                    trimmed_once("test_texts", i, key)
        if len(rec.message) > keep * 1.1:
            rec.message = _trim(rec.message, keep)
            trimmed_once("message", 0, "")
        size = _size(rec)
        if size <= limit:
            break
    if size > limit and rec.cells:
        # whole cells, from the last (the first failures are what the student needs); a cell
        # costs about its share of the JSON
        per_cell = max(1, (size - _size(Record(**{**rec.__dict__, "cells": []}))) // len(rec.cells))
        drop = min(len(rec.cells), (size - limit) // per_cell + 1)
        while drop and size > limit:
            rec.cells = rec.cells[: len(rec.cells) - drop]
            count("cells_dropped", drop)
            size = _size(rec)
            drop = min(len(rec.cells), max(1, drop // 2))
    if size > limit:  # only a grader bug could get here (thousands of tests): say so, keep the scores
        rec.missing = rec.missing[:100]
        count("over_limit")
    rec.truncated = cut
    return rec


def finite(value: Any) -> float:
    """A finite float (0.0 for NaN, infinities and non-numbers)."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        return 0.0
    return x if math.isfinite(x) else 0.0


def format_score(value: Any) -> str:
    """``40`` for 40.0, ``33.5`` for 33.5, up to 6 decimals; never an exponent or ``-0``."""
    text = f"{round(finite(value), 6):.6f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text
