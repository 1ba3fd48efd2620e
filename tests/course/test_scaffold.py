"""``jaxgrade new``: the scaffold loads, validate lists exactly what is left, grading.yaml keeps its comments."""

from __future__ import annotations

import io
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest
import yaml

from grader.cli import main
from grader.course.config import load_course
from grader.course.scaffold import ScaffoldError, add_entry, todos
from grader.intake.notebook import load_notebook
from tests.minicourse import make_minicourse

REPO = Path(__file__).resolve().parents[2]


def run(root: Path, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["--course", str(root), *argv], out=out, err=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def course(tmp_path: Path) -> Path:
    return make_minicourse(tmp_path / "course")


TODOS_FG = [
    "validate softmax:",
    "  TODO assignments/softmax/softmax.ipynb: cell 1: say what this assignment teaches, and what students hand in.",
    "  TODO assignments/softmax/softmax.ipynb: cell 3: say what `f` takes (shapes, dtypes) and returns, with a small example.",
    "  TODO assignments/softmax/softmax.ipynb: cell 5: say what `g` takes (shapes, dtypes) and returns, with a small example.",
    "  TODO assignments/softmax/tests/test_public.py:19: write f(X), worked out by hand, e.g. np.array([...], dtype=np.float32)",
    "  TODO assignments/softmax/tests/test_public.py:27: write g(X), worked out by hand, e.g. np.array([...], dtype=np.float32)",
    "  TODO reference/softmax/tests/test_hidden.py:19: make the arguments each function takes "
    "(the scaffold's guess is one float32 vector of length n)",
    "  TODO reference/softmax/solution.py: the reference still raises NotImplementedError in f; write f there",
    "  TODO reference/softmax/solution.py: the reference still raises NotImplementedError in g; write g there",
    "  TODO reference/softmax/mutants/wrong_numbers.py: the mutant is identical to the reference; "
    "put one bug in it and name the bug on its second line",
    "NOT written yet: 9 thing(s) left (TODO lines above); once they are written, validate grades the reference, "
    "the mutants and the starter",
]


def test_new_writes_a_loadable_assignment_and_validate_lists_what_is_left(course: Path) -> None:
    code, out, _ = run(course, "new", "softmax", "--functions", "f, g", "--title", "Softmax, stably")
    assert code == 0
    assert [line.split()[0] for line in out.splitlines()[1:8]] == [
        "assignments/softmax/assignment.yaml",
        "assignments/softmax/softmax.ipynb",
        "assignments/softmax/tests/test_public.py",
        "reference/softmax/mutants/wrong_numbers.py",
        "reference/softmax/solution.py",
        "reference/softmax/tests/test_hidden.py",
        "grading.yaml",
    ]
    assert (
        out.splitlines()[7] == "  grading.yaml                                 the new entry at the end of assignments:"
    )
    a = load_course(course).assignment("softmax")
    assert (a.title, a.functions) == ("Softmax, stably", ("f", "g"))
    assert load_notebook(a.starter).assignment == "softmax"
    code, out, _ = run(course, "list")
    assert code == 0 and "softmax                  Softmax, stably — 8 points (numerics 6, jit 2)" in out
    code, out, _ = run(course, "validate", "softmax")  # nothing is graded: the to-do list is static
    assert code == 1
    assert out.splitlines() == TODOS_FG


def test_validate_names_a_mutant_left_as_a_stub_once_the_reference_is_written(course: Path) -> None:
    assert run(course, "new", "halve")[0] == 0
    solution = course / "reference" / "halve" / "solution.py"
    solution.write_text(re.sub(r"raise NotImplementedError.*", "return x / 2", solution.read_text()))
    found = todos(load_course(course).assignment("halve"))
    assert "reference/halve/solution.py" not in "".join(found)
    assert found[-1] == (
        "reference/halve/mutants/wrong_numbers.py: the mutant still raises NotImplementedError in halve; "
        "copy the reference there and put one bug in it"
    )


def _fill_in(root: Path) -> None:
    """What an author writes into the scaffold of `twice` (functions: twice)."""
    ref, student = root / "reference" / "twice", root / "assignments" / "twice"
    stub = re.compile(r"raise NotImplementedError  # the reference of twice: replace this line")
    solution = ref / "solution.py"
    solution.write_text(stub.sub("return 2 * jnp.asarray(x)", solution.read_text()))
    mutant = ref / "mutants" / "wrong_numbers.py"
    mutant.write_text(stub.sub("return 2 * jnp.asarray(x) + 1", mutant.read_text()))
    public = student / "tests" / "test_public.py"
    public.write_text(re.sub(r"expected = \.\.\. .*", "expected = 2 * X", public.read_text()))
    hidden = ref / "tests" / "test_hidden.py"
    hidden.write_text(re.sub(r"\n *# TODO\(jaxgrade\).*", "", hidden.read_text()))
    nb = nbformat.read(student / "twice.ipynb", as_version=4)
    for cell in nb.cells:
        cell.source = cell.source.replace("TODO(jaxgrade): say what", "Here is what")
    nbformat.write(nb, student / "twice.ipynb")


@pytest.mark.slow
def test_filled_in_scaffold_is_valid(course: Path) -> None:
    assert run(course, "new", "twice")[0] == 0
    _fill_in(course)
    code, out, _ = run(course, "validate", "twice", "--jobs", "2")
    assert out.splitlines()[-1] == "valid", out
    assert code == 0
    assert "ok   mutant wrong_numbers" in out and "ok   starter" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["new", "2fast"], "'2fast' is not a valid assignment name (expected a Python identifier"),
        (["new", "class"], "'class' is not a valid assignment name"),
        (["new", "double"], "grading.yaml: assignments.double: the course already has an assignment 'double'"),
        (["new", "ok", "--functions", "f,g-h"], "--functions: 'g-h' is not a Python function name"),
        (["new", "ok", "--functions", "f,f"], "--functions: f given more than once"),
        (["new", "ok", "--functions", "jnp"], "--functions: 'jnp' would hide the starter notebook's `jnp` import"),
        (["new", "ok", "--functions", "f,\u00f1"], "--functions: '\u00f1' is not a Python function name"),
        (["new", "ok", "--functions", "\ufb01t"], "--functions: '\ufb01t' is not a Python function name"),  # NFKC: fit
        (
            ["new", "ok", "--functions", "jc"],
            "--functions: 'jc' would hide the self-check `jc` that the released notebook's first cell defines",
        ),
        (
            ["new", "jc"],
            "the default function name (the assignment's): 'jc' would hide the self-check `jc` that the released "
            "notebook's first cell defines",
        ),
        (["new", "np"], "the default function name (the assignment's): 'np' would hide the starter notebook's `np`"),
    ],
)
def test_new_refuses_bad_requests_and_writes_nothing(course: Path, argv: list[str], message: str) -> None:
    before = (course / "grading.yaml").read_text()
    code, _, err = run(course, *argv)
    assert code == 2
    assert err.startswith(f"jaxgrade: error: {message}")
    assert "\nTIP: " in err
    assert (course / "grading.yaml").read_text() == before
    assert not (course / "assignments" / "ok").exists() and not (course / "reference" / "ok").exists()
    assert sorted(p.name for p in (course / "assignments").iterdir()) == ["double"]


