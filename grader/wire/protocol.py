"""The wire format between the trusted grader and the sandbox: framed JSON plus raw ``.npy``.

Only plain data crosses the trust boundary.  A frame is::

    magic b"JGF1" | u32 header length | u64 payload length | header JSON | payload

The header is a JSON object.  Values (function arguments, results) are encoded as a JSON tree
of tagged nodes; arrays live in the payload as consecutive ``.npy`` records (no pickle, no zip),
referenced from the tree by index.  :func:`unpack_values` is the trusted side's gate: it accepts
only the tags below, numeric dtypes, bounded sizes and depths, and returns exact
``np.ndarray`` objects, so nothing a student's process sends can carry behaviour.

This module is imported on both sides of the boundary and must not import jax at module level,
nor NumPy: the sandboxed worker relays frames without decoding their arrays, and NumPy was a
fifth of its imports' CPU at every sandbox's start (bench/README.md, "Session 27").  Each
function that handles arrays imports it.
"""

from __future__ import annotations

import io
import json
import math
import os
import select
import struct
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "MAGIC",
    "MAX_DEPTH",
    "MAX_HEADER_BYTES",
    "MAX_NODES",
    "MAX_PAYLOAD_BYTES",
    "MAX_STRING",
    "NUMERIC_KINDS",
    "ChannelClosed",
    "ChannelTimeout",
    "Limits",
    "PRNGKeyData",
    "ProtocolError",
    "ShapeSpec",
    "ValueEncoder",
    "abstract",
    "pack_values",
    "read_frame",
    "unpack_values",
    "value_kind",
    "write_frame",
]

MAGIC = b"JGF1"
_HEAD = struct.Struct(">4sIQ")

#: Default caps applied to anything read from the sandbox.
MAX_HEADER_BYTES = 8 * 1024 * 1024
MAX_PAYLOAD_BYTES = 512 * 1024 * 1024
MAX_DEPTH = 32
MAX_NODES = 100_000
MAX_STRING = 100_000
NUMERIC_KINDS = frozenset("biufc")


class ProtocolError(Exception):
    """The other side sent something that is not a well-formed frame or value."""


class ChannelClosed(ProtocolError, EOFError):
    """The other side closed the channel (usually: the process died)."""


class ChannelTimeout(ProtocolError, TimeoutError):
    """Nothing (complete) arrived before the deadline."""


@dataclass(frozen=True)
class Limits:
    """Caps on decoded values (trusted side)."""

    max_array_bytes: int = 256 * 1024 * 1024
    max_total_bytes: int = MAX_PAYLOAD_BYTES
    max_depth: int = MAX_DEPTH
    max_nodes: int = MAX_NODES


@dataclass(frozen=True)
class PRNGKeyData:
    """A typed JAX PRNG key as plain data: the implementation name and its raw key data."""

    impl: str
    data: np.ndarray


@dataclass(frozen=True)
class ShapeSpec:
    """An abstract argument: a shape and a dtype, no values.  Exports are traced from these, so
    no concrete value of a hidden input is reachable in the kernel while it exports.  ``impl``
    is set for a typed PRNG key (``shape`` is then the key array's shape, without key data)."""

    shape: tuple[int, ...]
    dtype: str
    impl: str = ""


def abstract(value: Any) -> Any:
    """``value`` (a pytree of arrays, numbers and typed keys) with every leaf replaced by its
    :class:`ShapeSpec`; containers and ``None`` are kept."""
    if value is None or isinstance(value, ShapeSpec):
        return value
    if type(value) in (list, tuple):
        return type(value)(abstract(v) for v in value)
    if type(value) is dict:
        return {k: abstract(v) for k, v in value.items()}
    if isinstance(value, PRNGKeyData):
        return ShapeSpec(tuple(value.data.shape[:-1]), "key", value.impl)
    import numpy as np

    if isinstance(value, (bool, int, float, complex, np.ndarray, np.generic)):
        arr = np.asarray(value)
        return ShapeSpec(tuple(int(d) for d in arr.shape), arr.dtype.name)
    mod = type(value).__module__ or ""
    if mod.startswith(("jax", "jaxlib")):
        arr = np.asarray(value)
        return ShapeSpec(tuple(int(d) for d in arr.shape), arr.dtype.name)
    raise TypeError(f"cannot describe a {type(value).__qualname__} by shape and dtype")


