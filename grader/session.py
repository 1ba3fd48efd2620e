"""The trusted side's handle on one submission: its sandboxed worker and its evaluator.

Everything that comes back from the sandbox goes through :func:`grader.wire.protocol.unpack_values`
and is treated as data.  Failures attributable to the submission surface as
:class:`SubmissionError` subclasses carrying a message and a hint for the student.
"""

from __future__ import annotations

import json
import logging
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
from grader.sandbox import Isolation, Limits, SandboxProcess, make_scratch, remove_scratch
from grader.wire import protocol
from grader.xla_cache import XlaCache

log = logging.getLogger(__name__)

NOTEBOOK_NAME = "submission.ipynb"


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


def _location(raw: Any, exec_map: dict[int, int] | None = None) -> Location | None:
    if not isinstance(raw, dict):
        return None
    cell = raw.get("cell")
    if cell is None and exec_map is not None and isinstance(raw.get("exec_count"), int):
        cell = exec_map.get(raw["exec_count"])
    lineno = raw.get("lineno")
    return Location(
        cell if isinstance(cell, int) else None,
        lineno if isinstance(lineno, int) else None,
        str(raw.get("text", ""))[:300],
    )


def _cell_from(raw: Any) -> CellRecord:
    if not isinstance(raw, dict) or not isinstance(raw.get("index"), int):
        raise protocol.ProtocolError("bad cell record")
    loc = raw.get("location")
    return CellRecord(
        index=raw["index"],
        status=str(raw.get("status", "error"))[:20],
        ename=str(raw.get("ename", ""))[:200],
        evalue=str(raw.get("evalue", ""))[:2000],
        location=_location(loc) if loc else None,
        message=str(raw.get("message", ""))[:1000],
        duration=float(raw["duration"]) if isinstance(raw.get("duration"), (int, float)) else None,
        output=str(raw.get("output", ""))[:20000],
        strays=raw["strays"] if type(raw.get("strays")) is int else 0,
    )


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
    ) -> None:
        self.notebook_json = notebook_json
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
        self._spawned: list[SandboxProcess] = []  # every sandbox of this submission, for its CPU time

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def start(self) -> None:
        self.deadline = time.monotonic() + self.limits.wall_timeout
        self._start_worker()
        self._spawn_evaluator()  # it imports jax while the notebook runs, off the critical path

    def _start_worker(self) -> None:
        if self.scratch is not None:
            remove_scratch(self.scratch)
        self.scratch = make_scratch("jaxgrade-sub-", self.limits.scratch_bytes)
        (self.scratch / NOTEBOOK_NAME).write_text(self.notebook_json, encoding="utf-8")
        self.worker = SandboxProcess(
            "grader.sandboxed.worker", self.scratch, self.limits, self.isolation, self.env, self.protect, self.xla_cache
        )
        self._spawned.append(self.worker)
        self.worker.start()
        self.worker.send(
            {
                "op": "start",
                "cell_timeout": self.limits.cell_timeout,
                "output_cap": self.limits.output_cap,
                "max_restarts": self.limits.max_restarts,
            }
        )

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
                ready, _ = self.worker.recv(self._remaining(180.0))
                if not ready.get("ok"):
                    self.report = ExecutionReport(False, message=str(ready.get("error", "kernel failed"))[:2000])
                    return self.report
                startup += time.monotonic() - t_ready
                self.worker.send({"op": "execute", "notebook": NOTEBOOK_NAME, "skip": skip})
                current: int | None = None
                try:
                    while True:
                        msg, _ = self.worker.recv(self._remaining(self.limits.wall_timeout))
                        if msg.get("op") != "cell":
                            done = msg
                            break
                        current = msg.get("index") if type(msg.get("index")) is int else None
                except protocol.ChannelTimeout:
                    raise
                except protocol.ProtocolError:
                    if current is None or current in skip or len(skip) >= self.limits.max_restarts:
                        raise
                    skip.append(current)  # that cell killed the worker: run the notebook again without it
                    self.worker.kill()
                    self._start_worker()
                    continue
                break
            cells = [_cell_from(c) for c in done.get("cells", [])][:10_000]
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
            self.exec_map = _exec_map(done.get("exec_map"))
            self.report = ExecutionReport(
                ok=True,
                cells=cells,
                restarts=(int(done.get("restarts", 0)) if isinstance(done.get("restarts"), int) else 0) + len(skip),
                duration=time.monotonic() - t0 - startup,
                startup=startup,
            )
            if not done.get("alive", True):
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
        for proc in (self.worker, self.evaluator):
            if proc is not None:
                if proc.alive():
                    try:
                        proc.send({"op": "shutdown"})
                        proc.proc.wait(timeout=2)  # type: ignore[union-attr]
                    except Exception:
                        pass
                proc.kill()
        self.worker = self.evaluator = None
        for d in (self.scratch, self.eval_scratch):
            if d is not None:
                remove_scratch(d)

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
            self._lose(f"the submission used up its {self.limits.wall_timeout:g}s time limit", "time")
            raise SandboxLost(self._lost or "")
        return min(timeout, left)

    def _lose(self, why: str, kind: LossKind = "crash") -> None:
        if self._lost is None:
            self._lost, self.lost_kind = why, kind
        if self.worker is not None:
            self.worker.kill()

    def _request(
        self, op: str, values: dict[str, Any], timeout: float, **fields: Any
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        if self._lost:
            raise SandboxLost(f"not run: {self._lost}")
        assert self.worker is not None
        self._next_id += 1
        rid = self._next_id
        frag, payload = protocol.pack_values(values)
        header = {"op": op, "id": rid, "timeout": timeout, **fields, **frag}
        self._sent_timeout = timeout  # what a timeout message reports (never the sandbox's echo)
        try:
            self.worker.send(header, payload)
            # the worker itself applies `timeout`; allow it time to interrupt, probe and replay
            resp, rpayload = self.worker.recv(self._remaining(timeout + 60.0 + self.limits.cell_timeout))
            if resp.get("id") != rid:
                raise protocol.ProtocolError("response does not answer the request")
            out = protocol.unpack_values(resp, rpayload) if "values" in resp else {}
        except protocol.ChannelTimeout:
            if time.monotonic() >= self.deadline:  # the submission's wall limit, not a hang
                self._lose(f"the submission used up its {self.limits.wall_timeout:g}s time limit", "time")
            else:
                self._lose("the sandbox stopped answering")
            raise SandboxLost(self._lost or "") from None
        except protocol.ProtocolError as exc:
            self._lose(f"the sandbox sent something that is not valid data ({exc})")
            raise SandboxLost(self._lost or "") from None
        if resp.get("restarted") is True:
            self.kernel_restarts += 1
        if isinstance(resp.get("exec_map"), dict):
            self.exec_map = _exec_map(resp["exec_map"])
        return resp, out

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

    def _raise_for(self, name: str, resp: dict[str, Any], what: str = "call", args: tuple[Any, ...] = ()) -> None:
        from grader.hints import find_hint, hint_for

        if resp.get("ok") is True:
            return
        if "missing" in resp:
            restarts = (self.report.restarts if self.report else 0) + self.kernel_restarts
            if restarts:
                raise MissingName(
                    name,
                    f"The kernel had to be restarted {restarts} time(s) after a crash or a hang (see the cell "
                    f"errors), and `{name}` was not defined again when the notebook's cells were replayed.",
                )
            raise MissingName(name)
        if resp.get("timeout"):
            extra = "" if resp.get("restarted") is None else " (the kernel had to be restarted)"
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
        if resp.get("died"):
            raise SandboxLost(
                f"the kernel died during the {what} of `{name}` (os._exit, a crash, or out of memory)"
                + ("; it was restarted for the remaining tests" if resp.get("restarted") else "")
            )
        if "dead" in resp:
            self._student_text.append(str(resp["dead"])[:500])
            raise SandboxLost(
                str(resp["dead"])[:500]
                if STUDENT_TEXT_SHOWN.get()
                else f"the sandbox could not run the {what} of `{name}`"
            )
        if "unsendable" in resp:
            self._student_text.append(str(resp["unsendable"])[:300])
            raise BadValue(
                f"`{name}` returned something that is not an array or a container of arrays"
                + (": " + str(resp["unsendable"])[:300] if STUDENT_TEXT_SHOWN.get() else ""),
                "Return jax.numpy arrays (or numbers, or lists/tuples/dicts of them).",
            )
        err = resp.get("error")
        if isinstance(err, dict):
            ename = str(err.get("ename", "Exception"))[:200]
            evalue = str(err.get("evalue", ""))[:4000]
            self._student_text.extend([evalue, *([] if _known_error(ename) else [ename])])
            loc = self._trusted_location(_location(err.get("location"), self.exec_map))
            shown = ename if _known_error(ename) or STUDENT_TEXT_SHOWN.get() else "an error"
            hint = hint_for(shown, evalue, loc, name=name) if shown == ename else hint_for(shown, "", loc, name=name)
            if args and find_hint(ename, evalue) is None:  # nothing to teach but the location: name the inputs
                hint = (hint + " " if hint else "") + f"It failed on inputs {_shapes(args)}: check each shape "
                hint += "against the contract, and what your code does with it."
            raise StudentRaised(name, ename, evalue, loc, hint)
        raise BadValue(f"the sandbox answered the {what} of `{name}` with a malformed response")

    def probe(self, names: list[str]) -> dict[str, dict[str, Any]]:
        resp, _ = self._request("probe", {}, self.limits.call_timeout, names=list(names))
        info = resp.get("info")
        if not resp.get("ok") or not isinstance(info, dict):
            raise BadValue("the sandbox sent a malformed probe response")
        return {str(k): dict(v) for k, v in info.items() if isinstance(v, dict)}

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
        resp, out = self._request(
            "call",
            {"args": list(args), "kwargs": dict(kwargs)},
            timeout or self.limits.call_timeout,
            name=name,
            repeat=repeat,
            readonly=readonly,
            key_reuse=key_reuse,
        )
        self._raise_for(name, resp, args=args + tuple(kwargs.values()))
        values = [out.get(f"result{i}") for i in range(repeat)]
        if any(f"result{i}" not in out for i in range(repeat)):
            raise BadValue(f"the sandbox did not return every result of `{name}`")
        mutated = resp.get("mutated", [])
        elapsed = resp.get("elapsed", [])
        return CallResult(
            values=values,
            mutated=tuple(i for i in mutated if type(i) is int) if isinstance(mutated, list) else (),
            elapsed=tuple(float(e) for e in elapsed if isinstance(e, (int, float)))
            if isinstance(elapsed, list)
            else (),
        )

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
        resp, out = self._request(
            "count", payload, self.limits.call_timeout * max(1, len(calls)), name=name, how=how, static=list(static)
        )
        self._raise_for(name, resp)
        counts = resp.get("counts")
        if not isinstance(counts, list) or len(counts) != len(calls) or not all(type(c) is int for c in counts):
            raise BadValue(f"the sandbox sent malformed counts for `{name}`")
        return CountResult(tuple(counts), [out.get(f"result{i}") for i in range(len(calls))])

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
        resp, out = self._request(
            "export",
            values,
            self.limits.call_timeout,
            name=name,
            specs=[list(s) for s in specs or []],
            vjp_order=int(vjp_order),
        )
        self._raise_for(name, resp, "export")
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

    def _evaluator(self) -> SandboxProcess:
        if self.evaluator is not None and self.evaluator.alive() and self._evaluator_ready:
            return self.evaluator
        if self.evaluator is None or not self.evaluator.alive():
            if self.evaluator is not None:
                self.evaluator.kill()
            self._spawn_evaluator()
        assert self.evaluator is not None
        ready, _ = self.evaluator.recv(120.0)
        if not ready.get("ok"):
            raise RuntimeError("the evaluator failed to start")
        self._evaluator_ready = True
        return self.evaluator

    def evaluate(
        self, name: str, module: bytes, *args: Any, timeout: float | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Run an exported module on inputs in the evaluator; returns (value, info).

        ``info`` holds ``elapsed``, ``nr_devices``, ``custom_calls`` and ``analysis`` (see
        :meth:`analyze`), every field type-checked here."""
        return self._evaluator_request("eval", name, module, args, timeout)

    def evaluate_grad(
        self, name: str, module: bytes, argnum: int, *args: Any, timeout: float | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """The gradient of an exported module's scalar result with respect to ``args[argnum]``,
        computed in the evaluator (``jax.grad`` of ``exp.call``); the module must have been
        exported with ``vjp_order=1``.  Returns (gradient, info) like :meth:`evaluate`."""
        if type(argnum) is not int or not 0 <= argnum < len(args):
            raise ValueError(f"argnum {argnum!r} does not name one of the {len(args)} arguments")
        return self._evaluator_request("grad", name, module, args, timeout, argnum=argnum)

    def analyze(self, name: str, module: bytes, timeout: float | None = None) -> dict[str, Any]:
        """What the module itself says, read from its StableHLO in the evaluator (student code
        never runs there): ``nr_devices`` (int), ``custom_calls`` (list of str), ``loops`` and
        ``batch_loops`` (int: ``while`` loops, and those whose trip count is not a compile-time
        constant), ``whole_call`` (bool: the function exported was itself jitted),
        ``collectives`` (list of str: ``all_reduce``...), ``per_device`` (bool: split into
        per-device programs, as ``pmap``/``shard_map`` lower), and ``analysis_error`` (str)
        when the module could not be analysed."""
        return self._evaluator_request("analyze", name, module, (), timeout)[1]["analysis"]

    def _evaluator_request(
        self, op: str, name: str, module: bytes, args: tuple[Any, ...], timeout: float | None, **fields: Any
    ) -> tuple[Any, dict[str, Any]]:
        ev = self._evaluator()
        self._next_id += 1
        rid = self._next_id
        frag, payload = protocol.pack_values({"module": np.frombuffer(module, dtype=np.uint8), "args": list(args)})
        try:
            ev.send({"op": op, "id": rid, **fields, **frag}, payload)
            resp, rpayload = ev.recv(timeout or self.limits.call_timeout)
            if resp.get("id") != rid:
                raise protocol.ProtocolError("response does not answer the request")
            out = protocol.unpack_values(resp, rpayload) if "values" in resp else {}
        except protocol.ChannelTimeout:
            ev.kill()
            raise CallTimedOut(
                f"the compiled `{name}` did not finish within {timeout or self.limits.call_timeout:g}s",
                "A lax.while_loop whose condition never becomes false runs forever under jit.",
            ) from None
        except protocol.ProtocolError as exc:
            ev.kill()
            raise BadValue(f"the compiled `{name}` could not be evaluated ({exc})") from None
        if not resp.get("ok"):
            err = resp.get("error") if isinstance(resp.get("error"), dict) else {}
            # the module came from the kernel: its name, platforms and so the error's text are the student's
            said = f"{err.get('ename', '')}: {first_line(str(err.get('evalue', '')))}"
            self._student_text.append(said)
            raise SubmissionError(
                f"the compiled `{name}` failed to run" + (f": {said}" if STUDENT_TEXT_SHOWN.get() else "")
            )
        info: dict[str, Any] = {}
        if isinstance(resp.get("elapsed"), (int, float)) and not isinstance(resp.get("elapsed"), bool):
            info["elapsed"] = float(resp["elapsed"])
        if type(resp.get("nr_devices")) is int:
            info["nr_devices"] = resp["nr_devices"]
        calls = resp.get("custom_calls")
        if isinstance(calls, list):
            info["custom_calls"] = [str(c)[:200] for c in calls[:50]]
        info["analysis"] = _analysis(resp.get("analysis"))
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


#: The analysis fields and their types; anything else the evaluator sends is dropped.
ANALYSIS_FIELDS: dict[str, type] = {
    "nr_devices": int,
    "custom_calls": list,
    "loops": int,
    "batch_loops": int,
    "whole_call": bool,
    "collectives": list,
    "per_device": bool,
    "vmapped": bool,
    "analysis_error": str,
}


def _analysis(raw: Any) -> dict[str, Any]:
    """The evaluator's module analysis, type-checked field by field.  A field missing or of the
    wrong type is left out (checks that need it then fail closed), and ``analysis_error`` says so."""
    out: dict[str, Any] = {}
    if not isinstance(raw, dict):
        return {"analysis_error": "the evaluator sent no analysis"}
    for key, kind in ANALYSIS_FIELDS.items():
        value = raw.get(key)
        if kind is list:
            if isinstance(value, list) and all(isinstance(v, str) for v in value):
                out[key] = [v[:200] for v in value[:50]]
        elif type(value) is kind:
            out[key] = value[:500] if kind is str else value
    missing = [k for k in ANALYSIS_FIELDS if k != "analysis_error" and k not in out]
    if missing and "analysis_error" not in out:
        out["analysis_error"] = "missing or malformed: " + ", ".join(missing)
    return out


def _exec_map(raw: Any) -> dict[int, int]:
    out: dict[int, int] = {}
    if isinstance(raw, dict):
        for k, v in raw.items():
            try:
                out[int(k)] = int(v)
            except (TypeError, ValueError):
                continue
    return out
