"""Course and assignment configuration: ``grading.yaml`` and ``assignment.yaml``, parsed once into frozen models."""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import keyword
import math
import re
import types
import typing
import urllib.parse
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Annotated, Any, TypeVar

import yaml
from packaging.requirements import InvalidRequirement, Requirement
from pydantic import (
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from grader import __version__
from grader.host.sandbox import Limits

GiB = 1024**3
COURSE_FILE = "grading.yaml"
ASSIGNMENT_FILE = "assignment.yaml"
M = TypeVar("M", bound=BaseModel)
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]*$")  # an assignment name is also a directory name
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
LOOPBACK_HOSTS = ("127.0.0.1", "::1", "localhost")  # where plain http is allowed (a test server)


class ConfigError(Exception):
    """A configuration file is missing or invalid; the message names the file, the key and what was expected."""


class BrokenTestsError(ConfigError):
    """An assignment's test files cannot be collected (a syntax error, an import, a marker): the
    message names the file and the error."""

    def __init__(self, assignment: str, message: str, *, staff: bool = True) -> None:
        super().__init__(message)
        self.assignment = assignment
        self.staff = staff  # the hidden tests were read too: the staff's course, not a student's bundle


class UnmetRequirementError(ConfigError):
    """The installed packages do not meet an assignment's ``requires``."""

    def __init__(self, assignment: str, unmet: dict[str, str]) -> None:
        #: what it needs, with what is installed: ``jax>=0.8 (jax 0.6.2 is installed)``
        self.needs = "; ".join(f"{req} ({have})" for req, have in unmet.items())
        super().__init__(f"{assignment} cannot be graded here: it needs {self.needs}")
        self.assignment, self.unmet = assignment, unmet


def unmet_requirements(requires: typing.Iterable[str]) -> dict[str, str]:
    """The requirements (pip's form, ``jax>=0.8``) that the installed packages do not meet, each
    with what is installed."""
    from importlib import metadata

    from packaging.version import InvalidVersion

    unmet = {}
    for text in requires:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate():
            continue  # for another Python or platform (`; python_version >= "3.11"`)
        try:
            have = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            unmet[text] = f"{req.name} is not installed"
            continue
        try:
            met = req.specifier.contains(have, prereleases=True)
        except InvalidVersion:
            met = False
        if not met:
            unmet[text] = f"{req.name} {have} is installed"
    return unmet


def check_requirements(assignment: Assignment) -> None:
    """Raise :class:`UnmetRequirementError` where the installed packages cannot grade ``assignment``."""
    unmet = unmet_requirements(assignment.config.requires)
    if unmet:
        raise UnmetRequirementError(assignment.name, unmet)


class NoCourseError(ConfigError):
    """No ``grading.yaml`` where jaxgrade looked (a student outside their assignment folder)."""


class UnknownAssignmentError(ConfigError):
    """The course lists no assignment of that name (a typo on the command line, most often)."""


def _not_bool(value: Any) -> Any:
    if isinstance(value, bool):  # YAML's yes/no/true would otherwise count as 1/0
        raise PydanticCustomError("jaxgrade_bool", "expected a number, got {value}", {"value": repr(value)})
    return value


def _id_str(value: Any) -> Any:
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value  # canvas_id: 101


Seconds = Annotated[float, BeforeValidator(_not_bool), Field(gt=0, allow_inf_nan=False)]
Count = Annotated[int, BeforeValidator(_not_bool)]
LmsId = Annotated[str | None, BeforeValidator(_id_str)]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


_DEFAULT = Limits()


