"""`jaxgrade release`: the student bundle holds nothing of reference/, refuses to overwrite
other folders, and `jaxgrade check` says what to do where no course is found."""

from __future__ import annotations

import ast
import io
import json
import shutil
import zipfile
from pathlib import Path

import nbformat
import pytest
from IPython.core.inputtransformer2 import TransformerManager

from grader.cli import main
from grader.course import release
from grader.course.config import ConfigError, load_course
from grader.course.release import MARKER, SETUP_TAG, build_release
from grader.selfcheck import decode_payload
from tests.minicourse import make_minicourse

ROOT = Path(__file__).resolve().parents[2]
COURSE = load_course(ROOT)


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def setup_call(notebook: Path) -> tuple[str, str]:
    """(name, payload) of the released notebook's jc.setup(...) call."""
    nb = nbformat.read(notebook, as_version=4)
    cells = [c for c in nb.cells if SETUP_TAG in c.metadata.get("tags", [])]
    assert len(cells) == 1
    tree = ast.parse(TransformerManager().transform_cell(cells[0].source))
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "setup"]
    assert len(calls) == 1
    return calls[0].args[0].value, calls[0].args[1].value  # type: ignore[attr-defined]


def bundle_texts(folder: Path, zip_path: Path) -> dict[str, str]:
    """Every text a student receives: the bundle's files, the zip's members, and the files inside
    the notebook's payload, by where they are."""
    texts = {f"file:{p.relative_to(folder)}": p.read_bytes().decode() for p in folder.rglob("*") if p.is_file()}
    with zipfile.ZipFile(zip_path) as zf:
        texts |= {f"zip:{n}": zf.read(n).decode() for n in zf.namelist()}
    _, payload = setup_call(next(folder.glob("*.ipynb")))
    texts |= {f"payload:{rel}": text for rel, text in decode_payload(payload).items()}
    return texts


def secrets(name: str) -> tuple[set[str], set[str], set[str]]:
    """(file names of reference/NAME, hidden test names, distinctive lines of the hidden side):
    what build_release's own check looks for (grader.course.release.secrets)."""
    return release.secrets(COURSE.assignment(name, staff=False))


def leaks(texts: dict[str, str], files: set[str], hidden: set[str], lines: set[str]) -> list[str]:
    return release.leak_report(texts, files, hidden, lines)


@pytest.mark.parametrize("name", list(COURSE.assignments))
def test_bundle_holds_nothing_of_reference(tmp_path: Path, name: str) -> None:
    folder = build_release(COURSE, name, tmp_path, make_zip=True)
    texts = bundle_texts(folder, tmp_path / f"{name}.zip")
    files, hidden, lines = secrets(name)
    assert hidden and lines and "solution.py" in files  # the scan has something to find
    assert leaks(texts, files, hidden, lines) == []
    # and it would find them: a planted line of the solution, and a hidden test name, are reported
    planted = {**texts, "payload:tests/extra.py": sorted(lines)[0] + "\n" + sorted(hidden)[0]}
    assert len(leaks(planted, files, hidden, lines)) == 2
    notebook = COURSE.assignment(name, staff=False).config.notebook
    assert sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()) == sorted(
        [MARKER, "assignment.yaml", "grading.yaml", notebook]
        + [f"tests/{p.name}" for p in (ROOT / "assignments" / name / "tests").glob("*.py")]
    )


def test_bundle_contents(tmp_path: Path) -> None:
    """The notebook names its assignment and carries the public tests and configuration; the
    bundle's grading.yaml has no LMS ids or dates."""
    folder = build_release(COURSE, "vmap_convolve", tmp_path)
    nb = nbformat.read(folder / "vmap_convolve.ipynb", as_version=4)
    assert nb.metadata["jaxgrade"] == {"assignment": "vmap_convolve"}
    first_code = next(c for c in nb.cells if c.cell_type == "code")
    assert SETUP_TAG in first_code.metadata["tags"]
    assert "    %pip install -q jaxgrade==0.1.0\n" in first_code.source
    name, payload = setup_call(folder / "vmap_convolve.ipynb")
    assert name == "vmap_convolve"
    public = ROOT / "assignments" / "vmap_convolve"
    assert decode_payload(payload) == {
        "grading.yaml": (folder / "grading.yaml").read_text(),
        "assignment.yaml": (public / "assignment.yaml").read_text(),
        "tests/test_public.py": (public / "tests" / "test_public.py").read_text(),
    }
    course = load_course(folder)
    assert course.model_dump(exclude={"root"}, exclude_defaults=True) == {
        "course": "JAX 101 (sample course)",
        "seed": 20261120,
        "assignments": {"vmap_convolve": {"title": "Vectorization with vmap"}},
    }
    assert not (tmp_path / "vmap_convolve.zip").exists()


