"""The Gradescope autograder: the bundle a course uploads (:func:`build_bundle`), and what runs
inside Gradescope for each submission (:func:`run`, through the bundle's ``run_autograder``).

The bundle (a zip, uploaded as the assignment's autograder):

- ``setup.sh`` — run once by Gradescope when it builds the image: installs bubblewrap (best
  effort; without it student code runs as a plain subprocess and could read the hidden tests),
  python3 with venv and pip, then ``pip install`` of the bundled jaxgrade into
  ``/autograder/venv``;
- ``run_autograder`` — run for each submission: ``python3 -m grader.autograder /autograder``
  from ``/autograder/source`` (the venv's python when setup made one, else ``python3`` on
  ``PATH``). ``JAXGRADE_AUTOGRADER_ROOT`` replaces ``/autograder`` and ``JAXGRADE_ISOLATION``
  chooses the sandbox (``auto``, ``bwrap``, ``process``); if jaxgrade cannot even start, the
  script still writes a results.json with score 0;
- ``jaxgrade/`` — the package source (``grader/`` with its templates, ``pyproject.toml``);
- ``grading.yaml`` — the course settings with only this assignment, so seeds, limits, the late
  policy and the title are those of the course; ``assignments/<name>/`` and ``reference/<name>/``
  (solution and hidden tests; never the mutants).

Inside Gradescope, :func:`run` picks the notebook in ``/autograder/submission`` (the rule is in
:func:`find_notebook`), reads ``/autograder/submission_metadata.json`` for who submitted and
when, grades it like ``jaxgrade grade`` would, and writes ``/autograder/results/results.json``
(:func:`grader.exports.gradescope_results`). Whatever goes wrong, a results.json is written:
score 0 and what happened in ``output``; details for the instructor go to stdout, which
Gradescope shows only to staff.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import traceback
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from grader import __version__
from grader.batch import stamp
from grader.config import COURSE_FILE, ConfigError, load_course
from grader.exports import gradescope_results
from grader.grading import grade_many
from grader.intake import parse_time
from grader.late import apply_late
from grader.notebook import NotebookError, load_notebook
from grader.output import atomic_target, write_atomic
from grader.sandbox import choose_isolation, isolation_warning, resource_warning

if TYPE_CHECKING:
    from grader.config import Assignment, Course
    from grader.record import Record

log = logging.getLogger(__name__)

ROOT_ENV = "JAXGRADE_AUTOGRADER_ROOT"
ISOLATION_ENV = "JAXGRADE_ISOLATION"
PACKAGE_DIR = "jaxgrade"  # the package source inside the bundle
_SKIP_DIRS = {"__pycache__", ".ipynb_checkpoints", ".pytest_cache", ".git", "__MACOSX"}
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)  # zip entries get a fixed time: the same course gives the same zip

# Gradescope's two scripts, shipped as they are (grader/templates/): setup.sh builds the image,
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

[tool.setuptools]
packages = ["grader", "grader.course", "grader.publish", "grader.sandboxed", "grader.wire"]

[tool.setuptools.package-data]
grader = ["*.html", "*.ini", "*.css", "templates/*", "templates/**/*"]
"grader.course" = ["templates/new/*"]
"""


# --------------------------------------------------------------------------- the bundle


def build_bundle(course: Course, name: str, out_zip: Path) -> Path:
    """Write the Gradescope autograder zip for assignment ``name`` to ``out_zip``; return its path.

    Raises :class:`grader.config.ConfigError` when the assignment is unknown or incomplete
    (the reference solution and hidden tests must exist)."""
    assignment = course.assignment(name, staff=True)
    out_zip = Path(out_zip)
    members: list[tuple[str, bytes, bool]] = [
        ("setup.sh", SETUP_SH.encode(), True),
        ("run_autograder", RUN_AUTOGRADER.encode(), True),
        (COURSE_FILE, _course_subset_yaml(course, name).encode(), False),
    ]
    members += [(f"{PACKAGE_DIR}/{rel}", data, False) for rel, data in _package_files()]
    for folder in (assignment.student_dir, assignment.reference_dir):
        skip = {assignment.mutants_dir.resolve()}
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
        if any(part in _SKIP_DIRS or part.startswith(".") for part in rel):
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
        "jax>=0.4.30",
        "jaxlib",
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
    ]
    deps = "\n".join(f"    {json.dumps(r)}," for r in requires)
    return _GENERATED_PYPROJECT.format(version=__version__, dependencies=deps)


