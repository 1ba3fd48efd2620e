"""Runs inside the student's kernel (untrusted): answers the worker's requests about the namespace.

Nothing here is trusted.  A student can replace any of it; the trusted side validates every
value it receives and gains nothing a student could not also get by writing the function.
Requests arrive as frame files in the scratch directory; responses are written beside them.
"""

from __future__ import annotations

import builtins
import inspect
import os
import sys
import time
import traceback
from dataclasses import replace
from typing import Any

from grader.wire import messages, protocol

_USER_NS: dict[str, Any] | None = None


def _ns() -> dict[str, Any]:
    global _USER_NS
    if _USER_NS is None:
        from IPython import get_ipython

        ip = get_ipython()
        _USER_NS = ip.user_ns if ip is not None else sys.modules["__main__"].__dict__
    return _USER_NS


def _student_location(tb: Any) -> messages.Where | None:
    """The innermost traceback frame in notebook code: execution count, line number and text."""
    try:
        from IPython import get_ipython

        fmap = get_ipython().compile._filename_map  # filename -> execution count
    except Exception:
        fmap = {}
    import linecache

    found = None
    for frame, lineno in traceback.walk_tb(tb):
        fname = frame.f_code.co_filename
        if fname in fmap or fname.startswith("<ipython-input-"):
            text = linecache.getline(fname, lineno).strip()
            count = fmap.get(fname, _input_count(fname))
            found = messages.Where(
                exec_count=count if type(count) is int else None,
                lineno=lineno,
                text=text[:300],
                function=frame.f_code.co_name[:300],
            )
    return found


def _input_count(fname: str) -> int | None:
    """The execution count in an older IPython's cell file name, ``<ipython-input-7-1a2b3c>`` (Colab)."""
    parts = fname.split("-")
    return int(parts[2]) if fname.startswith("<ipython-input-") and len(parts) > 3 and parts[2].isdigit() else None


def _error(exc: BaseException) -> messages.Raised:
    return messages.Raised(
        ename=type(exc).__name__[: messages.MAX_TEXT],
        evalue=str(exc)[:4000],
        location=_student_location(exc.__traceback__),
    )


class _Missing(Exception):
    """The notebook does not define the requested name."""


def _lookup(name: str) -> Any:
    ns = _ns()
    if name not in ns:
        raise _Missing(name)
    return ns[name]


def _to_key_if_needed(value: Any) -> Any:
    """Turn typed-key placeholders back into JAX keys (and nested containers)."""
    if isinstance(value, protocol.PRNGKeyData):
        import jax

        return jax.random.wrap_key_data(value.data, impl=value.impl)
    if type(value) is list:
        return [_to_key_if_needed(v) for v in value]
    if type(value) is tuple:
        return tuple(_to_key_if_needed(v) for v in value)
    if type(value) is dict:
        return {k: _to_key_if_needed(v) for k, v in value.items()}
    return value


