"""Every error type a test, a course author or the command line meets; no internal imports.

Errors about the submission (``SubmissionError`` and its kinds) carry a message for the
student and a hint; the others carry what the TA or the course author must fix.
"""

from __future__ import annotations

import builtins
import contextlib
import contextvars
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

# --------------------------------------------------------------------------- about a submission


@dataclass(frozen=True)
class Location:
    """Where in the notebook something happened (cell index from 0, line from 1)."""

    cell: int | None
    lineno: int | None
    text: str = ""

    def describe(self) -> str:
        where = []
        if self.cell is not None:
            where.append(f"cell {self.cell + 1}")
        if self.lineno is not None:
            where.append(f"line {self.lineno}")
        s = ", ".join(where)
        if self.text:
            s += f": `{self.text}`" if s else f"`{self.text}`"
        return s


class _Taught(Exception):
    """An error with a ``message`` for the student and a ``hint`` that says how to fix it."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.message, self.hint))


class SubmissionError(_Taught):
    """A test could not get what it needed from the submission; the message is for the student."""


class MissingName(SubmissionError):
    def __init__(self, name: str, hint: str = "") -> None:
        super().__init__(
            f"`{name}` is not defined in the notebook",
            hint or f"Define `{name}` with exactly this name, and make sure its cell runs without an error.",
        )
        self.name = name

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.name, self.hint))


#: Whether messages may carry what the sandbox chose (error text, unknown error class names,
#: returned values).  Off while a hidden test runs (the grading plugin sets it): the student's
#: kernel has seen that test's inputs and could put them there.
STUDENT_TEXT_SHOWN: contextvars.ContextVar[bool] = contextvars.ContextVar("jaxgrade_student_text", default=True)


@contextlib.contextmanager
def showing_student_text(allowed: bool) -> Iterator[None]:
    """Within the block, messages carry the sandbox's text and values only if ``allowed``."""
    token = STUDENT_TEXT_SHOWN.set(allowed)
    try:
        yield
    finally:
        STUDENT_TEXT_SHOWN.reset(token)


class StudentRaised(SubmissionError):
    """The student's code raised; carries the JAX error class and the student's line.

    In a hidden test (:data:`STUDENT_TEXT_SHOWN` off) ``evalue`` is empty and an error class the
    grader does not know is shown as "an error": only ``says(text)`` still looks at the message,
    to choose the grader's own words (``grader.grading.hints.taught``)."""

    def __init__(self, name: str, ename: str, evalue: str, location: Location | None, hint: str = "") -> None:
        self._raw = evalue
        if not STUDENT_TEXT_SHOWN.get():
            ename = ename if _known_error(ename) else "an error"
            evalue = ""
        where = f" at {location.describe()}" if location and location.describe() else ""
        cause = error_cause(evalue)
        super().__init__(f"`{name}` raised {ename}{where}" + (f": {cause}" if cause else ""), hint)
        self.name, self.ename, self.evalue, self.location = name, ename, evalue, location

    def says(self, text: str) -> bool:
        """Whether the error's own message contains ``text`` (to pick a hint, never to show)."""
        return text in self._raw

    @property
    def unshown_message(self) -> str:
        """The error's own message, even in a hidden test: to choose the grader's words, never to
        show (grader.grading.hints.taught)."""
        return self._raw

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.name, self.ename, self._raw, self.location, self.hint))


class CallTimedOut(SubmissionError):
    """A call of a student function ran past its limit."""


class SandboxLost(SubmissionError):
    """The sandbox died, hung or ran out of time; nothing more can be asked of it."""


class BadValue(SubmissionError):
    """The sandbox sent something that is not acceptable data."""


class CheckFailure(_Taught, AssertionError):
    """A check failed; ``message`` says what differs, ``hint`` how to fix it."""


#: Lines of JAX's error messages that say nothing about the cause.
_BOILERPLATE = (
    "The stack trace below excludes JAX-internal frames",
    "For simplicity, JAX has removed its internal frames",
    "--------------------",
    "See https://",
    "see https://",
    "For more information",
    "To get the full stack trace",
)


#: The file a Jupyter kernel compiles a cell as (``/tmp/ipykernel_3/3870454633.py``, line 1),
#: which no student has seen: JAX names it where it traced a function, Python in a SyntaxError.
#: (From the start of a run of non-spaces only: tried at every position, a long run of "/" took
#: time with the square of its length, 46 s for 100,000 characters.)
_CELL_FILE = re.compile(r"(?<!\S)\S*?/ipykernel_\d+/\d+\.py:(\d+)")
_CELL_FILE_SYNTAX = re.compile(r"\(\d+\.py, line (\d+)\)")


def cell_paths_named(text: str) -> str:
    """``text`` with the kernel's files for cells named as cells ("a notebook cell, line 1")."""
    text = _CELL_FILE.sub(r"a notebook cell, line \1", text)
    return _CELL_FILE_SYNTAX.sub(r"(line \1 of the cell)", text)


def error_cause(text: str, limit: int = 500) -> str:
    """The lines of an error message that carry its cause, joined: JAX's messages often end their
    first line with a colon and give the cause on the next ones ("vmap got inconsistent sizes for
    array axes to be mapped:" / "* one axis had size 7: axis 0 of argument xs ...")."""
    out: list[str] = []
    used = 0
    for line in cell_paths_named(str(text)).splitlines():
        line = line.strip()
        if not line or any(b in line for b in _BOILERPLATE):
            continue
        if used + len(line) > limit:
            if not out:
                out.append(line[:limit] + "…")
            break
        out.append(line)
        used += len(line) + 1
    return " ".join(out)


def first_line(text: str, limit: int = 400) -> str:
    lines = [ln for ln in cell_paths_named(str(text)).strip().splitlines() if ln.strip()]
    first = lines[0] if lines else ""
    return first[:limit] + ("…" if len(first) > limit else "")


_KNOWN_ERRORS = frozenset(
    name
    for name in dir(builtins)
    if isinstance(getattr(builtins, name), type) and issubclass(getattr(builtins, name), BaseException)
) | frozenset(
    {
        "TracerBoolConversionError",
        "TracerIntegerConversionError",
        "TracerArrayConversionError",
        "ConcretizationTypeError",
        "NonConcreteBooleanIndexError",
        "UnexpectedTracerError",
        "KeyReuseError",
        "InconclusiveDimensionOperation",
        "XlaRuntimeError",
        "JaxRuntimeError",
        "CellTimeoutError",
    }
)


def _known_error(ename: str) -> bool:
    return ename in _KNOWN_ERRORS
