"""The pmap corpus: every notebook in tests/corpus/pmap gets the verdict that expected.yaml gives
it, category by category, graded with 4 devices (the trusted side runs in spawned worker
processes started with them); vmap instead of pmap keeps its numerics and loses parallelism.

Grading the corpus is slow (each notebook runs in a fresh sandbox with a kernel), so the whole
corpus is graded once, in a module-scoped fixture, and the parametrized tests only read results.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENT = "pmap"
CORPUS = ROOT / "tests" / "corpus" / ASSIGNMENT
EXPECTED: dict[str, dict[str, Any]] = yaml.safe_load((CORPUS / "expected.yaml").read_text(encoding="utf-8"))
CATEGORIES = ("numerics", "parallelism", "jit")
VERDICTS = ("full", "lost", "zero")
FUNCTIONS = ("parallel_convolve", "global_mean")
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


def _test(record: Any, name: str) -> Any:
    """The result of the test called ``name`` (its node id after ``::``) in ``record``."""
    found = [t for t in record.tests if t.name == name]
    assert found, f"no test {name!r} in the record\n{_explain(record)}"
    return found[0]


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
    """untouched_starter.ipynb copies the starter handed out."""
    starter = ROOT / "assignments" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    copy = CORPUS / "untouched_starter.ipynb"
    assert copy.read_text(encoding="utf-8") == starter.read_text(encoding="utf-8"), (
        f"{copy.relative_to(ROOT)} is not the current starter: run `python tests/corpus/{ASSIGNMENT}/make_corpus.py`"
    )


@pytest.fixture(scope="module")
def graded() -> dict[str, Any]:
    """Every corpus notebook graded once (``JOBS`` at a time): file name -> Record."""
    from grader.config import load_course
    from grader.grading import grade_many

    assignment = load_course(ROOT).assignment(ASSIGNMENT)
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


def test_missing_functions_are_named(graded: dict[str, Any]) -> None:
    """Functions left as TODO are reported by name; correct notebooks miss nothing."""
    assert graded["partial_submission.ipynb"].missing == ["global_mean"]
    assert sorted(graded["untouched_starter.ipynb"].missing) == sorted(FUNCTIONS)
    for name in ("correct_pmap_psum.ipynb", "correct_decorator_pmean.ipynb", "correct_psum_of_sums.ipynb"):
        assert graded[name].missing == [], _explain(graded[name])


def test_vmap_keeps_numerics_and_loses_parallelism(graded: dict[str, Any]) -> None:
    """vmap computes the right numbers on one device: every numerics test passes, every
    parallelism test fails."""
    record = graded["vmap_instead_of_pmap.ipynb"]
    for t in record.tests:
        if t.category == "numerics":
            assert t.status == "passed", _explain(record)
        if t.category == "parallelism":
            assert t.status == "failed", _explain(record)


# (notebook, test, words the message must contain, words the hint must contain)
TEACHING = [
    (
        "vmap_instead_of_pmap.ipynb",
        "test_runs_on_every_device[parallel_convolve]",
        ["1 device", "4 devices"],
        ["jax.pmap"],
    ),
    (
        "mean_on_one_device.ipynb",
        "test_global_mean_runs_on_every_device",
        ["1 device", "4 devices"],
        ["jax.pmap"],
    ),
    (
        "missing_psum.ipynb",
        "test_global_mean_numerics[6]",
        ["mean of its own row"],
        ["lax.psum", "axis_name"],
    ),
    (
        "missing_psum.ipynb",
        "test_global_mean",
        ["mean of its own row"],
        ["lax.psum"],
    ),
    (
        "psum_not_divided.ipynb",
        "test_global_mean_numerics[33]",
        ["sum of the row means"],
        ["divide by the number of devices"],
    ),
    (
        "psum_without_axis_name.ipynb",
        "test_global_mean_numerics[6]",
        ["NameError", "axis name"],
        [],
    ),
    (
        "mean_combined_on_host.ipynb",
        "test_traces_under_jit[global_mean]",
        ["does not work under jax.jit", "float("],
        [],
    ),
]


@pytest.mark.parametrize(("name", "test", "message", "hint"), TEACHING, ids=[f"{n}:{t}" for n, t, _, _ in TEACHING])
def test_failures_teach(graded: dict[str, Any], name: str, test: str, message: list[str], hint: list[str]) -> None:
    """A failure says what went wrong (one device, an unbound axis, a concrete value under jit),
    and the hint names the fix."""
    result = _test(graded[name], test)
    assert result.status == "failed", _explain(graded[name])
    for word in message:
        assert word in result.message, f"{name}: {word!r} not in the message {result.message!r}"
    for word in hint:
        assert word in result.hint, f"{name}: {word!r} not in the hint {result.hint!r}"
