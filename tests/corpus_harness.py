"""Shared machinery of the corpus tests (``tests/test_corpus*.py``).

Each ``tests/corpus/<assignment>/`` holds student notebooks named by their behaviour and
``expected.yaml``: per notebook a ``status`` and, per category, the verdict a careful grader
gives (``full``: every point of the category, ``lost``: some lost, ``zero``: none earned).
Grading a corpus is slow (a fresh sandbox and kernel per notebook), so each corpus module grades
its notebooks once in a module-scoped fixture, and the parametrized tests only read records.

A corpus module builds its standard tests with the factories here and adds its own::

    CORPUS = harness.load("pytrees")
    graded = harness.graded_fixture(CORPUS)
    test_expected_yaml_covers_the_corpus = harness.coverage_test(CORPUS)
    ...
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from grader.grading.record import CATEGORIES

ROOT = Path(__file__).resolve().parents[1]
VERDICTS = ("full", "lost", "zero")
JOBS = 2

#: Every corpus module grades a whole corpus in its first test's fixture setup: allow it more
#: than the suite's default per-test timeout (and start it first: tests/conftest.py).
MARKS = [pytest.mark.slow, pytest.mark.corpus, pytest.mark.timeout(1800)]


@dataclass(frozen=True)
class Corpus:
    assignment: str
    path: Path
    expected: dict[str, dict[str, Any]]
    categories: tuple[str, ...]  # the categories expected.yaml judges, in the canonical order

    def graded_names(self) -> list[str]:
        return sorted(n for n, e in self.expected.items() if e["status"] == "graded")


def load(assignment: str, path: Path | None = None) -> Corpus:
    """The corpus of ``assignment``: ``tests/corpus/<assignment>/``, or the notebooks and
    ``expected.yaml`` in ``path`` (another corpus of the same assignment, e.g. the forgeries)."""
    path = ROOT / "tests" / "corpus" / assignment if path is None else Path(path)
    expected = yaml.safe_load((path / "expected.yaml").read_text(encoding="utf-8"))
    judged = {key for entry in expected.values() for key in entry}
    return Corpus(assignment, path, expected, tuple(c for c in CATEGORIES if c in judged))


def verdict(score: float, max_score: float) -> str:
    if score >= max_score - 1e-9:
        return "full"
    if score <= 1e-9:
        return "zero"
    return "lost"


def explain(record: Any, category: str | None = None) -> str:
    """The record's tests (of one category) and problem cells, for an assertion message."""
    lines = [f"status={record.status!r} message={record.message!r} missing={record.missing}"]
    for t in record.tests:
        if category is None or t.category == category:
            lines.append(f"  [{t.category}] {t.name}: {t.status} {t.score:g}/{t.max_score:g} {t.message[:300]!r}")
    for c in record.cells:
        what = str(c.get("evalue", c.get("message", "")))[:200]
        lines.append(f"  cell {c.get('index')}: {c.get('status')} {c.get('ename', '')} {what!r}")
    return "\n".join(lines)


def find_test(record: Any, name: str) -> Any:
    """The result of the test called ``name`` (its node id after ``::``) in ``record``."""
    found = [t for t in record.tests if t.name == name]
    assert found, f"no test {name!r} in the record\n{explain(record)}"
    return found[0]


# --------------------------------------------------------------------------- test factories


def grade(corpus: Corpus, *, jobs: int = JOBS) -> dict[str, Any]:
    """Every corpus notebook graded (``jobs`` at a time): file name -> Record.

    A notebook whose expectation names ``limits`` is graded in a batch of its own, with those
    limits over the assignment's: a notebook that loops for ever in a cell is interrupted after
    the ``cell_timeout`` it names instead of the assignment's 60 s, which would keep a core
    spinning for a minute of every suite run to show the same interrupt."""
    from grader.course.config import UnmetRequirementError, check_requirements, load_course
    from grader.grading.grade import grade_many

    assignment = load_course(ROOT).assignment(corpus.assignment)
    try:
        check_requirements(assignment)
    except UnmetRequirementError as exc:  # jaxgrade refuses to grade it here, and says why
        pytest.skip(str(exc))
    batches: dict[str, list[Path]] = {}
    for name in sorted(corpus.expected):
        limits = json.dumps(corpus.expected[name].get("limits") or {}, sort_keys=True)
        batches.setdefault(limits, []).append(corpus.path / name)
    records: dict[str, Any] = {}
    for limits, paths in batches.items():
        changed = json.loads(limits)
        if changed:  # graded in this process: a pool's workers load the assignment from the course, by name
            graded_as = dataclasses.replace(assignment, limits=dataclasses.replace(assignment.limits, **changed))
            got = grade_many(graded_as, paths, jobs=1)
        else:
            got = grade_many(assignment, paths, jobs=jobs)
        records |= {Path(p).name: r for p, r in got.items()}
    return records