@pytest.fixture
def umask() -> Iterator[int]:
    old = os.umask(0o002)
    try:
        yield 0o002
    finally:
        os.umask(old)


def test_new_keeps_grading_yaml_mode_and_gives_new_files_the_umask_mode(course: Path, umask: int) -> None:
    (course / "grading.yaml").chmod(0o644)
    paths = [course / line.split()[0] for line in run(course, "new", "softmax")[1].splitlines()[1:8]]
    assert stat.S_IMODE((course / "grading.yaml").stat().st_mode) == 0o644
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in paths if p.name != "grading.yaml"} == {
        p.name: 0o664 for p in paths if p.name != "grading.yaml"
    }


def test_new_writes_through_a_linked_grading_yaml(course: Path) -> None:
    (course / "shared").mkdir()
    (course / "grading.yaml").rename(course / "shared" / "grading.yaml")
    (course / "grading.yaml").symlink_to(Path("shared") / "grading.yaml")
    assert run(course, "new", "softmax")[0] == 0
    assert (course / "grading.yaml").is_symlink()
    assert "softmax:" in (course / "shared" / "grading.yaml").read_text()
    assert load_course(course).assignment("softmax").functions == ("softmax",)


def test_new_refuses_a_leftover_directory(course: Path) -> None:
    (course / "reference" / "late").mkdir(parents=True)
    code, _, err = run(course, "new", "late")
    assert code == 2 and f"{course / 'reference' / 'late'}: already exists" in err
    assert not (course / "assignments" / "late").exists()


