"""The late policy: days late from a time or an LMS flag, the capped deduction."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from grader.course.config import LatePolicy
from grader.course.late import apply_late, days_late, describe
from grader.grading.record import Record

DUE = datetime(2026, 12, 1, 23, 59, tzinfo=timezone(timedelta(hours=1)))
POLICY = LatePolicy(percent_per_day=10, max_percent=30, grace_minutes=15, flag_days=1)


@pytest.mark.parametrize(
    ("after", "days"),
    [
        (timedelta(minutes=-5), 0),
        (timedelta(minutes=15), 0),  # inside the grace period
        (timedelta(minutes=16), 1),
        (timedelta(days=1, minutes=15), 1),
        (timedelta(days=1, minutes=16), 2),
        (timedelta(days=9), 9),
    ],
)
def test_days_late_counts_started_days_after_grace(after, days):
    assert days_late(POLICY, DUE, submitted_at=DUE + after, flag=False) == days


def test_a_flag_without_a_time_counts_flag_days():
    assert days_late(POLICY, DUE, submitted_at=None, flag=True) == 1
    assert days_late(POLICY, None, submitted_at=None, flag=True) == 1
    assert days_late(POLICY, None, submitted_at=None, flag=False) == 0


def test_a_known_time_on_time_wins_over_a_flag():
    assert days_late(POLICY, DUE, submitted_at=DUE - timedelta(hours=1), flag=True) == 0


def test_times_in_other_zones_compare_correctly():
    utc_just_after = (DUE + timedelta(minutes=16)).astimezone(timezone.utc)
    assert days_late(POLICY, DUE, submitted_at=utc_just_after, flag=False) == 1


def record(score: float = 40.0) -> Record:
    return Record("hw", "s", "", "graded", score=score, max_score=40.0)


def test_apply_late_deducts_and_caps():
    r = apply_late(record(), POLICY, DUE, submitted_at=DUE + timedelta(days=2), flag=False)
    assert r.score == 32.0
    assert r.late["days"] == 2 and r.late["percent"] == 20 and r.late["raw_score"] == 40.0
    r = apply_late(record(), POLICY, DUE, submitted_at=DUE + timedelta(days=8), flag=False)
    assert r.score == 28.0 and r.late["percent"] == 30  # capped at max_percent
    assert describe(r.late) == "8 days late: -30% (40 -> 28)"


def test_on_time_leaves_the_score_alone():
    r = apply_late(record(), POLICY, DUE, submitted_at=DUE, flag=False)
    assert r.score == 40.0 and r.late == {}
    assert describe(r.late) == ""


def test_flag_only_is_described_as_such():
    r = apply_late(record(), POLICY, DUE, flag=True)
    assert r.score == 36.0
    assert describe(r.late) == "1 day late (flagged late by the LMS): -10% (40 -> 36)"


def test_default_policy_records_lateness_without_deducting():
    r = apply_late(record(), LatePolicy(), DUE, flag=True)
    assert r.score == 40.0 and r.late["days"] == 1 and r.late["percent"] == 0
