"""Every message between the trusted grader and the sandbox: one typed definition each.

A message is a frozen dataclass with one :meth:`~Message.encode` (to a frame header) and one
``decode`` (from a frame header, validating every field: ``type(x) is int``, bounded strings
and lists).  Values (arrays, pytrees) are not fields: they travel beside the header as
:func:`grader.wire.protocol.pack_values` produced them.

Three families, each told apart by one explicit discriminator:

- requests (``"op"``) the trusted side sends: :class:`Start`, :class:`Execute` to the worker;
  :class:`Probe`, :class:`Call`, :class:`Export`, :class:`Count`, which the worker forwards to
  the kernel (:mod:`grader.sandboxed.kernel_side`); :class:`Eval`,
  :class:`Grad`, :class:`Analyze` to the evaluator;
- progress (``"op"``) the worker and the evaluator send on their own: :class:`Ready`,
  :class:`CellStarted`, :class:`Executed`;
- replies (``"kind"``) to a request: one success kind per request (:class:`Probed`,
  :class:`Called`, :class:`Exported`, :class:`Counted`, :class:`Evaluated`) and the failures
  any request may end in (:class:`Missing`, :class:`Raised`, :class:`Unsendable`,
  :class:`TimedOut`, :class:`Died`, :class:`Dead`).

Everything the sandbox sends is untrusted: decoding raises :class:`MessageError` (a
:class:`~grader.wire.protocol.ProtocolError`) for an unknown or unexpected discriminator, a
missing field, a field of the wrong type or an oversized one, and a reply of one kind is never
decoded as another.  This module is mounted into the sandbox: it imports nothing from
``grader`` outside ``grader.wire``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, ClassVar, TypeVar

from grader.wire.protocol import MAX_NODES, MAX_STRING, ProtocolError

__all__ = [
    "ANALYSIS_FIELDS",
    "CALL_TIMEOUT",
    "CELL_STATUSES",
    "CELL_TIMEOUT",
    "COUNT_HOWS",
    "FAILURES",
    "MAX_NAME",
    "MAX_RESTARTS",
    "MAX_TEXT",
    "OUTPUT_CAP",
    "PROGRESS",
    "REPLIES",
    "REQUESTS",
    "Analyze",
    "Call",
    "Called",
    "CellReport",
    "CellStarted",
    "Count",
    "Counted",
    "Dead",
    "Died",
    "Eval",
    "Evaluated",
    "EvaluatorRequest",
    "Execute",
    "Executed",
    "Export",
    "Exported",
    "Grad",
    "KernelRequest",
    "Message",
    "MessageError",
    "Missing",
    "NameInfo",
    "Probe",
    "Probed",
    "Progress",
    "Raised",
    "Ready",
    "Reply",
    "Request",
    "Start",
    "TimedOut",
    "Unsendable",
    "Where",
    "answers",
    "decode_analysis",
    "decode_progress",
    "decode_reply",
    "decode_request",
    "stamp_exec_map",
]

# --------------------------------------------------------------------------- defaults
#: The sandbox's defaults, defined once: :class:`grader.host.sandbox.Limits` and :class:`Start` use them.
CELL_TIMEOUT = 60.0  # seconds a notebook cell may run
CALL_TIMEOUT = 120.0  # seconds a request may run (a jitted, unrolled Python loop can take a while to compile)
OUTPUT_CAP = 20_000  # characters of printed output kept per cell
MAX_RESTARTS = 3  # kernel restarts (and fresh sandboxes) per submission
#: Seconds the worker waits for a kernel to answer after an interrupt before it kills it; the
#: trusted side allows for it in its wait for a reply (grader.host.session.Session._reply_within).
PROBE_TIMEOUT = 5.0

#: The caps on what a decoded message may hold (besides the frame's own caps).
MAX_TEXT = MAX_STRING  # any string
MAX_NAME = 1_000  # a Python name, an op, a dtype, a status
MAX_LIST = MAX_NODES  # any list or mapping
MAX_INT = 2**63

#: What a cell's record may say happened to it.
CELL_STATUSES = frozenset({"ok", "error", "timeout", "killed", "died", "skipped"})
#: What a count request may count.
COUNT_HOWS = frozenset({"traces", "compiles"})


class MessageError(ProtocolError):
    """A header is not the message it should be: unknown or unexpected discriminator, or a
    field missing, of the wrong type or too large."""


# --------------------------------------------------------------------------- field checks

_REQUIRED: Any = object()


class _Reader:
    """Reads typed fields out of one header, naming the message in every error."""

    def __init__(self, header: Any, what: str) -> None:
        if not isinstance(header, dict):
            raise MessageError(f"{what} is not an object")
        self.header = header
        self.what = what

    def _get(self, key: str, default: Any) -> tuple[bool, Any]:
        if key not in self.header:
            if default is _REQUIRED:
                raise MessageError(f"{self.what} has no {key!r}")
            return False, default
        return True, self.header[key]

    def _bad(self, key: str, want: str) -> MessageError:
        return MessageError(f"{self.what}: {key!r} is not {want}")

    def int(self, key: str, default: Any = _REQUIRED, *, lo: int = -MAX_INT, hi: int = MAX_INT) -> Any:
        present, v = self._get(key, default)
        if present and not _is_int(v, lo, hi):
            raise self._bad(key, f"an int in [{lo}, {hi})")
        return v

    def opt_int(self, key: str, *, lo: int = -MAX_INT, hi: int = MAX_INT) -> int | None:
        v = self.header.get(key)
        if v is not None and not _is_int(v, lo, hi):
            raise self._bad(key, f"an int in [{lo}, {hi}) or null")
        return v

    def float(self, key: str, default: Any = _REQUIRED) -> Any:
        present, v = self._get(key, default)
        if present:
            v = _as_float(v)
            if v is None:
                raise self._bad(key, "a finite number")
        return v

    def opt_float(self, key: str) -> float | None:
        v = self.header.get(key)
        if v is None:
            return None
        f = _as_float(v)
        if f is None:
            raise self._bad(key, "a finite number or null")
        return f

    def bool(self, key: str, default: Any = _REQUIRED) -> Any:
        present, v = self._get(key, default)
        if present and type(v) is not bool:
            raise self._bad(key, "a bool")
        return v

    def opt_bool(self, key: str) -> bool | None:
        v = self.header.get(key)
        if v is not None and type(v) is not bool:
            raise self._bad(key, "a bool or null")
        return v

    def str(self, key: str, default: Any = _REQUIRED, *, cap: int = MAX_TEXT) -> Any:
        present, v = self._get(key, default)
        if present and not _is_str(v, cap):
            raise self._bad(key, f"a string of at most {cap} characters")
        return v

    def one_of(self, key: str, allowed: frozenset[str], default: Any = _REQUIRED) -> Any:
        v = self.str(key, default, cap=MAX_NAME)
        if v not in allowed and not (v is default and default is not _REQUIRED):
            raise self._bad(key, "one of " + ", ".join(sorted(allowed)))
        return v

    def list(self, key: str, default: Any = _REQUIRED, *, cap: int = MAX_LIST) -> Any:
        present, v = self._get(key, default)
        if present and (not isinstance(v, list) or len(v) > cap):
            raise self._bad(key, f"a list of at most {cap} items")
        return v

    def ints(self, key: str, default: Any = _REQUIRED, *, lo: int = -MAX_INT, hi: int = MAX_INT) -> Any:
        v = self.list(key, default)
        if v is default and default is not _REQUIRED:
            return v
        if not all(_is_int(i, lo, hi) for i in v):
            raise self._bad(key, f"a list of ints in [{lo}, {hi})")
        return tuple(v)

    def floats(self, key: str, default: Any = _REQUIRED) -> Any:
        v = self.list(key, default)
        if v is default and default is not _REQUIRED:
            return v
        out = tuple(_as_float(f) for f in v)
        if any(f is None for f in out):
            raise self._bad(key, "a list of finite numbers")
        return out

    def strs(self, key: str, default: Any = _REQUIRED, *, cap: int = MAX_TEXT) -> Any:
        v = self.list(key, default)
        if v is default and default is not _REQUIRED:
            return v
        if not all(_is_str(s, cap) for s in v):
            raise self._bad(key, f"a list of strings of at most {cap} characters")
        return tuple(v)

    def object(self, key: str, default: Any = _REQUIRED) -> Any:
        present, v = self._get(key, default)
        if present and (not isinstance(v, dict) or len(v) > MAX_LIST):
            raise self._bad(key, f"an object of at most {MAX_LIST} entries")
        return v

    def exec_map(self, key: str, default: Any = None) -> Any:
        raw = self.object(key, default)
        if raw is None:
            return None
        out: dict[int, int] = {}
        for k, v in raw.items():
            # ASCII digits only: str.isdigit() is also true of "²", which int() refuses
            if not (_is_str(k, 20) and k.isascii() and k.isdigit() and _is_int(v, 0, MAX_INT)):
                raise self._bad(key, "a map of execution counts to cell indexes")
            out[int(k)] = v
        return out


def _is_int(v: Any, lo: int = -MAX_INT, hi: int = MAX_INT) -> bool:
    return type(v) is int and lo <= v < hi


def _is_str(v: Any, cap: int) -> bool:
    return type(v) is str and len(v) <= cap


def _as_float(v: Any) -> float | None:
    if type(v) is int and -MAX_INT <= v < MAX_INT:
        v = float(v)
    if type(v) is not float or not math.isfinite(v):
        return None
    return v


def _plain(value: Any) -> Any:
    """A field's value as JSON data (nested parts are dataclasses with their own ``encode``)."""
    if is_dataclass(value) and not isinstance(value, type):
        return value.encode()  # type: ignore[attr-defined]
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