# --------------------------------------------------------------------------- frames


def write_frame(fd: int, header: dict[str, Any], payload: bytes | bytearray | memoryview = b"") -> None:
    """Write one frame to a file descriptor (blocking, handles short writes)."""
    head = json.dumps(header, allow_nan=True, separators=(",", ":")).encode()
    data = _HEAD.pack(MAGIC, len(head), len(payload)) + head
    _write_all(fd, data)
    if payload:
        _write_all(fd, memoryview(payload))


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _read_exact(fd: int, n: int, deadline: float | None, interrupt: int | None = None) -> bytes:
    chunks: list[bytes] = []
    remaining = n
    while remaining:
        if deadline is not None or interrupt is not None:
            timeout = None if deadline is None else deadline - time.monotonic()
            if timeout is not None and timeout <= 0:
                raise ChannelTimeout("timed out waiting for the other side")
            ready, _, _ = select.select([fd] if interrupt is None else [fd, interrupt], [], [], timeout)
            if interrupt is not None and interrupt in ready:
                raise KeyboardInterrupt  # a stop was asked (grader.host.interrupts)
            if not ready:
                raise ChannelTimeout("timed out waiting for the other side")
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            raise ChannelClosed("the other side closed the channel")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def read_frame(
    fd: int,
    *,
    deadline: float | None = None,
    max_header: int = MAX_HEADER_BYTES,
    max_payload: int = MAX_PAYLOAD_BYTES,
    interrupt: int | None = None,
) -> tuple[dict[str, Any], bytes]:
    """Read one frame; raise :class:`ProtocolError` on anything malformed or oversized, and
    KeyboardInterrupt as soon as the descriptor ``interrupt`` is readable (a stop was asked)."""
    magic, hlen, plen = _HEAD.unpack(_read_exact(fd, _HEAD.size, deadline, interrupt))
    if magic != MAGIC:
        raise ProtocolError(f"bad frame magic {magic!r}")
    if hlen > max_header:
        raise ProtocolError(f"frame header of {hlen} bytes exceeds the cap of {max_header}")
    if plen > max_payload:
        raise ProtocolError(f"frame payload of {plen} bytes exceeds the cap of {max_payload}")
    try:
        header = json.loads(_read_exact(fd, hlen, deadline, interrupt))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProtocolError(f"frame header is not JSON: {exc}") from None
    except RecursionError:
        raise ProtocolError("frame header is nested too deeply") from None
    if not isinstance(header, dict):
        raise ProtocolError("frame header is not a JSON object")
    payload = _read_exact(fd, plen, deadline, interrupt) if plen else b""
    return header, payload


# --------------------------------------------------------------------------- values


