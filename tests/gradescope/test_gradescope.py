"""The Gradescope autograder bundle, and grading inside a fake /autograder tree."""

from __future__ import annotations

import io
import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import zipfile
from datetime import datetime, timezone
from pathlib import Path

import pytest

from grader.course.config import ConfigError, load_course
from grader.gradescope.bundle import build_bundle
from grader.gradescope.runtime import NoSubmission, find_notebook, read_metadata, run

REPO = Path(__file__).resolve().parents[2]
NAME = "vmap_convolve"
METADATA = {
    "id": 123456,
    "created_at": "2026-01-05T14:22:32.365935-08:00",
    "assignment": {"due_date": "2026-01-04T23:00:00.000000-08:00", "late_due_date": None, "title": "vmap"},
    "users": [{"email": "alice@example.edu", "id": 1234, "name": "Alice Smith", "sid": "A0042"}],
    "previous_submissions": [],
}


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    return build_bundle(load_course(REPO), NAME, tmp_path_factory.mktemp("bundle") / "autograder.zip")


def _fake_autograder(bundle: Path, root: Path, notebooks: list[Path], metadata: dict | None = None) -> Path:
    """``root`` laid out like Gradescope's /autograder: source/ (the bundle), submission/, results/."""
    with zipfile.ZipFile(bundle) as zf:
        zf.extractall(root / "source")
    for info in zipfile.ZipFile(bundle).infolist():  # extractall drops permission bits
        mode = (info.external_attr >> 16) & 0o777
        if mode:
            os.chmod(root / "source" / info.filename, mode)
    (root / "submission").mkdir()
    (root / "results").mkdir()
    for nb in notebooks:
        shutil.copy(nb, root / "submission" / nb.name)
    if metadata is not None:
        (root / "submission_metadata.json").write_text(json.dumps(metadata), encoding="utf-8")
    return root


def _results(root: Path) -> dict:
    return json.loads((root / "results" / "results.json").read_text(encoding="utf-8"))


# --------------------------------------------------------------------------- the bundle


def test_the_bundle_leaves_out_what_only_validate_and_warming_read(tmp_path: Path) -> None:
    """prng_keys has mutants and alternative solutions: neither grades anyone, so neither ships."""
    out = build_bundle(load_course(REPO), "prng_keys", tmp_path / "autograder.zip")
    names = zipfile.ZipFile(out).namelist()
    assert "reference/prng_keys/solution.py" in names
    assert (REPO / "reference" / "prng_keys" / "alternatives").is_dir()
    assert not [n for n in names if "/mutants/" in n or "/alternatives/" in n]


def test_bundle_members(bundle):
    with zipfile.ZipFile(bundle) as zf:
        infos = {i.filename: i for i in zf.infolist()}
        names = set(infos)
        subset = zf.read("grading.yaml").decode()
    for required in (
        "setup.sh",
        "run_autograder",
        "grading.yaml",
        "jaxgrade/pyproject.toml",
        "jaxgrade/grader/__init__.py",
        "jaxgrade/grader/gradescope/bundle.py",
        "jaxgrade/grader/gradescope/runtime.py",
        "jaxgrade/grader/gradescope/templates/gradescope_run_autograder",
        "jaxgrade/grader/publish/templates/feedback.html",
        "jaxgrade/grader/publish/exports.py",
        f"assignments/{NAME}/assignment.yaml",
        f"assignments/{NAME}/{NAME}.ipynb",
        f"assignments/{NAME}/tests/test_public.py",
        f"reference/{NAME}/solution.py",
        f"reference/{NAME}/tests/test_hidden.py",
    ):
        assert required in names, required
    assert not [n for n in names if "mutants" in n or "__pycache__" in n or n.endswith(".pyc")]
    tops = {n.split("/")[1] for n in names if n.startswith(("assignments/", "reference/"))}
    assert tops == {NAME}
    for script in ("run_autograder", "setup.sh"):
        mode = infos[script].external_attr >> 16
        assert stat.S_ISREG(mode) and mode & 0o111 == 0o111, oct(mode)
    assert "vmap_convolve:" in subset and "pmap" not in subset


