"""The late policy: how many days late a submission is, and the points it loses.

Days late are whole started days after the due date plus the grace period, from the submission
time when the LMS gives one (Gradescope's ``created_at``, or a time the TA supplies).  When the
LMS only flags a submission as late (Canvas's ``LATE_`` file name carries no time), it counts as
the policy's ``flag_days``.  A known time on or before the due date wins over a flag.  The
deduction is ``percent_per_day * days``, capped at ``max_percent``, taken from the total score;
test scores keep what each test earned, so feedback still shows what passed.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from grader.course.config import LatePolicy
from grader.grading.record import Record, finite, format_score

DAY = timedelta(days=1)


def days_late(policy: LatePolicy, due: datetime | None, *, submitted_at: datetime | None, flag: bool) -> int:
    """Whole started days late (0 when on time or when lateness cannot be known)."""
    if submitted_at is not None and due is not None:
        over = submitted_at - (due + timedelta(minutes=policy.grace_minutes))
        return max(0, math.ceil(over / DAY)) if over > timedelta(0) else 0
    return policy.flag_days if flag else 0


def apply_late(
    record: Record,
    policy: LatePolicy,
    due: datetime | None,
    *,
    submitted_at: datetime | None = None,
    flag: bool = False,
) -> Record:
    """Deduct the late penalty from ``record.score`` in place, and say so in ``record.late``."""
    days = days_late(policy, due, submitted_at=submitted_at, flag=flag)
    if days <= 0:
        record.late = {}
        return record
    percent = round(min(policy.percent_per_day * days, policy.max_percent), 6)
    raw = record.score
    record.late = {
        "days": days,
        "percent": percent,
        "raw_score": raw,
        "flag": flag,
        "submitted_at": submitted_at.isoformat() if submitted_at else None,
        "due": due.isoformat() if due else None,
    }
    record.score = round(raw * (1 - percent / 100), 6)
    return record


def days_text(late: dict) -> str:
    """``2 days late``, ``1 day late (flagged late by the LMS)``."""
    days = int(finite(late.get("days")))
    text = f"{days} day{'s' if days != 1 else ''} late"
    if late.get("flag") and not late.get("submitted_at"):
        text += " (flagged late by the LMS)"
    return text


def describe(late: dict, final: float | None = None) -> str:
    """One line for feedback and exports, e.g. ``2 days late: -20% (40 -> 32)``; "" when on time.
    ``final`` is the score after the deduction (the record's); else it is computed."""
    if not late or not late.get("days"):
        return ""
    raw, percent = finite(late.get("raw_score", final)), finite(late.get("percent"))
    after = round(raw * (1 - percent / 100), 6) if final is None else final
    return f"{days_text(late)}: -{format_score(percent)}% ({format_score(raw)} -> {format_score(after)})"