# --------------------------------------------------------------------------- parts


@dataclass(frozen=True)
class Where:
    """Where an error happened in the notebook: a cell index (the worker knows it) or an
    execution count (the kernel knows that), a line number, the line's text (the sandbox's copy:
    the trusted side reads the line from the submitted notebook instead) and the function."""

    cell: int | None = None
    exec_count: int | None = None
    lineno: int | None = None
    text: str = ""
    function: str = ""

    def encode(self) -> dict[str, Any]:
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def decode(cls, raw: Any) -> Where:
        r = _Reader(raw, "a location")
        return cls(
            cell=r.opt_int("cell", lo=0),
            exec_count=r.opt_int("exec_count"),
            lineno=r.opt_int("lineno"),
            text=r.str("text", ""),
            function=r.str("function", "", cap=MAX_TEXT),
        )


def _where(r: _Reader, key: str) -> Where | None:
    raw = r.header.get(key)
    return None if raw is None else Where.decode(raw)


@dataclass(frozen=True)
class NameInfo:
    """What the kernel's namespace holds under one name (a :class:`Probed` reply)."""

    exists: bool
    callable: bool = False
    type: str = ""

    def encode(self) -> dict[str, Any]:
        return {"exists": True, "callable": self.callable, "type": self.type} if self.exists else {"exists": False}

    as_dict = encode

    @classmethod
    def decode(cls, raw: Any) -> NameInfo:
        r = _Reader(raw, "a name's information")
        if not r.bool("exists"):
            return cls(False)
        return cls(True, r.bool("callable"), r.str("type", cap=MAX_NAME))


