"""The pytest plugin that runs public and hidden tests in the trusted process.

Markers: ``@pytest.mark.points(n)`` (a parametrized test's points are split evenly across its
cases) and ``@pytest.mark.category(name)``.  Fixtures: ``submission`` (calls go to the
sandbox), ``reference`` (the reference solution module), ``rng`` (seeded per run and test).
Outcomes are collected from pytest's reports into :class:`grader.grading.record.TestResult` objects;
nothing printed by anyone is ever read.
"""

from __future__ import annotations

import difflib
import re
import time
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from grader.grading.checks import Tolerance, using_tolerance
from grader.grading.record import CATEGORIES, TestResult
from grader.host.memory import is_out_of_memory
from grader.host.session import showing_student_text

MARKERS = (
    "points(n): the test's worth; split evenly across a parametrized test's cases. Example: @pytest.mark.points(2)",
    "category(name): one of " + ", ".join(CATEGORIES) + ". Example: @pytest.mark.category('jit')",
    "visible: show this hidden test's inputs and message to students",
)


#: Frames of a traceback that are not the course's code: pytest's import machinery, the standard library.
_NOT_THE_COURSES = re.compile(r"site-packages|dist-packages|[/\\]lib[/\\]python3\.\d+[/\\]|<frozen ")
_FRAME = re.compile(r'\s*File "(?P<a>[^"]+)", line \d+|(?P<b>\S+\.py|<frozen [^>]+>):\d+: in ')


def collect_error(text: str) -> str:
    """A test file's collection error as its author needs it: the frames of the course's own
    files and the error, without pytest's import machinery (a broken test file showed twenty
    lines of ``_pytest/python.py`` before its SyntaxError)."""
    kept, skipping = [], False
    for line in text.splitlines():
        if line.startswith("E "):
            kept.append(line[4:] if line.startswith("E   ") else line[2:])
            skipping = False
            continue
        frame = _FRAME.match(line)
        if frame:
            skipping = bool(_NOT_THE_COURSES.search(frame.group("a") or frame.group("b")))
        elif skipping and line.startswith(" "):
            continue  # the source lines under a frame left out
        else:
            skipping = False
        stripped = line.strip()
        if skipping or (stripped and set(stripped) <= set("^~ ")):
            continue
        if line.startswith(("Hint: make sure your test modules", "Traceback")):
            continue
        kept.append(line)
    return "\n".join(kept).strip() or text.strip()


class MarkerError(Exception):
    """A test's markers are wrong (a staff mistake, reported as such)."""


@dataclass(frozen=True)
class TestMeta:
    points: float
    category: str
    visibility: str
    title: str


def read_meta(item: pytest.Item, share: int, default_visibility: str) -> TestMeta:
    """Points, category and visibility of one collected test item (a pure function of markers)."""
    pm = item.get_closest_marker("points")
    cm = item.get_closest_marker("category")
    if pm is None or len(pm.args) != 1 or not isinstance(pm.args[0], (int, float)) or pm.args[0] < 0:
        raise MarkerError(f"{item.nodeid}: needs @pytest.mark.points(n) with a non-negative number")
    if cm is None or len(cm.args) != 1 or cm.args[0] not in CATEGORIES:
        got = cm.args[0] if cm is not None and cm.args else None

        close = difflib.get_close_matches(str(got), CATEGORIES, n=1)
        tip = f" - maybe you meant {close[0]!r}?" if close else ""
        raise MarkerError(
            f"{item.nodeid}: @pytest.mark.category must be one of {', '.join(CATEGORIES)}, got {got!r}{tip}"
        )
    visibility = "visible" if item.get_closest_marker("visible") else default_visibility
    doc = getattr(getattr(item, "function", None), "__doc__", None) or ""
    title = _title(doc)
    return TestMeta(float(pm.args[0]) / share, str(cm.args[0]), visibility, title)


#: Characters of a test's title at most (students read it, hidden tests' too).
TITLE_MAX = 200


