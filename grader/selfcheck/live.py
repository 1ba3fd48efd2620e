"""The self-check in the live kernel: the public tests against the functions the kernel holds now.

A :class:`LiveSession` is a :class:`~grader.host.session.Session` whose two sandboxed processes
are replaced by direct calls of their request handlers (:func:`grader.sandboxed.kernel_side.answer`,
:func:`grader.sandboxed.evaluator.answer`) in this kernel; the sources the checks read come from
the kernel's history (``In``), since on Colab no notebook file exists.
"""

from __future__ import annotations

import ast
import atexit
import difflib
import html
import inspect
import io
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest

from grader import __version__
from grader.cli import HIDDEN_TESTS_NOTE, missing_why, render_check
from grader.course.config import Assignment, UnmetRequirementError, check_requirements, load_course
from grader.errors import Location, first_line
from grader.grading.grade import _missing, _set_trusted_devices, run_tests
from grader.grading.record import Record, total
from grader.grading.submission import Submission
from grader.host.session import Session
from grader.intake.notebook import LoadedNotebook
from grader.sandboxed import evaluator, kernel_side
from grader.selfcheck.payload import SelfCheckError, decode_payload
from grader.wire import protocol

SOURCE = "this notebook (live kernel)"


# --------------------------------------------------------------------------- the live kernel


def _ipython() -> Any:
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    return get_ipython()


def _history() -> list[str]:
    """The kernel's cells by execution count (``In``: index 0 is empty), as IPython ran them."""
    ip = _ipython()
    if ip is None:
        return [""]
    return [str(c) for c in ip.user_ns.get("In", None) or ip.history_manager.input_hist_parsed]


