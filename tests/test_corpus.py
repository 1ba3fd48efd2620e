"""The submission corpus: every notebook in tests/corpus/vmap_convolve gets the verdict that
expected.yaml gives it, category by category, and no student process outlives the grading.

Grading the corpus is slow (each notebook runs in a fresh sandbox with a kernel), so the whole
corpus is graded once, in a module-scoped fixture, and the parametrized tests only read results.
"""

from __future__ import annotations

import os
import time
from typing import Any

import corpus_harness as harness
import pytest

CORPUS = harness.load("vmap_convolve")
pytestmark = harness.MARKS

test_expected_yaml_covers_the_corpus = harness.coverage_test(CORPUS)
test_untouched_starter_is_the_current_starter = harness.starter_test(
    CORPUS, also=(harness.ROOT / "examples" / "class" / "frank.ipynb",)
)
test_status = harness.status_test(CORPUS)
test_category_verdict = harness.category_test(CORPUS)


SLEEPER = ["sleep", "600"]  # what spawns_processes.ipynb starts, hundreds of times


def _sleepers() -> set[int]:
    """PIDs of `sleep 600` processes visible in /proc."""
    pids = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if [a.decode(errors="replace") for a in argv if a] == SLEEPER:
            pids.add(int(entry))
    return pids


@pytest.fixture(scope="module")
def sleepers_before() -> set[int]:
    return _sleepers()


@pytest.fixture(scope="module")
def graded(sleepers_before: set[int]) -> dict[str, Any]:
    """The corpus graded once, after noting the `sleep 600` processes that were already running."""
    return harness.grade(CORPUS)


def test_missing_functions_are_named(graded: dict[str, Any]) -> None:
    """A notebook that defines nothing is told which functions are missing."""
    assert "manually_vectorized_convolve" in graded["syntax_error_cell.ipynb"].missing
    for name in ("untouched_starter.ipynb", "empty_notebook.ipynb", "prints_fake_score.ipynb"):
        assert len(graded[name].missing) == 5, harness.explain(graded[name])


def test_fake_score_is_not_believed(graded: dict[str, Any]) -> None:
    record = graded["prints_fake_score.ipynb"]
    assert record.score == 0 and record.max_score > 0


def test_the_endless_loop_is_interrupted_at_the_timeout_it_was_graded_with(graded: dict[str, Any]) -> None:
    """infinite_loop_after_defs.ipynb names a cell timeout of 10 s in expected.yaml: its last
    cell is interrupted then (and the kernel goes on: its definitions earn their points)."""
    record = graded["infinite_loop_after_defs.ipynb"]
    loop = [c for c in record.cells if c.get("status") != "ok"]
    assert [c["status"] for c in loop] == ["timeout"], harness.explain(record)
    assert loop[0]["message"] == "interrupted after 10s", harness.explain(record)


def test_disk_search_finds_nothing(graded: dict[str, Any]) -> None:
    """The notebook raises `FOUND: ...` if it sees hidden tests, solutions or grading.yaml."""
    record = graded["searches_disk_for_tests.ipynb"]
    if record.isolation != "bwrap":
        pytest.skip(f"isolation is {record.isolation!r}: without bwrap the student can read this user's files")
    text = record.to_json()
    assert "FOUND:" not in text, harness.explain(record)


def test_no_process_left_behind(graded: dict[str, Any], sleepers_before: set[int]) -> None:
    """No `sleep 600` started by spawns_processes.ipynb survives its sandbox (runs last)."""
    before = sleepers_before
    deadline = time.monotonic() + 15
    left = _sleepers() - before
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = _sleepers() - before
    assert not left, f"{len(left)} `sleep 600` processes outlived the grading: {sorted(left)[:20]}"