@dataclass(frozen=True)
class CellReport:
    """What happened to one notebook cell (an :class:`Executed` message holds one per cell run)."""

    index: int
    status: str = "ok"  # one of CELL_STATUSES
    ename: str = ""
    evalue: str = ""
    location: Where | None = None
    message: str = ""
    duration: float | None = None
    output: str = ""
    strays: int = 0  # processes the cell left running, killed after it
    restarted: bool | None = None  # after a cell that killed the kernel: a fresh one replayed the notebook

    def encode(self) -> dict[str, Any]:
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def decode(cls, raw: Any) -> CellReport:
        r = _Reader(raw, "a cell record")
        return cls(
            index=r.int("index", lo=0),
            status=r.one_of("status", CELL_STATUSES),
            ename=r.str("ename", ""),
            evalue=r.str("evalue", ""),
            location=_where(r, "location"),
            message=r.str("message", ""),
            duration=r.opt_float("duration"),
            output=r.str("output", ""),
            strays=r.int("strays", 0, lo=0),
            restarted=r.opt_bool("restarted"),
        )


# --------------------------------------------------------------------------- message bases


class Message:
    """One message: ``TAG`` is its discriminator's key and ``NAME`` its value."""

    TAG: ClassVar[str]
    NAME: ClassVar[str]

    def encode(self) -> dict[str, Any]:
        """The frame header (values, if any, are added beside it by the sender)."""
        out: dict[str, Any] = {self.TAG: self.NAME}
        for f in fields(self):  # type: ignore[arg-type]
            out[f.name] = _plain(getattr(self, f.name))
        return out

    @classmethod
    def decode(cls: type[_M], header: Any) -> _M:
        r = _Reader(header, f"a {cls.NAME!r} message")
        if header.get(cls.TAG) != cls.NAME:
            raise MessageError(f"a {header.get(cls.TAG)!r} message is not a {cls.NAME!r} message")
        return cls._decode(r)

    @classmethod
    def _decode(cls: type[_M], r: _Reader) -> _M:
        raise NotImplementedError


