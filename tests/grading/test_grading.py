"""grade_notebook / grade_many end to end on small courses."""

from __future__ import annotations

import textwrap
from pathlib import Path

import nbformat
import pytest

from grader.course.config import load_course
from grader.grading.grade import grade_many, load_reference
from tests.conftest import needs_requirements_of
from tests.minicourse import make_minicourse

pytestmark = pytest.mark.slow


@needs_requirements_of("pmap")  # its hidden test exports a pmap
def test_multi_device_assignment_runs_everywhere_with_its_device_count(tmp_path: Path) -> None:
    """devices: 4 in assignment.yaml: the sandbox, the evaluator and the trusted process that
    computes references all see 4 devices (references must match the students' setting)."""
    (tmp_path / "grading.yaml").write_text("course: t\nassignments:\n  par: {}\n")
    a, r = tmp_path / "assignments" / "par", tmp_path / "reference" / "par"
    (a / "tests").mkdir(parents=True)
    (r / "tests").mkdir(parents=True)
    (a / "assignment.yaml").write_text("name: par\ntitle: P\nnotebook: par.ipynb\nfunctions: [count]\ndevices: 4\n")
    nbformat.write(nbformat.v4.new_notebook(), a / "par.ipynb")
    (r / "solution.py").write_text("import jax\ndef count():\n    return jax.device_count()\n")
    (r / "tests" / "test_hidden.py").write_text(
        textwrap.dedent(
            """
            import numpy as np
            import pytest
            from grader.grading.checks import check_parallel

            @pytest.mark.category("parallelism")
            @pytest.mark.points(1)
            def test_counts(submission, reference):
                assert reference.count() == 4, "trusted side"
                assert submission["count"]() == 4, "sandbox"  # `count` is also a proxy method

            @pytest.mark.category("parallelism")
            @pytest.mark.points(1)
            def test_pmap_result_spans_devices(submission):
                check_parallel(submission, "double", (np.ones((4, 3), np.float32),), devices=4)
            """
        )
    )
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(
            "import jax\ndef count():\n    return jax.device_count()\ndouble = jax.pmap(lambda x: 2 * x)"
        )
    ]
    path = tmp_path / "student.ipynb"
    nbformat.write(nb, path)
    rec = grade_many(load_course(tmp_path).assignment("par"), [path], jobs=1)[path]
    assert rec.status == "graded", rec.message
    assert [(t.name, t.status, t.message) for t in rec.tests] == [
        ("test_counts", "passed", ""),
        ("test_pmap_result_spans_devices", "passed", ""),
    ]


def test_an_edited_reference_is_imported_again(tmp_path: Path) -> None:
    """A long-lived process (the self-check's kernel, a TA's session) never grades with a reference
    it imported before the file changed."""
    course = make_minicourse(tmp_path / "c")
    before = load_course(course).assignment("double")
    first = load_reference(before)
    assert load_reference(before) is first  # once per process and version
    before.solution.write_text(before.solution.read_text(encoding="utf-8") + "\nEDITED = True\n", encoding="utf-8")
    after = load_reference(load_course(course).assignment("double"))
    assert after is not first and after.EDITED is True


def test_ctrl_c_during_the_tests_stops_grading_and_is_never_a_record(tmp_path: Path) -> None:
    """pytest turns a KeyboardInterrupt inside a test into an exit code: run_tests raises it
    again, so `jaxgrade check` (or a pool worker's grading) stops instead of keeping an error."""
    from grader.grading.grade import run_tests
    from tests.minicourse import make_minicourse

    assignment = load_course(make_minicourse(tmp_path / "course")).assignment("double")

    class Interrupted:
        def __getattr__(self, name: str) -> object:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_tests(assignment, Interrupted(), public_only=True)


def test_a_test_file_that_does_not_import_is_a_staff_error_not_ctrl_c(tmp_path: Path) -> None:
    """pytest reports errors during collection through a KeyboardInterrupt subclass of its own:
    that stays a grader configuration problem in the record."""
    from grader.grading.grade import run_tests

    course = make_minicourse(tmp_path / "course")
    (course / "assignments" / "double" / "tests" / "test_public.py").write_text("import no_such_module_here\n")
    assignment = load_course(course).assignment("double")
    results, errors = run_tests(assignment, object(), public_only=True)
    assert results == [] and any("pytest could not run the tests" in e for e in errors), errors


def test_grade_one_makes_a_grader_bug_the_submissions_grader_error_and_lets_the_rest_stop_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The in-process grading of `check` and `check --watch`: a bug of ours costs one
    record that is never kept; a machine that cannot sandbox anyone, and Ctrl-C, stop the run."""
    from grader.grading import grade
    from grader.host.sandbox import SandboxSetupError

    assignment = load_course(make_minicourse(tmp_path / "course")).assignment("double")
    nb = tmp_path / "s.ipynb"
    nb.write_text("{}")
    for raised in (KeyError("a grader bug"), SandboxSetupError("no bwrap"), KeyboardInterrupt()):

        def boom(*args: object, _raised: BaseException = raised, **kwargs: object) -> None:
            raise _raised

        monkeypatch.setattr(grade, "grade_notebook", boom)
        if isinstance(raised, KeyError):
            rec = grade.grade_one(assignment, nb, student="s")
            assert (rec.status, rec.student) == ("grader_error", "s") and "KeyError" in rec.message
        else:
            with pytest.raises(type(raised)):
                grade.grade_one(assignment, nb, student="s")
