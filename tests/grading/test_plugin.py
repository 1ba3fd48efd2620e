"""The pytest plugin: markers, point splitting, outcomes, and staff mistakes reported as such."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any

import nbformat
import pytest

from grader.course.config import load_course
from grader.grading.grade import collect_points, run_tests
from grader.host.session import MissingName


def make_course(tmp_path: Path, hidden: str, public: str = "") -> Any:
    (tmp_path / "grading.yaml").write_text("course: t\nseed: 3\nassignments:\n  toy: {}\n")
    a = tmp_path / "assignments" / "toy"
    r = tmp_path / "reference" / "toy"
    (a / "tests").mkdir(parents=True)
    (r / "tests").mkdir(parents=True)
    (a / "assignment.yaml").write_text("name: toy\ntitle: Toy\nnotebook: toy.ipynb\nfunctions: [double]\n")
    nbformat.write(nbformat.v4.new_notebook(), a / "toy.ipynb")
    (r / "solution.py").write_text("def double(x):\n    return 2 * x\n")
    (a / "tests" / "test_public.py").write_text(textwrap.dedent(public))
    (r / "tests" / "test_hidden.py").write_text(textwrap.dedent(hidden))
    return load_course(tmp_path).assignment("toy")


class Fake:
    def __init__(self, funcs: dict[str, Any]) -> None:
        self.funcs = funcs

    def __getattr__(self, name: str) -> Any:
        if name not in self.funcs:

            def missing(*a: Any, **k: Any) -> Any:
                raise MissingName(name)

            return missing
        return self.funcs[name]


HIDDEN = """
    import pytest
    from grader.grading.checks import assert_close

    @pytest.mark.category("numerics")
    @pytest.mark.points(3)
    @pytest.mark.parametrize("x", [1.0, 2.0, 3.0])
    def test_double(submission, reference, x):
        '''double doubles.'''
        assert_close(submission.double(x), reference.double(x))

    @pytest.mark.category("purity")
    @pytest.mark.points(1)
    @pytest.mark.visible
    def test_seeded(submission, rng):
        rng.integers(0, 1000)  # the fixture works in a hidden test
        assert_close(submission.double(0.5), 1.0)
