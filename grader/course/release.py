"""`jaxgrade release NAME --out DIR`: the student bundle of one assignment, built from
``assignments/NAME/`` alone: its real files only (a symbolic link on the way is refused, since
one could point into ``reference/``).  ``reference/NAME/`` is read for one thing: to check that
nothing written holds a file name, hidden test name or distinctive line of it (:func:`leaks`).

``DIR/NAME/`` holds the starter notebook, whose first code cell installs jaxgrade and loads the
self-check (``grader.selfcheck``) with the public tests and configuration inside the cell, the
public tests (``tests/``), ``assignment.yaml``, and a ``grading.yaml`` for this one assignment,
so that ``jaxgrade check NOTEBOOK`` works inside the folder too.  ``--zip`` also writes
``DIR/NAME.zip`` for the LMS.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import shutil
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import yaml

from grader import __version__
from grader.course.config import ASSIGNMENT_FILE, COURSE_FILE, Assignment, Course
from grader.publish.output import OutputPathError, atomic_target, check_file_target, check_folder_target
from grader.selfcheck import decode_payload, encode_payload

MARKER = ".jaxgrade-release"  # in every bundle: a folder with it may be replaced by a new release
SETUP_TAG = "jaxgrade-setup"  # the first cell's tag
_SKIP = {"__pycache__", ".ipynb_checkpoints", ".pytest_cache"}
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)  # the same course gives the same zip


class ReleaseError(Exception):
    """The bundle cannot be written; ``tip`` says what to do."""

    def __init__(self, message: str, tip: str = "") -> None:
        super().__init__(message)
        self.message, self.tip = message, tip


def public_files(assignment: Assignment) -> dict[str, str]:
    """What the self-check needs, by path inside the bundle: ``grading.yaml``, ``assignment.yaml``
    and the public tests; read from the assignment's student directory only."""
    files = {
        COURSE_FILE: bundle_course_yaml(assignment),
        ASSIGNMENT_FILE: _source(assignment, assignment.student_dir / ASSIGNMENT_FILE).read_text(encoding="utf-8"),
    }
    for path in _walk(_source(assignment, assignment.public_tests), refuse_links=assignment):
        rel = path.relative_to(assignment.student_dir).as_posix()
        try:
            files[rel] = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise ReleaseError(
                f"{path}: the public tests must be text files (the self-check carries them inside the notebook)",
                "Build data in the test file from code or literals instead of a binary file.",
            ) from None
    return files


def bundle_course_yaml(assignment: Assignment) -> str:
    """A ``grading.yaml`` with assignment ``name`` only: the course's name, seed (public tests
    draw their inputs from it) and limits, and the entry's title and limits; no LMS ids, dates
    or release settings."""
    course = assignment.course
    data: dict[str, Any] = {"course": course.course, "seed": course.seed}
    limits = course.limits.model_dump(mode="json", exclude_unset=True)
    if limits:
        data["limits"] = limits
    entry: dict[str, Any] = {"title": assignment.title}
    own = course.assignments[assignment.name].limits
    if own is not None:
        entry["limits"] = own.model_dump(mode="json", exclude_unset=True)
    data["assignments"] = {assignment.name: entry}
    head = (
        f"# Made by `jaxgrade release {assignment.name}` (jaxgrade {__version__}): this assignment's public "
        "tests only.\n# Run `jaxgrade check NOTEBOOK` in this folder, or `jc.check()` in the notebook.\n"
    )
    return head + yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def setup_cell_source(name: str, install: str, payload: str) -> str:
    """The first code cell: install jaxgrade from ``install`` and load the self-check."""
    chunks = [payload[i : i + 96] for i in range(0, len(payload), 96)] or [""]
    body = "\n".join(f'        "{c}"' for c in chunks)
    return (
        "# jaxgrade self-check: run this cell first. It installs the checker and loads this assignment's\n"
        '# public tests; then run `jc.check()` in any cell (or `jc.check("function_name")`).\n'
        "import os as _os\n"
        "import types as _types\n"
        "\n"
        'if _os.environ.get("JAXGRADE_SANDBOX"):  # being graded: the grader runs its own tests\n'
        "    class _NotRun:  # what jc.run() gives while graded: nothing ran, nothing failed\n"
        "        ok, record = True, None\n"
        '        text = html = _repr_html_ = __repr__ = lambda self: ""\n'
        "\n"
        "    jc = _types.SimpleNamespace(\n"
        "        setup=lambda *args, **kwargs: None,\n"
        "        check=lambda *args, **kwargs: None,\n"
        "        run=lambda *args, **kwargs: _NotRun(),\n"
        "    )\n"
        "else:\n"
        f"    %pip install -q {shlex.quote(install)}\n"
        "    from grader import selfcheck as jc\n"
        "\n"
        "    jc.setup(\n"
        f'        "{name}",\n'
        f"{body},\n"
        "    )\n"
    )