def test_bundle_scripts(bundle):
    with zipfile.ZipFile(bundle) as zf:
        setup = zf.read("setup.sh").decode()
        runner = zf.read("run_autograder").decode()
    assert setup.startswith("#!/usr/bin/env bash") and runner.startswith("#!/usr/bin/env bash")
    assert "bubblewrap" in setup and "python3-venv" in setup and 'pip install "$ROOT/source/jaxgrade"' in setup
    assert "-m grader.gradescope.runtime" in runner and "JAXGRADE_AUTOGRADER_ROOT" in runner


@pytest.mark.parametrize("requires", ["", "requires: ['jax>=999']\n"], ids=["met", "unmet"])
def test_setup_fails_the_build_where_the_image_cannot_grade_the_assignment(bundle, tmp_path, requires):
    """setup.sh's last step, run as written: a bundle whose assignment the image's packages
    cannot grade (the pmap assignment on an image with Python 3.10) fails its build, instead of
    every submission getting a score of 0 with "the autograder failed"."""
    root = _fake_autograder(bundle, tmp_path / "autograder", [])
    if requires:
        yaml_file = root / "source" / "assignments" / NAME / "assignment.yaml"
        yaml_file.write_text(yaml_file.read_text() + requires)
    (root / "venv" / "bin").mkdir(parents=True)
    python = root / "venv" / "bin" / "python3"  # the image's venv: this test's Python
    python.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    with zipfile.ZipFile(bundle) as zf:
        setup = zf.read("setup.sh").decode()
    (last,) = [line for line in setup.splitlines() if "preflight" in line and not line.startswith("#")]
    done = subprocess.run(
        ["bash", "-euc", last], env={**os.environ, "ROOT": str(root)}, capture_output=True, text=True, timeout=120
    )
    if requires:
        assert done.returncode != 0, done.stdout
        assert "vmap_convolve cannot be graded here: it needs jax>=999" in done.stderr, done.stderr
    else:
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("jaxgrade ") and done.stdout.rstrip().endswith("ready to grade vmap_convolve")


def test_bundle_course_matches_the_original(bundle, tmp_path):
    with zipfile.ZipFile(bundle) as zf:
        zf.extractall(tmp_path)
    original = load_course(REPO).assignment(NAME)
    copy_course = load_course(tmp_path)
    assert list(copy_course.assignments) == [NAME]
    copy = copy_course.assignment(NAME)
    assert (copy.title, copy.seed, copy.limits, copy.functions) == (
        original.title,
        original.seed,
        original.limits,
        original.functions,
    )
    assert copy_course.assignments[NAME].canvas_id == "101"
    if hasattr(original, "version"):
        assert copy.version() == original.version()


def test_bundle_unknown_assignment(tmp_path):
    with pytest.raises(ConfigError, match="no such assignment"):
        build_bundle(load_course(REPO), "nope", tmp_path / "x.zip")
    assert not (tmp_path / "x.zip").exists()


def test_bundle_out_that_is_a_folder_or_inside_a_file_is_a_clear_error(tmp_path):
    """``--out`` an existing folder was an IsADirectoryError traceback, once the zip was written beside it."""
    from grader.cli import main

    afile = tmp_path / "notes.txt"
    afile.write_text("mine")
    cases = [
        (tmp_path, f"{tmp_path}: is a folder, not a file", f"e.g. --out {tmp_path / 'autograder.zip'}"),
        (afile / "a.zip", f"{afile / 'a.zip'}: {afile} is not a folder", "choose another"),
    ]
    for out, said, where in cases:
        err = io.StringIO()
        code = main(["--course", str(REPO), "gradescope", NAME, "--out", str(out)], io.StringIO(), err)
        assert code == 2
        assert err.getvalue() == f"jaxgrade: error: {said}\nTIP: --out names the zip to write: {where}.\n"
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"] and afile.read_text() == "mine"