def test_release_refuses_a_folder_that_is_not_a_release(tmp_path: Path) -> None:
    (tmp_path / "vmap_convolve").mkdir()
    (tmp_path / "vmap_convolve" / "notes.txt").write_text("mine")
    code, _, err = run("--course", str(ROOT), "release", "vmap_convolve", "--out", str(tmp_path))
    assert code == 2
    assert err == (
        f"jaxgrade: error: {tmp_path / 'vmap_convolve'}: the folder is not empty and is not an earlier release "
        f"(no .jaxgrade-release in it); not overwriting it\n"
        "TIP: Choose another --out, or move that folder away first.\n"
    )
    assert (tmp_path / "vmap_convolve" / "notes.txt").read_text() == "mine"


def test_release_into_a_file_or_a_zip_over_a_folder_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    """``--out`` an existing file (or a path inside one) was a FileExistsError traceback; a zip
    path that is a folder failed only after the bundle was written."""
    afile = tmp_path / "notes.txt"
    afile.write_text("mine")
    for out, said in [
        (afile, f"{afile}: exists and is not a folder"),
        (afile / "sub", f"{afile / 'sub'}: {afile} is not a folder"),
    ]:
        code, _, err = run("--course", str(ROOT), "release", "vmap_convolve", "--out", str(out))
        assert code == 2
        assert err == f"jaxgrade: error: {said}\nTIP: Choose another --out, or remove it.\n"
    assert afile.read_text() == "mine"
    out = tmp_path / "out"
    (out / "vmap_convolve.zip").mkdir(parents=True)
    code, _, err = run("--course", str(ROOT), "release", "vmap_convolve", "--out", str(out), "--zip")
    assert code == 2
    assert err == (
        f"jaxgrade: error: {out / 'vmap_convolve.zip'}: is a folder, not a file\n"
        "TIP: Choose another --out, or remove it.\n"
    )
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["notes.txt", "out", "vmap_convolve.zip"]


def test_release_replaces_an_earlier_release(tmp_path: Path) -> None:
    course = make_minicourse(tmp_path / "course")
    (course / "grading.yaml").write_text(
        (course / "grading.yaml").read_text() + 'release: {install: "git+https://example.org/jaxgrade.git@v0.1.0"}\n'
    )
    out = tmp_path / "out"
    assert run("--course", str(course), "release", "double", "--out", str(out))[0] == 0
    (out / "double" / "stale.txt").write_text("from the earlier release")
    code, _, err = run("--course", str(course), "release", "double", "--out", str(out), "--zip")
    assert code == 0
    assert err == (
        f"wrote the student bundle of double to {out / 'double'} (public tests only)\n"
        f"wrote {out / 'double.zip'}: upload it to your LMS for students\n"
        "its first cell installs the checker with `%pip install -q git+https://example.org/jaxgrade.git@v0.1.0`\n"
    )
    assert not (out / "double" / "stale.txt").exists()
    with zipfile.ZipFile(out / "double.zip") as zf:
        assert sorted(zf.namelist()) == [
            "double/.jaxgrade-release",
            "double/assignment.yaml",
            "double/double.ipynb",
            "double/grading.yaml",
            "double/tests/test_public.py",
        ]
    assert json.loads((out / "double" / MARKER).read_text())["assignment"] == "double"


@pytest.mark.parametrize(
    ("install", "ok"),
    [
        ("jaxgrade==0.1.0", True),
        ("jaxgrade", True),
        ("git+https://github.com/example/jaxgrade.git@v0.1.0", True),
        ("https://example.org/dist/jaxgrade-0.1.0-py3-none-any.whl", True),
        ("jaxgrade; rm -rf ~", False),
        ("https://example.org/jaxgrade", False),
        ("jaxgrade @ https://example.org/x.whl", False),
    ],
)
def test_release_install_source(tmp_path: Path, install: str, ok: bool) -> None:
    root = make_minicourse(tmp_path)
    (root / "grading.yaml").write_text((root / "grading.yaml").read_text() + f"release:\n  install: {install!r}\n")
    if ok:
        assert load_course(root).release.install == install
        return
    with pytest.raises(ConfigError) as info:
        load_course(root)
    assert str(info.value) == (
        "grading.yaml: release.install: expected a package index name (e.g. 'jaxgrade==0.1.0'), a git URL "
        "('git+https://host/repo.git@tag') or the https URL of a wheel "
        f"('https://host/jaxgrade-0.1.0-py3-none-any.whl'), got {install!r}"
    )


def test_check_outside_a_course_says_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("grader.course.config.__file__", str(tmp_path / "pkg" / "grader" / "course" / "config.py"))
    monkeypatch.chdir(tmp_path)
    shutil.copy(ROOT / "assignments" / "vmap_convolve" / "vmap_convolve.ipynb", tmp_path / "hw.ipynb")
    code, out, err = run("check", "hw.ipynb")
    assert (code, out) == (2, "")
    assert err == (
        f"jaxgrade: error: no grading.yaml found in {tmp_path} or its parents: this is neither a course "
        "repository nor an assignment folder made by `jaxgrade release`\n"
        "TIP: Run it inside the folder your course gave you for this assignment (made by `jaxgrade release`: "
        "it holds grading.yaml, assignment.yaml and tests/), or pass --course DIR, or check inside the "
        "notebook: run its first cell, then `jc.check()` in a cell.\n"
    )