_M = TypeVar("_M", bound=Message)


def _family(header: Any, tag: str, table: dict[str, type[_M]], accept: tuple[type[_M], ...], what: str) -> _M:
    if not isinstance(header, dict):
        raise MessageError(f"{what} is not an object")
    name = header.get(tag)
    cls = table.get(name) if type(name) is str else None
    if cls is None:
        raise MessageError(f"unknown {what} {tag} {str(name)[:40]!r}")
    if accept and cls not in accept:
        raise MessageError(f"a {name!r} {what} is not one of " + ", ".join(repr(a.NAME) for a in accept))
    try:
        return cls.decode(header)
    except MessageError:
        raise
    except Exception as exc:  # a decoder that missed a case must still refuse, never crash the grader
        raise MessageError(f"malformed {what} {name!r} ({type(exc).__name__})") from None


# --------------------------------------------------------------------------- requests


class Request(Message):
    """Sent by the trusted side, tagged by ``op``."""

    TAG = "op"


@dataclass(frozen=True)
class Start(Request):
    """The worker's first message: how to run the notebook."""

    NAME = "start"
    cell_timeout: float = CELL_TIMEOUT
    output_cap: int = OUTPUT_CAP
    max_restarts: int = MAX_RESTARTS

    @classmethod
    def _decode(cls, r: _Reader) -> Start:
        return cls(
            r.float("cell_timeout", CELL_TIMEOUT),
            r.int("output_cap", OUTPUT_CAP, lo=0),
            r.int("max_restarts", MAX_RESTARTS, lo=0),
        )


@dataclass(frozen=True)
class Execute(Request):
    """Run the notebook (a file in the scratch directory), except the cells in ``skip``."""

    NAME = "execute"
    notebook: str
    skip: tuple[int, ...] = ()

    @classmethod
    def _decode(cls, r: _Reader) -> Execute:
        return cls(r.str("notebook", cap=MAX_NAME), r.ints("skip", (), lo=0))


@dataclass(frozen=True)
class KernelRequest(Request):
    """A request the worker forwards to the kernel: ``id`` comes back in the reply, and the
    worker interrupts the kernel after ``timeout`` seconds."""

    id: int
    timeout: float


@dataclass(frozen=True)
class Probe(KernelRequest):
    """Which of ``names`` the namespace holds, and whether they are callable."""

    NAME = "probe"
    names: tuple[str, ...] = ()

    @classmethod
    def _decode(cls, r: _Reader) -> Probe:
        return cls(r.int("id"), r.float("timeout"), r.strs("names", cap=MAX_NAME))


@dataclass(frozen=True)
class Call(KernelRequest):
    """Call ``name`` on the values ``args`` and ``kwargs``, ``repeat`` times; the values
    ``result0``... come back.  ``readonly``: hand over read-only arrays; ``key_reuse``: under
    JAX's key-reuse checker."""

    NAME = "call"
    name: str = ""
    repeat: int = 1
    readonly: bool = False
    key_reuse: bool = False

    @classmethod
    def _decode(cls, r: _Reader) -> Call:
        return cls(
            r.int("id"),
            r.float("timeout"),
            r.str("name", cap=MAX_NAME),
            r.int("repeat", 1),
            r.bool("readonly", False),
            r.bool("key_reuse", False),
        )