def test_bundled_package_builds(bundle, tmp_path):
    """The bundled jaxgrade/ is a complete project: setuptools builds it, templates included."""
    with zipfile.ZipFile(bundle) as zf:
        zf.extractall(tmp_path / "src")
    code = "import sys; from setuptools import build_meta as b; print(b.build_sdist(sys.argv[1]))"
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "dist")],
        cwd=tmp_path / "src" / "jaxgrade",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    sdist = tmp_path / "dist" / out.stdout.split()[-1]
    with tarfile.open(sdist) as tf:
        members = {m.split("/", 1)[1] for m in tf.getnames() if "/" in m}
    assert {"grader/gradescope/bundle.py", "grader/publish/exports.py", "pyproject.toml"} <= members
    assert {"grader/publish/templates/feedback.html", "grader/gradescope/templates/gradescope_setup.sh"} <= members
    assert "grader/course/templates/new/solution.py.j2" in members  # jaxgrade new's scaffold


# --------------------------------------------------------------------------- choosing the notebook, metadata


def _touch_notebook(path: Path, assignment: str | None, make_notebook) -> Path:
    text = make_notebook("x = 1")
    if assignment:
        nb = json.loads(text)
        nb["metadata"]["jaxgrade"] = {"assignment": assignment}
        text = json.dumps(nb)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_find_notebook_rules(tmp_path, make_notebook):
    sub = tmp_path / "submission"
    sub.mkdir()
    with pytest.raises(NoSubmission, match=r"No notebook .*it is empty.*vmap_convolve\.ipynb"):
        find_notebook(sub, "vmap_convolve.ipynb", NAME)
    (sub / "notes.txt").write_text("hi")
    with pytest.raises(NoSubmission, match=r"found: notes\.txt"):
        find_notebook(sub, "vmap_convolve.ipynb", NAME)
    only = _touch_notebook(sub / "mine.ipynb", None, make_notebook)
    _touch_notebook(sub / ".ipynb_checkpoints" / "mine-checkpoint.ipynb", NAME, make_notebook)
    _touch_notebook(sub / "__MACOSX" / "._mine.ipynb", NAME, make_notebook)
    assert find_notebook(sub, "vmap_convolve.ipynb", NAME) == only
    tagged = _touch_notebook(sub / "work" / "copy.ipynb", NAME, make_notebook)
    assert find_notebook(sub, "vmap_convolve.ipynb", NAME) == tagged  # the one whose metadata names it
    named = _touch_notebook(sub / "Vmap_Convolve.ipynb", None, make_notebook)
    assert find_notebook(sub, "vmap_convolve.ipynb", NAME) == named  # the starter's name wins
    _touch_notebook(sub / "other" / "vmap_convolve.ipynb", None, make_notebook)
    with pytest.raises(NoSubmission, match=r"has 4 notebooks .*Submit only your vmap_convolve\.ipynb"):
        find_notebook(sub, "vmap_convolve.ipynb", NAME)


def test_read_metadata(tmp_path):
    (tmp_path / "submission_metadata.json").write_text(json.dumps(METADATA), encoding="utf-8")
    info = read_metadata(tmp_path, tmp_path / "submission" / "hw.ipynb")
    assert info.student == "A0042"
    assert info.identity == {
        "lms": "gradescope",
        "id": "A0042",
        "name": "Alice Smith",
        "email": "alice@example.edu",
        "original": "hw.ipynb",
        "submission_id": "123456",
    }
    assert info.submitted_at == datetime(2026, 1, 5, 22, 22, 32, 365935, tzinfo=timezone.utc)
    assert info.due == datetime(2026, 1, 5, 7, 0, tzinfo=timezone.utc)
    assert info.late_due is None


def test_read_metadata_without_sid_or_file(tmp_path):
    meta = {**METADATA, "users": [{"email": "bob@example.edu", "name": "Bob"}]}
    (tmp_path / "submission_metadata.json").write_text(json.dumps(meta), encoding="utf-8")
    assert read_metadata(tmp_path, tmp_path / "x.ipynb").student == "bob@example.edu"
    (tmp_path / "submission_metadata.json").unlink()
    info = read_metadata(tmp_path, tmp_path / "x.ipynb")
    assert (info.student, info.identity) == ("x", {"lms": "file", "id": "x", "original": "x.ipynb"})


