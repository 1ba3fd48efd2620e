"""The ``submission`` fixture: a proxy whose calls go to the student's sandbox."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from grader.errors import CheckFailure
from grader.host.session import CallResult, CountResult, ExportResult, MissingName, Session
from grader.intake.notebook import (
    CodeUnreadable,
    LoadedNotebook,
    definition_sources,
    reachable_sources,
    writes_into_arguments,
)


@contextlib.contextmanager
def _read_in_full() -> Iterator[None]:
    """A check that reads the notebook's source cannot judge one it does not read in full."""
    try:
        yield
    except CodeUnreadable as exc:
        raise CheckFailure(
            f"{exc}: the checks that read your source cannot judge it",
            "Hand in the notebook with only the code the assignment asks for, written plainly.",
        ) from None


class _Function:
    def __init__(self, owner: Submission, name: str) -> None:
        self._owner = owner
        self._name = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._owner.call(self._name, *args, **kwargs).value

    def __repr__(self) -> str:
        return f"<student function {self._name}>"


class Submission:
    """``submission.f(*args)`` (or ``submission["f"](*args)``) calls the student's ``f`` in the
    sandbox and returns validated data."""

    def __init__(self, session: Session, notebook: LoadedNotebook | None = None) -> None:
        self._session = session
        self._notebook = notebook
        self._probe_cache: dict[str, dict[str, Any]] = {}

    def __getattr__(self, name: str) -> _Function:
        if name.startswith("_"):
            raise AttributeError(name)
        return _Function(self, name)

    def __getitem__(self, name: str) -> _Function:
        """``submission["count"]``: the student's function even where its name is one of this
        proxy's methods (``call``, ``count``, ``export``, ``evaluate``, ``probe``...)."""
        return _Function(self, name)

    def call(
        self, name: str, *args: Any, repeat: int = 1, readonly: bool = False, key_reuse: bool = False, **kwargs: Any
    ) -> CallResult:
        return self._session.call(name, *args, repeat=repeat, readonly=readonly, key_reuse=key_reuse, **kwargs)

    def count(
        self,
        name: str,
        calls: list[tuple[tuple[Any, ...], dict[str, Any]]],
        how: str,
        static: tuple[str, ...] = (),
    ) -> CountResult:
        return self._session.count(name, calls, how, static)

    def export(
        self,
        name: str,
        specs: list[tuple[str, str]] | None = None,
        static: dict[str, Any] | None = None,
        *,
        example: tuple[Any, ...] | None = None,
        vjp_order: int = 0,
    ) -> ExportResult:
        return self._session.export(name, specs, static, example=example, vjp_order=vjp_order)

    def evaluate(
        self, name: str, module: bytes, *args: Any, batch_axes: tuple[tuple[int, ...], ...] = ()
    ) -> tuple[Any, dict[str, Any]]:
        return self._session.evaluate(name, module, *args, batch_axes=batch_axes)

    def evaluate_grad(self, name: str, module: bytes, argnum: int, *args: Any) -> tuple[Any, dict[str, Any]]:
        """The gradient of the module's scalar result with respect to ``args[argnum]`` (the
        module exported with ``vjp_order=1``), computed in the evaluator."""
        return self._session.evaluate_grad(name, module, argnum, *args)

    def analyze(self, name: str, module: bytes) -> dict[str, Any]:
        """The module's analysis (see :meth:`grader.host.session.Session.analyze`)."""
        return self._session.analyze(name, module)

    def probe(self, name: str) -> dict[str, Any]:
        if name not in self._probe_cache:
            self._probe_cache.update(self._session.probe([name]))
        return self._probe_cache.get(name, {"exists": False})

    def take_student_text(self) -> list[str]:
        """Text the sandbox chose since the last call (see :meth:`Session.take_student_text`)."""
        return self._session.take_student_text()

    def require(self, *names: str) -> None:
        """Fail with a message naming the first missing function."""
        for name in names:
            if not self.probe(name).get("exists"):
                raise MissingName(name)

    def sources(self, name: str) -> list[str]:
        """The notebook's source for ``name`` (read on the trusted side, from the file itself).
        These three fail the check (:class:`CheckFailure`) for a notebook the grader cannot read
        in full (more code than ``MAX_CODE_READ``, a cell it cannot parse or transform)."""
        if self._notebook is None:
            return []
        with _read_in_full():
            return definition_sources(self._notebook.code_cells(), name)

    def writes_into_arguments(self, name: str) -> str:
        """The statement of ``name`` (or of a notebook function it hands an argument to) that
        writes into an argument, read on the trusted side; "" when there is none."""
        if self._notebook is None:
            return ""
        with _read_in_full():
            return writes_into_arguments(self._notebook.code_cells(), name)

    def reachable_sources(self, name: str) -> list[str]:
        """The notebook's source for ``name`` and for every notebook definition it names,
        transitively (read on the trusted side)."""
        if self._notebook is None:
            return []
        with _read_in_full():
            return reachable_sources(self._notebook.code_cells(), name)