def _os_read_only(value: Any) -> Any:
    """``value`` with every ndarray (at any depth) replaced by a copy the operating system maps
    read-only: a write raises ``ValueError: assignment destination is read-only``, the writeable
    flag cannot be set back (the buffer is read-only), and ``mprotect`` cannot make the pages
    writable: they belong to an anonymous memory file sealed against writes.  (A student who
    replaces this function hands over writable arrays; the trusted side also reads the notebook
    for writes into arguments.)"""
    import fcntl
    import mmap

    import numpy as np

    if isinstance(value, (list, tuple)):
        return type(value)(_os_read_only(v) for v in value)
    if isinstance(value, dict):
        return {k: _os_read_only(v) for k, v in value.items()}
    if not isinstance(value, np.ndarray):
        return value
    data = np.ascontiguousarray(value).tobytes()
    if not data or not hasattr(os, "memfd_create"):  # no memfd (macOS): a read-only copy, weaker but honest
        frozen = value.copy()
        frozen.flags.writeable = False
        return frozen
    fd = os.memfd_create("jaxgrade-read-only", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        fcntl.fcntl(
            fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL
        )
        buf = mmap.mmap(fd, len(data), access=mmap.ACCESS_READ)
    finally:
        os.close(fd)
    return np.frombuffer(buf, dtype=value.dtype).reshape(value.shape)


def _snapshot(args: Any) -> list[Any]:
    import numpy as np

    out = []
    for a in args:
        out.append(np.array(a, copy=True) if isinstance(a, np.ndarray) else None)
    return out


def _mutated(args: Any, snaps: list[Any]) -> list[int]:
    import numpy as np

    changed = []
    for i, (a, s) in enumerate(zip(args, snaps)):
        if s is not None and not np.array_equal(a, s, equal_nan=s.dtype.kind in "fc"):
            changed.append(i)
    return changed


def _op_probe(req: messages.Probe, values: dict[str, Any]) -> tuple[messages.Reply, dict[str, Any]]:
    ns = _ns()
    info = {}
    for name in req.names:
        if name not in ns:
            info[name] = messages.NameInfo(False)
            continue
        obj = ns[name]
        info[name] = messages.NameInfo(True, callable(obj), f"{type(obj).__module__}.{type(obj).__qualname__}"[:200])
    return messages.Probed(info=info), {}


def _fresh(value: Any) -> Any:
    """An equal copy of a decoded argument whose arrays, lists, tuples and dicts are new objects."""
    import numpy as np

    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, protocol.PRNGKeyData):
        return protocol.PRNGKeyData(impl=value.impl, data=value.data.copy())
    if type(value) in (list, tuple):
        return type(value)(_fresh(v) for v in value)
    if type(value) is dict:
        return {k: _fresh(v) for k, v in value.items()}
    return value


def _op_call(req: messages.Call, values: dict[str, Any]) -> tuple[messages.Reply, dict[str, Any]]:
    fn = _lookup(req.name)
    raw_args = list(values.get("args", ()))
    raw_kwargs = dict(values.get("kwargs", {}))
    repeat = max(1, min(req.repeat, 8))
    # each call gets argument objects of its own, equal in value and made before any call runs: a
    # function that remembers its results by the arguments' identity (``id(key)``) must compute
    # again, as for any caller that passes equal values (a purity check asks whether the result
    # depends on the values only)
    calls = []
    for i in range(repeat):
        args = raw_args if i == 0 else [_fresh(a) for a in raw_args]
        kwargs = raw_kwargs if i == 0 else {k: _fresh(v) for k, v in raw_kwargs.items()}
        if req.readonly:
            args = [_os_read_only(a) for a in args]
            kwargs = {k: _os_read_only(v) for k, v in kwargs.items()}
        calls.append(([_to_key_if_needed(a) for a in args], {k: _to_key_if_needed(v) for k, v in kwargs.items()}))
    results = []
    snaps = _snapshot(calls[0][0])
    elapsed = []
    with _key_reuse(req.key_reuse):
        for args, kwargs in calls:
            t0 = time.perf_counter()
            out = fn(*args, **kwargs)
            try:  # wait for asynchronous dispatch so timing and errors belong to this call
                import jax

                out = jax.block_until_ready(out)
            except Exception:
                pass
            elapsed.append(time.perf_counter() - t0)
            results.append(out)
    mutated = sorted({i for args, _ in calls for i in _mutated(args, snaps)})
    head = messages.Called(mutated=tuple(mutated), elapsed=tuple(elapsed))
    return head, {f"result{i}": r for i, r in enumerate(results)}


def _abstract_arg(spec: Any) -> Any:
    """A :class:`protocol.ShapeSpec` pytree as ``jax.ShapeDtypeStruct`` leaves (no values)."""
    import jax
    import numpy as np

    def one(leaf: Any) -> Any:
        if not isinstance(leaf, protocol.ShapeSpec):
            raise ValueError("an export argument must be a shape specification")
        if leaf.impl:  # a typed key: its abstract value, from key data that never leaves here
            width = jax.random.key_data(jax.random.key(0, impl=leaf.impl)).shape[-1]
            return jax.eval_shape(
                lambda: jax.random.wrap_key_data(np.zeros((*leaf.shape, width), np.uint32), impl=leaf.impl)
            )
        return jax.ShapeDtypeStruct(leaf.shape, jax.dtypes.canonicalize_dtype(np.dtype(leaf.dtype)))

    return jax.tree_util.tree_map(one, spec, is_leaf=lambda x: isinstance(x, protocol.ShapeSpec))


