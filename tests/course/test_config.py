"""Tests for grader.course.config: loading grading.yaml and assignment.yaml, and the messages for bad ones."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from grader.course.config import (
    Assignment,
    ConfigError,
    Course,
    LimitsConfig,
    Tolerance,
    combine_seeds,
    find_course_root,
    load_course,
)
from grader.host.sandbox import Limits

GRADING = """\
course: Test course
seed: 7
assignments:
  demo:
    title: Demo from grading.yaml
    canvas_id: 101
"""

ASSIGNMENT = """\
name: demo
title: Demo
notebook: demo.ipynb
functions: [f, g]
"""


def make_course(root: Path, grading: str = GRADING, assignment: str = ASSIGNMENT, name: str = "demo") -> Path:
    """A minimal course tree: grading.yaml, one assignment with its starter, public and hidden tests, solution."""
    (root / "grading.yaml").write_text(textwrap.dedent(grading))
    student = root / "assignments" / name
    reference = root / "reference" / name
    for directory in (student / "tests", reference / "tests", reference / "mutants"):
        directory.mkdir(parents=True)
    (student / "assignment.yaml").write_text(textwrap.dedent(assignment))
    (student / "demo.ipynb").write_text("{}")
    (reference / "solution.py").write_text("def f(x):\n    return x\n")
    return root


def error_of(root: Path, name: str = "demo") -> str:
    with pytest.raises(ConfigError) as info:
        load_course(root).assignment(name)
    return str(info.value)


def test_valid_tree_loads(tmp_path: Path) -> None:
    course = load_course(make_course(tmp_path))
    assert isinstance(course, Course)
    assert course.root == tmp_path.resolve()
    assert course.course == "Test course"
    assert course.assignments["demo"].canvas_id == "101"  # an unquoted YAML number is kept as an id string
    demo = course.assignment("demo")
    assert isinstance(demo, Assignment)
    assert demo.title == "Demo from grading.yaml"
    assert demo.functions == ("f", "g")
    assert demo.config.tolerance == Tolerance()
    assert demo.starter == tmp_path.resolve() / "assignments" / "demo" / "demo.ipynb"
    assert demo.public_tests == tmp_path.resolve() / "assignments" / "demo" / "tests"
    assert demo.hidden_tests == tmp_path.resolve() / "reference" / "demo" / "tests"
    assert demo.solution == tmp_path.resolve() / "reference" / "demo" / "solution.py"
    assert demo.mutants_dir == tmp_path.resolve() / "reference" / "demo" / "mutants"
    assert demo.limits == Limits()
    assert demo.seed == combine_seeds(7, 0)
    assert 0 <= demo.seed < 2**31


def test_models_are_frozen(tmp_path: Path) -> None:
    course = load_course(make_course(tmp_path))
    with pytest.raises(Exception, match="frozen"):
        course.seed = 1  # type: ignore[misc]


def test_seed_combination_is_deterministic_and_depends_on_both() -> None:
    assert combine_seeds(20261120, 0) == combine_seeds(20261120, 0)
    assert len({combine_seeds(1, 0), combine_seeds(2, 0), combine_seeds(1, 1)}) == 3


def test_find_course_root_walks_up(tmp_path: Path) -> None:
    root = make_course(tmp_path)
    assert find_course_root(root / "assignments" / "demo" / "tests") == root.resolve()
    assert find_course_root(root / "assignments" / "demo" / "demo.ipynb") == root.resolve()


def test_find_course_root_without_grading_yaml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("grader.course.config.__file__", str(tmp_path / "pkg" / "grader" / "config.py"))
    with pytest.raises(ConfigError) as info:
        find_course_root(tmp_path)
    assert str(info.value) == (
        f"no grading.yaml found in {tmp_path} or its parents: this is neither a course repository nor an "
        "assignment folder made by `jaxgrade release`"
    )


@pytest.mark.parametrize(
    ("grading", "expected"),
    [
        pytest.param(
            GRADING + "    limits: {cell_timeout: soon}\n",
            "grading.yaml: assignments.demo.limits.cell_timeout: expected a number, got 'soon'",
            id="wrong-type",
        ),
        pytest.param(
            GRADING + "    limits: {cell_timout: 5}\n",
            "grading.yaml: assignments.demo.limits.cell_timout: unknown key; did you mean 'cell_timeout'?",
            id="unknown-key",
        ),
        pytest.param(
            GRADING + "limts: {}\n",
            "grading.yaml: limts: unknown key; did you mean 'limits'?",
            id="unknown-top-level-key",
        ),
        pytest.param(
            GRADING + "    limits: {memory_bytes: 1073741824}\n",
            "grading.yaml: assignments.demo.limits.memory_bytes: "
            "expected at least 2147483648 (2 GiB; XLA aborts with less address space), got 1073741824",
            id="memory-below-2GiB",
        ),
        pytest.param(
            GRADING + "    limits: {max_processes: 8}\n",
            "grading.yaml: assignments.demo.limits.max_processes: "
            "expected at least 64 (XLA starts about that many threads), got 8",
            id="too-few-processes",
        ),
        pytest.param(
            GRADING + "    limits: {cell_timeout: true}\n",
            "grading.yaml: assignments.demo.limits.cell_timeout: expected a number, got True",
            id="bool-is-not-a-number",
        ),
        pytest.param(
            GRADING + "    due: 2026-12-01T23:59:00\n",
            "grading.yaml: assignments.demo.due: expected a date and time with a UTC offset "
            "(e.g. 2026-12-01T23:59:00+01:00), got 2026-12-01T23:59:00 (no UTC offset)",
            id="due-without-offset",
        ),
        pytest.param(
            GRADING + "    due: 2026-12-01\n",
            "grading.yaml: assignments.demo.due: expected a date and time with a UTC offset "
            "(e.g. 2026-12-01T23:59:00+01:00), got 2026-12-01",
            id="due-date-only",
        ),
        pytest.param(
            GRADING + "late_policy: {percent_per_dya: 10}\n",
            "grading.yaml: late_policy.percent_per_dya: unknown key; did you mean 'percent_per_day'?",
            id="late-policy-typo",
        ),
        pytest.param(
            GRADING + "late_policy: {percent_per_day: 150}\n",
            "grading.yaml: late_policy.percent_per_day: expected a value less than or equal to 100, got 150",
            id="late-policy-over-100",
        ),
        pytest.param(
            "course: x\n",
            "grading.yaml: assignments: required key is missing",
            id="missing-key",
        ),
        pytest.param(
            "assignments: [demo]\n",
            "grading.yaml: assignments: expected a mapping, got a list",
            id="list-instead-of-mapping",
        ),
    ],
)
def test_bad_grading_yaml(tmp_path: Path, grading: str, expected: str) -> None:
    make_course(tmp_path, grading=grading)
    with pytest.raises(ConfigError) as info:
        load_course(tmp_path)
    assert str(info.value) == expected


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        pytest.param(
            "tolerance: {rtol: -1.0e-5}\n",
            "assignments/demo/assignment.yaml: tolerance.rtol: expected a value greater than or equal to 0, got -1e-05",
            id="negative-tolerance",
        ),
        pytest.param(
            "tolerance: {atol: .inf}\n",
            "assignments/demo/assignment.yaml: tolerance.atol: expected a finite number, got inf",
            id="infinite-tolerance",
        ),
        pytest.param(
            "limits: {wall_timeot: 5}\n",
            "assignments/demo/assignment.yaml: limits.wall_timeot: unknown key; did you mean 'wall_timeout'?",
            id="unknown-key",
        ),
        pytest.param(
            "devices: 0\n",
            "assignments/demo/assignment.yaml: devices: expected a value greater than or equal to 1, got 0",
            id="no-devices",
        ),
        pytest.param(
            "requires: ['jax >= 0.8 !!']\n",
            "assignments/demo/assignment.yaml: requires: expected pip requirements such as 'jax>=0.8', got 'jax >= 0.8 !!'",
            id="bad-requirement",
        ),
    ],
)
def test_bad_assignment_yaml(tmp_path: Path, extra: str, expected: str) -> None:
    make_course(tmp_path, assignment=ASSIGNMENT + extra)
    assert error_of(tmp_path) == expected


@pytest.mark.parametrize(
    ("functions", "expected"),
    [
        ("[]", "functions: expected a non-empty list, got an empty list"),
        ("[f, 2d]", "functions: expected Python identifiers, got '2d'"),
        ("[f, f]", "functions: expected each function once, got f more than once"),
    ],
)
def test_bad_functions(tmp_path: Path, functions: str, expected: str) -> None:
    make_course(tmp_path, assignment=ASSIGNMENT.replace("[f, g]", functions))
    assert error_of(tmp_path) == f"assignments/demo/assignment.yaml: {expected}"


def test_small_tolerances_written_the_yaml_1_1_way_still_parse(tmp_path: Path) -> None:
    # PyYAML reads `1e-4` (no dot) as a string; it must still be accepted as a number.
    make_course(tmp_path, assignment=ASSIGNMENT + "tolerance: {rtol: 1e-4}\n")
    assert load_course(tmp_path).assignment("demo").config.tolerance == Tolerance(rtol=1e-4)


def test_unknown_assignment_name(tmp_path: Path) -> None:
    make_course(tmp_path)
    assert error_of(tmp_path, "demoo") == (
        "grading.yaml: assignments.demoo: no such assignment; did you mean 'demo'? Known assignments: demo."
    )
    assert error_of(tmp_path, "zzz") == "grading.yaml: assignments.zzz: no such assignment. Known assignments: demo."


def test_assignment_on_disk_but_not_listed(tmp_path: Path) -> None:
    make_course(tmp_path)
    (tmp_path / "assignments" / "extra").mkdir()
    (tmp_path / "assignments" / "extra" / "assignment.yaml").write_text(ASSIGNMENT.replace("demo", "extra"))
    assert error_of(tmp_path, "extra").endswith("To grade it, list 'extra' under 'assignments:' in grading.yaml.")


def test_name_must_match_directory(tmp_path: Path) -> None:
    make_course(tmp_path, assignment=ASSIGNMENT.replace("name: demo", "name: other"))
    assert error_of(tmp_path) == (
        "assignments/demo/assignment.yaml: name: expected 'demo' (the directory's name and the key in grading.yaml), "
        "got 'other'"
    )


def test_missing_grading_yaml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_course(tmp_path)
    assert str(info.value) == f"{tmp_path.resolve() / 'grading.yaml'}: file not found"


def test_missing_assignment_yaml(tmp_path: Path) -> None:
    make_course(tmp_path)
    (tmp_path / "assignments" / "demo" / "assignment.yaml").unlink()
    path = tmp_path.resolve() / "assignments" / "demo" / "assignment.yaml"
    assert error_of(tmp_path) == (
        f"{path}: file not found (grading.yaml lists assignment 'demo', "
        "whose directory assignments/demo/ must contain assignment.yaml)"
    )


@pytest.mark.parametrize(
    ("relative", "what", "kind"),
    [
        ("assignments/demo/demo.ipynb", "starter notebook", "file"),
        ("assignments/demo/tests", "public tests", "directory"),
        ("reference/demo/solution.py", "reference solution", "file"),
        ("reference/demo/tests", "hidden tests", "directory"),
    ],
)
def test_missing_files(tmp_path: Path, relative: str, what: str, kind: str) -> None:
    make_course(tmp_path)
    path = tmp_path / relative
    path.rmdir() if path.is_dir() else path.unlink()
    expected = f"{tmp_path.resolve() / relative}: {what} of assignment 'demo' not found (expected a {kind})"
    assert error_of(tmp_path) == expected


def test_students_need_no_reference(tmp_path: Path) -> None:
    make_course(tmp_path)
    (tmp_path / "reference" / "demo" / "solution.py").unlink()
    assert load_course(tmp_path).assignment("demo", staff=False).name == "demo"


def test_yaml_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    make_course(tmp_path, grading=GRADING + "    limits: {cell_timeout: [\n")
    with pytest.raises(ConfigError) as info:
        load_course(tmp_path)
    assert str(info.value).startswith("grading.yaml: line 8, column 1: invalid YAML: ")


def test_top_level_must_be_a_mapping(tmp_path: Path) -> None:
    make_course(tmp_path, grading="- demo\n")
    with pytest.raises(ConfigError, match=r"^grading.yaml: expected a mapping of keys to values at the top level"):
        load_course(tmp_path)


def test_root_is_not_a_yaml_key(tmp_path: Path) -> None:
    make_course(tmp_path, grading=GRADING + "root: /elsewhere\n")
    with pytest.raises(ConfigError, match=r"^grading.yaml: root: unknown key"):
        load_course(tmp_path)


def test_limits_merge_order(tmp_path: Path) -> None:
    grading = GRADING.replace(
        "assignments:",
        "limits: {cell_timeout: 10, call_timeout: 11, wall_timeout: 12}\nassignments:",
    )
    grading += "    limits: {call_timeout: 21, wall_timeout: 22, max_restarts: 0}\n"
    assignment = ASSIGNMENT + "limits: {wall_timeout: 32, memory_bytes: 4294967296}\n"
    make_course(tmp_path, grading=grading, assignment=assignment)
    limits = load_course(tmp_path).assignment("demo").limits
    assert isinstance(limits, Limits)
    assert limits.cell_timeout == 10  # course
    assert limits.call_timeout == 21  # grading.yaml entry over course
    assert limits.max_restarts == 0  # grading.yaml entry over the default
    assert limits.wall_timeout == 32  # assignment.yaml over both
    assert limits.memory_bytes == 4 * 1024**3
    assert limits.output_cap == LimitsConfig().output_cap  # untouched fields keep their defaults
    assert limits.max_open_files == Limits().max_open_files


def test_defaults_in_an_override_do_not_reset_the_course(tmp_path: Path) -> None:
    grading = GRADING.replace("assignments:", "limits: {cell_timeout: 10}\nassignments:")
    make_course(tmp_path, grading=grading, assignment=ASSIGNMENT + "limits: {call_timeout: 5}\n")
    limits = load_course(tmp_path).assignment("demo").limits
    assert (limits.cell_timeout, limits.call_timeout) == (10, 5)


def test_due_date_and_late_policy(tmp_path: Path) -> None:
    grading = GRADING.replace("assignments:\n", "late_policy: {percent_per_day: 10, max_percent: 50}\nassignments:\n")
    make_course(tmp_path, grading=grading + "    due: 2026-12-01T23:59:00+01:00\n")
    a = load_course(tmp_path).assignment("demo")
    assert a.due is not None and a.due.isoformat() == "2026-12-01T23:59:00+01:00"
    assert a.late_policy.percent_per_day == 10 and a.late_policy.max_percent == 50


def test_assignment_version_follows_what_decides_grades(tmp_path: Path) -> None:
    make_course(tmp_path)
    before = load_course(tmp_path).assignment("demo").version()
    assert before == load_course(tmp_path).assignment("demo").version()
    hidden = tmp_path / "reference" / "demo" / "tests" / "test_hidden.py"
    hidden.write_text("# changed\n")
    after = load_course(tmp_path).assignment("demo").version()
    assert after != before
    (tmp_path / "grading.yaml").write_text(GRADING.replace("seed: 7", "seed: 8"))
    reseeded = load_course(tmp_path).assignment("demo").version()
    assert reseeded != after
    # the due date and the late policy decide no verdict: a batch applies them to the results it keeps
    (tmp_path / "grading.yaml").write_text(
        GRADING.replace("seed: 7", "seed: 8")
        + "    due: 2026-12-01T23:59:00+01:00\n"
        + "late_policy: {percent_per_day: 10}\n"
    )
    assert load_course(tmp_path).assignment("demo").version() == reseeded


def test_limits_config_matches_sandbox_limits() -> None:
    assert LimitsConfig().to_limits() == Limits()


def test_repository_grading_yaml_is_valid() -> None:
    course = load_course(Path(__file__).resolve().parents[2])
    assert course.assignments["vmap_convolve"].canvas_id == "101"


def test_the_course_file_shows_every_limit_with_its_real_default() -> None:
    """grading.yaml's commented ``limits:`` block is the documentation TAs read: one line per
    setting, with the value the sandbox really uses when it is left out."""
    import re

    from grader.course.config import LimitsConfig
    from grader.host.sandbox import Limits

    text = (Path(__file__).resolve().parents[2] / "grading.yaml").read_text(encoding="utf-8")
    shown = {k: float(v) for k, v in re.findall(r"^#   (\w+): ([0-9.]+)", text, re.MULTILINE)}
    defaults = LimitsConfig().model_dump()
    assert shown == {k: float(v) for k, v in defaults.items()}
    assert all(getattr(Limits(), k) == v for k, v in defaults.items())


def test_the_tolerance_a_course_leaves_out_is_the_checks_own() -> None:
    """grading.yaml's tolerance is validated here and used by the checks; the defaults agree."""
    from grader.course.config import Tolerance as Configured
    from grader.grading.checks import Tolerance

    assert Configured().model_dump() == vars(Tolerance())


def test_unmet_requirements_name_what_is_installed() -> None:
    """``requires``: each requirement the installed packages do not meet, with what is installed."""
    from importlib import metadata

    from grader.course.config import unmet_requirements

    jax = metadata.version("jax")
    assert unmet_requirements(["jax>=0.4", f"jax=={jax}", "numpy"]) == {}
    assert unmet_requirements(["jax>=999", "no-such-package-jaxgrade>=1"]) == {
        "jax>=999": f"jax {jax} is installed",
        "no-such-package-jaxgrade>=1": "no-such-package-jaxgrade is not installed",
    }
    # a requirement for another Python is not this one's
    assert unmet_requirements(['jax>=999; python_version < "3"', 'jax>=999; python_version >= "3"']) == {
        'jax>=999; python_version >= "3"': f"jax {jax} is installed"
    }