def test_add_entry_keeps_every_comment_of_the_sample_course() -> None:
    text = (REPO / "grading.yaml").read_text()
    new = add_entry(text, "softmax")
    lines = new.splitlines()
    at = lines.index("  softmax:  # written by `jaxgrade new softmax`")
    assert lines[at - 2 : at] == ['    title: "Parallelism with pmap"', '    canvas_id: "109"']
    assert [line for line in lines if "softmax" not in line and '"<id>"' not in line and "due:" not in line] == (
        text.splitlines()
    )
    assert list(yaml.safe_load(new)["assignments"])[-1] == "softmax"


def test_add_entry_goes_after_the_last_entry_and_its_comments_not_after_the_next_key() -> None:
    text = "assignments:\n  a:\n    title: A\n    # limits: {cell_timeout: 5}\n\n# the late policy\nlate_policy: {}\n"
    new = add_entry(text, "b")
    assert new.startswith("assignments:\n  a:\n    title: A\n    # limits: {cell_timeout: 5}\n  b:  # written by")
    assert new.endswith("\n\n# the late policy\nlate_policy: {}\n")
    assert yaml.safe_load(new)["assignments"] == {"a": {"title": "A"}, "b": None}


def test_add_entry_to_an_empty_mapping_and_refuses_flow_style() -> None:
    assert yaml.safe_load(add_entry("course: c\nassignments:\n", "b"))["assignments"] == {"b": None}
    with pytest.raises(ScaffoldError, match=r"written on one line"):
        add_entry("assignments: {a: {}}\n", "b")


def test_new_refuses_a_one_line_assignments_mapping_before_writing_anything(tmp_path: Path) -> None:
    root = tmp_path / "c"
    (root / "assignments").mkdir(parents=True)
    (root / "grading.yaml").write_text("course: c  # kept\nassignments: {}\n")
    code, _, err = run(root, "new", "fresh")
    assert code == 2
    assert err.splitlines() == [
        "jaxgrade: error: grading.yaml: assignments: written on one line ({...}), which jaxgrade new does not edit",
        "TIP: Write assignments: as one entry per line (see the README), or add `fresh: {}` to it yourself.",
    ]
    assert not (root / "assignments" / "fresh").exists() and not (root / "reference").exists()


def test_release_and_gradescope_of_an_unfinished_assignment_warn(course: Path, tmp_path: Path) -> None:
    """Shipped as `new` left it, students would get its TODOs and stubs (a TA's walkthrough): both
    commands say so and point at validate; a finished assignment gets no warning."""
    assert run(course, "new", "softmax", "--functions", "f")[0] == 0
    for argv in (
        ["release", "softmax", "--out", str(tmp_path / "rel")],
        ["gradescope", "softmax", "--out", str(tmp_path / "gs.zip")],
    ):
        code, _, err = run(course, *argv)
        assert code == 0, err
        assert err.startswith("warning: softmax is not finished (") and "`jaxgrade validate softmax` lists them" in err
    code, _, err = run(course, "release", "double", "--out", str(tmp_path / "rel2"))
    assert code == 0 and "warning" not in err