def _op_export(req: messages.Export, values: dict[str, Any]) -> tuple[messages.Reply, dict[str, Any]]:
    """Export ``name`` under our own ``jax.jit`` from abstract arguments only: the trusted side
    sends shapes and dtypes (``example``, any pytrees) or shape strings with symbolic dimensions
    (``specs``), never values."""
    import jax
    import numpy as np
    from jax import export

    fn = _lookup(req.name)
    specs: list[Any] = []
    if "example" in values:
        specs = [_abstract_arg(a) for a in values["example"]]
    else:
        scope = export.SymbolicScope()
        for shape, dtype in req.specs:
            dims = export.symbolic_shape(shape, scope=scope) if shape else ()
            specs.append(jax.ShapeDtypeStruct(dims, np.dtype(dtype)))
    static = dict(values.get("static", {}))
    # always our own jit around it: exporting a student's jit directly would hand its static
    # arguments the abstract specs, and the error would not be about what the student did
    target = jax.jit(fn, static_argnames=tuple(static) or None)
    if static:
        exp = export.export(target)(*specs, **static)
    else:
        exp = export.export(target)(*specs)
    blob = exp.serialize(vjp_order=max(0, min(req.vjp_order, 2)))
    return messages.Exported(), {"module": np.frombuffer(bytes(blob), dtype=np.uint8)}


#: The first JAX whose compiled functions are compiled again when the key-reuse checker is
#: switched on (measured: 0.6.2, 0.7.2, 0.8.0, 0.8.3 and 0.9.0 reuse what they compiled with it
#: off, so a reuse in a function the notebook already ran went unseen; 0.9.1, 0.9.2 and 0.10.2 do not).
KEY_REUSE_RECOMPILES = "0.9.1"


def _key_reuse(on: bool) -> Any:
    """JAX's key-reuse checker (it sees typed keys only) around a call, when asked for.  On JAX
    before :data:`KEY_REUSE_RECOMPILES`, functions the notebook already ran (compiled with the
    checker off) would run unchecked: its compiled functions are dropped first."""
    import contextlib

    if not on:
        return contextlib.nullcontext()
    import jax

    if _jax_before(KEY_REUSE_RECOMPILES):
        jax.clear_caches()
    return jax.debug_key_reuse(True)


def _jax_before(version: str) -> bool:
    """Whether this kernel's JAX is older than ``version`` (a pre-release or dev build of that
    version counts as older)."""
    import jax
    from packaging.version import Version

    return Version(jax.__version__) < Version(version)


_COMPILES = [0]
_LISTENING = [False]


def _listen_for_compiles() -> None:
    if _LISTENING[0]:
        return
    from jax import monitoring

    def on_event(name: str, duration: float, **kwargs: Any) -> None:
        if name == "/jax/core/compile/backend_compile_duration":
            _COMPILES[0] += 1

    monitoring.register_event_duration_secs_listener(on_event)
    _LISTENING[0] = True


def _op_count(req: messages.Count, values: dict[str, Any]) -> tuple[messages.Reply, dict[str, Any]]:
    """Per call, how many times the function was traced (under one jax.jit of a counting wrapper)
    or how many XLA compilations it caused (JAX's monitoring events)."""
    import jax

    fn = _lookup(req.name)
    calls = values.get("calls", [])
    how = req.how
    counts: list[int] = []
    results: dict[str, Any] = {}
    if how == "traces":
        traced = [0]

        def wrapper(*a: Any, **k: Any) -> Any:
            traced[0] += 1
            return fn(*a, **k)

        target = jax.jit(wrapper, static_argnames=req.static or None)
        for i, call in enumerate(calls):
            before = traced[0]
            out = jax.block_until_ready(target(*_to_key_if_needed(call["args"]), **call.get("kwargs", {})))
            counts.append(traced[0] - before)
            results[f"result{i}"] = out
    elif how == "compiles":
        _listen_for_compiles()
        for i, call in enumerate(calls):
            before = _COMPILES[0]
            out = fn(*_to_key_if_needed(call["args"]), **call.get("kwargs", {}))
            try:
                out = jax.block_until_ready(out)
            except Exception:
                pass
            counts.append(_COMPILES[0] - before)
            results[f"result{i}"] = out
    else:
        raise ValueError(f"unknown count {how!r}")
    return messages.Counted(counts=tuple(counts)), results