def graded_fixture(corpus: Corpus) -> Callable[[], dict[str, Any]]:
    """A module-scoped fixture ``graded``: the corpus graded once, file name -> Record."""

    @pytest.fixture(scope="module")
    def graded() -> dict[str, Any]:
        return grade(corpus)

    return graded


def coverage_test(corpus: Corpus) -> Callable[[], None]:
    def test_expected_yaml_covers_the_corpus() -> None:
        notebooks = {p.name for p in corpus.path.glob("*.ipynb")}
        assert notebooks == set(corpus.expected), (
            f"notebooks without an expectation: {sorted(notebooks - set(corpus.expected))}; "
            f"expectations without a notebook: {sorted(set(corpus.expected) - notebooks)}"
        )
        for name, exp in corpus.expected.items():
            assert exp["status"] in ("graded", "error"), name
            if exp["status"] == "graded":
                for cat in corpus.categories:
                    assert exp.get(cat) in VERDICTS, f"{name}: {cat} must be one of {VERDICTS}, not {exp.get(cat)!r}"

    return test_expected_yaml_covers_the_corpus


def starter_test(corpus: Corpus, *, also: tuple[Path, ...] = ()) -> Callable[[], None]:
    """untouched_starter.ipynb (and ``also``) are byte-identical to the starter handed out."""

    def test_untouched_starter_is_the_current_starter() -> None:
        starter = ROOT / "assignments" / corpus.assignment / f"{corpus.assignment}.ipynb"
        for copy in (corpus.path / "untouched_starter.ipynb", *also):
            assert copy.read_text(encoding="utf-8") == starter.read_text(encoding="utf-8"), (
                f"{copy.relative_to(ROOT)} is not the current starter: run "
                f"`python tests/corpus/{corpus.assignment}/make_corpus.py`"
            )

    return test_untouched_starter_is_the_current_starter


def status_test(corpus: Corpus) -> Callable[..., None]:
    @pytest.mark.parametrize("name", sorted(corpus.expected))
    def test_status(graded: dict[str, Any], name: str) -> None:
        record = graded[name]
        assert record.status == corpus.expected[name]["status"], explain(record)

    return test_status


def category_test(corpus: Corpus) -> Callable[..., None]:
    @pytest.mark.parametrize(("name", "category"), [(n, c) for n in corpus.graded_names() for c in corpus.categories])
    def test_category_verdict(graded: dict[str, Any], name: str, category: str) -> None:
        record = graded[name]
        cats = record.categories()
        assert category in cats, f"{name}: no {category} tests ran\n{explain(record)}"
        score, max_score = cats[category]
        assert max_score > 0, f"{name}: {category} is worth no points"
        got, want = verdict(score, max_score), corpus.expected[name][category]
        assert got == want, (
            f"{name}: {category} {score:g}/{max_score:g} is {got!r}, expected {want!r}\n{explain(record, category)}"
        )

    return test_category_verdict


def teaching_test(teaching: list[tuple[str, str, list[str], list[str]]]) -> Callable[..., None]:
    """Per (notebook, test, words of the message, words of the hint): that test failed, and its
    message says what went wrong and its hint names the fix."""

    @pytest.mark.parametrize(("name", "test", "message", "hint"), teaching, ids=[f"{n}:{t}" for n, t, _, _ in teaching])
    def test_failures_teach(graded: dict[str, Any], name: str, test: str, message: list[str], hint: list[str]) -> None:
        result = find_test(graded[name], test)
        assert result.status == "failed", explain(graded[name])
        for word in message:
            assert word in result.message, f"{name}: {word!r} not in the message {result.message!r}"
        for word in hint:
            assert word in result.hint, f"{name}: {word!r} not in the hint {result.hint!r}"

    return test_failures_teach
