"""The per_example_grads corpus: every notebook in tests/corpus/per_example_grads gets the
verdict that expected.yaml gives it, category by category, and failures say what is wrong and
how to fix it (a loop over the examples, mapping over params, the batch gradient repeated).

Grading the corpus is slow (each notebook runs in a fresh sandbox with a kernel), so the whole
corpus is graded once, in a module-scoped fixture, and the parametrized tests only read results.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENT = "per_example_grads"
CORPUS = ROOT / "tests" / "corpus" / ASSIGNMENT
EXPECTED: dict[str, dict[str, Any]] = yaml.safe_load((CORPUS / "expected.yaml").read_text(encoding="utf-8"))
CATEGORIES = ("numerics", "vectorization", "jit")
VERDICTS = ("full", "lost", "zero")
FUNCTIONS = ("per_example_grads", "batch_grad")
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
    assert sorted(graded["partial_submission.ipynb"].missing) == ["batch_grad"]
    assert sorted(graded["untouched_starter.ipynb"].missing) == sorted(FUNCTIONS)
    for name in ("correct_jit_vmap_grad.ipynb", "correct_closure_vmap.ipynb", "correct_jacrev_extra_cells.ipynb"):
        assert graded[name].missing == [], _explain(graded[name])


# (notebook, test, words the message must contain, words the hint must contain)
TEACHING = [
    (
        "python_loop_over_examples.ipynb",
        "test_per_example_grads_vectorized",
        ["not vectorized", "range(xs.shape[0])"],
        ["jax.vmap"],
    ),
    (
        "batch_grad_python_loop.ipynb",
        "test_batch_grad_vectorized",
        ["not vectorized", "for x, y in zip(xs, ys)"],
        ["jax.vmap"],
    ),
    (
        "maps_over_params.ipynb",
        "test_per_example_grads_numerics[7-5]",
        ["inconsistent sizes", "argument params"],
        ["in_axes=(None, 0, 0)"],
    ),
    (
        "per_example_is_batch_grad.ipynb",
        "test_mean_of_per_example_grads_is_batch_grad[6-4]",
        ["not shape (B, P)"],
        ["rows of xs and ys"],
    ),
    (
        "batch_grad_sum_not_mean.ipynb",
        "test_mean_of_per_example_grads_is_batch_grad[48-9]",
        ["mean of per_example_grads", "batch_grad"],
        ["mean of the gradients"],
    ),
    (
        "not_jitted.ipynb",
        "test_per_example_grads_is_itself_jitted",
        ["not a jax.jit-compiled function"],
        ["jax.jit"],
    ),
]


@pytest.mark.parametrize(("name", "test", "message", "hint"), TEACHING, ids=[f"{n}:{t}" for n, t, _, _ in TEACHING])
def test_failures_teach(graded: dict[str, Any], name: str, test: str, message: list[str], hint: list[str]) -> None:
    """A failure says what is wrong (the error and the student's line, where there is one), and the
    hint names the fix."""
    result = _test(graded[name], test)
    assert result.status == "failed", _explain(graded[name])
    for word in message:
        assert word in result.message, f"{name}: {word!r} not in the message {result.message!r}"
    for word in hint:
        assert word in result.hint, f"{name}: {word!r} not in the hint {result.hint!r}"


def test_repeated_batch_gradient_passes_only_the_mean_check(graded: dict[str, Any]) -> None:
    """The batch gradient repeated B times has the right mean: the consistency check alone cannot
    catch it, the per-example numerics (B > 1) do."""
    record = graded["batch_grad_repeated.ipynb"]
    for t in record.tests:
        if t.name.startswith("test_mean_of_per_example_grads_is_batch_grad"):
            assert t.status == "passed", _explain(record)
        elif t.name.startswith("test_per_example_grads_numerics[") and not t.name.startswith(
            "test_per_example_grads_numerics[1-"
        ):
            assert t.status == "failed", _explain(record)
