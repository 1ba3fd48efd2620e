"""``jaxgrade validate`` on a small course: it accepts a sound assignment and names what is wrong."""

from __future__ import annotations

import io
import textwrap
from pathlib import Path

import nbformat
import pytest

from grader.cli import main
from grader.course.config import ConfigError, load_course
from grader.course.validate import mutant_category, validate
from grader.intake.notebook import notebook_from_script

pytestmark = pytest.mark.slow

HIDDEN = """
    import numpy as np
    import pytest
    from grader.grading.checks import assert_close, check_jit

    @pytest.mark.category("numerics")
    @pytest.mark.points(2)
    def test_double(submission, reference, rng):
        x = rng.standard_normal(5).astype(np.float32)
        assert_close(submission.double(x), reference.double(x))

    @pytest.mark.category("jit")
    @pytest.mark.points(1)
    def test_double_jit(submission, reference, rng):
        x = rng.standard_normal(5).astype(np.float32)
        check_jit(submission, "double", (x,), reference=reference.double)
"""


def make_course(tmp_path: Path, mutants: dict[str, str]) -> Path:
    (tmp_path / "grading.yaml").write_text("course: t\nassignments:\n  toy: {}\n")
    a = tmp_path / "assignments" / "toy"
    r = tmp_path / "reference" / "toy"
    (a / "tests").mkdir(parents=True)
    (r / "tests").mkdir(parents=True)
    (r / "mutants").mkdir()
    (a / "assignment.yaml").write_text("name: toy\ntitle: Toy\nnotebook: toy.ipynb\nfunctions: [double]\n")
    starter = nbformat.v4.new_notebook()
    starter.cells = [nbformat.v4.new_code_cell("import jax.numpy as jnp\n# TODO: define double(x)")]
    nbformat.write(starter, a / "toy.ipynb")
    (r / "solution.py").write_text("import jax.numpy as jnp\n# %%\ndef double(x):\n    return 2 * jnp.asarray(x)\n")
    (r / "tests" / "test_hidden.py").write_text(textwrap.dedent(HIDDEN))
    for name, text in mutants.items():
        (r / "mutants" / f"{name}.py").write_text(text)
    return tmp_path


OFF_BY_ONE = (
    "# jaxgrade-mutant: fails=numerics\nimport jax.numpy as jnp\ndef double(x):\n    return 2 * jnp.asarray(x) + 1\n"
)
NOT_JITTABLE = "# jaxgrade-mutant: fails=jit\nimport numpy as np\ndef double(x):\n    return np.asarray(x) * 2\n"
CORRECT_BUT_CLAIMED = "# jaxgrade-mutant: fails=numerics\nimport jax.numpy as jnp\ndef double(x):\n    return x + x\n"


def test_sound_assignment_is_valid(tmp_path: Path) -> None:
    root = make_course(tmp_path, {"off_by_one": OFF_BY_ONE, "not_jittable": NOT_JITTABLE})
    out = io.StringIO()
    assert main(["--course", str(root), "validate", "toy", "--jobs", "1"], out=out) == 0
    lines = out.getvalue().splitlines()
    assert lines[0] == "validate toy:"
    assert lines[-1] == "valid"
    text = out.getvalue()
    assert "ok   reference" in text and "3/3" in text
    assert "ok   mutant off_by_one" in text and "ok   mutant not_jittable" in text
    assert "ok   starter" in text and "0/3" in text


def test_mutant_that_is_not_caught_fails_validation(tmp_path: Path) -> None:
    root = make_course(tmp_path, {"correct_but_claimed": CORRECT_BUT_CLAIMED})
    report = validate(load_course(root).assignment("toy"), jobs=1)
    assert not report.ok
    bad = [o for o in report.outcomes if not o.ok]
    assert [o.label for o in bad] == ["mutant correct_but_claimed"]
    assert bad[0].expectation == "loses points in numerics"