def _title(doc: str) -> str:
    """A test's title, shown to students (hidden tests' too): its docstring's first sentence,
    which may wrap onto the next lines, up to a line that ends with a colon (a list follows),
    and at most :data:`TITLE_MAX` characters, cut at a word."""
    lines: list[str] = []
    for line in doc.strip().split("\n\n")[0].splitlines():
        lines.append(line.strip())
        if line.rstrip().endswith(":"):
            break
    para = " ".join(lines)
    first = re.match(r"(.+?[.!?])(?:\s|$)", para)
    title = first.group(1) if first else para
    if len(title) > TITLE_MAX:
        title = title[:TITLE_MAX].rsplit(" ", 1)[0] + "…"
    return title


def _failure(excinfo: Any) -> tuple[str, str, str]:
    """(status, message, hint) for an exception raised by a test."""
    from grader.grading.checks import CheckFailure
    from grader.host.session import SubmissionError

    exc = excinfo.value
    if isinstance(exc, (CheckFailure, SubmissionError)):
        return "failed", exc.message, exc.hint
    if isinstance(exc, AssertionError):
        text = str(exc).split("\nassert ")[0].strip() or "assertion failed"
        return "failed", text[:2000], ""
    return "error", f"the test itself failed ({type(exc).__name__}: {str(exc)[:500]}); please tell the course staff", ""


#: Shortest piece of the sandbox's text that :func:`scrub` looks for.
_SCRUB_MIN = 12
_SCRUBBED = "[…]"


def scrub(text: str, said: list[str]) -> str:
    """``text`` without any whole line of what the sandbox said (at least ``_SCRUB_MIN``
    characters, so that the grader's own words, which JAX's messages repeat, stay): a backstop
    for a hidden test that quotes the sandbox's text itself."""
    lines = {line.strip() for chunk in said for line in str(chunk).splitlines()}
    for line in sorted((ln for ln in lines if len(ln) >= _SCRUB_MIN), key=len, reverse=True):
        text = text.replace(line, _SCRUBBED)
    return text


