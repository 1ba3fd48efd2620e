"""The reference solution's outputs, computed once per trusted process and input, not once per student.

Every submission of a batch gets the same hidden inputs (the ``rng`` fixture is seeded by the
assignment's seed and the test's name), so the reference solution computes the same outputs for
each of them: 0.1 to 0.25 CPU s of a trusted worker's time per notebook for five of the nine
assignments (bench/README.md, "Session 28").  The tests see the reference module through
:class:`KeptModule`, whose functions keep their outputs by their inputs:

- **Only inputs whose value is wholly known are keys**: NumPy arrays and scalars (not object
  arrays), concrete JAX arrays (their dtype, weak type and bytes; typed PRNG keys by their
  implementation and key data), Python numbers, strings, bytes and None, and tuples, lists and
  dicts of them (exact types).  Anything else (a tracer under ``jax.grad``, a callable, a named
  tuple, an object of the course's own) makes the call go through, as without this module.
- **JAX's configuration is part of the key**: every one of its states as the call sees it
  (``enable_x64``, dtype promotion, the PRNG implementation, ... in a context manager too).
- **A function's outputs are kept only once they were seen to repeat.**  The second call with
  the same key computes again and compares bit for bit; a function that gave two different
  outputs (a reference that reads the clock, NumPy's global random state, or state that tests
  change) is never kept again in this process, and every call of it computes, as without this
  module.  Exceptions are never kept.
- **Outputs are copied out**: NumPy arrays and the lists and dicts around them are copied for
  each caller, so a test that changes what it got changes nothing another test gets (JAX arrays
  are immutable and handed over as they are).  An output of another kind is not kept.
- **Bounded**: at most :data:`BUDGET_BYTES` of kept outputs per process, the least recently used
  dropped first.

This is the trusted side only: the reference and the hidden inputs never enter a sandbox, and
nothing a submission sends is a key unless a test passes it to the reference, in which case its
value (not its origin) is the key, as the reference's output depends on nothing else.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import sys
import threading
import types
from collections import OrderedDict
from typing import Any

log = logging.getLogger(__name__)

#: The kept outputs of one process, all reference modules together.
BUDGET_BYTES = 64 * 2**20
#: What a kept leaf costs besides its array bytes (the key, the entry).
_OVERHEAD = 256
#: Containers deeper than this are not keys (a reference's inputs are shallow pytrees).
_MAX_DEPTH = 32


class _Unkeyable(Exception):
    """An input or output whose value this module does not capture wholly."""


class _Entry:
    __slots__ = ("nbytes", "seen_twice", "value")

    def __init__(self, value: Any, nbytes: int) -> None:
        self.value = value
        self.nbytes = nbytes
        self.seen_twice = False


class KeptOutputs:
    """A process's kept outputs: key -> output, least recently used first, within a byte budget."""

    def __init__(self, budget: int = BUDGET_BYTES) -> None:
        self.budget = budget
        self._entries: OrderedDict[bytes, _Entry] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        #: functions seen giving two different outputs for one key: never kept again
        self._unkept: set[str] = set()

    def call(self, label: str, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if label in self._unkept:
            return fn(*args, **kwargs)
        try:
            key = _key(label, args, kwargs)
        except _Unkeyable:
            return fn(*args, **kwargs)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
        if entry is not None and entry.seen_twice:
            return _freeze(entry.value, 0)[0]  # the caller's own copy of its arrays, lists and dicts
        out = fn(*args, **kwargs)
        try:
            kept, nbytes = _freeze(out, 0)
        except _Unkeyable:
            return out
        with self._lock:
            if entry is None:
                self._store(key, _Entry(kept, nbytes))
            elif _same(entry.value, kept):
                entry.seen_twice = True
            else:
                self._forget(label)
                log.warning(
                    "the reference's `%s` gave two different outputs for the same inputs: "
                    "its outputs are computed for every call",
                    label.rsplit(":", 1)[-1],
                )
        return out

    def _store(self, key: bytes, entry: _Entry) -> None:
        if entry.nbytes > self.budget:
            return
        self._entries[key] = entry
        self._bytes += entry.nbytes
        while self._bytes > self.budget:
            _, dropped = self._entries.popitem(last=False)
            self._bytes -= dropped.nbytes

    def _forget(self, label: str) -> None:
        self._unkept.add(label)
        prefix = _label_prefix(label)
        for key in [k for k in self._entries if k.startswith(prefix)]:
            self._bytes -= self._entries.pop(key).nbytes

    def __len__(self) -> int:
        return len(self._entries)


#: The store of this process (the reference modules of every assignment it grades).
STORE = KeptOutputs()


class KeptModule:
    """A reference module whose functions keep their outputs (the module docstring); every other
    attribute is the module's own."""

    def __init__(self, module: types.ModuleType, version: str, store: KeptOutputs | None = None) -> None:
        self._module = module
        self._label = f"{getattr(module, '__file__', None) or module.__name__}@{version}"
        self._store = store if store is not None else STORE  # an empty store is falsy (len)
        self._functions: dict[str, tuple[Any, _KeptFunction]] = {}
        self.__doc__ = module.__doc__

    def __getattr__(self, name: str) -> Any:
        if name in ("_module", "_label", "_store", "_functions"):  # not set yet (a copy being made)
            raise AttributeError(name)
        if name.startswith("_"):  # dunders and the module's private names: as they are
            return getattr(self._module, name)
        value = getattr(self._module, name)
        if not callable(value) or isinstance(value, (type, types.ModuleType)):
            return value
        known = self._functions.get(name)
        if known is None or known[0] is not value:  # the same wrapper each time, while the function stays
            known = (value, _KeptFunction(value, f"{self._label}:{name}", self._store))
            self._functions[name] = known
        return known[1]

    def __dir__(self) -> list[str]:
        return dir(self._module)

    def __repr__(self) -> str:
        return f"<kept outputs of {self._module!r}>"


class _KeptFunction:
    """One reference function, calling through :class:`KeptOutputs`; its other attributes (a jitted
    function's ``lower``, a custom_vjp's ``defvjp``) are the function's own."""

    def __init__(self, fn: Any, label: str, store: KeptOutputs) -> None:
        self._fn = fn
        self._label = label
        self._store = store
        functools.update_wrapper(self, fn, updated=())

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._store.call(self._label, self._fn, args, kwargs)

    def __getattr__(self, name: str) -> Any:
        if name in ("_fn", "_label", "_store"):  # not set yet (a copy being made)
            raise AttributeError(name)
        return getattr(self._fn, name)

    def __repr__(self) -> str:
        return f"<kept outputs of {self._fn!r}>"


def _label_prefix(label: str) -> bytes:
    return hashlib.blake2b(label.encode("utf-8", "surrogatepass"), digest_size=16).digest()


# --------------------------------------------------------------------------- keys


def _key(label: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bytes:
    """The label's prefix, then a digest of the inputs and JAX's configuration."""
    h = hashlib.blake2b(digest_size=32)
    _feed(h, args, 0)
    _feed(h, kwargs, 0)
    h.update(_jax_state().encode("utf-8", "surrogatepass"))
    return _label_prefix(label) + h.digest()


@functools.lru_cache(maxsize=1)
def _jax_states() -> tuple[Any, ...]:
    """JAX's configuration states (defined as JAX is imported: listed once)."""
    from jax._src import config

    return tuple(v for v in vars(config).values() if isinstance(v, config.State))


def _jax_state() -> str:
    """Every state of JAX's configuration as this thread sees it; "" where JAX is not imported."""
    if "jax" not in sys.modules:
        return ""
    try:
        return repr([(s.name, s.value) for s in _jax_states()])
    except Exception as exc:  # another JAX's internals: keep nothing rather than guess
        raise _Unkeyable from exc


def _feed(h: Any, value: Any, depth: int) -> None:
    if depth > _MAX_DEPTH:
        raise _Unkeyable
    t = type(value)
    if value is None or t in (bool, int, float, complex, str):
        h.update(f"{t.__name__}:{value!r};".encode("utf-8", "surrogatepass"))
    elif t is bytes:
        h.update(f"bytes:{len(value)};".encode())
        h.update(value)
    elif t in (tuple, list):
        h.update(f"{t.__name__}:{len(value)}(".encode())
        for v in value:
            _feed(h, v, depth + 1)
        h.update(b")")
    elif t is dict:
        if not all(type(k) is str for k in value):
            raise _Unkeyable
        h.update(f"dict:{len(value)}(".encode())
        for k in sorted(value):
            _feed(h, k, depth + 1)
            _feed(h, value[k], depth + 1)
        h.update(b")")
    else:
        _feed_array(h, value)


def _feed_array(h: Any, value: Any) -> None:
    np = sys.modules.get("numpy")
    if np is not None and (type(value) is np.ndarray or isinstance(value, np.generic)):
        if value.dtype.hasobject:
            raise _Unkeyable
        h.update(f"np:{value.dtype.str}:{value.shape};".encode())
        h.update(np.ascontiguousarray(value).tobytes())
        return
    jax = sys.modules.get("jax")
    if jax is None or np is None or not _concrete_jax_array(jax, value):
        raise _Unkeyable
    try:
        if jax.dtypes.issubdtype(value.dtype, jax.dtypes.prng_key):
            data = np.asarray(jax.random.key_data(value))
            h.update(f"key:{jax.random.key_impl(value)}:{value.shape}:{data.dtype.str};".encode())
            h.update(data.tobytes())
            return
        data = np.asarray(value)
    except Exception as exc:  # deleted, donated, on a device it cannot be read from
        raise _Unkeyable from exc
    h.update(f"jax:{data.dtype.str}:{data.shape}:{bool(getattr(value, 'weak_type', False))};".encode())
    h.update(np.ascontiguousarray(data).tobytes())


def _concrete_jax_array(jax: Any, value: Any) -> bool:
    try:
        from jax._src.core import Tracer
    except Exception:
        return False
    return isinstance(value, jax.Array) and not isinstance(value, Tracer)


# --------------------------------------------------------------------------- outputs


def _freeze(value: Any, depth: int) -> tuple[Any, int]:
    """A copy of an output that no caller holds, and its size; _Unkeyable for a kind not kept.
    A kept output is handed out through it too, so each caller gets arrays of its own."""
    if depth > _MAX_DEPTH:
        raise _Unkeyable
    t = type(value)
    if value is None or t in (bool, int, float, complex, str, bytes):
        return value, _OVERHEAD
    if t in (tuple, list):
        parts = [_freeze(v, depth + 1) for v in value]
        return t(p for p, _ in parts), _OVERHEAD + sum(n for _, n in parts)
    if t is dict:
        if not all(type(k) is str for k in value):  # as for keys: compared through _digest
            raise _Unkeyable
        parts_d = {k: _freeze(v, depth + 1) for k, v in value.items()}
        return {k: p for k, (p, _) in parts_d.items()}, _OVERHEAD + sum(n for _, n in parts_d.values())
    np = sys.modules.get("numpy")
    if np is not None and (t is np.ndarray or isinstance(value, np.generic)):
        if value.dtype.hasobject:
            raise _Unkeyable
        return (value.copy() if t is np.ndarray else value), _OVERHEAD + int(value.nbytes)
    jax = sys.modules.get("jax")
    if jax is not None and _concrete_jax_array(jax, value):
        return value, _OVERHEAD + int(getattr(value, "nbytes", 0) or 0)
    raise _Unkeyable


def _digest(value: Any) -> bytes:
    """A frozen output's digest, as a key's (:func:`_feed`: types, dtypes, shapes and bits); two
    outputs are the same when their digests are."""
    h = hashlib.blake2b(digest_size=32)
    _feed(h, value, 0)
    return h.digest()


def _same(a: Any, b: Any) -> bool:
    """Whether two frozen outputs are the same, bit for bit (one that cannot be read back is not)."""
    try:
        return _digest(a) == _digest(b)
    except _Unkeyable:
        return False