class ValueEncoder:
    """Encode a pytree of arrays and Python scalars into (tree, payload)."""

    def __init__(self, *, max_depth: int = MAX_DEPTH) -> None:
        self.max_depth = max_depth
        self._chunks: list[bytes] = []
        self._lengths: list[int] = []

    def payload(self) -> bytes:
        return b"".join(self._chunks)

    def lengths(self) -> list[int]:
        return list(self._lengths)

    def _add_array(self, arr: np.ndarray) -> int:
        import numpy as np

        buf = io.BytesIO()
        np.lib.format.write_array(buf, np.asarray(arr, order="C"), allow_pickle=False)  # keeps 0-d shapes
        data = buf.getvalue()
        self._chunks.append(data)
        self._lengths.append(len(data))
        return len(self._lengths) - 1

    def encode(self, obj: Any, depth: int = 0) -> dict[str, Any]:
        if depth > self.max_depth:
            raise TypeError(f"value is nested more than {self.max_depth} levels deep")
        if obj is None:
            return {"t": "none"}
        if isinstance(obj, bool):
            return {"t": "bool", "v": bool(obj)}
        if isinstance(obj, int) and type(obj).__module__ == "builtins":
            return {"t": "int", "v": int(obj)}
        if isinstance(obj, float) and type(obj).__module__ == "builtins":
            return {"t": "float", "v": float(obj)}
        if isinstance(obj, str):
            return {"t": "str", "v": str(obj)}
        if isinstance(obj, PRNGKeyData):
            return {"t": "key", "impl": obj.impl, "i": self._add_array(obj.data)}
        if isinstance(obj, ShapeSpec):
            return {"t": "spec", "shape": [int(d) for d in obj.shape], "dtype": obj.dtype, "impl": obj.impl}
        if type(obj) is tuple:
            return {"t": "tuple", "v": [self.encode(v, depth + 1) for v in obj]}
        if type(obj) is list:
            return {"t": "list", "v": [self.encode(v, depth + 1) for v in obj]}
        if type(obj) is dict:
            keys = list(obj.keys())
            for k in keys:
                if not isinstance(k, str):
                    raise TypeError(f"dict keys must be strings, got {type(k).__name__}")
            return {"t": "dict", "k": [str(k) for k in keys], "v": [self.encode(obj[k], depth + 1) for k in keys]}
        import numpy as np

        if isinstance(obj, np.ndarray) or isinstance(obj, np.generic):
            arr = np.asarray(obj)
            kind = "numpy_scalar" if isinstance(obj, np.generic) else "numpy"
            return self._array_node(arr, kind)
        # jax arrays (and typed keys) are recognised without importing jax here
        mod = type(obj).__module__ or ""
        if mod.startswith("jax") or mod.startswith("jaxlib"):
            return self._encode_jax(obj)
        raise TypeError(
            f"a value of type {type(obj).__module__}.{type(obj).__qualname__} cannot be sent: "
            "only arrays, numbers, strings, None, and lists/tuples/dicts of them"
        )

    def _array_node(self, arr: np.ndarray, kind: str) -> dict[str, Any]:
        if arr.dtype.kind not in NUMERIC_KINDS:
            raise TypeError(f"array of dtype {arr.dtype} is not numeric")
        return {"t": "array", "kind": kind, "i": self._add_array(arr)}

    def _encode_jax(self, obj: Any) -> dict[str, Any]:
        import jax
        import numpy as np

        if isinstance(obj, jax.Array):
            if jax.dtypes.issubdtype(obj.dtype, jax.dtypes.prng_key):
                impl = str(jax.random.key_impl(obj))
                data = np.asarray(jax.random.key_data(obj))
                return {"t": "key", "impl": impl, "i": self._add_array(data)}
            return self._array_node(np.asarray(obj), "jax")
        raise TypeError(f"a value of type {type(obj).__qualname__} cannot be sent")


