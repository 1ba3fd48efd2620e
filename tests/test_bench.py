"""bench/compare.py and its otter version of vmap_convolve's tests (bench/otter/).

Nothing here times anything: the benchmark's figures belong in bench/README.md, not in asserts.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]
OTTER = REPO / "bench" / "otter"
ASSIGNMENT = "vmap_convolve"


def load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def compare() -> ModuleType:
    return load(REPO / "bench" / "compare.py", "bench_compare")


def test_copies_of_the_class_are_distinct_notebooks(compare, tmp_path):
    paths = compare.make_class(tmp_path / "class", 2)
    assert len(paths) == 2 * len(list(compare.CLASS.glob("*.ipynb")))
    assert len({p.read_bytes() for p in paths}) == len(paths)  # different sha256: jaxgrade grades each
    assert {p.stem for p in paths} >= {"alice000", "alice001"}


def test_a_missing_tool_is_named_with_its_install_command(compare, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "otter" else real(name))
    with pytest.raises(SystemExit) as exc:
        compare.main(["--skip", "nbconvert"])
    assert str(exc.value) == "the otter row needs otter-grader: pip install -e '.[bench]' (or --skip otter)"


def test_unknown_rows_to_skip_are_refused(compare, capsys):
    with pytest.raises(SystemExit):
        compare.main(["--skip", "otter,nbconvrt"])
    assert "nbconvrt" in capsys.readouterr().err


def test_ratios_are_per_notebook_against_the_rows_baseline(compare):
    base = compare.Row("nbconvert", "nb", 6, 6.0, "nb")
    otter = compare.Row("otter", "otter", 6, 30.0, "nb")
    grade = compare.Row("grade", "grade", 6, 24.0, "nb")
    single = compare.Row("nbconvert", "nb1", 1, 2.0, "nb1")
    check = compare.Row("check", "check", 1, 4.0, "nb1")
    compare.ratios([base, otter, grade, single, check])
    assert (base.vs_nbconvert, otter.vs_nbconvert, grade.vs_nbconvert) == (1.0, 5.0, 4.0)
    assert grade.vs_otter == pytest.approx(0.8) and otter.vs_otter is None
    assert check.vs_nbconvert == 2.0 and check.vs_otter is None


# --------------------------------------------------------------------------- the otter tests


@pytest.fixture(scope="module")
def otter_tests(tmp_path_factory) -> Iterator[list]:
    """bench/otter/tests as otter reads them, with the reference solution importable as otter's
    autograder zip ships it (``vmap_convolve_solution``)."""
    pytest.importorskip("otter", reason="the otter tests need otter-grader: pip install -e '.[bench]'")
    from otter.nbmeta_config import NBMetadataConfig
    from otter.test_files import create_test_file

    support = tmp_path_factory.mktemp("otter-support")
    shutil.copy(REPO / "reference" / ASSIGNMENT / "solution.py", support / "vmap_convolve_solution.py")
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(OTTER))
        mp.syspath_prepend(str(support))
        yield [create_test_file(str(p), NBMetadataConfig()) for p in sorted((OTTER / "tests").glob("*.py"))]


def jaxgrade_tests() -> dict[tuple[str, bool], tuple[str, float]]:
    """(name, hidden) -> (category, points) of vmap_convolve's jaxgrade tests, a parametrized
    test's points split evenly across its cases as jaxgrade does."""
    out = {}
    files = [
        (REPO / "assignments" / ASSIGNMENT / "tests" / "test_public.py", False),
        (REPO / "reference" / ASSIGNMENT / "tests" / "test_hidden.py", True),
    ]
    for path, hidden in files:
        module = load(path, f"bench_jaxgrade_{path.stem}")
        for name, fn in vars(module).items():
            if not name.startswith("test_"):
                continue
            marks = {m.name: m for m in fn.pytestmark}
            points, category = marks["points"].args[0], marks["category"].args[0]
            cases = [""]
            if "parametrize" in marks:
                values = marks["parametrize"].args[1]
                cases = ["[" + ("-".join(map(str, v)) if isinstance(v, tuple) else str(v)) + "]" for v in values]
            for case in cases:
                out[(name + case, hidden)] = (category, points / len(cases))
    return out


@pytest.mark.filterwarnings("ignore::pytest.PytestUnknownMarkWarning")  # jaxgrade's plugin registers its marks
def test_otter_tests_mirror_jaxgrade_tests_name_for_name_point_for_point(otter_tests):
    got = {}
    for test_file in otter_tests:
        for case in test_file.test_cases:
            name = case.name.split("::")[-1]  # test_public::/test_hidden:: tell the two is_jitted tests apart
            got[(name, case.hidden)] = (test_file.name, case.points)
    want = jaxgrade_tests()
    assert set(got) == set(want)
    for key, (category, points) in want.items():
        assert got[key][0] == category, key
        assert got[key][1] == pytest.approx(points), key
    assert sum(p for _, p in got.values()) == pytest.approx(40)


def otter_grade(otter_tests: list, path: Path, name: str) -> dict[str, float]:
    """Points per category (otter question) that the otter tests give the solution in ``path``,
    loaded as a module so that the checks can read its source, as they do in a kernel."""
    env = vars(load(path, name))
    scores = {}
    for test_file in otter_tests:
        test_file.run(env)
        scores[test_file.name] = sum(r.test_case.points for r in test_file.test_case_results if r.passed)
    return scores


@pytest.mark.slow
def test_otter_tests_give_the_reference_full_marks_and_catch_every_mutant(otter_tests):
    """What `jaxgrade validate vmap_convolve` asserts of jaxgrade's tests, asserted of the otter ones."""
    reference = otter_grade(otter_tests, REPO / "reference" / ASSIGNMENT / "solution.py", "bench_reference")
    assert reference == pytest.approx({"numerics": 20, "jit": 7, "vectorization": 10, "purity": 3})
    mutants = sorted((REPO / "reference" / ASSIGNMENT / "mutants").glob("*.py"))
    assert mutants
    for path in mutants:
        fails = path.read_text().splitlines()[0].split("fails=")[1].strip()
        scores = otter_grade(otter_tests, path, f"bench_mutant_{path.stem}")
        assert scores[fails] < reference[fails] - 1e-9, (path.name, scores)


def test_compare_reads_otter_results_per_question(compare, tmp_path):
    """otter's results.json: a "Public Tests" summary without points, then one entry per question."""
    out = tmp_path / "otter-out"
    (out / "alice000").mkdir(parents=True)
    results = {
        "tests": [
            {"name": "Public Tests", "score": None, "max_score": None},
            {"name": "numerics", "score": 20.0, "max_score": 20.0},
            {"name": "vectorization", "score": 6, "max_score": 10},
        ]
    }
    (out / "alice000" / "results.json").write_text(json.dumps(results))
    scores = compare.otter_scores(out, [Path("alice000.ipynb"), Path("bob000.ipynb")])
    assert scores == {"alice000": {"score": 26.0, "categories": {"numerics": 20.0, "vectorization": 6.0}}}


@pytest.mark.parametrize("script", sorted(p.name for p in (REPO / "bench").glob("*.py")))
def test_every_benchmark_starts(script: str) -> None:
    """Each script imports what it measures and parses its arguments (a moved module broke
    bench/profile.py once, unseen: nothing ran it)."""
    import subprocess

    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / script), "--help"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "usage:" in proc.stdout