def test_mutant_header_is_required(tmp_path: Path) -> None:
    p = tmp_path / "m.py"
    p.write_text("# a mutant without its header\n")
    with pytest.raises(ConfigError, match="first line must be `# jaxgrade-mutant: fails=<category>`"):
        mutant_category(p)
    p.write_text("# jaxgrade-mutant: fails=numeric\n")
    with pytest.raises(ConfigError, match="did you mean fails=numerics"):
        mutant_category(p)
    p.write_text("# jaxgrade-mutant: fails=numerics\n")
    assert mutant_category(p) == "numerics"


@pytest.mark.parametrize(
    ("broken", "said"),
    [
        ("def broken(:", ["line 17", "def broken(:", "SyntaxError: invalid syntax"]),
        (
            "import no_such_module_here",
            ["test_hidden.py:17", "ModuleNotFoundError: No module named 'no_such_module_here'"],
        ),
        ("x = undefined_name + 1", ["line 17, in <module>", "NameError: name 'undefined_name' is not defined"]),
    ],
)
def test_a_test_file_that_cannot_be_collected_is_said_at_once_and_plainly(
    tmp_path: Path, broken: str, said: list[str]
) -> None:
    """validate graded every subject for half a minute before saying that a test file was
    broken, once per subject, with pytest's import machinery: now it says so before grading,
    once, with the course's frames and the error only; `grade` stops the same way, before
    making anything."""
    (tmp_path / "c").mkdir()
    root = make_course(tmp_path / "c", {"off_by_one": OFF_BY_ONE})
    hidden = root / "reference" / "toy" / "tests" / "test_hidden.py"
    hidden.write_text(hidden.read_text() + broken + "\n")
    assert len(hidden.read_text().splitlines()) == 17
    report = validate(load_course(root).assignment("toy"), jobs=1)
    assert [(o.label, o.ok) for o in report.outcomes] == [("tests", False)]
    detail = report.outcomes[0].detail
    assert detail.startswith("could not collect reference/toy/tests/test_hidden.py: ")
    assert all(s in detail for s in said), detail
    assert "_pytest" not in detail and "importlib" not in detail and "Hint:" not in detail

    nb = tmp_path / "toy.ipynb"
    nb.write_bytes((root / "assignments" / "toy" / "toy.ipynb").read_bytes())
    out, err = io.StringIO(), io.StringIO()
    argv = ["--course", str(root), "grade", "--assignment", "toy", "--out", str(tmp_path / "o"), str(nb)]
    assert main(argv, out=out, err=err) == 2
    assert (
        said[-1] in err.getvalue() and "TIP: fix the test file named above; `jaxgrade validate toy`" in err.getvalue()
    )
    assert not (tmp_path / "o").exists()


def test_every_alternative_solution_must_earn_full_marks(tmp_path: Path) -> None:
    """An alternative solution is the staff's word that a way of writing it is correct: validate
    grades each one the way a student hands it in (filled into the starter, whose cells run too)
    and fails when one loses points (a test asks more than the contract, or the alternative is
    wrong) or when a cell of the notebook fails."""
    root = make_course(tmp_path, {"off_by_one": OFF_BY_ONE})
    starter = nbformat.v4.new_notebook()
    starter.cells = [
        nbformat.v4.new_code_cell("import jax.numpy as jnp\nSCALE = 2  # given by the starter"),
        nbformat.v4.new_code_cell("# TODO: define double(x)"),
    ]
    nbformat.write(starter, root / "assignments" / "toy" / "toy.ipynb")
    alternatives = root / "reference" / "toy" / "alternatives"
    alternatives.mkdir()
    # right only with the starter's SCALE: a bare script of it would fail every test
    (alternatives / "scaled.py").write_text("def double(x):\n    return SCALE * jnp.asarray(x)\n")
    (alternatives / "with_numpy.py").write_text(NOT_JITTABLE.split("\n", 1)[1])
    (alternatives / "loud.py").write_text(  # full marks, but a cell of the notebook fails
        "import jax.numpy as jnp\n# %%\ndef double(x):\n    return 2 * jnp.asarray(x)\n# %%\nraise ValueError('oops')\n"
    )
    (alternatives / "latin1.py").write_bytes(b"# caf\xe9\ndef double(x):\n    return 2 * x\n")
    report = validate(load_course(root).assignment("toy"), jobs=1)
    by_label = {o.label: o for o in report.outcomes}
    assert by_label["alternative scaled"].ok and by_label["alternative scaled"].expectation == "full marks"
    assert not by_label["alternative with_numpy"].ok and "2/3" in by_label["alternative with_numpy"].detail
    loud = by_label["alternative loud"]
    assert not loud.ok and "3/3" in loud.detail, loud.detail
    assert "the cell `raise ValueError('oops')`: error (ValueError: oops)" in loud.detail, loud.detail
    assert not by_label["alternative latin1"].ok and "cannot read" in by_label["alternative latin1"].detail
    assert sorted(o.label for o in report.outcomes if not o.ok) == [
        "alternative latin1",
        "alternative loud",
        "alternative with_numpy",
    ]
    assert by_label["reference"].ok and not report.ok