#: The handler of each request the kernel answers: (request, its values) -> (reply, values).
_OPS = {
    messages.Probe.NAME: _op_probe,
    messages.Call.NAME: _op_call,
    messages.Export.NAME: _op_export,
    messages.Count.NAME: _op_count,
}
_REQUESTS = (messages.Probe, messages.Call, messages.Export, messages.Count)


def reap_children(budget: float = 1.0) -> int:
    """Collect the kernel's dead children (zombies count against the process limit)."""
    deadline = time.monotonic() + budget
    reaped = 0
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            time.sleep(0.02)
        else:
            reaped += 1
    return reaped


def answer(header: dict[str, Any], payload: bytes) -> tuple[dict[str, Any], bytes]:
    """The reply frame (header, payload) to one request.
    Never raises: a failure is the reply.  ``serve`` answers the worker's files with it, and the
    in-notebook self-check (``grader.selfcheck``) calls it directly."""
    rid = header.get("id") if type(header.get("id")) is int else None
    try:
        request = messages.decode_request(header, *_REQUESTS)
        values = protocol.unpack_values(header, payload) if "values" in header else {}
        resp, out_values = _OPS[request.NAME](request, values)
    except _Missing as exc:
        resp, out_values = messages.Missing(name=str(exc.args[0])[: messages.MAX_TEXT]), {}
    except BaseException as exc:
        resp, out_values = _error(exc), {}
    try:
        frag, blob = protocol.pack_values(out_values)
    except (TypeError, ValueError) as exc:
        resp, blob = messages.Unsendable(why=str(exc)[:1000]), b""
        frag = {}
    return {**replace(resp, id=rid).encode(), **frag}, blob


#: Python 3.11's exception groups: their members' tracebacks hold frames too.
_GROUPS: tuple[type, ...] = tuple(t for t in (getattr(builtins, "BaseExceptionGroup", None),) if t)


def forget_errors_after_each_cell() -> None:
    """Let go of a failed cell's exception once the cell is over: IPython callbacks the worker
    registers as the kernel starts (``post_run_cell``, and ``pre_execute`` for what only a
    garbage collection frees).

    IPython keeps the last exception for ``%debug`` and ``%tb``, which grading never uses: in
    ``sys.last_*``, its traceback formatters and the last execution result.  The traceback holds
    the frames of the code that raised and every local variable they had, so a cell that failed
    after building large arrays (or Python 3.12's tokenizer, whose tokens of a 200,000-character
    line filled the kernel's address space before its MemoryError) left that memory taken for the
    rest of the grading, and the tests' calls ran out of it.  After each cell those references
    are dropped; after a failed one, the local variables of every frame its exception (its cause
    and context, an exception group's members) went through are cleared
    (:func:`traceback.clear_frames`): a name the notebook keeps (``saved = exc``) keeps the
    exception, not its frames' locals.  An error in transforming the cell (IPython syntax) is
    also held by ipykernel's own first transform, in a reference cycle that lives until the reply
    is sent: the garbage is collected as the next execution starts.

    Nothing the grader reports changes: the cell's reply carries the traceback text IPython
    formatted as the error was shown, before these callbacks, and its ename and evalue, which
    clearing frames does not change."""
    from IPython import get_ipython

    ip = get_ipython()
    if ip is None:
        return
    for event, callback in (("post_run_cell", _forget_error), ("pre_execute", _collect_if_asked)):
        if callback not in ip.events.callbacks.get(event, []):
            ip.events.register(event, callback)


