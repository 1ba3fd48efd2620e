"""`jaxgrade release NAME --out DIR`: the student bundle of one assignment, built from
``assignments/NAME/`` alone (nothing of ``reference/`` is ever read).

``DIR/NAME/`` holds the starter notebook, whose first code cell installs jaxgrade and loads the
self-check (``grader.selfcheck``) with the public tests and configuration inside the cell, the
public tests (``tests/``), ``assignment.yaml``, and a ``grading.yaml`` for this one assignment,
so that ``jaxgrade check NOTEBOOK`` works inside the folder too.  ``--zip`` also writes
``DIR/NAME.zip`` for the LMS.
"""

from __future__ import annotations

import json
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
from grader.publish.output import atomic_target
from grader.selfcheck import encode_payload

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
        ASSIGNMENT_FILE: (assignment.student_dir / ASSIGNMENT_FILE).read_text(encoding="utf-8"),
    }
    for path in _walk(assignment.public_tests):
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
        "    jc = _types.SimpleNamespace(check=lambda *args: None, run=lambda *args: None)\n"
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
    """The starter notebook with the setup cell before its first code cell, and its metadata
    naming the assignment (so that `jaxgrade check` knows it)."""
    nb = nbformat.read(assignment.starter, as_version=4)
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
    _check_target(target)
    install = course.release.install
    files = {rel: text.encode() for rel, text in public_files(assignment).items()}
    nb = released_notebook(assignment, install)
    files[assignment.config.notebook] = nbformat.writes(nb).encode()
    files[MARKER] = json.dumps({"assignment": name, "jaxgrade": __version__, "install": install}).encode() + b"\n"
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


def _check_target(target: Path) -> None:
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


def _walk(folder: Path) -> Iterator[Path]:
    """Regular files under ``folder``, sorted, without caches and checkpoints."""
    for path in sorted(folder.rglob("*")):
        if any(part in _SKIP for part in path.relative_to(folder).parts):
            continue
        if path.is_file() and not path.is_symlink() and path.suffix not in (".pyc", ".pyo"):
            yield path


__all__ = ["MARKER", "ReleaseError", "build_release", "public_files", "released_notebook", "write_zip"]