class LimitsConfig(_Model):
    """Resource limits of one submission's sandbox; in YAML every field is an optional override."""

    # the defaults are the sandbox's own (grader.host.sandbox.Limits), written down once there
    cell_timeout: Seconds = _DEFAULT.cell_timeout
    call_timeout: Seconds = _DEFAULT.call_timeout
    wall_timeout: Seconds = _DEFAULT.wall_timeout
    memory_bytes: Count = _DEFAULT.memory_bytes
    max_processes: Count = _DEFAULT.max_processes
    max_file_bytes: Annotated[Count, Field(gt=0)] = _DEFAULT.max_file_bytes
    cpu_seconds: Annotated[Count, Field(gt=0)] = _DEFAULT.cpu_seconds
    output_cap: Annotated[Count, Field(gt=0)] = _DEFAULT.output_cap
    max_restarts: Annotated[Count, Field(ge=0)] = _DEFAULT.max_restarts
    memory_total_bytes: Annotated[Count, Field(ge=512 * 1024**2)] = _DEFAULT.memory_total_bytes
    pids_total: Annotated[Count, Field(ge=64)] = _DEFAULT.pids_total
    cpu_weight: Annotated[Count, Field(ge=1, le=10_000)] = _DEFAULT.cpu_weight
    scratch_bytes: Annotated[Count, Field(ge=64 * 1024**2)] = _DEFAULT.scratch_bytes

    @field_validator("memory_bytes")
    @classmethod
    def _enough_memory(cls, value: int) -> int:
        if value < 2 * GiB:
            raise ValueError(f"expected at least {2 * GiB} (2 GiB; XLA aborts with less address space), got {value}")
        return value

    @field_validator("max_processes")
    @classmethod
    def _enough_processes(cls, value: int) -> int:
        if value < 64:
            raise ValueError(f"expected at least 64 (XLA starts about that many threads), got {value}")
        return value

    def to_limits(self) -> Limits:
        return Limits(**self.model_dump())


class Tolerance(_Model):
    rtol: Annotated[float, BeforeValidator(_not_bool), Field(ge=0, allow_inf_nan=False)] = 1e-5
    atol: Annotated[float, BeforeValidator(_not_bool), Field(ge=0, allow_inf_nan=False)] = 1e-6