def released_notebook(assignment: Assignment, install: str) -> Any:
    """The starter notebook, its outputs and execution counts cleared, with the setup cell before
    its first code cell, and its metadata naming the assignment (so that `jaxgrade check` knows it)."""
    nb = nbformat.read(_source(assignment, assignment.starter), as_version=4)
    for c in nb.cells:
        if c.cell_type == "code":
            c.outputs, c.execution_count = [], None
    source = setup_cell_source(assignment.name, install, encode_payload(public_files(assignment)))
    cell = nbformat.v4.new_code_cell(source, metadata={"tags": [SETUP_TAG]})
    cell["id"] = SETUP_TAG
    first_code = next((i for i, c in enumerate(nb.cells) if c.cell_type == "code"), len(nb.cells))
    nb.cells.insert(first_code, cell)
    nb.metadata.setdefault("jaxgrade", {})["assignment"] = assignment.name
    nbformat.validate(nb)
    return nb


def build_release(course: Course, name: str, out: Path, *, make_zip: bool = False) -> Path:
    """Write ``out/NAME/`` (and ``out/NAME.zip`` with ``make_zip``); return the folder.  A folder
    already there is replaced only if it is an earlier release (it holds :data:`MARKER`)."""
    assignment = course.assignment(name, staff=False)
    target = Path(out) / name
    _check_target(target, Path(out) / f"{name}.zip" if make_zip else None)
    install = course.release.install
    files = {rel: text.encode() for rel, text in public_files(assignment).items()}
    nb = released_notebook(assignment, install)
    files[assignment.config.notebook] = nbformat.writes(nb).encode()
    files[MARKER] = json.dumps({"assignment": name, "jaxgrade": __version__, "install": install}).encode() + b"\n"
    found = leaks(assignment, files)
    if found:
        raise ReleaseError(
            f"the bundle of {name} would give away the hidden side of the assignment: {'; '.join(found)}; "
            "nothing was written",
            f"Remove it from {assignment.student_dir} (what students may see), then run release again.",
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{name}.", suffix=".tmp"))
    try:
        for rel, data in files.items():
            (staging / rel).parent.mkdir(parents=True, exist_ok=True)
            (staging / rel).write_bytes(data)
        if target.exists():
            shutil.rmtree(target)  # an earlier release (checked above)
        staging.chmod(0o755)  # mkdtemp's folder is private; a bundle is for sharing
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if make_zip:
        write_zip(target, Path(out) / f"{name}.zip")
    return target


def _check_target(target: Path, zip_path: Path | None = None) -> None:
    """Refuse, before anything is written, an ``--out`` that is (or lies inside) a file, a zip
    path that is a folder, and a ``target`` that is neither new nor an earlier release."""
    try:
        check_folder_target(target.parent)
        if zip_path is not None:
            check_file_target(zip_path)
    except OutputPathError as exc:
        raise ReleaseError(str(exc), "Choose another --out, or remove it.") from None
    if target.is_symlink() or (target.exists() and not target.is_dir()):
        raise ReleaseError(f"{target}: exists and is not a folder", "Choose another --out, or remove it.")
    if target.is_dir() and any(target.iterdir()) and not (target / MARKER).is_file():
        raise ReleaseError(
            f"{target}: the folder is not empty and is not an earlier release (no {MARKER} in it); not overwriting it",
            "Choose another --out, or move that folder away first.",
        )


def write_zip(folder: Path, zip_path: Path) -> Path:
    """``folder``'s files in a zip whose entries sit under ``folder.name/`` (what students unpack)."""
    with atomic_target(zip_path) as tmp, zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for path in _walk(folder):
            info = zipfile.ZipInfo(f"{folder.name}/{path.relative_to(folder).as_posix()}", date_time=_FIXED_TIME)
            info.external_attr = (0o100644 & 0xFFFF) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, path.read_bytes())
    zip_path.chmod(0o644)
    return zip_path


def _walk(folder: Path, refuse_links: Assignment | None = None) -> Iterator[Path]:
    """Regular files under ``folder``, sorted, without caches and checkpoints; links are never
    followed, and with ``refuse_links`` (the assignment read from) a link is an error."""
    for path in sorted(folder.rglob("*")):
        if any(part in _SKIP for part in path.relative_to(folder).parts):
            continue
        if path.is_symlink():
            if refuse_links is not None:
                raise _link_error(refuse_links, path)
            continue
        if path.is_file() and path.suffix not in (".pyc", ".pyo"):
            yield path


def _source(assignment: Assignment, path: Path) -> Path:
    """``path`` (inside ``assignments/NAME/``), once checked: no symbolic link on the way from the
    course root, and its real path inside the real ``assignments/NAME/`` and outside ``reference/``."""
    root = assignment.course.root
    here = root
    for part in path.relative_to(root).parts:
        here = here / part
        if here.is_symlink():
            raise _link_error(assignment, here)
    real, student = path.resolve(), assignment.student_dir.resolve()
    if not real.is_relative_to(student) or real.is_relative_to((root / "reference").resolve()):
        raise ReleaseError(
            f"{path}: is not inside assignments/{assignment.name}/ (its real path is {real}); release reads only "
            "that folder",
            "Move what students may see into that folder, then run release again.",
        )
    return path