class GradingPlugin:
    """Registered with ``pytest.main(plugins=[...])`` for one submission."""

    def __init__(
        self,
        *,
        submission: Any,
        reference: Any,
        seed: int,
        visibility_of: dict[Path, str],
        student_text: Callable[[], list[str]] | None = None,
        tolerance: Tolerance | None = None,
        hidden_salt: int = 0,
    ) -> None:
        """``student_text()`` returns (and forgets) the text the sandbox chose since its last
        call; a hidden test's message and hint are scrubbed of it.  ``tolerance`` is
        ``assert_close``'s default during each test (the assignment's).  ``hidden_salt`` goes
        into the ``rng`` of every test outside the visible folders: a secret of the staff's side,
        so that knowing the course seed, a hidden test's name and its code (a scaffold's, say)
        is not enough to recompute its inputs."""
        self._submission = submission
        self._tolerance = tolerance or Tolerance()
        self._take_student_text = student_text
        self._reference = reference
        self._seed = seed
        self._hidden_salt = hidden_salt
        self._visibility_of = visibility_of
        self.results: list[TestResult] = []
        self.errors: list[str] = []
        self.interrupted = False  # Ctrl-C reached pytest (pytest_keyboard_interrupt)
        #: a test ran out of this (trusted) process's memory limit: not the student's failure,
        #: so the grading stops (:func:`grader.grading.grade.run_tests`) instead of scoring it
        self.out_of_memory = False
        self._meta: dict[str, TestMeta] = {}
        self._started: dict[str, float] = {}

    @property
    def collected(self) -> list[TestMeta]:
        """Points, category, visibility and title of every test collected so far."""
        return list(self._meta.values())

    # -- configuration
    def pytest_keyboard_interrupt(self, excinfo: Any) -> None:
        # Ctrl-C itself, not pytest's own subclass for errors during collection (a staff error)
        self.interrupted = type(excinfo.value) is KeyboardInterrupt

    def pytest_configure(self, config: pytest.Config) -> None:
        for m in MARKERS:
            config.addinivalue_line("markers", m)
        # a failed test's result comes from its exception (_failure), not from pytest's report of
        # it; pytest's default report parses the whole source file of every frame of the
        # traceback (30 ms a failure: 1.5 s of an empty notebook's 49).  Python's own traceback
        # keeps what a report is still used for (a test file that cannot be collected) readable.
        # (The terminal plugin, which owns --tb, is off: the option is set here.)
        config.option.tbstyle = "native"

    def pytest_collection_modifyitems(
        self, session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        counts = Counter(self._group(it) for it in items)
        for it in items:
            vis = self._folder_visibility(it)
            try:
                self._meta[it.nodeid] = read_meta(it, counts[self._group(it)], vis)
            except MarkerError as exc:
                self.errors.append(str(exc))

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.errors.append(f"could not collect {report.nodeid}: {collect_error(str(report.longrepr))[-1500:]}")

    def _folder_visibility(self, item: pytest.Item) -> str:
        """The visibility of the folder ``item``'s file is in (before any marker)."""
        vis = "visible"
        for root, v in self._visibility_of.items():
            if Path(str(item.path)).resolve().is_relative_to(root.resolve()):
                vis = v
        return vis

    @staticmethod
    def _group(item: pytest.Item) -> str:
        return item.nodeid.split("[", 1)[0]

    # -- fixtures
    @pytest.fixture
    def submission(self) -> Any:
        return self._submission

    @pytest.fixture
    def reference(self) -> Any:
        if self._reference is None:
            raise RuntimeError(
                "the reference solution is not available here (student bundle): public tests must not use it"
            )
        return self._reference

    @pytest.fixture
    def rng(self, request: pytest.FixtureRequest) -> np.random.Generator:
        key = [self._seed & 0xFFFFFFFF, zlib.crc32(request.node.nodeid.encode())]
        if self._hidden_salt and self._folder_visibility(request.node) != "visible":
            key.append(self._hidden_salt)  # hidden inputs: not computable from what students get
        return np.random.default_rng(key)

    # -- outcomes
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Any:
        meta = self._meta.get(item.nodeid)
        with showing_student_text(meta is None or meta.visibility == "visible"):
            yield

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Any:
        with using_tolerance(self._tolerance):  # fixtures' comparisons too (setup and teardown)
            yield

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[Any]) -> Any:
        outcome = yield
        report = outcome.get_result()
        if call.excinfo is not None and is_out_of_memory(call.excinfo.value):
            self.out_of_memory = True
        if call.excinfo is not None and report.failed:
            report._jaxgrade = _failure(call.excinfo)  # type: ignore[attr-defined]

    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        self._started[nodeid] = time.monotonic()
        self._student_text()  # what earlier tests received is theirs

    def _student_text(self) -> list[str]:
        return self._take_student_text() if self._take_student_text is not None else []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        meta = self._meta.get(report.nodeid)
        if meta is None:
            return
        done = any(r.name == report.nodeid for r in self.results)
        if done:
            # a teardown error after a pass turns the test into an error
            if report.failed:
                for r in self.results:
                    if r.name == report.nodeid:
                        r.status, r.score = "error", 0.0
                        r.message = r.message or "the test's teardown failed"
            return
        if report.when == "call" or (report.when == "setup" and not report.passed):
            if report.passed:
                status, message, hint = "passed", "", ""
            elif report.skipped:
                status, message, hint = "failed", "skipped", ""
            else:
                status, message, hint = getattr(report, "_jaxgrade", ("error", str(report.longrepr)[-1000:], ""))
            if meta.visibility != "visible":
                # the student's kernel saw this test's hidden inputs: the checks already leave its text
                # and values out of the message (STUDENT_TEXT_SHOWN); this is the backstop for a test
                # that quotes it anyway. Hints are the grader's own words, chosen by the error.
                message = scrub(message, self._student_text())
            self.results.append(
                TestResult(
                    name=report.nodeid.split("::", 1)[-1],
                    category=meta.category,
                    score=meta.points if status == "passed" else 0.0,
                    max_score=meta.points,
                    status=status,
                    message=message,
                    hint=hint,
                    visibility=meta.visibility,
                    title=meta.title,
                    duration=round(time.monotonic() - self._started.get(report.nodeid, time.monotonic()), 3),
                )
            )
            # keep the full node id until the run ends, for the teardown lookup above
            self.results[-1].name = report.nodeid

    def finish(self) -> list[TestResult]:
        """Name each result by its test function (and parameters); a name that two test files
        share (a public and a hidden test) keeps its file's stem, ``test_hidden::test_x``."""
        short = Counter(r.name.split("::", 1)[-1] for r in self.results)
        for r in self.results:
            path, _, name = r.name.partition("::")
            r.name = name if short[name] == 1 else f"{Path(path).stem}::{name}"
        return self.results