# --------------------------------------------------------------------------- run()


def test_missing_submission_scores_zero(bundle, tmp_path):
    root = _fake_autograder(bundle, tmp_path, [], METADATA)
    (root / "submission" / "answers.py").write_text("print('hi')\n")
    assert run(root) == 0
    res = _results(root)
    assert res["score"] == 0.0 and res["tests"] == []
    assert "No notebook (.ipynb) was found in your submission (found: answers.py)" in res["output"]
    assert "vmap_convolve.ipynb" in res["output"]


def test_grader_failure_still_writes_results(tmp_path):
    (tmp_path / "source").mkdir()
    (tmp_path / "submission").mkdir()
    assert run(tmp_path) == 0
    res = _results(tmp_path)
    assert res["score"] == 0.0
    assert "The autograder failed" in res["output"] and "ConfigError" in res["output"]
    assert "grading.yaml" in res["output"]


def test_late_hook_is_called(bundle, tmp_path, monkeypatch):
    import grader.gradescope.runtime as ag
    from grader.grading.record import Record

    def fake_grade(assignment, notebook, info, isolation):
        return Record(
            assignment=assignment.name,
            student=info.student,
            submission_sha256="",
            status="graded",
            score=10.0,
            max_score=10.0,
        )

    monkeypatch.setattr(ag, "_grade", fake_grade)
    seen = []

    def late(rec, assignment, info):
        seen.append((assignment.name, info.submitted_at is not None, info.due is not None))
        rec.late = {"days": 1, "percent": 10.0, "raw_score": rec.score, "flag": False, "submitted_at": "s", "due": "d"}
        rec.score = 9.0

    root = _fake_autograder(bundle, tmp_path, [REPO / "examples" / "class" / "alice.ipynb"], METADATA)
    assert run(root, late=late) == 0
    assert seen == [(NAME, True, True)]
    res = _results(root)
    assert res["score"] == 9.0 and "1 day late: -10% (10 -> 9)" in res["output"]


def test_run_autograder_script_writes_results_when_python_cannot_start(bundle, tmp_path):
    root = _fake_autograder(bundle, tmp_path / "ag", [], None)
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "python3").write_text("#!/bin/sh\nexit 3\n")
    (fake_bin / "python3").chmod(0o755)
    env = {**os.environ, "JAXGRADE_AUTOGRADER_ROOT": str(root), "PATH": f"{fake_bin}:{os.environ.get('PATH', '')}"}
    out = subprocess.run(["bash", str(root / "source" / "run_autograder")], env=env, capture_output=True, timeout=60)
    assert out.returncode == 3
    res = _results(root)
    assert res["score"] == 0.0 and "could not start" in res["output"]


@pytest.mark.slow
def test_run_autograder_grades_alice(bundle, tmp_path):
    """The extracted bundle's run_autograder, as Gradescope runs it, with this venv's python3."""
    root = _fake_autograder(bundle, tmp_path, [REPO / "examples" / "class" / "alice.ipynb"], METADATA)
    python_dir = Path(sys.executable).parent
    assert (python_dir / "python3").exists()
    env = {**os.environ, "JAXGRADE_AUTOGRADER_ROOT": str(root), "PATH": f"{python_dir}:{os.environ.get('PATH', '')}"}
    out = subprocess.run(
        ["bash", str(root / "source" / "run_autograder")],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    res = _results(root)
    assert res["score"] == 40.0, res["output"]
    assert len(res["tests"]) > 10
    assert all(t["status"] == "passed" and t["score"] == t["max_score"] for t in res["tests"])
    assert sum(t["max_score"] for t in res["tests"]) == pytest.approx(40.0)
    assert {t["visibility"] for t in res["tests"]} == {"visible", "after_published"}
    assert res["extra_data"]["student"] == "A0042"
    assert res["extra_data"]["assignment"] == NAME
    assert "grading" in out.stdout and "A0042" in out.stdout