def _link_error(assignment: Assignment, path: Path) -> ReleaseError:
    return ReleaseError(
        f"{path}: is a symbolic link (to {os.readlink(path)}); release copies only the real files of "
        f"assignments/{assignment.name}/, so that nothing of reference/ can reach students through a link",
        "Replace the link with a copy of what students may see (the public tests only), then run release again.",
    )


# --------------------------------------------------------------------------- the leak check

_DISTINCTIVE = 30  # a line of the hidden side this long (stripped) that no student file has is a secret


def secrets(assignment: Assignment) -> tuple[set[str], set[str], set[str]]:
    """(file names of ``reference/NAME/``, hidden test names, distinctive lines of the hidden side),
    each less what the student side (the real files of ``assignments/NAME/``) already has: a name
    or line students are given anyway is no secret."""
    ref = assignment.reference_dir
    if not ref.is_dir():
        return set(), set(), set()
    student = [p for p in _walk(assignment.student_dir) if p.suffix in (".py", ".yaml", ".yml", ".ipynb")]
    shown_texts = [_text(p) for p in student] + [c.source for p in student if p.suffix == ".ipynb" for c in _cells(p)]
    shown = "\n".join(shown_texts)
    public_tests = {n for p in student if p.suffix == ".py" for n in _test_names(_text(p))}
    hidden_side = list(_walk(ref))
    files = {p.name for p in hidden_side} - {p.name for p in _walk(assignment.student_dir)}
    hidden = {n for p in hidden_side if p.suffix == ".py" for n in _test_names(_text(p))} - public_tests
    lines = {
        line.strip()
        for p in hidden_side
        if p.suffix == ".py"
        for line in _text(p).splitlines()
        if len(line.strip()) >= _DISTINCTIVE and line.strip() not in shown and not line.strip().startswith("#")
    }
    return files, hidden, lines


def leak_report(texts: dict[str, str], files: set[str], hidden: set[str], lines: set[str]) -> list[str]:
    """Where ``texts`` (by place: ``file:REL``, ``payload:REL``...) hold one of the secrets: each
    secret once, at the first place that holds it."""
    found: dict[str, str] = {}
    for where in texts:
        if Path(where.split(":", 1)[-1]).name in files:
            found.setdefault(f"file {Path(where).name}", f"{where}: file name of reference/")
    names = [(h, re.compile(rf"(?<![A-Za-z0-9_]){re.escape(h)}(?![A-Za-z0-9_])")) for h in sorted(hidden)]
    for where, text in texts.items():
        for h, pattern in names:
            if pattern.search(text):
                found.setdefault(f"test {h}", f"{where}: hidden test {h}")
        for ln in sorted(lines):
            if ln in text:
                found.setdefault(f"line {ln}", f"{where}: hidden line {ln!r}")
    return list(found.values())


def leaks(assignment: Assignment, files: dict[str, bytes]) -> list[str]:
    """What of the hidden side the bundle's ``files`` (and the zip, which holds the same, and the
    payload inside the notebook) would give away: empty when nothing."""
    secret = secrets(assignment)
    if not any(secret):
        return []
    texts = {rel: data.decode("utf-8", "replace") for rel, data in files.items()}
    notebook = assignment.config.notebook
    nb = nbformat.reads(texts[notebook], as_version=4)
    texts |= {f"{notebook} (cell {i})": c.source for i, c in enumerate(nb.cells, 1)}
    setup = next(c.source for c in nb.cells if SETUP_TAG in c.metadata.get("tags", []))
    call = re.search(r'^    jc\.setup\(\n        "[^"]*",\n((?:        "[^"]*",?\n)+)    \)', setup, re.M)
    if call is None:  # setup_cell_source and this check disagree: a bug, never a bundle unchecked
        raise ReleaseError(f"{notebook}: the self-check cell's payload was not found; nothing was written")
    payload = "".join(re.findall(r'"([^"]*)"', call.group(1)))
    texts |= {f"{notebook} (payload: {rel})": text for rel, text in decode_payload(payload).items()}
    found = leak_report({f"file:{rel}": text for rel, text in texts.items()}, *secret)
    return [f.removeprefix("file:") for f in found]


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def _cells(path: Path) -> list[Any]:
    try:
        return list(nbformat.reads(_text(path), as_version=4).cells)
    except Exception:  # not a notebook after all: its raw text is compared already
        return []


def _test_names(source: str) -> set[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    return {
        n.name
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name.startswith("test")
    }


__all__ = [
    "MARKER",
    "ReleaseError",
    "build_release",
    "leak_report",
    "leaks",
    "public_files",
    "released_notebook",
    "secrets",
    "write_zip",
]