def _course_subset_yaml(course: Course, name: str) -> str:
    """``grading.yaml`` with the course's settings (only those it sets) and only assignment ``name``."""
    data = course.model_dump(mode="json", exclude_unset=True, exclude={"root"})
    data["assignments"] = {name: (data.get("assignments") or {}).get(name) or {}}
    head = f"# Generated by jaxgrade {__version__} for the Gradescope autograder of {name!r}.\n"
    return head + yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


# --------------------------------------------------------------------------- inside Gradescope


class NoSubmission(Exception):
    """The submission has no notebook to grade, or several and no way to choose; for the student."""


@dataclass(frozen=True)
class SubmissionInfo:
    """What Gradescope says about a submission (``submission_metadata.json``), for the late policy."""

    student: str
    identity: dict[str, str]
    submitted_at: datetime | None = None
    due: datetime | None = None
    late_due: datetime | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


# The late-policy hook: called with the graded record (before results.json is written), the
# assignment and what Gradescope said; it may change ``record.score`` and set ``record.late``.
LateHook = Callable[["Record", "Assignment", SubmissionInfo], object]


def find_notebook(submission: Path, starter_name: str, assignment: str) -> Path:
    """The notebook to grade in ``submission`` (searched recursively).

    Rule: checkpoints, ``__MACOSX`` copies, hidden files and links are ignored. One notebook:
    that one. Several: the one named like the starter notebook (``starter_name``, any case);
    else the one whose jaxgrade metadata names ``assignment``; else :class:`NoSubmission`."""
    found = sorted(
        p
        for p in submission.rglob("*.ipynb")
        if not any(part in _SKIP_DIRS or part.startswith(".") for part in p.relative_to(submission).parts)
        and p.is_file()
        and not p.is_symlink()
    )
    if not found:
        others = sorted(p.relative_to(submission).as_posix() for p in submission.rglob("*") if p.is_file())
        seen = f" (found: {', '.join(others[:10])})" if others else " (it is empty)"
        raise NoSubmission(
            f"No notebook (.ipynb) was found in your submission{seen}. "
            f"Upload your notebook, {starter_name}, and submit again."
        )
    if len(found) == 1:
        return found[0]
    named = [p for p in found if p.name.lower() == starter_name.lower()]
    if len(named) == 1:
        return named[0]

    def names_assignment(p: Path) -> bool:
        try:
            return load_notebook(p).assignment == assignment
        except NotebookError:
            return False

    tagged = [p for p in (named or found) if names_assignment(p)]
    if len(tagged) == 1:
        return tagged[0]
    listed = ", ".join(p.relative_to(submission).as_posix() for p in found)
    raise NoSubmission(
        f"Your submission has {len(found)} notebooks ({listed}) and the autograder cannot tell which "
        f"one to grade. Submit only your {starter_name} and submit again."
    )


def read_metadata(root: Path, notebook: Path | None) -> SubmissionInfo:
    """Who submitted and when, from ``root/submission_metadata.json`` (absent: the file's stem)."""
    path = root / "submission_metadata.json"
    meta: dict[str, Any] = {}
    if path.is_file():
        try:
            loaded = json.loads(path.read_text(encoding="utf-8"))
            meta = loaded if isinstance(loaded, dict) else {}
        except (OSError, ValueError) as exc:
            log.warning("%s could not be read: %s", path, exc)
    stem = notebook.stem if notebook is not None else "submission"
    original = notebook.name if notebook is not None else ""
    if not meta:
        identity = {"lms": "file", "id": stem}
        if original:
            identity["original"] = original
        return SubmissionInfo(student=stem, identity=identity)
    users = [u for u in meta.get("users") or [] if isinstance(u, dict)]
    first = users[0] if users else {}
    sid = str(first.get("sid") or "").strip()
    email = str(first.get("email") or "").strip()
    sub_id = str(meta.get("id") or "").strip()
    student = sid or email or (f"submission-{sub_id}" if sub_id else stem)
    identity = {"lms": "gradescope", "id": student}
    for key, value in (("name", first.get("name")), ("email", email), ("original", original)):
        if value:
            identity[key] = str(value)
    if sub_id:
        identity["submission_id"] = sub_id
    info = meta.get("assignment") if isinstance(meta.get("assignment"), dict) else {}
    return SubmissionInfo(
        student=student,
        identity=identity,
        submitted_at=parse_time(meta.get("created_at")),
        due=parse_time(info.get("due_date")),
        late_due=parse_time(info.get("late_due_date")),
        metadata=meta,
    )