class AssignmentConfig(_Model):
    """``assignments/<name>/assignment.yaml``."""

    name: str
    title: str
    notebook: str
    functions: tuple[str, ...] = Field(min_length=1)
    seed: Count = 0
    devices: Annotated[Count, Field(ge=1)] = 1
    tolerance: Tolerance = Tolerance()
    limits: LimitsConfig | None = None
    #: pip requirements on the installed packages that grading it needs (``jax>=0.8``): where one
    #: is not met, grading refuses to start (:func:`check_requirements`) instead of giving grades
    #: that the installed packages cannot back
    requires: tuple[str, ...] = ()

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError(f"expected letters, digits, '_' or '-' (it names a directory), got {value!r}")
        return value

    @field_validator("notebook")
    @classmethod
    def _plain_notebook_name(cls, value: str) -> str:
        if "/" in value or "\\" in value or not value.endswith(".ipynb") or value.startswith("."):
            raise ValueError(f"expected a file name ending in .ipynb inside the assignment directory, got {value!r}")
        return value

    @field_validator("requires")
    @classmethod
    def _requirements(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for text in value:
            try:
                Requirement(text)
            except InvalidRequirement:
                raise ValueError(f"expected pip requirements such as 'jax>=0.8', got {text!r}") from None
        return value

    @field_validator("functions")
    @classmethod
    def _identifiers(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            if not name.isidentifier() or keyword.iskeyword(name):
                raise ValueError(f"expected Python identifiers, got {name!r}")
        duplicates = sorted({name for name in value if value.count(name) > 1})
        if duplicates:
            raise ValueError(f"expected each function once, got {', '.join(duplicates)} more than once")
        return value


class LatePolicy(_Model):
    """How late work loses points: ``percent_per_day`` for each started day after the due date
    (past ``grace_minutes``), at most ``max_percent``.  A submission whose LMS only says "late"
    (Canvas's ``LATE_`` file name) with no time counts as ``flag_days`` days late."""

    percent_per_day: Annotated[float, BeforeValidator(_not_bool), Field(ge=0, le=100, allow_inf_nan=False)] = 0.0
    max_percent: Annotated[float, BeforeValidator(_not_bool), Field(ge=0, le=100, allow_inf_nan=False)] = 100.0
    grace_minutes: Annotated[float, BeforeValidator(_not_bool), Field(ge=0, allow_inf_nan=False)] = 0.0
    flag_days: Annotated[Count, Field(ge=0)] = 1


class AssignmentEntry(_Model):
    """One entry under ``assignments:`` in ``grading.yaml``."""

    title: str | None = None
    canvas_id: LmsId = None
    moodle_id: LmsId = None
    limits: LimitsConfig | None = None
    due: AwareDatetime | None = None
    late_policy: LatePolicy | None = None


#: ``release.install`` forms: a git URL, or an http(s) URL of a wheel or source archive.
_GIT_URL = re.compile(r"^git\+(https|ssh|http|file)://[^\s'\"`$;&|<>]+$")
_ARCHIVE_URL = re.compile(r"^https?://[^\s'\"`$;&|<>]+\.(whl|tar\.gz|zip)$")


class ReleaseConfig(_Model):
    """``release:`` in ``grading.yaml``: what `jaxgrade release` puts in the student bundle."""

    install: str = f"jaxgrade=={__version__}"  # what the notebook's first cell installs (`%pip install -q ...`)

    @field_validator("install")
    @classmethod
    def _install_source(cls, value: str) -> str:
        if any(c in value for c in "{}!$"):
            raise ValueError(
                f"must not contain {{, }}, ! or $ (IPython expands them in the notebook's %pip line), got {value!r}"
            )
        if _GIT_URL.match(value) or _ARCHIVE_URL.match(value):
            return value
        try:
            req = Requirement(value)
        except InvalidRequirement:
            req = None
        if req is None or req.url or req.marker or any(c in value for c in "'\"`$;&|<> "):
            raise ValueError(
                "expected a package index name (e.g. 'jaxgrade==0.1.0'), a git URL ('git+https://host/repo.git@tag') "
                f"or the https URL of a wheel ('https://host/jaxgrade-0.1.0-py3-none-any.whl'), got {value!r}"
            )
        return value


class CanvasConfig(_Model):
    """``canvas:`` in ``grading.yaml``: where ``jaxgrade post canvas`` posts grades.  The access
    token is never part of the course: it is read from the environment variable ``token_env``."""

    base_url: str
    course_id: LmsId
    token_env: str = "CANVAS_TOKEN"

    @model_validator(mode="before")
    @classmethod
    def _no_token(cls, data: Any) -> Any:
        if isinstance(data, dict) and any(key in data for key in ("token", "access_token", "api_key")):
            raise PydanticCustomError(
                "jaxgrade_token",
                "a token never goes in grading.yaml (it would be committed with the course); remove it, "
                "and set the environment variable named by token_env (default CANVAS_TOKEN) instead",
            )
        return data

    @field_validator("base_url")
    @classmethod
    def _https(cls, value: str) -> str:
        url = urllib.parse.urlsplit(value.strip())
        loopback = url.scheme == "http" and url.hostname in LOOPBACK_HOSTS
        if url.scheme != "https" and not loopback:
            raise ValueError(f"expected an https:// address (the token must not travel in clear text), got {value!r}")
        if not url.hostname or url.username or url.password or url.query or url.fragment or url.path not in ("", "/"):
            raise ValueError(
                f"expected the address of the Canvas site alone, like https://canvas.example.edu, got {value!r}"
            )
        return f"{url.scheme}://{url.netloc}"

    @field_validator("course_id")
    @classmethod
    def _digits(cls, value: str | None) -> str | None:
        if value is None or not (value.isascii() and value.isdigit()):
            raise ValueError(f"expected the number in the course's Canvas URL (.../courses/<id>), got {value!r}")
        return value

    @field_validator("token_env")
    @classmethod
    def _env_name(cls, value: str) -> str:
        if not _ENV_NAME.match(value):
            raise ValueError(f"expected the name of an environment variable, like CANVAS_TOKEN, got {value!r}")
        return value


class Course(_Model):
    """``grading.yaml``; ``root`` is the directory that contains it."""

    root: Path
    course: str = "JAX course"
    seed: Count = 0
    limits: LimitsConfig = LimitsConfig()
    late_policy: LatePolicy = LatePolicy()
    canvas: CanvasConfig | None = None
    release: ReleaseConfig = ReleaseConfig()
    assignments: dict[str, AssignmentEntry]

    @field_validator("assignments", mode="before")
    @classmethod
    def _entries(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        for name in value:
            if not isinstance(name, str) or not _NAME.match(name):
                raise ValueError(f"expected assignment names of letters, digits, '_' or '-', got {name!r}")
        return {name: {} if entry is None else entry for name, entry in value.items()}  # `name:` alone is fine

    def assignment(self, name: str, *, staff: bool = True, starter: bool = True) -> Assignment:
        """The resolved assignment ``name``; with ``staff``, the reference solution and hidden tests must exist
        too; without ``starter``, the starter notebook need not (the self-check's copy of the public tests)."""
        if name not in self.assignments:
            known = sorted(self.assignments)
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else "."
            listed = ", ".join(known) or "none"
            where = self.root / "assignments" / name / ASSIGNMENT_FILE
            tip = f" To grade it, list {name!r} under 'assignments:' in {COURSE_FILE}." if where.is_file() else ""
            raise UnknownAssignmentError(
                f"{COURSE_FILE}: assignments.{name}: no such assignment{hint} Known assignments: {listed}.{tip}"
            )
        entry = self.assignments[name]
        student_dir = self.student_dir(name)
        reference_dir = self.root / "reference" / name
        if not (student_dir / ASSIGNMENT_FILE).is_file():
            raise ConfigError(
                f"{student_dir / ASSIGNMENT_FILE}: file not found ({COURSE_FILE} lists assignment {name!r}, "
                f"whose directory assignments/{name}/ must contain {ASSIGNMENT_FILE})"
            )
        config = load_assignment_config(student_dir / ASSIGNMENT_FILE, root=self.root)
        if config.name != name:
            raise ConfigError(
                f"{_show(student_dir / ASSIGNMENT_FILE, self.root)}: name: expected {name!r} "
                f"(the directory's name and the key in {COURSE_FILE}), got {config.name!r}"
            )
        merged = self.limits.model_dump()
        for override in (entry.limits, config.limits):
            if override is not None:
                merged.update({key: getattr(override, key) for key in override.model_fields_set})
        resolved = Assignment(
            name=name,
            title=entry.title or config.title,
            config=config,
            course=self,
            student_dir=student_dir,
            reference_dir=reference_dir,
            starter=student_dir / config.notebook,
            public_tests=student_dir / "tests",
            hidden_tests=reference_dir / "tests",
            solution=reference_dir / "solution.py",
            mutants_dir=reference_dir / "mutants",
            alternatives_dir=reference_dir / "alternatives",
            limits=LimitsConfig(**merged).to_limits(),
            seed=combine_seeds(self.seed, config.seed),
            functions=config.functions,
            due=entry.due,
            late_policy=entry.late_policy or self.late_policy,
        )
        required = [("public tests", resolved.public_tests, True)]
        if starter:
            required.insert(0, ("starter notebook", resolved.starter, False))
        if staff:
            required += [
                ("reference solution", resolved.solution, False),
                ("hidden tests", resolved.hidden_tests, True),
            ]
        for what, path, is_dir in required:
            if not (path.is_dir() if is_dir else path.is_file()):
                kind = "directory" if is_dir else "file"
                raise ConfigError(f"{path}: {what} of assignment {name!r} not found (expected a {kind})")
        return resolved

    def student_dir(self, name: str) -> Path:
        """``assignments/<name>/``, or the course root itself in a student bundle (the folder
        `jaxgrade release` writes: ``assignment.yaml``, ``tests/`` and the notebook at the top)."""
        nested = self.root / "assignments" / name
        if not nested.is_dir() and (self.root / ASSIGNMENT_FILE).is_file():
            return self.root
        return nested


@dataclass(frozen=True)
class Assignment:
    """One assignment resolved against its course: paths, merged limits and seed."""

    name: str
    title: str
    config: AssignmentConfig
    course: Course
    student_dir: Path
    reference_dir: Path
    starter: Path
    public_tests: Path
    hidden_tests: Path
    solution: Path
    mutants_dir: Path
    alternatives_dir: Path  # other correct solutions, in the styles students write (staff only)
    limits: Limits
    seed: int
    functions: tuple[str, ...]
    due: datetime | None = None
    late_policy: LatePolicy = dataclasses.field(default_factory=LatePolicy)

    def fingerprint(self) -> dict[str, Any]:
        """What :meth:`version` digests, part by part (the grader's version, the settings, each
        file's sha256 by its path in the course), so that two versions can say how they differ.
        Not the due date nor the late policy: they decide no test's verdict, and a batch applies
        them as they are now to the results it keeps (a deadline moved for the class regrades
        nobody)."""
        from grader import __version__

        settings = {
            "limits": dataclasses.asdict(self.limits),
            "seed": self.seed,
            "functions": self.functions,
            "devices": self.config.devices,
            "tolerance": self.config.tolerance.model_dump(),
        }
        paths = [self.student_dir / ASSIGNMENT_FILE, self.solution]
        for folder in (self.public_tests, self.hidden_tests):
            if folder.is_dir():
                paths += sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
        files = {
            path.relative_to(self.course.root).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in paths
            if path.is_file()
        }
        return {"jaxgrade": __version__, "settings": json.loads(json.dumps(settings)), "files": files}

    def alternatives(self) -> list[Path]:
        """The staff's other correct solutions (``reference/<name>/alternatives/*.py``), written the
        ways students write them (the tutorial's loop, another split of the keys): `jaxgrade
        validate` requires full marks of each, and the trusted compilation cache is warmed with
        them too.  They decide no grade, so they are not part of :meth:`version`."""
        folder = self.alternatives_dir
        return sorted(p for p in folder.glob("*.py") if p.is_file()) if folder.is_dir() else []

    def hidden_salt(self) -> int:
        """A number only the staff's side can compute: a digest of the reference solution and the
        hidden tests (never released).  It seeds the hidden tests' inputs beside the course seed,
        which students do know (the release carries it for the public tests)."""
        cached = self.__dict__.get("_hidden_salt")
        if cached is not None:
            return cached
        h = hashlib.sha256(b"jaxgrade hidden inputs\0")
        files = [self.solution]
        if self.hidden_tests.is_dir():
            files += sorted(p for p in self.hidden_tests.rglob("*.py") if p.is_file() and "__pycache__" not in p.parts)
        for path in files:
            if path.is_file():
                h.update(path.relative_to(self.course.root).as_posix().encode() + b"\0")
                h.update(hashlib.sha256(path.read_bytes()).digest())
        salt = int.from_bytes(h.digest()[:4], "big") or 1
        object.__setattr__(self, "_hidden_salt", salt)
        return salt

    def version(self) -> str:
        """``<grader version>+<digest>``: changes when anything that decides a test's verdict
        changes (the tests, the reference, the settings, the grader), so that resumed batches
        regrade; the lateness is applied again without grading (:meth:`Batch.plan`)."""
        cached = self.__dict__.get("_version")  # once per run: a batch keys every row by it
        if cached is not None:
            return cached
        parts = self.fingerprint()
        h = hashlib.sha256()
        h.update(json.dumps(parts["settings"], sort_keys=True).encode())
        for rel, digest in parts["files"].items():
            h.update(rel.encode() + b"\0")
            h.update(bytes.fromhex(digest))
        version = f"{parts['jaxgrade']}+{h.hexdigest()[:16]}"
        object.__setattr__(self, "_version", version)  # a frozen dataclass: set once, here
        return version


def combine_seeds(course_seed: int, assignment_seed: int) -> int:
    """A deterministic seed in [0, 2**31) from the course's and the assignment's seeds."""
    digest = hashlib.sha256(f"jaxgrade:{course_seed}:{assignment_seed}".encode()).digest()
    return int.from_bytes(digest[:4], "big") % 2**31


def find_course_root(start: Path | None = None) -> Path:
    """The first directory from ``start`` (default: the working directory) upwards that holds ``grading.yaml``."""
    begin = Path.cwd() if start is None else Path(start)
    here = begin.resolve()
    if here.is_file():
        here = here.parent
    for candidate in (here, *here.parents):
        if (candidate / COURSE_FILE).is_file():
            return candidate
    installed = Path(__file__).resolve().parents[2]  # an editable install of the course repository
    if (installed / COURSE_FILE).is_file():
        return installed
    raise NoCourseError(
        f"no {COURSE_FILE} found in {begin} or its parents: this is neither a course repository nor an "
        "assignment folder made by `jaxgrade release`"
    )


def load_course(root: Path | None = None) -> Course:
    """Read ``root/grading.yaml`` (``root`` defaults to :func:`find_course_root`)."""
    root = find_course_root() if root is None else Path(root).resolve()
    return course_from_data(_read_yaml(root / COURSE_FILE, root), root)


def course_from_data(data: dict[str, Any], root: Path) -> Course:
    """The course from ``grading.yaml``'s parsed ``data`` (``jaxgrade new`` checks an edit with it)."""
    if "root" in data:
        raise ConfigError(f"{COURSE_FILE}: root: unknown key (the course root is the directory holding {COURSE_FILE})")
    return _validate(Course, {**data, "root": root}, COURSE_FILE)


def load_assignment_config(path: Path, *, root: Path | None = None) -> AssignmentConfig:
    """Read one ``assignment.yaml``; ``root`` only shortens the file name shown in messages."""
    return _validate(AssignmentConfig, _read_yaml(Path(path), root), _show(Path(path), root))


def _show(path: Path, root: Path | None) -> str:
    if root is not None and path.is_relative_to(root):
        return path.relative_to(root).as_posix()
    return str(path)


def _read_yaml(path: Path, root: Path | None) -> dict[str, Any]:
    shown = _show(path, root)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot be read: {exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{shown}: {where}invalid YAML: {problem}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{shown}: expected a mapping of keys to values at the top level, got {_describe(data)}")
    return data


_EXPECTED = {
    "float_parsing": "expected a number",
    "float_type": "expected a number",
    "finite_number": "expected a finite number",
    "int_parsing": "expected a whole number",
    "int_type": "expected a whole number",
    "int_from_float": "expected a whole number",
    "string_type": "expected a string",
    "dict_type": "expected a mapping",
    "model_type": "expected a mapping",
    "model_attributes_type": "expected a mapping",
    "tuple_type": "expected a list",
    "list_type": "expected a list",
    "timezone_aware": "expected a date and time with a UTC offset (e.g. 2026-12-01T23:59:00+01:00)",
    "datetime_type": "expected a date and time with a UTC offset (e.g. 2026-12-01T23:59:00+01:00)",
    "datetime_parsing": "expected a date and time with a UTC offset (e.g. 2026-12-01T23:59:00+01:00)",
    "datetime_from_date_parsing": "expected a date and time with a UTC offset (e.g. 2026-12-01T23:59:00+01:00)",
}


def _validate(model: type[M], data: dict[str, Any], shown: str) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        lines = [f"{shown}: {_key_path(err['loc'])}: {_explain(model, err)}" for err in exc.errors()]
        raise ConfigError("\n".join(lines)) from None


def _key_path(loc: tuple[int | str, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


def _explain(model: type[BaseModel], err: Any) -> str:
    kind, ctx = err["type"], err.get("ctx") or {}
    if kind == "missing":
        return "required key is missing"
    if kind == "extra_forbidden":
        allowed = _allowed_keys(model, err["loc"][:-1])
        close = difflib.get_close_matches(str(err["loc"][-1]), allowed, n=1)
        return "unknown key; " + (f"did you mean {close[0]!r}?" if close else f"expected one of: {', '.join(allowed)}")
    if kind == "value_error":
        return str(ctx.get("error", err["msg"]))
    if kind.startswith("jaxgrade_"):
        return str(err["msg"])
    if kind in _EXPECTED:
        expected = _EXPECTED[kind]
    elif kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        expected = "expected a value " + err["msg"].removeprefix("Input should be ")
    elif kind == "too_short":
        expected = "expected a non-empty list"
    else:
        expected = err["msg"].replace("Input should be", "expected", 1)
    return f"{expected}, got {_describe(err['input'])}"


def _describe(value: Any) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "an empty list" if not value else "a list"
    if value is None:
        return "nothing (null)"
    if isinstance(value, (datetime, date)):
        return f"{value.isoformat()} (no UTC offset)" if isinstance(value, datetime) else value.isoformat()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _allowed_keys(model: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    """The field names of the model found at ``loc`` inside ``model`` (for "did you mean")."""
    current: Any = model
    for part in loc:
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get(str(part))
            if field is None:
                return []
            current = _unwrap(field.annotation)
        elif typing.get_origin(current) is dict:
            current = _unwrap(typing.get_args(current)[1])
        else:
            return []
    if isinstance(current, type) and issubclass(current, BaseModel):
        return [name for name in current.model_fields if not (current is Course and name == "root")]
    return []


def _unwrap(annotation: Any) -> Any:
    """``X | None`` -> ``X``."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        members = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        return members[0] if len(members) == 1 else annotation
    return annotation