def pack_values(values: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
    """Encode several named values into one header fragment and one payload."""
    enc = ValueEncoder()
    trees = {name: enc.encode(v) for name, v in values.items()}
    return {"values": trees, "arrays": enc.lengths()}, enc.payload()


def _load_arrays(lengths: Any, payload: bytes, limits: Limits) -> list[np.ndarray]:
    if not isinstance(lengths, list) or not all(type(n) is int and n >= 0 for n in lengths):
        raise ProtocolError("array table is not a list of lengths")
    if sum(lengths) != len(payload):
        raise ProtocolError("array table does not match the payload size")
    if sum(lengths) > limits.max_total_bytes:
        raise ProtocolError("values exceed the total size cap")
    arrays: list[np.ndarray] = []
    if not lengths:
        return arrays
    import numpy as np

    offset = 0
    view = memoryview(payload)
    for n in lengths:
        buf = io.BytesIO(view[offset : offset + n])
        offset += n
        try:
            version = np.lib.format.read_magic(buf)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(buf)
            elif version == (2, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(buf)
            else:
                raise ProtocolError(f"unsupported npy version {version}")
        except ValueError as exc:
            raise ProtocolError(f"bad npy record: {exc}") from None
        if dtype.kind not in NUMERIC_KINDS or dtype.hasobject or dtype.fields is not None:
            raise ProtocolError(f"array dtype {dtype} is not a plain numeric dtype")
        if any(d < 0 for d in shape):
            raise ProtocolError(f"npy record has a negative dimension in shape {shape}")
        count = math.prod(shape)
        if count * dtype.itemsize > limits.max_array_bytes:
            raise ProtocolError(
                f"array of shape {shape} and dtype {dtype} exceeds the cap of {limits.max_array_bytes} bytes"
            )
        data = buf.read()
        if len(data) != count * dtype.itemsize:
            raise ProtocolError("npy record length does not match its header")
        arr = np.frombuffer(data, dtype=dtype, count=count)
        arr = arr.reshape(shape, order="F" if fortran else "C")
        arr = np.array(arr, dtype=dtype.newbyteorder("=") if dtype.byteorder not in "=|" else dtype, copy=True)
        if type(arr) is not np.ndarray:  # pragma: no cover - defensive
            raise ProtocolError("array did not decode to a plain ndarray")
        arrays.append(arr)
    return arrays


class _Decoder:
    def __init__(self, arrays: list[np.ndarray], limits: Limits) -> None:
        self.arrays = arrays
        self.limits = limits
        self.nodes = 0
        self.used: set[int] = set()

    def array(self, node: dict[str, Any]) -> np.ndarray:
        i = node.get("i")
        if type(i) is not int or not 0 <= i < len(self.arrays) or i in self.used:
            raise ProtocolError("array reference out of range")
        self.used.add(i)
        return self.arrays[i]

    def decode(self, node: Any, depth: int = 0) -> Any:
        self.nodes += 1
        if self.nodes > self.limits.max_nodes:
            raise ProtocolError(f"value has more than {self.limits.max_nodes} nodes")
        if depth > self.limits.max_depth:
            raise ProtocolError(f"value is nested more than {self.limits.max_depth} levels deep")
        if not isinstance(node, dict):
            raise ProtocolError("value node is not an object")
        t = node.get("t")
        if t == "none":
            return None
        if t == "bool":
            v = node.get("v")
            if type(v) is not bool:
                raise ProtocolError("bad bool node")
            return v
        if t == "int":
            v = node.get("v")
            if type(v) is not int or not -(2**63) <= v < 2**64:
                raise ProtocolError("bad int node")
            return v
        if t == "float":
            v = node.get("v")
            if type(v) is int:
                v = float(v)
            if type(v) is not float:
                raise ProtocolError("bad float node")
            return v
        if t == "str":
            v = node.get("v")
            if type(v) is not str or len(v) > MAX_STRING:
                raise ProtocolError("bad str node")
            return v
        if t == "array":
            arr = self.array(node)
            if node.get("kind") == "numpy_scalar":
                return arr[()] if arr.ndim == 0 else arr
            return arr
        if t == "key":
            impl = node.get("impl")
            if type(impl) is not str or len(impl) > 100:
                raise ProtocolError("bad key node")
            return PRNGKeyData(impl, self.array(node))
        if t == "spec":
            shape, dtype, impl = node.get("shape"), node.get("dtype"), node.get("impl", "")
            if (
                not isinstance(shape, list)
                or len(shape) > 32
                or not all(type(d) is int and 0 <= d < 2**31 for d in shape)
                or type(dtype) is not str
                or type(impl) is not str
                or len(dtype) > 40
                or len(impl) > 100
            ):
                raise ProtocolError("bad spec node")
            return ShapeSpec(tuple(shape), dtype, impl)
        if t in ("list", "tuple"):
            items = node.get("v")
            if not isinstance(items, list):
                raise ProtocolError(f"bad {t} node")
            out = [self.decode(v, depth + 1) for v in items]
            return out if t == "list" else tuple(out)
        if t == "dict":
            keys, items = node.get("k"), node.get("v")
            if not isinstance(keys, list) or not isinstance(items, list) or len(keys) != len(items):
                raise ProtocolError("bad dict node")
            if not all(type(k) is str and len(k) <= MAX_STRING for k in keys) or len(set(keys)) != len(keys):
                raise ProtocolError("bad dict keys")
            return {k: self.decode(v, depth + 1) for k, v in zip(keys, items)}
        raise ProtocolError(f"unknown value tag {t!r}")


def unpack_values(header: dict[str, Any], payload: bytes, limits: Limits | None = None) -> dict[str, Any]:
    """Decode what :func:`pack_values` produced, validating everything (trusted side)."""
    limits = limits or Limits()
    arrays = _load_arrays(header.get("arrays", []), payload, limits)
    trees = header.get("values", {})
    if not isinstance(trees, dict):
        raise ProtocolError("values is not an object")
    dec = _Decoder(arrays, limits)
    return {str(name): dec.decode(tree) for name, tree in trees.items()}


def value_kind(node: dict[str, Any]) -> str:
    """The ``kind`` recorded for an array node (``jax``, ``numpy``...), for structure checks."""
    return str(node.get("kind", ""))