#: Whether the next execution starts with a garbage collection (a cell failed in its transform).
_COLLECT = [False]


def _forget_error(result: Any = None) -> None:
    try:  # a callback that raises (or is interrupted) would print IPython's warning into the cell's output
        _forget(result)
    except BaseException:  # the cell is over: there is nothing left for an interrupt to stop
        pass


#: Code that can be suspended (generators, coroutines): clearing a suspended one's frame would
#: close it (Python 3.12 and before), and the notebook may still resume it.
_SUSPENDABLE = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR | inspect.CO_ITERABLE_COROUTINE


def _clear_frames(tb: Any) -> None:
    """:func:`traceback.clear_frames`, except the frames of generators and coroutines, and on
    Python 3.12 and before, the frames' copies of their locals too: a frame whose ``f_locals`` was
    read (IPython's traceback formatter reads them) keeps a dict of them that ``frame.clear()``
    leaves; reading ``f_locals`` again brings that dict up to date with the cleared frame (from
    3.13 ``f_locals`` is a view and holds nothing)."""
    while tb is not None:
        frame = tb.tb_frame
        if not frame.f_code.co_flags & _SUSPENDABLE:
            try:
                frame.clear()
            except RuntimeError:  # still running (a frame that caught the error)
                pass
            frame.f_locals  # noqa: B018 - read for its effect
        tb = tb.tb_next


def _collect_if_asked() -> None:
    if _COLLECT[0]:
        _COLLECT[0] = False
        try:
            import gc

            gc.collect()
        except BaseException:
            pass


def _forget(result: Any) -> None:
    from IPython import get_ipython

    for name in ("last_exc", "last_type", "last_value", "last_traceback"):
        if hasattr(sys, name):
            delattr(sys, name)
    ip = get_ipython()
    if ip is not None:
        for formatter, attribute in (
            (getattr(ip, "InteractiveTB", None), "tb"),
            (getattr(ip, "SyntaxTB", None), "last_syntax_error"),
        ):
            if formatter is not None and hasattr(formatter, attribute):
                setattr(formatter, attribute, None)
    if result is None or getattr(result, "success", True):
        return
    # the frames' locals go now: ipykernel still holds the error until its reply is sent, and the
    # frames and the error refer to each other (only a garbage collection, some time, would free them)
    seen: set[int] = set()
    errors = [getattr(result, "error_before_exec", None), getattr(result, "error_in_exec", None)]
    _COLLECT[0] = _COLLECT[0] or errors[0] is not None
    while errors and len(seen) < 1000:  # the error, its cause and context, an exception group's members
        error = errors.pop()
        if not isinstance(error, BaseException) or id(error) in seen:
            continue
        seen.add(id(error))
        _clear_frames(error.__traceback__)
        errors += [error.__cause__, error.__context__]
        if isinstance(error, _GROUPS):
            errors += list(error.exceptions)
    if ip is not None and getattr(ip, "last_execution_result", None) is result:  # the same cell's, without its error
        kept = type(result)(result.info)
        kept.execution_count = result.execution_count
        ip.last_execution_result = kept


def serve(req_path: str, resp_path: str) -> None:
    """Answer one request file; always writes a response frame."""
    with open(req_path, "rb") as f:
        rfd = f.fileno()
        header, payload = protocol.read_frame(rfd)
    reply, blob = answer(header, payload)
    try:
        _write_response(resp_path, reply, blob)
    except OSError as exc:  # the file size limit (EFBIG) or a full disk: the value is too large
        why = f"the value is too large to send ({len(blob)} bytes: {exc})"[:1000]
        rid = header.get("id") if type(header.get("id")) is int else None
        _write_response(resp_path, messages.Unsendable(why=why, id=rid).encode(), b"")


def _write_response(resp_path: str, reply: dict[str, Any], blob: bytes) -> None:
    tmp = resp_path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        protocol.write_frame(fd, reply, blob)
    finally:
        os.close(fd)
    os.replace(tmp, resp_path)
