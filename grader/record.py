"""The result record of one graded submission, and scoring as a pure function of test outcomes."""

from __future__ import annotations

import json
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
    status: str  # graded | error | timeout
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
    # sis_id, original (the file name the student uploaded); see grader/intake.py
    identity: dict[str, str] = field(default_factory=dict)
    # the late policy's verdict, {} when on time or no due date: days, percent (deducted),
    # raw_score (before the deduction), flag (the LMS said late), submitted_at, due
    late: dict[str, Any] = field(default_factory=dict)
    assignment_version: str = ""  # digest of the assignment's tests, reference and settings
    graded_at: str = ""  # ISO 8601, UTC

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