def _defined_names(source: str) -> set[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def latest_cells(history: list[str]) -> list[str]:
    """The cells of ``history`` that still define something: a cell whose every definition was
    run again later (the student edited and re-ran it) is left out, so that the checks that read
    sources see the functions the kernel holds, not their earlier drafts."""
    seen: set[str] = set()
    kept: list[str] = []
    for source in reversed(history):
        names = _defined_names(source)
        if names and names <= seen:
            continue
        seen |= names
        kept.append(source)
    return kept[::-1]


#: Each cell run since setup(), by its cell id (or its source, where the front end sends no
#: id): (execution count, the error of its latest run or None, its first line of code).
_RUNS: dict[str, tuple[int, str | None, str]] = {}
_HOOKS: list[Any] = []  # the post_run_cell callback setup() registered (one per kernel)
MAX_RAISED = 5


def _record_cell_runs() -> None:
    """From now on, note how each cell's latest run ended (IPython's ``post_run_cell``): a cell
    that raised and was fixed and run again is no longer listed."""
    ip = _ipython()
    if ip is None or not hasattr(ip, "events"):
        return
    for hook in _HOOKS:
        try:
            ip.events.unregister("post_run_cell", hook)
        except ValueError:
            pass
    _HOOKS.clear()
    _RUNS.clear()

    def after(result: Any) -> None:
        info = getattr(result, "info", None)
        source = str(getattr(info, "raw_cell", "") or "")
        key = str(getattr(info, "cell_id", None) or source)
        exc = getattr(result, "error_before_exec", None) or getattr(result, "error_in_exec", None)
        said = f"{type(exc).__name__}: {first_line(str(exc))}"[:200] if exc is not None else None
        line = next((ln.strip() for ln in source.splitlines() if ln.strip() and not ln.strip().startswith("#")), "")
        _RUNS[key] = (int(getattr(result, "execution_count", None) or 0), said, line[:80])

    ip.events.register("post_run_cell", after)
    _HOOKS.append(after)


def raised_cells() -> list[str]:
    """The cells whose latest run raised, oldest first: ``In [4] (`y = f(x)`): NameError: ...``."""
    failed = sorted((n, said, line) for n, said, line in _RUNS.values() if said)
    return [f"In [{n}] (`{line}`): {said}" if line else f"In [{n}]: {said}" for n, said, line in failed]


@dataclass(frozen=True)
class _LiveNotebook:
    """What the checks read of "the notebook" (``code_cells``), from the live kernel."""

    cells: tuple[str, ...]

    def code_cells(self) -> list[str]:
        return list(self.cells)


def _live_notebook(functions: tuple[str, ...]) -> _LiveNotebook:
    history = _history()
    if len(history) > 1:
        return _LiveNotebook(tuple(latest_cells(history)))
    # not IPython (a plain Python session): the functions' own source, where Python kept it
    ns = kernel_side._ns()
    found = []
    for name in functions:
        try:
            found.append(inspect.getsource(ns[name]))
        except (KeyError, TypeError, OSError):
            pass
    return _LiveNotebook(tuple(found))


@dataclass(frozen=True)
class KernelLocation(Location):
    """A place in the live kernel: ``cell`` is the execution count, shown as Jupyter's ``In [n]``
    (a notebook's cell positions are not known in the kernel)."""

    def describe(self) -> str:
        where = []
        if self.cell:
            where.append(f"In [{self.cell}]")
        if self.lineno is not None:
            where.append(f"line {self.lineno}")
        s = ", ".join(where)
        if self.text:
            s += f": `{self.text}`" if s else f"`{self.text}`"
        return s


class _InProcess:
    """Stands where a sandboxed process stands in :class:`Session`: ``send`` a request frame,
    ``recv`` its reply, answered in this process by ``handler``."""

    def __init__(self, handler: Any) -> None:
        self._handler = handler
        self._reply: tuple[dict[str, Any], bytes] | None = None

    def send(self, header: dict[str, Any], payload: bytes = b"") -> None:
        # the same framing as the pipe: the values are packed and checked, then unpacked again
        reply, blob = self._handler(header, payload)
        self._reply = reply, blob

    def recv(self, timeout: float) -> tuple[dict[str, Any], bytes]:
        if self._reply is None:
            raise protocol.ProtocolError("no request was sent")
        reply, self._reply = self._reply, None
        return reply

    def alive(self) -> bool:
        return False  # nothing to shut down

    def kill(self) -> None:
        pass


class LiveSession(Session):
    """A :class:`Session` whose kernel is this one: requests go to the kernel side's and the
    evaluator's handlers in this process, through the same messages, values and validation.
    No time limit is enforced (interrupt the kernel to stop a call)."""

    def __init__(self, assignment: Assignment) -> None:
        super().__init__("{}", limits=assignment.limits, isolation="process")
        history = _history()
        self._cell_lines = [cell.splitlines() for cell in history]  # by execution count
        self.exec_map = {n: n for n in range(len(history))}
        self.worker = cast(Any, _InProcess(kernel_side.answer))
        self._live_evaluator = _InProcess(evaluator.answer)

    def start(self) -> None:
        raise RuntimeError("a live session has no sandbox to start")

    def _evaluator(self) -> Any:
        return self._live_evaluator

    def _trusted_location(self, loc: Location | None) -> Location | None:
        found = super()._trusted_location(loc)
        return None if found is None else KernelLocation(found.cell, found.lineno, found.text)


# --------------------------------------------------------------------------- choosing tests


def owner(test: str, functions: tuple[str, ...]) -> str | None:
    """The function a public test is about, from its name: the longest function name that
    ``test_<function>[_...]`` starts with, else the longest one it contains."""
    bare = test.split("[", 1)[0].removeprefix("test_")
    by_length = sorted(functions, key=len, reverse=True)
    for name in by_length:
        if bare == name or bare.startswith(name + "_"):
            return name
    return next((name for name in by_length if name in bare), None)


class _OnlyFunction:
    """A pytest plugin that keeps the tests of one function (:func:`owner`)."""

    def __init__(self, name: str, functions: tuple[str, ...]) -> None:
        self.name, self.functions = name, functions

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        keep = [it for it in items if owner(it.name, self.functions) == self.name]
        config.hook.pytest_deselected(items=[it for it in items if it not in keep])
        items[:] = keep


# --------------------------------------------------------------------------- the checker


@dataclass
class Result:
    """One self-check: the same record `jaxgrade check` makes, shown as HTML or text."""

    record: Record

    @property
    def ok(self) -> bool:
        tests = self.record.tests
        return bool(tests) and all(t.status == "passed" for t in tests)

    def text(self) -> str:
        out = io.StringIO()
        render_check(self.record, out, live=True)
        return out.getvalue()

    def html(self) -> str:
        return render_html(self.record)

    def _repr_html_(self) -> str:
        return self.html()

    def __repr__(self) -> str:
        return self.text()


class Checker:
    """The public tests of one assignment, extracted where pytest can read them."""

    def __init__(self, assignment: Assignment) -> None:
        self.assignment = assignment

    def run(self, function: str | None = None) -> Result:
        a = self.assignment
        try:  # its tests would fail every solution here (the pmap assignment on JAX before 0.8)
            check_requirements(a)
        except UnmetRequirementError as exc:
            raise SelfCheckError(f"{a.name} cannot be checked in this kernel: it needs {exc.needs}") from None
        if function is not None and function not in a.functions:
            close = difflib.get_close_matches(function, a.functions, n=1)
            raise SelfCheckError(
                f"{function!r} is not a function of {a.name}"
                + (f"; did you mean {close[0]!r}?" if close else "")
                + f" Its functions: {', '.join(a.functions)}"
            )
        session = LiveSession(a)
        sub = Submission(session, cast(LoadedNotebook, _live_notebook(a.functions)))
        only = (_OnlyFunction(function, a.functions),) if function else ()
        rec = Record(
            assignment=a.name,
            student="you",
            submission_sha256="",
            status="graded",
            grader_version=__version__,
            isolation="none (your own kernel)",
            source=SOURCE if function is None else f"{SOURCE}, tests of `{function}`",
        )
        raised = raised_cells()
        if raised:  # what `jaxgrade check` lists as the notebook's failing cells
            more = f" (and {len(raised) - MAX_RAISED} more)" if len(raised) > MAX_RAISED else ""
            shown = "; ".join(raised[:MAX_RAISED])
            rec.message = f"cells that raised when last run: {shown}{more}"
        rec.message = "; ".join(m for m in (_device_note(a), rec.message) if m)
        rec.missing = _missing(sub, (function,) if function else a.functions)
        results, errors = run_tests(a, sub, public_only=True, plugins=only)
        rec.tests = results
        if errors:
            rec.status = "error"
            rec.message = "; ".join([m for m in (rec.message, *errors) if m])
        rec.score, rec.max_score = total(rec.tests)
        return Result(rec)


def _device_note(a: Assignment) -> str:
    devices = a.config.devices
    if devices <= 1 or "jax" not in sys.modules:
        return ""
    import jax

    if jax.device_count() >= devices:
        return ""
    return (
        f"this assignment runs on {devices} devices, but this kernel's JAX has {jax.device_count()}: restart the "
        "kernel (Colab: Runtime > Restart session) and run the first cell before anything else"
    )


_CHECKER: list[Checker] = []  # the notebook's checker, set by setup(): one per kernel
_FOLDERS: list[Path] = []  # setup()'s temporary folders still there: the latest one only, once set up


def _remove_folders(keep: Path | None = None) -> None:
    """Delete setup()'s temporary folders but ``keep`` (all at exit)."""
    for folder in [f for f in _FOLDERS if f != keep]:
        shutil.rmtree(folder, ignore_errors=True)
        _FOLDERS.remove(folder)


atexit.register(_remove_folders)


def setup(name: str, payload: str) -> Checker:
    """Load the public tests and configuration of assignment ``name`` from the first cell's
    ``payload`` (see :func:`encode_payload`), into a fresh private temporary folder; the folder of
    an earlier run of the cell is deleted, and this one when the kernel exits."""
    files = decode_payload(payload)
    root = Path(tempfile.mkdtemp(prefix=f"jaxgrade-{name}-"))
    _FOLDERS.append(root)
    try:
        for rel, text in files.items():
            target = root / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        assignment = load_course(root).assignment(name, staff=False, starter=False)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        _FOLDERS.remove(root)
        raise
    _remove_folders(keep=root)
    _set_trusted_devices(assignment.config.devices)  # before JAX starts, when this cell runs first
    _CHECKER[:] = [Checker(assignment)]
    _record_cell_runs()
    print(f"jaxgrade {__version__}: self-check ready for {name}. Run `jc.check()` (or `jc.check('function')`).")
    return _CHECKER[0]


def run(function: str | None = None) -> Result:
    """The public tests (of ``function`` only, if named) against this kernel's functions."""
    if not _CHECKER:
        raise SelfCheckError("the self-check is not set up: run the notebook's first cell, then `jc.check()` again")
    return _CHECKER[0].run(function)


def check(function: str | None = None) -> None:
    """Run the public tests and show the verdicts, messages and hints (HTML in a notebook, text
    elsewhere).  A request it cannot run (a misspelt function, no setup) is said in one line,
    without a traceback under it; :func:`run` raises it."""
    try:
        result = run(function)
    except SelfCheckError as exc:
        print(f"jaxgrade: {exc}", file=sys.stderr)
        return
    if _ipython() is None:
        print(result.text())
        return
    from IPython.display import display

    display(result)


# --------------------------------------------------------------------------- HTML

_STYLE = {"PASS": "#1a7f37", "FAIL": "#cf222e", "ERROR": "#9a6700"}


def render_html(rec: Record) -> str:
    """The record as an HTML fragment: the same lines as :func:`grader.cli.render_check`."""
    e = html.escape
    parts = [
        '<div class="jaxgrade-check" style="font-family:sans-serif;line-height:1.4">',
        f"<p><b>jaxgrade check</b>: {e(rec.source)} — assignment <code>{e(rec.assignment)}</code> (public tests)</p>",
    ]
    if rec.message:
        parts.append(f"<p>note: {e(rec.message)}</p>")
    if rec.missing:
        parts.append(f"<p>missing: {e(', '.join(rec.missing))} ({e(missing_why(live=True))})</p>")
    parts.append('<table style="border-collapse:collapse">')
    for t in rec.tests:
        mark = "PASS" if t.status == "passed" else ("ERROR" if t.status == "error" else "FAIL")
        title = f" — {e(t.title)}" if t.title else ""
        parts.append(
            f'<tr><td style="color:{_STYLE[mark]};font-weight:bold;padding-right:1em">{mark}</td>'
            f"<td><code>{e(t.name)}</code> [{e(t.category)}] {t.score:g}/{t.max_score:g}{title}</td></tr>"
        )
        if t.status != "passed":
            parts.append(f"<tr><td></td><td>{e(t.message)}</td></tr>")
            if t.hint:
                parts.append(f"<tr><td></td><td><i>hint:</i> {e(t.hint)}</td></tr>")
    parts.append("</table>")
    passed = sum(t.status == "passed" for t in rec.tests)
    parts.append(
        f"<p>{passed}/{len(rec.tests)} public tests passed ({rec.score:g}/{rec.max_score:g} points).</p>"
        f"<p><b>{e(HIDDEN_TESTS_NOTE)}</b></p></div>"
    )
    return "\n".join(parts)