def test_each_solution_is_graded_once_and_leaves_the_cache_warm_with_all_of_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the compilation cache is cold, validate's gradings of the reference and of each
    alternative are what warm it (trusted code, with a writable cache): the reference used to be
    graded once to warm the cache and once more to be judged, and the alternatives never warmed
    it in a batch of fewer than 50.  Afterwards every grading of the assignment, of any size,
    reads the cache warmed with all of them."""
    from grader.grading import grade as grading
    from grader.host import xla_cache
    from grader.host.sandbox import choose_isolation

    if choose_isolation("auto") != "bwrap":
        pytest.skip("the cache is mounted only into bubblewrap sandboxes; bubblewrap does not work here")
    monkeypatch.setenv("JAXGRADE_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "course").mkdir()
    root = make_course(tmp_path / "course", {"off_by_one": OFF_BY_ONE})
    alternatives = root / "reference" / "toy" / "alternatives"
    alternatives.mkdir()
    (alternatives / "summed.py").write_text(
        "import jax.numpy as jnp\n# %%\ndef double(x):\n    return x + jnp.asarray(x)\n"
    )
    graded: list[tuple[str, bool]] = []  # (the function's source line, whether it wrote the cache)
    real = grading.grade_notebook

    def counting(assignment, path, **kwargs):  # type: ignore[no-untyped-def]
        text = Path(path).read_text(encoding="utf-8")
        cache = kwargs.get("xla_cache")
        graded.append(
            (
                "mutant"
                if "+ 1" in text
                else "2 * jnp"
                if "2 * jnp" in text
                else "x + jnp"
                if "x + jnp" in text
                else "other",
                bool(cache and cache.writable),
            )
        )
        return real(assignment, path, **kwargs)

    monkeypatch.setattr(grading, "grade_notebook", counting)
    a = load_course(root).assignment("toy")
    report = validate(a, jobs=1)
    assert report.ok, "\n".join(report.lines())
    solutions = sorted(g for g in graded if g[0] not in ("other", "mutant"))
    assert solutions == [("2 * jnp", True), ("x + jnp", True)], graded  # once each, and they warmed it
    assert xla_cache.ready(grading.trusted_cache_dir(a, alternatives=True)) is not None
    assert grading.cache_plan(a, 1) == grading.CachePlan(grading.trusted_cache_dir(a, alternatives=True), False, True)
    # with the cache warm, validate grades them again, reading it (nothing of its own to warm)
    graded.clear()
    assert validate(a, jobs=1).ok
    assert sorted(g for g in graded if g[0] not in ("other", "mutant")) == [("2 * jnp", False), ("x + jnp", False)], (
        graded
    )


def test_a_pool_hands_back_the_records_of_the_solutions_its_warm_graded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same with pool workers (validate's default, 2 jobs): the warm task sends back each
    solution's record, by its path in the course, and no solution is graded again."""
    from grader.grading import grade as grading
    from grader.host import xla_cache
    from grader.host.sandbox import choose_isolation

    if choose_isolation("auto") != "bwrap":
        pytest.skip("the cache is mounted only into bubblewrap sandboxes; bubblewrap does not work here")
    monkeypatch.setenv("JAXGRADE_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "course").mkdir()
    root = make_course(tmp_path / "course", {})
    (root / "reference" / "toy" / "alternatives").mkdir()
    (root / "reference" / "toy" / "alternatives" / "solution.py").write_text(  # the reference's name, elsewhere
        "import jax.numpy as jnp\n# %%\ndef double(x):\n    return x + jnp.asarray(x)\n"
    )
    a = load_course(root).assignment("toy")
    mutant = tmp_path / "off_by_one.ipynb"
    nbformat.write(notebook_from_script(OFF_BY_ONE, "toy"), mutant)
    solutions: dict = {}
    records = grading.grade_many(a, [mutant], jobs=2, solutions=solutions)
    assert records[mutant].score < records[mutant].max_score
    assert set(solutions) == {a.solution, *a.alternatives()}
    for script, rec in solutions.items():
        assert rec.score == rec.max_score == 3, (script, rec.status, rec.message)
        assert rec.student == "reference" and Path(rec.source).name.startswith("warm-"), rec.source  # the warm's
    assert xla_cache.ready(grading.trusted_cache_dir(a, alternatives=True)) is not None


def test_solutions_a_failed_warm_did_not_grade_are_graded_as_submissions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A warm that fails (here: its first grading raises, which warming survives) leaves no
    record of a solution: they are graded afterwards as submissions are, and validate judges them."""
    from grader.grading import grade as grading
    from grader.host.sandbox import choose_isolation

    if choose_isolation("auto") != "bwrap":
        pytest.skip("the cache is mounted only into bubblewrap sandboxes; bubblewrap does not work here")
    monkeypatch.setenv("JAXGRADE_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "course").mkdir()
    root = make_course(tmp_path / "course", {"off_by_one": OFF_BY_ONE})
    real = grading.grade_notebook
    writable: list[bool] = []

    def failing_warm(assignment, path, **kwargs):  # type: ignore[no-untyped-def]
        cache = kwargs.get("xla_cache")
        writable.append(bool(cache and cache.writable))
        if writable[-1]:
            raise RuntimeError("the warm broke")
        return real(assignment, path, **kwargs)

    monkeypatch.setattr(grading, "grade_notebook", failing_warm)
    report = validate(load_course(root).assignment("toy"), jobs=1)
    assert report.ok, "\n".join(report.lines())
    assert {o.label for o in report.outcomes} == {"reference", "starter", "mutant off_by_one"}
    assert writable.count(True) == 1 and writable.count(False) == 3  # the warm's one try, then all three


REPO = Path(__file__).resolve().parents[2]


@pytest.mark.corpus  # minutes of grading: scheduled with the corpus modules, first
def test_prng_keys_is_valid_with_its_alternative_solutions() -> None:
    """The real course: prng_keys' reference and its two alternative solutions, filled into its
    starter, earn full marks with every cell running (the tests ask no more than the contract of
    these ways of writing it), every mutant loses points in its category, the starter earns none."""
    report = validate(load_course(REPO).assignment("prng_keys"))
    assert report.ok, "\n".join(report.lines())
    labels = [o.label for o in report.outcomes]
    assert {"reference", "alternative split_as_you_go", "alternative split_per_sample", "starter"} <= set(labels)
    assert sum(label.startswith("mutant ") for label in labels) >= 4


def test_an_unreadable_starter_is_warned_about_once_per_process(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """validate asks for the filled-in solutions twice (to list them, and to grade them): the
    solutions are then graded as bare scripts, and the log says so once, not at each ask."""
    from grader.grading.grade import filled_solutions

    root = make_course(tmp_path, {})
    (root / "assignments" / "toy" / "toy.ipynb").write_text("{not json")
    assignment = load_course(root).assignment("toy")
    with caplog.at_level("WARNING", logger="grader.grading.grade"):
        for _ in range(2):
            [(script, nb, why)] = filled_solutions(assignment)
            assert script == assignment.solution and nb is not None and why == ""
    said = [r for r in caplog.records if "graded without the starter's cells" in r.getMessage()]
    assert len(said) == 1, [r.getMessage() for r in caplog.records]