@dataclass(frozen=True)
class Export(KernelRequest):
    """``jax.export`` of ``name`` for ``specs`` ((shape string, dtype) pairs, possibly symbolic)
    or for the value ``example`` (shape specifications only), with the value ``static``; the
    value ``module`` comes back.  ``vjp_order``: serialize that many VJPs too."""

    NAME = "export"
    name: str = ""
    specs: tuple[tuple[str, str], ...] = ()
    vjp_order: int = 0

    @classmethod
    def _decode(cls, r: _Reader) -> Export:
        specs = r.list("specs", [])
        if not all(isinstance(s, list) and len(s) == 2 and all(_is_str(p, MAX_NAME) for p in s) for s in specs):
            raise r._bad("specs", "a list of [shape, dtype] string pairs")
        return cls(
            r.int("id"),
            r.float("timeout"),
            r.str("name", cap=MAX_NAME),
            tuple((s[0], s[1]) for s in specs),
            r.int("vjp_order", 0),
        )


@dataclass(frozen=True)
class Count(KernelRequest):
    """Run the value ``calls`` (a list of ``{"args", "kwargs"}``) in order and count, per call,
    traces (``how="traces"``, with ``static`` argument names) or compilations (``"compiles"``)."""

    NAME = "count"
    name: str = ""
    how: str = "traces"
    static: tuple[str, ...] = ()

    @classmethod
    def _decode(cls, r: _Reader) -> Count:
        return cls(
            r.int("id"),
            r.float("timeout"),
            r.str("name", cap=MAX_NAME),
            r.one_of("how", COUNT_HOWS),
            r.strs("static", (), cap=MAX_NAME),
        )


@dataclass(frozen=True)
class EvaluatorRequest(Request):
    """A request to the evaluator about the value ``module`` (an exported module's bytes)."""

    id: int


@dataclass(frozen=True)
class Eval(EvaluatorRequest):
    """Call the module on the value ``args``; the value ``result`` comes back.  With
    ``batch_axes`` (for each argument, the axes that hold the batch's examples), the reply also
    counts the operations that work on examples taken out of the batch, at these arguments'
    shapes (``Evaluated.per_example_ops``)."""

    NAME = "eval"
    batch_axes: tuple[tuple[int, ...], ...] = ()

    @classmethod
    def _decode(cls, r: _Reader) -> Eval:
        axes = r.list("batch_axes", [])
        if not all(isinstance(a, list) and len(a) <= 32 and all(_is_int(i, 0, 32) for i in a) for a in axes):
            raise r._bad("batch_axes", "a list of lists of axes")
        return cls(r.int("id"), tuple(tuple(a) for a in axes))


@dataclass(frozen=True)
class Grad(EvaluatorRequest):
    """The gradient of the module's scalar result with respect to ``args[argnum]``."""

    NAME = "grad"
    argnum: int = 0

    @classmethod
    def _decode(cls, r: _Reader) -> Grad:
        return cls(r.int("id"), r.int("argnum"))


@dataclass(frozen=True)
class Analyze(EvaluatorRequest):
    """The module's analysis alone."""

    NAME = "analyze"

    @classmethod
    def _decode(cls, r: _Reader) -> Analyze:
        return cls(r.int("id"))


REQUESTS: dict[str, type[Request]] = {
    c.NAME: c for c in (Start, Execute, Probe, Call, Export, Count, Eval, Grad, Analyze)
}


def decode_request(header: Any, *accept: type[Request]) -> Request:
    """The request ``header`` holds; with ``accept``, only one of those classes."""
    return _family(header, "op", REQUESTS, accept, "request")


# --------------------------------------------------------------------------- progress


class Progress(Message):
    """Sent by the worker or the evaluator on its own (not a reply), tagged by ``op``."""

    TAG = "op"


@dataclass(frozen=True)
class Ready(Progress):
    """The kernel (worker) or JAX (evaluator) is up, or failed to start (``ok`` false, ``error``)."""

    NAME = "ready"
    ok: bool = True
    startup: float = 0.0
    error: str = ""

    @classmethod
    def _decode(cls, r: _Reader) -> Ready:
        return cls(r.bool("ok"), r.float("startup", 0.0), r.str("error", ""))


@dataclass(frozen=True)
class CellStarted(Progress):
    """The worker is about to run cell ``index`` (if the worker dies, that cell killed it)."""

    NAME = "cell"
    index: int = 0

    @classmethod
    def _decode(cls, r: _Reader) -> CellStarted:
        return cls(r.int("index", lo=0))


