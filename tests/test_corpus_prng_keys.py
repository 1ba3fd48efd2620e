"""The `prng_keys` submission corpus: every notebook in tests/corpus/prng_keys gets the verdict
that expected.yaml gives it, category by category.

Grading the corpus is slow (each notebook runs in a fresh sandbox with a kernel), so the whole
corpus is graded once, in a module-scoped fixture, and the parametrized tests only read results.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "corpus" / "prng_keys"
EXPECTED: dict[str, dict[str, Any]] = yaml.safe_load((CORPUS / "expected.yaml").read_text(encoding="utf-8"))
CATEGORIES = ("structure", "prng", "numerics", "jit", "purity")
VERDICTS = ("full", "lost", "zero")
FUNCTIONS = ("init_mlp_params", "sample_noise", "dropout")
JOBS = 2

# grading the whole corpus happens in the first test's fixture setup: allow it more than the
# suite's default per-test timeout
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


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


def test_every_mutant_is_in_the_corpus() -> None:
    """Each reference mutant has a corpus notebook of the same name."""
    mutants = {p.stem for p in (ROOT / "reference" / "prng_keys" / "mutants").glob("*.py")}
    assert mutants, "no mutants found"
    missing = sorted(m for m in mutants if f"{m}.ipynb" not in EXPECTED)
    assert not missing, f"mutants without a corpus notebook: {missing}"


def test_untouched_starter_is_the_current_starter() -> None:
    """untouched_starter.ipynb is a copy of the starter handed out."""
    starter = ROOT / "assignments" / "prng_keys" / "prng_keys.ipynb"
    copy = CORPUS / "untouched_starter.ipynb"
    assert copy.read_text(encoding="utf-8") == starter.read_text(encoding="utf-8"), (
        "tests/corpus/prng_keys/untouched_starter.ipynb is not the current starter: run "
        "`python tests/corpus/prng_keys/make_corpus.py`"
    )


@pytest.fixture(scope="module")
def graded() -> dict[str, Any]:
    """Every corpus notebook graded once (``JOBS`` at a time): file name -> Record."""
    from grader.config import load_course
    from grader.grading import grade_many

    assignment = load_course(ROOT).assignment("prng_keys")
    paths = sorted(CORPUS / name for name in EXPECTED)
    records = grade_many(assignment, paths, jobs=JOBS)
    return {Path(p).name: r for p, r in records.items()}


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


def test_untouched_starter_names_every_missing_function(graded: dict[str, Any]) -> None:
    record = graded["untouched_starter.ipynb"]
    assert set(FUNCTIONS) <= set(record.missing), _explain(record)
    assert record.score == 0 and record.max_score > 0, _explain(record)


def test_key_reuse_is_reported_with_the_students_line(graded: dict[str, Any]) -> None:
    """A KeyReuseError names the line that reused the key, and the hint says to split."""
    record = graded["one_key_every_layer.ipynb"]
    failed = [t for t in record.tests if t.name == "test_no_key_reuse[init_mlp_params]"]
    assert failed and failed[0].status == "failed", _explain(record, "prng")
    assert "KeyReuseError" in failed[0].message and "random.normal(key" in failed[0].message, failed[0].message
    assert "split" in failed[0].hint, failed[0].hint