def error_results(output: str) -> dict[str, Any]:
    """A results.json for a submission that could not be graded: score 0 and why."""
    return {
        "score": 0.0,
        "execution_time": 0,
        "output": output,
        "output_format": "text",
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": [],
    }


def _write_results(root: Path, results: dict[str, Any]) -> Path:
    path = root / "results" / "results.json"
    write_atomic(path, json.dumps(results, indent=2, ensure_ascii=False, allow_nan=False) + "\n")
    return path


def _pick_assignment(course: Course, name: str | None) -> str:
    if name:
        return name
    names = list(course.assignments)
    if len(names) != 1:
        raise ConfigError(
            f"{COURSE_FILE}: assignments: the autograder bundle must list exactly one assignment, "
            f"got {len(names)} ({', '.join(names) or 'none'}); rebuild it for one assignment"
        )
    return names[0]


def run(
    root: Path = Path("/autograder"),
    *,
    isolation: str = "auto",
    assignment_name: str | None = None,
    late: LateHook | None = None,
) -> int:
    """Grade the submission in ``root/submission`` and write ``root/results/results.json``.

    ``root/source`` is the unpacked bundle (the course subset). ``late`` is the late policy
    (see :data:`LateHook`); by default :func:`course_late_policy`. Returns 0 when a results.json was written (whatever the
    submission earned, including score 0 for a missing notebook or a grader failure), 1 when not
    even that was possible."""
    root = Path(root)
    try:
        course = load_course(root / "source")
        name = _pick_assignment(course, assignment_name)
        assignment = course.assignment(name)
        try:
            notebook = find_notebook(root / "submission", assignment.starter.name, name)
        except NoSubmission as exc:
            print(f"jaxgrade autograder: not graded: {exc}")
            _write_results(root, error_results(str(exc)))
            return 0
        info = read_metadata(root, notebook)
        print(f"jaxgrade autograder {__version__}: grading {notebook} as {info.student} ({name})", flush=True)
        rec = _grade(assignment, notebook, info, isolation)
        (late or course_late_policy)(rec, assignment, info)
        print(f"jaxgrade autograder: {rec.score:g}/{rec.max_score:g} {rec.status} ({rec.isolation})", flush=True)
        _write_results(root, gradescope_results(rec))
        return 0
    except BaseException as exc:  # never leave Gradescope without results
        traceback.print_exc(file=sys.stdout)
        text = (
            "The autograder failed, so this submission was not graded "
            f"({type(exc).__name__}: {str(exc)[:500]}). Please tell your instructor."
        )
        try:
            _write_results(root, error_results(text))
        except Exception:
            traceback.print_exc(file=sys.stdout)
            return 1
        if isinstance(exc, KeyboardInterrupt):
            raise
        return 0


def course_late_policy(rec: Record, assignment: Assignment, info: SubmissionInfo) -> None:
    """The default late hook: grading.yaml's late policy, against grading.yaml's due date when it
    has one, else Gradescope's (``assignment.due_date`` in the submission metadata)."""
    apply_late(rec, assignment.late_policy, assignment.due or info.due, submitted_at=info.submitted_at)


def _grade(assignment: Assignment, notebook: Path, info: SubmissionInfo, isolation: str) -> Record:
    warning = isolation_warning(choose_isolation(isolation))
    if warning:
        print(f"jaxgrade autograder: {warning}", flush=True)
    for line in (resource_warning() or "").splitlines():
        print(f"jaxgrade autograder: {line}", flush=True)
    rec = grade_many(assignment, [notebook], jobs=1, students={notebook: info.student}, isolation=isolation)[notebook]
    return stamp(rec, info.identity, assignment.version())


def main(argv: list[str] | None = None) -> int:
    """``python -m grader.autograder [ROOT] [--isolation auto|bwrap|process] [--assignment NAME]``."""
    p = argparse.ArgumentParser(prog="python -m grader.autograder", description=__doc__.splitlines()[0])
    p.add_argument("root", nargs="?", default=os.environ.get(ROOT_ENV, "/autograder"))
    p.add_argument("--isolation", choices=("auto", "bwrap", "process"), default=os.environ.get(ISOLATION_ENV) or "auto")
    p.add_argument("--assignment", help="the assignment to grade (default: the only one in the bundle)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stdout)
    return run(Path(args.root), isolation=args.isolation, assignment_name=args.assignment)


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["LateHook", "NoSubmission", "SubmissionInfo", "build_bundle", "find_notebook", "main", "run"]