def _course_copy(tmp_path: Path) -> Path:
    root = tmp_path / "course"
    root.mkdir()
    shutil.copy(ROOT / "grading.yaml", root / "grading.yaml")
    for part in ("assignments", "reference"):
        shutil.copytree(ROOT / part, root / part, ignore=shutil.ignore_patterns("__pycache__"))
    return root


@pytest.mark.parametrize(
    ("link", "target"),
    [
        ("assignments/vmap_convolve/tests", "../../reference/vmap_convolve/tests"),
        ("assignments/vmap_convolve/tests/test_public.py", "../../../reference/vmap_convolve/tests/test_hidden.py"),
        ("assignments/vmap_convolve/assignment.yaml", "../../reference/vmap_convolve/assignment.yaml"),
        ("assignments/vmap_convolve/vmap_convolve.ipynb", "../../reference/vmap_convolve/vmap_convolve.ipynb"),
        ("assignments/vmap_convolve", "../reference/vmap_convolve"),
    ],
)
def test_release_refuses_symbolic_links(tmp_path: Path, link: str, target: str) -> None:
    """A link anywhere in the assignment's folder (a staff layout mistake that would ship the
    hidden tests) is refused by name, and nothing is written."""
    root = _course_copy(tmp_path)
    ref, public = root / "reference" / "vmap_convolve", root / "assignments" / "vmap_convolve"
    # the reference side holds what the link would ship
    shutil.copy(public / "assignment.yaml", ref / "assignment.yaml")
    shutil.copy(public / "vmap_convolve.ipynb", ref / "vmap_convolve.ipynb")
    if link == "assignments/vmap_convolve":
        shutil.copytree(public / "tests", ref / "tests", dirs_exist_ok=True)
    path = root / link
    (shutil.rmtree if path.is_dir() else Path.unlink)(path)
    path.symlink_to(target)
    out = tmp_path / "out"
    code, stdout, err = run("--course", str(root), "release", "vmap_convolve", "--out", str(out), "--zip")
    assert (code, stdout) == (2, "")
    assert err == (
        f"jaxgrade: error: {path}: is a symbolic link (to {target}); release copies only the real files of "
        "assignments/vmap_convolve/, so that nothing of reference/ can reach students through a link\n"
        "TIP: Replace the link with a copy of what students may see (the public tests only), then run release again.\n"
    )
    assert not out.exists()


def test_release_refuses_a_bundle_naming_a_hidden_test(tmp_path: Path) -> None:
    """build_release runs the leak check itself: a starter notebook that names a hidden test is
    refused, and nothing is written."""
    root = _course_copy(tmp_path)
    _, hidden, _ = secrets("vmap_convolve")
    name = sorted(hidden)[0]
    starter = root / "assignments" / "vmap_convolve" / "vmap_convolve.ipynb"
    nb = nbformat.read(starter, as_version=4)
    nb.cells.append(nbformat.v4.new_markdown_cell(f"Your code must also pass `{name}`."))
    nbformat.write(nb, starter)
    out = tmp_path / "out"
    code, _, err = run("--course", str(root), "release", "vmap_convolve", "--out", str(out), "--zip")
    assert code == 2
    assert err == (
        "jaxgrade: error: the bundle of vmap_convolve would give away the hidden side of the assignment: "
        f"vmap_convolve.ipynb: hidden test {name}; nothing was written\n"
        f"TIP: Remove it from {root / 'assignments' / 'vmap_convolve'} (what students may see), then run "
        "release again.\n"
    )
    assert not out.exists()


def test_release_clears_the_starters_outputs(tmp_path: Path) -> None:
    root = make_minicourse(tmp_path / "course")
    starter = root / "assignments" / "double" / "double.ipynb"
    nb = nbformat.read(starter, as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == "code")
    cell.execution_count = 7
    cell.outputs = [nbformat.v4.new_output("stream", text="my own run of the solution\n")]
    nb.metadata["jaxgrade"] = {"note": "kept"}
    nbformat.write(nb, starter)
    folder = build_release(load_course(root), "double", tmp_path / "out")
    released = nbformat.read(folder / "double.ipynb", as_version=4)
    assert all(c.outputs == [] and c.execution_count is None for c in released.cells if c.cell_type == "code")
    assert released.metadata["jaxgrade"] == {"note": "kept", "assignment": "double"}


@pytest.mark.parametrize(
    "install",
    [
        "git+https://example.org/{__import__('os').system('id')}.git",
        "https://example.org/x{y}.whl",
        "git+https://example.org/repo.git@v1!",
        "git+https://example.org/$HOME.git",
        "jaxgrade!=0.1.0",
    ],
)
def test_release_install_refuses_what_ipython_expands(tmp_path: Path, install: str) -> None:
    """IPython expands {expr} and $name in a %pip line before the shell quoting applies."""
    root = make_minicourse(tmp_path)
    (root / "grading.yaml").write_text((root / "grading.yaml").read_text() + f"release:\n  install: {install!r}\n")
    with pytest.raises(ConfigError) as info:
        load_course(root)
    assert str(info.value) == (
        "grading.yaml: release.install: must not contain {, }, ! or $ (IPython expands them in the notebook's "
        f"%pip line), got {install!r}"
    )