"""


def test_points_split_and_outcomes(tmp_path: Path) -> None:
    a = make_course(tmp_path, HIDDEN)
    results, errors = run_tests(a, Fake({"double": lambda x: 2 * x if x != 2.0 else 0.0}))
    assert errors == []
    by = {r.name: r for r in results}
    assert [by[f"test_double[{x}]"].max_score for x in (1.0, 2.0, 3.0)] == [1.0, 1.0, 1.0]
    assert by["test_double[2.0]"].status == "failed" and by["test_double[2.0]"].score == 0
    assert by["test_double[2.0]"].message.startswith("result: 1 of 1 values differ")
    assert by["test_double[1.0]"].title == "double doubles."
    assert by["test_double[1.0]"].visibility == "after_published"
    assert by["test_seeded"].visibility == "visible"
    assert sum(r.score for r in results) == 3.0


def test_missing_function_fails_with_its_name(tmp_path: Path) -> None:
    a = make_course(tmp_path, HIDDEN)
    results, _ = run_tests(a, Fake({}))
    assert {r.message for r in results} == {"`double` is not defined in the notebook"}
    assert all(r.status == "failed" and r.score == 0 for r in results)


def test_public_only_runs_no_hidden_test(tmp_path: Path) -> None:
    public = """
        import pytest
        @pytest.mark.category("numerics")
        @pytest.mark.points(1)
        def test_pub(submission):
            assert submission.double(1.0) == 2.0
    """
    a = make_course(tmp_path, HIDDEN, public)
    results, _ = run_tests(a, Fake({"double": lambda x: 2 * x}), public_only=True)
    assert [r.name for r in results] == ["test_pub"]
    assert results[0].visibility == "visible"


def test_bad_category_is_a_staff_error_with_suggestion(tmp_path: Path) -> None:
    bad = """
        import pytest
        @pytest.mark.category("numeric")
        @pytest.mark.points(1)
        def test_x(submission):
            pass
    """
    a = make_course(tmp_path, bad)
    _, errors = run_tests(a, Fake({}))
    assert len(errors) == 1
    assert errors[0].endswith(
        "@pytest.mark.category must be one of numerics, jit, vectorization, purity, prng, structure, "
        "parallelism, got 'numeric' - maybe you meant 'numerics'?"
    )


def test_missing_points_marker(tmp_path: Path) -> None:
    bad = """
        import pytest
        @pytest.mark.category("jit")
        def test_x(submission):
            pass
    """
    _, errors = run_tests(make_course(tmp_path, bad), Fake({}))
    assert errors and "needs @pytest.mark.points(n)" in errors[0]


def test_broken_hidden_test_is_an_error_not_a_student_failure(tmp_path: Path) -> None:
    broken = """
        import pytest
        @pytest.mark.category("jit")
        @pytest.mark.points(1)
        def test_x(submission):
            {}["nope"]
    """
    results, _ = run_tests(make_course(tmp_path, broken), Fake({}))
    assert results[0].status == "error"
    assert results[0].message.startswith("the test itself failed (KeyError")


def test_syntax_error_in_hidden_tests_is_reported(tmp_path: Path) -> None:
    _, errors = run_tests(make_course(tmp_path, "def test_x(:\n"), Fake({}))
    assert any("could not collect" in e for e in errors)


def test_a_collection_error_keeps_the_courses_frames_and_the_error_only() -> None:
    """pytest's and the standard library's frames are left out, in both traceback styles."""
    from grader.grading.plugin import collect_error

    short = (
        "ImportError while importing test module 'x'.\nHint: make sure your test modules/packages have valid "
        "Python names.\nTraceback:\n<frozen importlib._bootstrap>:1204: in _gcd_import\n    ???\n"
        "/venv/lib/python3.11/site-packages/_pytest/python.py:528: in importtestmodule\n    mod = import_path(\n"
        "reference/t/tests/test_hidden.py:3: in <module>\n    import nosuch\n"
        "E   ModuleNotFoundError: No module named 'nosuch'\n"
    )
    assert collect_error(short) == (
        "ImportError while importing test module 'x'.\nreference/t/tests/test_hidden.py:3: in <module>\n"
        "    import nosuch\nModuleNotFoundError: No module named 'nosuch'"
    )
    native = (
        'Traceback (most recent call last):\n  File "/venv/lib/python3.11/site-packages/_pytest/runner.py", '
        "line 341, in from_call\n    result: TResult | None = func()\n                             ^^^^^^\n"
        '  File "/c/reference/t/tests/test_hidden.py", line 3, in <module>\n    x = undefined + 1\n'
        "NameError: name 'undefined' is not defined\n"
    )
    assert collect_error(native) == (
        'File "/c/reference/t/tests/test_hidden.py", line 3, in <module>\n    x = undefined + 1\n'
        "NameError: name 'undefined' is not defined"
    )
    assert collect_error("") == "" and collect_error("odd\n") == "odd"


def test_a_test_file_that_cannot_be_imported_says_where(tmp_path: Path) -> None:
    """A collection error keeps the traceback that tells the staff which line failed."""
    _, errors = run_tests(make_course(tmp_path, "import json\n\nSETTINGS = json.loads('{')\n"), Fake({}))
    (error,) = [e for e in errors if "could not collect" in e]
    assert "JSONDecodeError" in error and re.search(r"test_hidden\.py(:|\", line )3\b", error), error


def test_failed_tests_are_not_reported_by_parsing_their_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure's result comes from its exception: pytest's own report of it, which parses the
    source file of every frame (30 ms a failure, 1.5 s of an empty notebook), is not built."""
    from _pytest._code import code, source

    parsed = []
    real = source.getstatementrange_ast
    for module in (source, code):  # code.py imports the name itself
        if hasattr(module, "getstatementrange_ast"):
            monkeypatch.setattr(module, "getstatementrange_ast", lambda *a, **k: parsed.append(a) or real(*a, **k))
    results, _ = run_tests(make_course(tmp_path, HIDDEN), Fake({}))
    assert len(results) == 4 and all(r.status == "failed" and "double" in r.message for r in results), results
    assert parsed == []


def test_collect_points(tmp_path: Path) -> None:
    assert collect_points(make_course(tmp_path, HIDDEN)) == {"numerics": 3.0, "purity": 1.0}


def test_rng_is_seeded_per_test(tmp_path: Path) -> None:
    seen = """
        import pytest
        VALUES = []
        @pytest.mark.category("numerics")
        @pytest.mark.points(1)
        @pytest.mark.parametrize("i", [0, 1])
        def test_r(submission, rng, i):
            submission.record(float(rng.random()))
    """
    got: list[float] = []
    a = make_course(tmp_path, seen)
    run_tests(a, Fake({"record": got.append}))
    run_tests(a, Fake({"record": got.append}))
    assert got[:2] == got[2:]  # same seed, same test: same draw
    assert got[0] != got[1]  # different tests: different draws
    run_tests(a, Fake({"record": got.append}), seed=99)
    assert got[4:6] != got[:2]