@dataclass(frozen=True)
class Executed(Progress):
    """The notebook ran: a record per cell, execution counts to cell indexes, the kernel's
    restarts and whether it is still alive."""

    NAME = "executed"
    cells: tuple[CellReport, ...] = ()
    exec_map: dict[int, int] = field(default_factory=dict)
    restarts: int = 0
    alive: bool = True
    duration: float = 0.0

    @classmethod
    def _decode(cls, r: _Reader) -> Executed:
        return cls(
            tuple(CellReport.decode(c) for c in r.list("cells")),
            r.exec_map("exec_map", _REQUIRED),
            r.int("restarts", lo=0),
            r.bool("alive"),
            r.float("duration", 0.0),
        )


PROGRESS: dict[str, type[Progress]] = {c.NAME: c for c in (Ready, CellStarted, Executed)}


def decode_progress(header: Any, *accept: type[Progress]) -> Progress:
    """The progress message ``header`` holds; with ``accept``, only one of those classes."""
    return _family(header, "op", PROGRESS, accept, "message")


# --------------------------------------------------------------------------- replies


@dataclass(frozen=True, kw_only=True)
class Reply(Message):
    """An answer to the request with the same ``id``, tagged by ``kind``.  The worker stamps the
    kernel's replies with its ``exec_map`` (execution counts to cell indexes, after replays)."""

    TAG = "kind"
    id: int | None = None
    exec_map: dict[int, int] | None = None

    def encode(self) -> dict[str, Any]:
        out = super().encode()
        if self.exec_map is None:
            del out["exec_map"]
        return out

    @classmethod
    def _envelope(cls, r: _Reader) -> dict[str, Any]:
        return {"id": r.opt_int("id"), "exec_map": r.exec_map("exec_map")}


@dataclass(frozen=True, kw_only=True)
class Probed(Reply):
    NAME = "probed"
    info: dict[str, NameInfo] = field(default_factory=dict)

    @classmethod
    def _decode(cls, r: _Reader) -> Probed:
        info = r.object("info")
        if not all(_is_str(k, MAX_NAME) for k in info):
            raise r._bad("info", "keyed by names")
        return cls(info={k: NameInfo.decode(v) for k, v in info.items()}, **cls._envelope(r))


@dataclass(frozen=True, kw_only=True)
class Called(Reply):
    """The values ``result0``... came back; ``mutated``: the positional arguments the call wrote
    into; ``elapsed``: seconds per repetition."""

    NAME = "called"
    mutated: tuple[int, ...] = ()
    elapsed: tuple[float, ...] = ()

    @classmethod
    def _decode(cls, r: _Reader) -> Called:
        return cls(mutated=r.ints("mutated", lo=0), elapsed=r.floats("elapsed"), **cls._envelope(r))


@dataclass(frozen=True, kw_only=True)
class Exported(Reply):
    """The value ``module`` came back."""

    NAME = "exported"

    @classmethod
    def _decode(cls, r: _Reader) -> Exported:
        return cls(**cls._envelope(r))


@dataclass(frozen=True, kw_only=True)
class Counted(Reply):
    """One count per call (the values ``result0``... came back too)."""

    NAME = "counted"
    counts: tuple[int, ...] = ()

    @classmethod
    def _decode(cls, r: _Reader) -> Counted:
        return cls(counts=r.ints("counts"), **cls._envelope(r))


@dataclass(frozen=True, kw_only=True)
class Evaluated(Reply):
    """The evaluator ran the module (or only analysed it: ``elapsed`` is None): the value
    ``result`` came back, with the module's analysis (see :func:`decode_analysis`)."""

    NAME = "evaluated"
    nr_devices: int = 1
    analysis: dict[str, Any] = field(default_factory=dict)
    custom_calls: tuple[str, ...] | None = None
    elapsed: float | None = None
    per_example_ops: int | None = None
    per_example_error: str | None = None

    @classmethod
    def _decode(cls, r: _Reader) -> Evaluated:
        calls = r.header.get("custom_calls")
        error = r.header.get("per_example_error")
        return cls(
            nr_devices=r.int("nr_devices", lo=0),
            analysis=decode_analysis(r.header.get("analysis")),
            custom_calls=None if calls is None else tuple(c[:200] for c in r.strs("custom_calls")[:50]),
            elapsed=r.opt_float("elapsed"),
            per_example_ops=r.opt_int("per_example_ops", lo=0),
            per_example_error=None if error is None else r.str("per_example_error")[:500],
            **cls._envelope(r),
        )


