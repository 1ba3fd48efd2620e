"""The Gradescope autograder zip a course uploads for one assignment (:func:`build_bundle`).

- ``setup.sh`` (``templates/gradescope_setup.sh``): run once when Gradescope builds the image;
  installs bubblewrap (best effort), python3 with venv and pip, and the bundled jaxgrade into
  ``/autograder/venv``;
- ``run_autograder`` (``templates/gradescope_run_autograder``): run for each submission; starts
  :mod:`grader.gradescope.runtime`, and writes a score-0 results.json if jaxgrade cannot start;
- ``jaxgrade/``: the package source and ``pyproject.toml``;
- ``grading.yaml`` with only this assignment, ``assignments/<name>/`` and ``reference/<name>/``
  (solution and hidden tests; never the mutants).
"""

from __future__ import annotations

import json
import logging
import re
import zipfile
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from grader import __version__
from grader.course.config import COURSE_FILE
from grader.publish.output import atomic_target, check_file_target

if TYPE_CHECKING:
    from grader.course.config import Course

log = logging.getLogger(__name__)

PACKAGE_DIR = "jaxgrade"  # the package source inside the bundle
SKIP_DIRS = {"__pycache__", ".ipynb_checkpoints", ".pytest_cache", ".git", "__MACOSX"}
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)  # zip entries get a fixed time: the same course gives the same zip

# Gradescope's two scripts, shipped as they are (templates/): setup.sh builds the image,
# run_autograder grades one submission
TEMPLATES = Path(__file__).resolve().parent / "templates"
SETUP_SH = (TEMPLATES / "gradescope_setup.sh").read_text(encoding="utf-8")
RUN_AUTOGRADER = (TEMPLATES / "gradescope_run_autograder").read_text(encoding="utf-8")

_GENERATED_PYPROJECT = """[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "jaxgrade"
version = "{version}"
description = "Automated grading of JAX notebook assignments, with student code kept in a sandbox"
requires-python = ">=3.10"
dependencies = [
{dependencies}
]

[project.scripts]
jaxgrade = "grader.cli:main"

[tool.setuptools.packages.find]
include = ["grader", "grader.*"]

[tool.setuptools.package-data]
"*" = ["templates/*"]
"grader.course" = ["templates/new/*"]
"""


# --------------------------------------------------------------------------- the bundle


def build_bundle(course: Course, name: str, out_zip: Path) -> Path:
    """Write the Gradescope autograder zip for assignment ``name`` to ``out_zip``; return its path.

    Raises :class:`grader.course.config.ConfigError` when the assignment is unknown or incomplete
    (the reference solution and hidden tests must exist), and
    :class:`grader.publish.output.OutputPathError`, before anything is written, when ``out_zip``
    cannot be a file (a folder, or inside a file)."""
    assignment = course.assignment(name, staff=True)
    out_zip = Path(out_zip)
    check_file_target(out_zip)
    members: list[tuple[str, bytes, bool]] = [
        ("setup.sh", SETUP_SH.encode(), True),
        ("run_autograder", RUN_AUTOGRADER.encode(), True),
        (COURSE_FILE, _course_subset_yaml(course, name).encode(), False),
    ]
    members += [(f"{PACKAGE_DIR}/{rel}", data, False) for rel, data in _package_files()]
    for folder in (assignment.student_dir, assignment.reference_dir):
        skip = {assignment.mutants_dir.resolve(), assignment.alternatives_dir.resolve()}  # for validate and warming
        for path in _walk(folder, skip):
            members.append((path.relative_to(course.root).as_posix(), path.read_bytes(), False))
    with atomic_target(out_zip) as tmp, zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for arcname, data, executable in members:
            info = zipfile.ZipInfo(arcname, date_time=_FIXED_TIME)
            info.create_system = 3  # Unix, so that unzip honours the permission bits
            info.external_attr = ((0o100755 if executable else 0o100644) & 0xFFFF) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
    return out_zip


def _walk(folder: Path, skip: set[Path]) -> Iterator[Path]:
    """Regular files under ``folder``, sorted, without caches, checkpoints, dotfiles and ``skip``."""
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).parts
        if any(part in SKIP_DIRS or part.startswith(".") for part in rel):
            continue
        resolved = path.resolve()
        if any(resolved == s or s in resolved.parents for s in skip):
            continue
        if path.suffix in (".pyc", ".pyo") or not path.is_file():
            continue
        yield path


def _package_files() -> list[tuple[str, bytes]]:
    """(path inside ``jaxgrade/``, content) of the grader package and its ``pyproject.toml``."""
    import grader

    package = Path(grader.__file__).resolve().parent
    files = [(f"grader/{p.relative_to(package).as_posix()}", p.read_bytes()) for p in _walk(package, set())]
    project = package.parent / "pyproject.toml"
    text = project.read_text(encoding="utf-8") if project.is_file() else ""
    if re.search(r'^name\s*=\s*"jaxgrade"\s*$', text, re.MULTILINE):
        files.append(("pyproject.toml", text.encode()))
        readme = re.search(r'^readme\s*=\s*"([^"]+)"\s*$', text, re.MULTILINE)
        if readme and (package.parent / readme.group(1)).is_file():
            files.append((readme.group(1), (package.parent / readme.group(1)).read_bytes()))
        elif readme:  # the readme would be missing from the copy: pip would refuse to build
            files[-1] = ("pyproject.toml", text.replace(readme.group(0), "").encode())
    else:
        files.append(("pyproject.toml", _generated_pyproject().encode()))
    return files


def _generated_pyproject() -> str:
    """A pyproject.toml for an installed (non-editable) jaxgrade, from its metadata."""
    try:
        requires = [r for r in metadata.requires("jaxgrade") or [] if "extra ==" not in r]
    except metadata.PackageNotFoundError:
        requires = []
    requires = requires or [
        "jax>=0.6.2",
        "jaxlib>=0.6.2",
        "numpy",
        "nbformat",
        "nbclient",
        "ipykernel",
        "pytest>=8",
        "pyyaml",
        "flatbuffers",
        "pydantic>=2",
        "rich",
        "jinja2",
        "matplotlib",
        "packaging",
        "filelock",
    ]
    deps = "\n".join(f"    {json.dumps(r)}," for r in requires)
    return _GENERATED_PYPROJECT.format(version=__version__, dependencies=deps)


def _course_subset_yaml(course: Course, name: str) -> str:
    """``grading.yaml`` with the course's settings (only those it sets) and only assignment ``name``."""
    data = course.model_dump(mode="json", exclude_unset=True, exclude={"root"})
    data["assignments"] = {name: (data.get("assignments") or {}).get(name) or {}}
    head = f"# Generated by jaxgrade {__version__} for the Gradescope autograder of {name!r}.\n"
    return head + yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


__all__ = ["build_bundle"]
