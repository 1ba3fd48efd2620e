"""The submission corpus: every notebook in tests/corpus/vmap_convolve gets the verdict that
expected.yaml gives it, category by category, and no student process outlives the grading.

Grading the corpus is slow (each notebook runs in a fresh sandbox with a kernel), so the whole
corpus is graded once, in a module-scoped fixture, and the parametrized tests only read results.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "corpus" / "vmap_convolve"
EXPECTED: dict[str, dict[str, Any]] = yaml.safe_load((CORPUS / "expected.yaml").read_text(encoding="utf-8"))
CATEGORIES = ("numerics", "jit", "vectorization", "purity")
VERDICTS = ("full", "lost", "zero")
SLEEPER = ["sleep", "600"]  # what spawns_processes.ipynb starts, hundreds of times
JOBS = 2

# grading the whole corpus happens in the first test's fixture setup: allow it more than the
# suite's default per-test timeout
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


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


def verdict(score: float, max_score: float) -> str:
    if score >= max_score - 1e-9:
        return "full"
    if score <= 1e-9:
        return "zero"
    return "lost"


def _explain(record: Any, category: str | None = None) -> str:
    """The record's tests (of one category), for an assertion message."""
    lines = [f"status={record.status!r} message={record.message!r} missing={record.missing}"]
    for t in record.tests:
        if category is None or t.category == category:
            lines.append(f"  [{t.category}] {t.name}: {t.status} {t.score:g}/{t.max_score:g} {t.message[:300]!r}")
    for c in record.cells:
        what = str(c.get("evalue", c.get("message", "")))[:200]
        lines.append(f"  cell {c.get('index')}: {c.get('status')} {c.get('ename', '')} {what!r}")
    return "\n".join(lines)


def test_expected_yaml_covers_the_corpus() -> None:
    notebooks = {p.name for p in CORPUS.glob("*.ipynb")}
    assert notebooks == set(EXPECTED), (
        f"notebooks without an expectation: {sorted(notebooks - set(EXPECTED))}; "
        f"expectations without a notebook: {sorted(set(EXPECTED) - notebooks)}"
    )
    for name, exp in EXPECTED.items():
        assert exp["status"] in ("graded", "error"), name
        for cat in CATEGORIES:
            if exp["status"] == "graded":
                assert exp.get(cat) in VERDICTS, f"{name}: {cat} must be one of {VERDICTS}, not {exp.get(cat)!r}"


def test_untouched_starter_is_the_current_starter() -> None:
    """untouched_starter.ipynb (and examples/class/frank.ipynb) copy the starter handed out."""
    starter = ROOT / "assignments" / "vmap_convolve" / "vmap_convolve.ipynb"
    if not starter.exists():
        pytest.skip("no starter notebook yet")
    for copy in (CORPUS / "untouched_starter.ipynb", ROOT / "examples" / "class" / "frank.ipynb"):
        assert copy.read_text(encoding="utf-8") == starter.read_text(encoding="utf-8"), (
            f"{copy.relative_to(ROOT)} is not the current starter: run "
            "`python tests/corpus/vmap_convolve/make_corpus.py`"
        )


@pytest.fixture(scope="module")
def graded() -> dict[str, Any]:
    """Every corpus notebook graded once (``JOBS`` at a time): file name -> Record."""
    grading = pytest.importorskip("grader.grading")
    from grader.config import load_course

    before = _sleepers()
    assignment = load_course(ROOT).assignment("vmap_convolve")
    paths = sorted(CORPUS / name for name in EXPECTED)
    if hasattr(grading, "grade_many"):
        records = grading.grade_many(assignment, paths, jobs=JOBS)
    else:
        records = {p: grading.grade_notebook(assignment, p) for p in paths}
    results: dict[str, Any] = {Path(p).name: r for p, r in records.items()}
    results["__sleepers_before__"] = before
    return results


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_status(graded: dict[str, Any], name: str) -> None:
    record = graded[name]
    assert record.status == EXPECTED[name]["status"], _explain(record)


@pytest.mark.parametrize(
    ("name", "category"),
    [(n, c) for n in sorted(EXPECTED) for c in CATEGORIES if EXPECTED[n]["status"] == "graded"],
)
def test_category_verdict(graded: dict[str, Any], name: str, category: str) -> None:
    record = graded[name]
    cats = record.categories()
    assert category in cats, f"{name}: no {category} tests ran\n{_explain(record)}"
    score, max_score = cats[category]
    assert max_score > 0, f"{name}: {category} is worth no points"
    got = verdict(score, max_score)
    want = EXPECTED[name][category]
    assert got == want, (
        f"{name}: {category} {score:g}/{max_score:g} is {got!r}, expected {want!r}\n{_explain(record, category)}"
    )


def test_missing_functions_are_named(graded: dict[str, Any]) -> None:
    """A notebook that defines nothing is told which functions are missing."""
    assert "manually_vectorized_convolve" in graded["syntax_error_cell.ipynb"].missing
    for name in ("untouched_starter.ipynb", "empty_notebook.ipynb", "prints_fake_score.ipynb"):
        assert len(graded[name].missing) == 5, _explain(graded[name])


def test_fake_score_is_not_believed(graded: dict[str, Any]) -> None:
    record = graded["prints_fake_score.ipynb"]
    assert record.score == 0 and record.max_score > 0


def test_disk_search_finds_nothing(graded: dict[str, Any]) -> None:
    """The notebook raises `FOUND: ...` if it sees hidden tests, solutions or grading.yaml."""
    record = graded["searches_disk_for_tests.ipynb"]
    if record.isolation != "bwrap":
        pytest.skip(f"isolation is {record.isolation!r}: without bwrap the student can read this user's files")
    text = record.to_json()
    assert "FOUND:" not in text, _explain(record)


def test_no_process_left_behind(graded: dict[str, Any]) -> None:
    """No `sleep 600` started by spawns_processes.ipynb survives its sandbox (runs last)."""
    before = graded["__sleepers_before__"]
    deadline = time.monotonic() + 15
    left = _sleepers() - before
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = _sleepers() - before
    assert not left, f"{len(left)} `sleep 600` processes outlived the grading: {sorted(left)[:20]}"