def test_hidden_inputs_need_the_staffs_files_not_only_the_seed(tmp_path: Path) -> None:
    """A public test draws from (course seed, test id): a student's self-check gets the same
    inputs.  A hidden test's draws also depend on a digest of the reference and the hidden tests,
    which are never released, so the seed, a test's name and its code do not give them away."""
    import zlib

    import numpy as np

    code = """
        import pytest
        @pytest.mark.category("numerics")
        @pytest.mark.points(1)
        def test_r(submission, rng):
            submission.record(float(rng.random()))
    """
    got: list[float] = []
    a = make_course(tmp_path, code, public=code)
    run_tests(a, Fake({"record": got.append}))
    public, hidden = got
    seed = a.seed & 0xFFFFFFFF
    assert public == np.random.default_rng([seed, zlib.crc32(b"assignments/toy/tests/test_public.py::test_r")]).random()
    unsalted = np.random.default_rng([seed, zlib.crc32(b"reference/toy/tests/test_hidden.py::test_r")]).random()
    assert hidden != unsalted
    run_tests(a, Fake({"record": got.append}), public_only=True)
    assert got[2] == public  # what a student's check draws

    a.solution.write_text(a.solution.read_text() + "# a comment changes the staff's digest\n")
    run_tests(load_course(tmp_path).assignment("toy"), Fake({"record": got.append}))
    assert got[3] == public and got[4] != hidden


def test_scrub_removes_whole_lines_the_sandbox_said() -> None:
    """The backstop removes every long enough line of the sandbox's text, and nothing of the
    grader's own words (short pieces that JAX's messages share with them stay)."""
    from grader.grading.plugin import scrub

    said = ["inputs were 0.1234567 1.5\nglobal_mean\nsecond line holds 2.75", "MyError_0.99"]
    message = "`global_mean` raised ValueError at cell 2: inputs were 0.1234567 1.5 / second line holds 2.75"
    assert scrub(message, said) == "`global_mean` raised ValueError at cell 2: […] / […]"
    assert scrub("nothing of it here", said) == "nothing of it here"


LOOSE = """
    import pytest
    from grader.grading.checks import assert_close

    @pytest.fixture
    def compared():
        assert_close(1.05, 1.0)  # a fixture's comparison uses the assignment's tolerance too
        return True

    @pytest.mark.category("numerics")
    @pytest.mark.points(1)
    def test_loose(submission, compared):
        assert_close(submission.double(1.0), 2.0)
"""


def test_the_assignments_tolerance_reaches_checks_through_the_plugin_only(tmp_path: Path) -> None:
    from grader.grading.checks import TOLERANCE, CheckFailure, Tolerance, assert_close

    for d in ("loose", "strict"):
        (tmp_path / d).mkdir()
    make_course(tmp_path / "loose", LOOSE)
    (tmp_path / "loose" / "assignments" / "toy" / "assignment.yaml").write_text(
        "name: toy\ntitle: Toy\nnotebook: toy.ipynb\nfunctions: [double]\ntolerance: {rtol: 0.1, atol: 0}\n"
    )
    loose = load_course(tmp_path / "loose").assignment("toy")
    strict = make_course(tmp_path / "strict", LOOSE)
    almost = Fake({"double": lambda x: 2.1 * x})
    results, errors = run_tests(loose, almost)
    assert errors == [] and [r.status for r in results] == ["passed"]
    results, _ = run_tests(strict, almost)  # the next assignment does not inherit it
    assert [r.status for r in results] == ["failed"]  # the fixture's comparison fails at setup
    assert TOLERANCE.get() == Tolerance()  # nothing outlives a run
    with pytest.raises(CheckFailure):
        assert_close(2.1, 2.0)  # outside a run: the default


def test_a_title_is_the_docstrings_first_sentence_even_where_it_wraps(tmp_path: Path) -> None:
    """Ten of the course's titles were cut at the end of the docstring's first line, mid-sentence
    (a student's walkthrough)."""
    hidden = '''
    import pytest

    @pytest.mark.category("numerics")
    @pytest.mark.points(1)
    def test_wrapped(submission):
        """double doubles its input (floats,
        ints and arrays). Then more that is not the title.

        And a paragraph.
        """
    '''
    a = make_course(tmp_path, hidden)
    results, errors = run_tests(a, Fake({"double": lambda x: 2 * x}))
    assert errors == [] and results[0].title == "double doubles its input (floats, ints and arrays)."


def test_a_title_stops_before_a_list_and_is_capped() -> None:
    """Titles are shown for hidden tests too: not a list of the hidden cases that follows a colon,
    nor a paragraph without a period (a review)."""
    from grader.grading.plugin import TITLE_MAX, _title

    assert (
        _title("double doubles on these hidden cases:\n    x = 3.25, 7.5\n") == "double doubles on these hidden cases:"
    )
    long = _title("word " * 100)
    assert len(long) <= TITLE_MAX + 1 and long.endswith("word…")