@dataclass(frozen=True, kw_only=True)
class Missing(Reply):
    """The namespace does not hold ``name``."""

    NAME = "missing"
    name: str = ""

    @classmethod
    def _decode(cls, r: _Reader) -> Missing:
        return cls(name=r.str("name", cap=MAX_TEXT), **cls._envelope(r))


@dataclass(frozen=True, kw_only=True)
class Raised(Reply):
    """The request raised (student code, or the evaluator): the error's class name and text
    (the sandbox's words) and where in the notebook, if there."""

    NAME = "raised"
    ename: str = "Exception"
    evalue: str = ""
    location: Where | None = None

    @classmethod
    def _decode(cls, r: _Reader) -> Raised:
        return cls(ename=r.str("ename"), evalue=r.str("evalue"), location=_where(r, "location"), **cls._envelope(r))


@dataclass(frozen=True, kw_only=True)
class Unsendable(Reply):
    """What came back is not plain data (or too large to send): ``why``, the sandbox's words."""

    NAME = "unsendable"
    why: str = ""

    @classmethod
    def _decode(cls, r: _Reader) -> Unsendable:
        return cls(why=r.str("why"), **cls._envelope(r))


@dataclass(frozen=True, kw_only=True)
class TimedOut(Reply):
    """The worker interrupted the request after ``timeout`` seconds; ``restarted``: None when the
    kernel answered again after the interrupt, else whether a fresh kernel replaced it."""

    NAME = "timeout"
    timeout: float = 0.0
    restarted: bool | None = None

    @classmethod
    def _decode(cls, r: _Reader) -> TimedOut:
        return cls(timeout=r.float("timeout"), restarted=r.opt_bool("restarted"), **cls._envelope(r))


@dataclass(frozen=True, kw_only=True)
class Died(Reply):
    """The kernel died during the request; ``restarted``: whether a fresh one replaced it."""

    NAME = "died"
    restarted: bool = False

    @classmethod
    def _decode(cls, r: _Reader) -> Died:
        return cls(restarted=r.bool("restarted"), **cls._envelope(r))


@dataclass(frozen=True, kw_only=True)
class Dead(Reply):
    """The request could not run in the kernel: ``why``, in the sandbox's words."""

    NAME = "dead"
    why: str = ""

    @classmethod
    def _decode(cls, r: _Reader) -> Dead:
        return cls(why=r.str("why"), **cls._envelope(r))


#: Replies any request may end in, besides its own success kind.
FAILURES: tuple[type[Reply], ...] = (Missing, Raised, Unsendable, TimedOut, Died, Dead)
REPLIES: dict[str, type[Reply]] = {c.NAME: c for c in (Probed, Called, Exported, Counted, Evaluated, *FAILURES)}


def decode_reply(header: Any, *accept: type[Reply]) -> Reply:
    """The reply ``header`` holds; with ``accept``, only one of those classes."""
    return _family(header, "kind", REPLIES, accept, "reply")


def answers(header: Any, request: KernelRequest | EvaluatorRequest) -> bool:
    """Whether a reply's header carries ``request``'s id (checked before anything else in it)."""
    return isinstance(header, dict) and _is_int(header.get("id")) and header["id"] == request.id


def stamp_exec_map(header: dict[str, Any], exec_map: dict[int, int]) -> dict[str, Any]:
    """``header`` (a reply the worker passes on from the kernel) with the worker's exec_map."""
    header["exec_map"] = {str(k): v for k, v in exec_map.items()}
    return header


# --------------------------------------------------------------------------- analysis

#: The evaluator's analysis fields and their types; anything else it sends is dropped.
ANALYSIS_FIELDS: dict[str, type] = {
    "nr_devices": int,
    "custom_calls": list,
    "loops": int,
    "batch_loops": int,
    "whole_call": bool,
    "collectives": list,
    "per_device": bool,
    "vmapped": bool,
    "outside_ops": int,
    "outside_op": str,
    "whole_inputs": list,
    "rows_kept": bool,
    "analysis_error": str,
}


def decode_analysis(raw: Any) -> dict[str, Any]:
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
