"""The trusted side's handle on one submission: its sandboxed worker and its evaluator.

Everything that comes back from the sandbox goes through :func:`grader.wire.protocol.unpack_values`
(values) and :mod:`grader.wire.messages` (typed messages) and is treated as data.  Failures attributable to the submission surface as
:class:`SubmissionError` subclasses carrying a message and a hint for the student.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from grader.errors import (  # noqa: F401 - re-exported: course test files import them from here
    STUDENT_TEXT_SHOWN,
    BadValue,
    CallTimedOut,
    Location,
    MissingName,
    SandboxLost,
    StudentRaised,
    SubmissionError,
    _known_error,
    error_cause,
    first_line,
    showing_student_text,
)
from grader.host.eval_cache import EvalCache, eval_plain
from grader.host.sandbox import Isolation, Limits, SandboxProcess, make_scratch, remove_scratch
from grader.host.xla_cache import XlaCache
from grader.wire import messages, protocol

log = logging.getLogger(__name__)

NOTEBOOK_NAME = "submission.ipynb"
#: The worker's probe of a kernel after an interrupt, and its kill.
PROBE_ALLOWANCE = messages.PROBE_TIMEOUT + 5.0
#: What a reply may take beyond the work it waits for (a loaded machine, a kernel's start).
REPLY_MARGIN = 60.0


@dataclass
class CellRecord:
    index: int
    status: str  # ok | error | timeout | killed | died | skipped
    ename: str = ""
    evalue: str = ""
    location: Location | None = None
    message: str = ""
    duration: float | None = None
    output: str = ""
    strays: int = 0  # processes the cell left running, killed after it

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"index": self.index, "status": self.status}
        if self.strays:
            d["strays"] = self.strays
        for key in ("ename", "evalue", "message", "output"):
            if getattr(self, key):
                d[key] = getattr(self, key)
        if self.duration is not None:
            d["duration"] = self.duration
        if self.location is not None:
            d["line"] = self.location.lineno
            d["source"] = self.location.text
            if self.location.cell is not None and self.location.cell != self.index:
                d["line_cell"] = self.location.cell  # the failing line is in an earlier cell
        return d


LossKind = Literal["time", "crash"]  # why a sandbox was lost: its wall limit, or it died or hung


@dataclass
class ExecutionReport:
    ok: bool
    cells: list[CellRecord] = field(default_factory=list)
    restarts: int = 0
    duration: float = 0.0
    startup: float = 0.0
    message: str = ""
    timed_out: bool = False  # not ok because the submission's wall limit ran out

    def problems(self) -> list[CellRecord]:
        return [c for c in self.cells if c.status != "ok" or c.strays]


@dataclass(frozen=True)
class CallResult:
    values: list[Any]
    mutated: tuple[int, ...]
    elapsed: tuple[float, ...]

    @property
    def value(self) -> Any:
        return self.values[0]


@dataclass(frozen=True)
class CountResult:
    counts: tuple[int, ...]
    values: list[Any]


@dataclass(frozen=True)
class ExportResult:
    module: bytes


def _location(where: messages.Where | None, exec_map: dict[int, int] | None = None) -> Location | None:
    if where is None:
        return None
    cell = where.cell
    if cell is None and exec_map is not None and where.exec_count is not None:
        cell = exec_map.get(where.exec_count)
    return Location(cell, where.lineno, where.text[:300])


def _cell_from(report: messages.CellReport) -> CellRecord:
    return CellRecord(
        index=report.index,
        status=report.status[:20],
        ename=report.ename[:200],
        evalue=report.evalue[:2000],
        location=_location(report.location),
        message=report.message[:1000],
        duration=report.duration,
        output=report.output[:20000],
        strays=report.strays,
    )


class EvaluatorUnavailable(RuntimeError):
    """The evaluator sandbox could not be started: the grader's problem, never a test's verdict
    (:attr:`Session.failure` keeps the cause for the grading process to raise)."""


class Session:
    """One submission's sandbox: execute the notebook, then answer the tests' requests."""

    def __init__(
        self,
        notebook_json: str,
        *,
        limits: Limits | None = None,
        isolation: Isolation = "bwrap",
        env: dict[str, str] | None = None,
        protect: tuple[Path, ...] = (),
        xla_cache: XlaCache | None = None,
        eval_cache: EvalCache | None = None,
    ) -> None:
        self.notebook_json = notebook_json
        # the evaluator's answers kept by trusted code (grader/host/eval_cache.py); with it, the
        # evaluator starts only when an answer is not there (often never, for a correct notebook)
        self.eval_cache = eval_cache
        self.protect = protect
        self.xla_cache = xla_cache  # read-only in both sandboxes (written only while warming it)
        self.limits = limits or Limits()
        self.isolation = isolation
        self.env = env or {}
        self.scratch: Path | None = None
        self.eval_scratch: Path | None = None
        self.worker: SandboxProcess | None = None
        self.evaluator: SandboxProcess | None = None
        self.deadline = float("inf")
        self.report: ExecutionReport | None = None
        self.exec_map: dict[int, int] = {}
        self._lost: str | None = None  # why the sandbox is gone (for messages)
        self.lost_kind: LossKind | None = None  # and what that means for the status (never the text)
        self._next_id = 0
        self._evaluator_ready = False
        self.kernel_restarts = 0
        self.timings: dict[str, float] = {}
        self._student_text: list[str] = []  # text the sandbox chose, since take_student_text()
        self._cell_lines: list[list[str]] | None = None
        self._evaluator_plain = True
        #: what went wrong on the grader's side (the evaluator could not start): the grading
        #: process raises it after the tests, so the record is never a score (grader_error)
        self.failure: BaseException | None = None
        self._spawned: list[SandboxProcess] = []  # every sandbox of this submission, for its CPU time

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def start(self) -> None:
        """Start the sandboxes.  With no notebook yet (``Session("")``) they start and wait, and
        :meth:`load` hands the notebook over later: a pre-started sandbox (``jaxgrade check --watch``)."""
        self.deadline = time.monotonic() + self.limits.wall_timeout
        self._start_worker()
        if self.eval_cache is None:
            self._spawn_evaluator()  # it imports jax while the notebook runs, off the critical path

    def _start_worker(self) -> None:
        if self.scratch is not None:
            remove_scratch(self.scratch)
        self.scratch = make_scratch("jaxgrade-sub-", self.limits.scratch_bytes)
        if self.notebook_json:
            (self.scratch / NOTEBOOK_NAME).write_text(self.notebook_json, encoding="utf-8")
        self.worker = SandboxProcess(
            "grader.sandboxed.worker", self.scratch, self.limits, self.isolation, self.env, self.protect, self.xla_cache
        )
        self._spawned.append(self.worker)
        self.worker.start()
        start = messages.Start(
            cell_timeout=float(self.limits.cell_timeout),
            output_cap=int(self.limits.output_cap),
            max_restarts=int(self.limits.max_restarts),
        )
        self.worker.send(start.encode())

    def load(self, notebook_json: str) -> None:
        """Give a pre-started session its notebook (before :meth:`execute`, which reads it): the
        worker opens the file only when told to execute it.  The submission's time limit starts now."""
        if self.notebook_json or self.report is not None:
            raise RuntimeError("load(): this session has its notebook already")
        if self.worker is None or self.scratch is None:
            raise RuntimeError("load(): the session is not started")
        self.notebook_json = notebook_json
        # a new file, never through a link (the folder is the sandbox uid's, though only our
        # code has run in it so far); 0644: the sandbox's (leased) uid reads it
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(self.scratch / NOTEBOOK_NAME, flags, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(notebook_json)
        self.deadline = time.monotonic() + self.limits.wall_timeout

    def execute(self) -> ExecutionReport:
        """Wait for the kernel, execute every cell, and return what happened.

        A cell that takes the whole sandbox down (it killed the worker: ``os.kill(os.getppid())``,
        ``os.kill(-1, SIGKILL)``) is reported as such, and a fresh sandbox runs the notebook again
        without it, at most ``max_restarts`` times."""
        if self.worker is None:
            self.start()
        assert self.worker is not None
        t0 = time.monotonic()
        startup = 0.0
        skip: list[int] = []
        try:
            while True:
                t_ready = time.monotonic()
                header, _ = self.worker.recv(self._remaining(180.0))
                ready = messages.decode_progress(header, messages.Ready)
                assert isinstance(ready, messages.Ready)
                if not ready.ok:
                    self.report = ExecutionReport(False, message=(ready.error or "kernel failed")[:2000])
                    return self.report
                startup += time.monotonic() - t_ready
                self.worker.send(messages.Execute(NOTEBOOK_NAME, tuple(skip)).encode())
                current: int | None = None
                try:
                    while True:
                        header, _ = self.worker.recv(self._remaining(self.limits.wall_timeout))
                        msg = messages.decode_progress(header, messages.CellStarted, messages.Executed)
                        if not isinstance(msg, messages.CellStarted):
                            assert isinstance(msg, messages.Executed)
                            done = msg
                            break
                        current = msg.index
                except (protocol.ChannelTimeout, messages.MessageError):
                    raise  # a malformed message is not a cell that killed the worker
                except protocol.ProtocolError:
                    if current is None or current in skip or len(skip) >= self.limits.max_restarts:
                        raise
                    skip.append(current)  # that cell killed the worker: run the notebook again without it
                    self.worker.kill()
                    self._start_worker()
                    continue
                break
            cells = [_cell_from(c) for c in done.cells][:10_000]
            for index in skip:
                cells = [c for c in cells if c.index != index]
                cells.append(
                    CellRecord(
                        index=index,
                        status="died",
                        message="this cell killed the grader's process in the sandbox (os.kill of its parent, "
                        "of its process group or of every process): a fresh sandbox ran the notebook again "
                        "without this cell",
                    )
                )
            cells.sort(key=lambda c: c.index)
            self.exec_map = dict(done.exec_map)
            self.report = ExecutionReport(
                ok=True,
                cells=cells,
                restarts=done.restarts + len(skip),
                duration=time.monotonic() - t0 - startup,
                startup=startup,
            )
            if not done.alive:
                self._lost = "the kernel could not be restarted after it died"
                self.lost_kind = "crash"
        except protocol.ChannelTimeout:
            self._lose(
                f"the notebook did not finish within the {self.limits.wall_timeout:g}s limit for a submission", "time"
            )
            self.report = ExecutionReport(False, message=self._lost or "", timed_out=True)
        except protocol.ProtocolError as exc:
            self._lose(f"the sandbox stopped while running the notebook ({exc})")
            self.report = ExecutionReport(False, message=self._lost or "")
        self.timings["execute"] = time.monotonic() - t0
        return self.report

    def close(self) -> None:
        """Kill both sandboxes and remove their scratch folders; safe to call again.  Nothing in
        a sandbox is worth a polite shutdown (no state is kept, and the cgroup's figures are read
        at the kill), and waiting for one cost 0.23 s of every submission's wall time: under
        bubblewrap the kill takes the sandbox's whole PID namespace and cgroup.  In the fallback
        mode (no namespace) the kernel is in a session of its own (jupyter_client starts it so),
        out of the worker's process group, and only the environment marker finds it: there the
        worker is first told to stop (its pipe closed: it kills its kernel and exits), for 2 s at most."""
        worker, evaluator, scratch = self.worker, self.evaluator, (self.scratch, self.eval_scratch)
        self.worker = self.evaluator = self.scratch = self.eval_scratch = None
        # every step runs whatever an earlier one raised (Ctrl-C included): kills, then folders
        with contextlib.ExitStack() as cleanup:
            for d in scratch:
                if d is not None:
                    cleanup.callback(remove_scratch, d)
            for proc in (evaluator, worker):
                if proc is not None:
                    cleanup.callback(proc.kill)
            if self.isolation == "process" and worker is not None and worker.proc is not None and worker.alive():
                with contextlib.suppress(Exception):
                    if worker.proc.stdin is not None:
                        worker.proc.stdin.close()
                    worker.proc.wait(timeout=2)

    def cpu_seconds(self) -> float | None:
        """CPU time of every process of this submission's sandboxes (their cgroups; None when
        not accounted here); meaningful after :meth:`close`."""
        used = [p.cpu_seconds for p in self._spawned]
        return None if not used or any(u is None for u in used) else sum(u for u in used if u is not None)

    def oom_kills(self) -> int:
        return sum(p.oom_kills for p in self._spawned)

    def peak_memory(self) -> int | None:
        """The most memory one of this submission's sandboxes held (bytes; None when not
        accounted here); meaningful after :meth:`close`."""
        peaks = [p.peak_memory for p in self._spawned if p.peak_memory is not None]
        return max(peaks) if peaks else None

    # ------------------------------------------------------------------ requests
    def _remaining(self, timeout: float) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise self._out_of_time()
        return min(timeout, left)

    def _out_of_time(self) -> SandboxLost:
        """The submission's wall limit is spent: the sandbox is lost for time (the record says
        ``timeout``); the error to raise."""
        self._lose(f"the submission used up its {self.limits.wall_timeout:g}s time limit", "time")
        return SandboxLost(self._lost or "")

    @property
    def lost(self) -> str | None:
        """Why the sandbox is gone (for the record's message), or None; :attr:`lost_kind` says
        what it means for the status."""
        return self._lost

    def _lose(self, why: str, kind: LossKind = "crash") -> None:
        if self._lost is None:
            self._lost, self.lost_kind = why, kind
        if self.worker is not None:
            self.worker.kill()

    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def _round_trip(
        self,
        proc: SandboxProcess,
        request: messages.KernelRequest | messages.EvaluatorRequest,
        values: dict[str, Any],
        timeout: float,
        accept: tuple[type[messages.Reply], ...],
    ) -> tuple[messages.Reply, dict[str, Any]]:
        """Send ``request`` with ``values`` to ``proc`` and read its reply: the one sequence both
        sandboxes answer by.  Raises :class:`protocol.ChannelTimeout` after ``timeout``,
        :class:`protocol.ProtocolError` for a frame, an id or values that are not valid, and
        :class:`messages.MessageError` (checked first: it is a ProtocolError) for a header that is
        not a reply of a kind in ``accept``."""
        frag, payload = protocol.pack_values(values)
        return self._decode(*self._exchange(proc, request, frag, payload, timeout), accept)

    @staticmethod
    def _exchange(
        proc: SandboxProcess,
        request: messages.KernelRequest | messages.EvaluatorRequest,
        frag: dict[str, Any],
        payload: bytes,
        timeout: float,
    ) -> tuple[dict[str, Any], bytes]:
        """Send a packed request and read the frame that answers it (its id checked)."""
        proc.send({**request.encode(), **frag}, payload)
        header, rpayload = proc.recv(timeout)
        if not messages.answers(header, request):
            raise protocol.ProtocolError("response does not answer the request")
        return header, rpayload

    @staticmethod
    def _decode(
        header: dict[str, Any], payload: bytes, accept: tuple[type[messages.Reply], ...]
    ) -> tuple[messages.Reply, dict[str, Any]]:
        """A reply frame's typed message and values (a live one, or one the evaluator cache kept)."""
        out = protocol.unpack_values(header, payload) if "values" in header else {}
        return messages.decode_reply(header, *accept), out

    def _request(
        self,
        request: messages.KernelRequest,
        values: dict[str, Any],
        answer: type[messages.Reply],
        malformed: str,
    ) -> tuple[messages.Reply, dict[str, Any]]:
        """One request to the kernel: its reply (of kind ``answer`` or a failure kind) and values.
        A reply that is not one of those is :class:`BadValue` (``malformed``)."""
        if self._lost:
            raise SandboxLost(f"not run: {self._lost}")
        assert self.worker is not None
        self._sent_timeout = request.timeout  # what a timeout message reports (never the sandbox's echo)
        try:
            reply, out = self._round_trip(
                self.worker, request, values, self._remaining(self._reply_within(request)), (answer, *messages.FAILURES)
            )
        except messages.MessageError:
            raise BadValue(malformed) from None
        except protocol.ChannelTimeout:
            if time.monotonic() >= self.deadline:  # the submission's wall limit, not a hang
                raise self._out_of_time() from None
            self._lose("the sandbox stopped answering")
            raise SandboxLost(self._lost or "") from None
        except protocol.ProtocolError as exc:
            self._lose(f"the sandbox sent something that is not valid data ({exc})")
            raise SandboxLost(self._lost or "") from None
        if isinstance(reply, (messages.TimedOut, messages.Died)) and reply.restarted is True:
            self.kernel_restarts += 1
        if reply.exec_map is not None:
            self.exec_map = dict(reply.exec_map)
        return reply, out

    def _reply_within(self, request: messages.KernelRequest) -> float:
        """Seconds to wait for the worker's reply to ``request``.  The worker applies the timeout
        itself; a kernel stuck past it is probed, replaced and the notebook replayed before the
        reply, and a replay takes about as long as the kernel's first start and the notebook's
        run did (a notebook of slow cells: more than any fixed allowance)."""
        replay = self.report.startup + self.report.duration if self.report is not None else 0.0
        # a replayed cell may get the fresh kernel stuck in turn (a cell timeout, a probe and
        # another replay), as often as restarts are allowed; the wall deadline caps it all
        restart = PROBE_ALLOWANCE + self.limits.cell_timeout + replay
        return request.timeout + restart * max(1, self.limits.max_restarts) + REPLY_MARGIN

    def take_student_text(self) -> list[str]:
        """Every piece of text the sandbox chose (error messages, unknown error class names) since
        the last call: a hidden test's message must not repeat any of it, since a student who
        controls the kernel could put the hidden inputs there."""
        out, self._student_text = self._student_text, []
        return out

    def _trusted_location(self, loc: Location | None) -> Location | None:
        """``loc`` with the line's text read from the submitted notebook (the kernel's copy of the
        text is not trusted); the kernel's text is kept only as student text."""
        if loc is None:
            return None
        if self._cell_lines is None:
            try:
                cells = json.loads(self.notebook_json).get("cells", [])
                self._cell_lines = [
                    (
                        "".join(c["source"]) if isinstance(c.get("source"), list) else str(c.get("source", ""))
                    ).splitlines()
                    if c.get("cell_type") == "code"
                    else []
                    for c in cells
                ]
            except (ValueError, AttributeError, TypeError, KeyError):
                self._cell_lines = []
        lines = self._cell_lines[loc.cell] if loc.cell is not None and 0 <= loc.cell < len(self._cell_lines) else None
        if lines is not None and loc.lineno is not None and 0 < loc.lineno <= len(lines):
            return Location(loc.cell, loc.lineno, lines[loc.lineno - 1].strip()[:300])
        if loc.text:
            self._student_text.append(loc.text)
        # not a line of the submitted notebook: the numbers and the text are the kernel's
        return loc if STUDENT_TEXT_SHOWN.get() else None

    def _raise_for(self, name: str, reply: messages.Reply, what: str = "call", args: tuple[Any, ...] = ()) -> None:
        """Raise what a failure reply means for the student; return for a success reply."""
        from grader.grading.hints import find_hint, hint_for

        match reply:
            case messages.Missing():
                restarts = (self.report.restarts if self.report else 0) + self.kernel_restarts
                if restarts:
                    raise MissingName(
                        name,
                        f"The kernel had to be restarted {restarts} time(s) after a crash or a hang (see the cell "
                        f"errors), and `{name}` was not defined again when the notebook's cells were replayed.",
                    )
                raise MissingName(name)
            case messages.TimedOut():
                extra = "" if reply.restarted is None else " (the kernel had to be restarted)"
                # the limit the trusted side sent with the request (the sandbox's reply could carry data)
                ran = getattr(self, "_sent_timeout", self.limits.call_timeout)
                raise CallTimedOut(
                    f"`{name}` did not finish within {ran:g}s{extra}: it is either too slow for that limit "
                    "or stuck in a loop that never ends",
                    "If it is correct but slow, do the work in fewer, larger calls: draw all the numbers at "
                    "once (e.g. `jax.random.normal(key, (num_samples, *shape))`) or map with `jax.vmap` instead of "
                    "calling JAX once per element in a Python loop. Otherwise look for a loop whose condition "
                    "never becomes false.",
                )
            case messages.Died():
                raise SandboxLost(
                    f"the kernel died during the {what} of `{name}` (os._exit, a crash, or out of memory)"
                    + ("; it was restarted for the remaining tests" if reply.restarted else "")
                )
            case messages.Dead():
                self._student_text.append(reply.why[:500])
                raise SandboxLost(
                    reply.why[:500] if STUDENT_TEXT_SHOWN.get() else f"the sandbox could not run the {what} of `{name}`"
                )
            case messages.Unsendable():
                self._student_text.append(reply.why[:300])
                raise BadValue(
                    f"`{name}` returned something that is not an array or a container of arrays"
                    + (": " + reply.why[:300] if STUDENT_TEXT_SHOWN.get() else ""),
                    "Return jax.numpy arrays (or numbers, or lists/tuples/dicts of them).",
                )
            case messages.Raised():
                ename = reply.ename[:200]
                evalue = reply.evalue[:4000]
                self._student_text.extend([evalue, *([] if _known_error(ename) else [ename])])
                loc = self._trusted_location(_location(reply.location, self.exec_map))
                shown = ename if _known_error(ename) or STUDENT_TEXT_SHOWN.get() else "an error"
                hint = (
                    hint_for(shown, evalue, loc, name=name) if shown == ename else hint_for(shown, "", loc, name=name)
                )
                if args and find_hint(ename, evalue) is None:  # nothing to teach but the location: name the inputs
                    hint = (hint + " " if hint else "") + f"It failed on inputs {_shapes(args)}: check each "
                    hint += "shape and dtype against the contract, and what your code does with it."
                raise StudentRaised(name, ename, evalue, loc, hint)
            case _:
                return  # the request's own success kind (decode_reply let no other kind through)

    def probe(self, names: list[str]) -> dict[str, dict[str, Any]]:
        request = messages.Probe(self._new_id(), float(self.limits.call_timeout), tuple(names))
        malformed = "the sandbox sent a malformed probe response"
        reply, _ = self._request(request, {}, messages.Probed, malformed)
        if not isinstance(reply, messages.Probed):
            raise BadValue(malformed)
        return {k: v.as_dict() for k, v in reply.info.items()}

    def call(
        self,
        name: str,
        *args: Any,
        repeat: int = 1,
        readonly: bool = False,
        key_reuse: bool = False,
        timeout: float | None = None,
        **kwargs: Any,
    ) -> CallResult:
        request = messages.Call(
            self._new_id(),
            float(timeout or self.limits.call_timeout),
            name=name,
            repeat=int(repeat),
            readonly=bool(readonly),
            key_reuse=bool(key_reuse),
        )
        reply, out = self._request(
            request,
            {"args": list(args), "kwargs": dict(kwargs)},
            messages.Called,
            f"the sandbox answered the call of `{name}` with a malformed response",
        )
        self._raise_for(name, reply, args=args + tuple(kwargs.values()))
        assert isinstance(reply, messages.Called)
        values = [out.get(f"result{i}") for i in range(repeat)]
        if any(f"result{i}" not in out for i in range(repeat)):
            raise BadValue(f"the sandbox did not return every result of `{name}`")
        return CallResult(values=values, mutated=reply.mutated, elapsed=reply.elapsed)

    def count(
        self,
        name: str,
        calls: list[tuple[tuple[Any, ...], dict[str, Any]]],
        how: str,
        static: tuple[str, ...] = (),
    ) -> CountResult:
        """Run ``calls`` in order and count, per call, traces (``how="traces"``: under one
        ``jax.jit`` of a counting wrapper) or XLA compilations (``how="compiles"``)."""
        payload = {"calls": [{"args": list(a), "kwargs": dict(k)} for a, k in calls]}
        request = messages.Count(
            self._new_id(),
            float(self.limits.call_timeout * max(1, len(calls))),
            name=name,
            how=how,
            static=tuple(static),
        )
        reply, out = self._request(
            request, payload, messages.Counted, f"the sandbox answered the call of `{name}` with a malformed response"
        )
        self._raise_for(name, reply)
        assert isinstance(reply, messages.Counted)
        if len(reply.counts) != len(calls):
            raise BadValue(f"the sandbox sent malformed counts for `{name}`")
        return CountResult(reply.counts, [out.get(f"result{i}") for i in range(len(calls))])

    def export(
        self,
        name: str,
        specs: list[tuple[str, str]] | None = None,
        static: dict[str, Any] | None = None,
        *,
        example: tuple[Any, ...] | None = None,
        vjp_order: int = 0,
    ) -> ExportResult:
        """Export ``name`` with ``jax.export``: for ``specs`` (shape strings, possibly symbolic,
        and dtypes), or for the shapes and dtypes of ``example`` arguments (any pytrees).  Only
        shapes and dtypes reach the sandbox (:func:`protocol.abstract`), never the example's
        values.  ``vjp_order=1`` serializes the VJP too, so the evaluator can differentiate it."""
        values: dict[str, Any] = {"static": dict(static or {})}
        if example is not None:
            values["example"] = [protocol.abstract(a) for a in example]
        request = messages.Export(
            self._new_id(),
            float(self.limits.call_timeout),
            name=name,
            specs=tuple((s[0], s[1]) for s in specs or []),
            vjp_order=int(vjp_order),
        )
        reply, out = self._request(
            request, values, messages.Exported, f"the sandbox answered the export of `{name}` with a malformed response"
        )
        self._raise_for(name, reply, "export")
        module = out.get("module")
        if type(module) is not np.ndarray or module.dtype != np.uint8 or module.ndim != 1:
            raise BadValue(f"the sandbox returned no exported module for `{name}`")
        return ExportResult(module.tobytes())

    # ------------------------------------------------------------------ evaluator
    def _spawn_evaluator(self) -> None:
        if self.eval_scratch is None:
            self.eval_scratch = make_scratch("jaxgrade-eval-", self.limits.scratch_bytes)
        self.evaluator = SandboxProcess(
            "grader.sandboxed.evaluator",
            self.eval_scratch,
            self.limits,
            self.isolation,
            self.env,
            self.protect,
            self.xla_cache,
        )
        self._spawned.append(self.evaluator)
        self.evaluator.start()
        self._evaluator_ready = False
        self._evaluator_plain = True  # every module it ran so far is plain (eval_cache.plain)

    def _evaluator(self) -> SandboxProcess:
        if self.evaluator is not None and self.evaluator.alive() and self._evaluator_ready:
            return self.evaluator
        if self.evaluator is None or not self.evaluator.alive():
            if self.evaluator is not None:
                self.evaluator.kill()
            self._spawn_evaluator()
        assert self.evaluator is not None
        try:
            header, _ = self.evaluator.recv(self._remaining(120.0))  # its start counts in the wall limit too
        except protocol.ChannelTimeout:
            if time.monotonic() < self.deadline:
                raise
            self.evaluator.kill()
            raise self._out_of_time() from None
        try:
            ready = messages.decode_progress(header, messages.Ready)
        except messages.MessageError:
            raise RuntimeError("the evaluator failed to start") from None
        if not isinstance(ready, messages.Ready) or not ready.ok:
            raise RuntimeError("the evaluator failed to start")
        self._evaluator_ready = True
        return self.evaluator

    def evaluate(
        self,
        name: str,
        module: bytes,
        *args: Any,
        timeout: float | None = None,
        batch_axes: tuple[tuple[int, ...], ...] = (),
    ) -> tuple[Any, dict[str, Any]]:
        """Run an exported module on inputs in the evaluator; returns (value, info).

        ``info`` holds ``elapsed``, ``nr_devices``, ``custom_calls`` and ``analysis`` (see
        :meth:`analyze`), every field type-checked here.  With ``batch_axes`` (for each argument,
        the axes that hold the batch's examples), it also holds ``per_example_ops``: the
        operations that work on examples taken out of the batch, at these arguments' shapes
        (:func:`grader.sandboxed.evaluator.per_example_ops`), or ``per_example_error``."""
        request = messages.Eval(self._new_id(), tuple(tuple(a) for a in batch_axes))
        return self._evaluator_request(request, name, module, args, timeout)

    def evaluate_grad(
        self, name: str, module: bytes, argnum: int, *args: Any, timeout: float | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """The gradient of an exported module's scalar result with respect to ``args[argnum]``,
        computed in the evaluator (``jax.grad`` of ``exp.call``); the module must have been
        exported with ``vjp_order=1``.  Returns (gradient, info) like :meth:`evaluate`."""
        if type(argnum) is not int or not 0 <= argnum < len(args):
            raise ValueError(f"argnum {argnum!r} does not name one of the {len(args)} arguments")
        return self._evaluator_request(messages.Grad(self._new_id(), argnum), name, module, args, timeout)

    def analyze(self, name: str, module: bytes, timeout: float | None = None) -> dict[str, Any]:
        """What the module itself says, read from its StableHLO in the evaluator (student code
        never runs there): ``nr_devices`` (int), ``custom_calls`` (list of str), ``loops`` and
        ``batch_loops`` (int: ``while`` loops, and those whose trip count is not a compile-time
        constant), ``whole_call`` (bool: the function exported was itself jitted),
        ``collectives`` (list of str: ``all_reduce``...), ``per_device`` (bool: split into
        per-device programs, as ``pmap``/``shard_map`` lower), ``vmapped`` (bool), where a
        module for several devices does its work (``outside_ops``: int, ``outside_op``: str,
        ``whole_inputs``: list of str, ``rows_kept``: bool; see
        :func:`grader.sandboxed.evaluator.outside_per_device`), and ``analysis_error`` (str)
        when the module could not be analysed."""
        return self._evaluator_request(messages.Analyze(self._new_id()), name, module, (), timeout)[1]["analysis"]

    def _evaluator_request(
        self,
        request: messages.EvaluatorRequest,
        name: str,
        module: bytes,
        args: tuple[Any, ...],
        timeout: float | None,
    ) -> tuple[Any, dict[str, Any]]:
        limit = timeout or self.limits.call_timeout
        self._remaining(limit)  # past the submission's wall limit nothing is answered, kept or not
        values = {"module": np.frombuffer(module, dtype=np.uint8), "args": list(args)}
        frag, payload = protocol.pack_values(values)
        key = EvalCache.key(request.encode(), frag, payload) if self.eval_cache is not None else ""
        kept = self.eval_cache.get(key) if self.eval_cache is not None else None
        if kept is not None:
            try:  # through the same checks as a live reply; an entry that fails them is a miss
                return self._evaluated(*self._decode({**kept[0], "id": request.id}, kept[1], (messages.Evaluated,)))
            except protocol.ProtocolError:
                self.eval_cache.damaged(key)
        try:
            ev = self._evaluator()
        except SandboxLost:  # the wall limit came while it started
            raise
        except Exception as exc:  # starting it is ours to get right (lazily, with the cache): not the student's test
            self.failure = self.failure or exc
            raise EvaluatorUnavailable(f"the grader could not start its evaluator sandbox ({exc})") from exc
        wait = self._remaining(limit)  # the submission's wall limit bounds the evaluator's time too
        try:
            header, rpayload = self._exchange(ev, request, frag, payload, wait)
            reply, out = self._decode(header, rpayload, (messages.Evaluated, messages.Raised))
        except protocol.ChannelTimeout:
            ev.kill()
            if time.monotonic() >= self.deadline:  # the submission's wall limit, not this module's
                raise self._out_of_time() from None
            raise CallTimedOut(
                f"the compiled `{name}` did not finish within {limit:g}s",
                "A lax.while_loop whose condition never becomes false runs forever under jit.",
            ) from None
        except protocol.ProtocolError as exc:  # a MessageError too: the evaluator is ours, not the student's
            ev.kill()
            raise BadValue(f"the compiled `{name}` could not be evaluated ({exc})") from None
        if not (isinstance(reply, messages.Evaluated) and eval_plain(reply)):
            self._evaluator_plain = False  # nothing it answers from now on is kept
        if isinstance(reply, messages.Raised):
            # the module came from the kernel: its name, platforms and so the error's text are the student's
            said = f"{reply.ename}: {first_line(reply.evalue[:4000])}"
            self._student_text.append(said)
            raise SubmissionError(
                f"the compiled `{name}` failed to run" + (f": {said}" if STUDENT_TEXT_SHOWN.get() else "")
            )
        assert isinstance(reply, messages.Evaluated)
        if self.eval_cache is not None and self._evaluator_plain:
            # kept only from an evaluator that never ran anything but plain modules, each of which
            # answered: a module that could leave state behind (a custom call, a failed analysis, an
            # error) must not decide what a classmate's identical module is answered
            self.eval_cache.put(key, header, rpayload)
        return self._evaluated(reply, out)

    @staticmethod
    def _evaluated(reply: messages.Reply, out: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        assert isinstance(reply, messages.Evaluated)
        info: dict[str, Any] = {}
        if reply.elapsed is not None:
            info["elapsed"] = reply.elapsed
        info["nr_devices"] = reply.nr_devices
        if reply.custom_calls is not None:
            info["custom_calls"] = list(reply.custom_calls)
        info["analysis"] = reply.analysis
        if reply.per_example_ops is not None:
            info["per_example_ops"] = reply.per_example_ops
        if reply.per_example_error is not None:
            info["per_example_error"] = reply.per_example_error
        return out.get("result"), info


#: Error classes whose names a hidden test's message may show (any other name is the student's text).
def _shapes(args: tuple[Any, ...]) -> str:
    """``(7, 11) float32, (7, 3) float32``: what a failing call was given (no values)."""
    parts = []
    for a in args:
        if isinstance(a, (np.ndarray, np.generic)):
            parts.append(f"{tuple(np.shape(a))} {np.asarray(a).dtype}")
        elif isinstance(a, protocol.PRNGKeyData):
            parts.append("a PRNG key")
        elif isinstance(a, (list, tuple, dict)):
            parts.append(f"a {type(a).__name__} of {len(a)}")
        else:
            parts.append(type(a).__name__)
    return ", ".join(parts)


#: The analysis fields and their types, and their check (both in :mod:`grader.wire.messages`).
ANALYSIS_FIELDS = messages.ANALYSIS_FIELDS
_analysis = messages.decode_analysis
