"""The evaluator's answers, kept by trusted code and shared by every submission of a batch.

The evaluator runs an exported module (StableHLO, which has no side effects: host callbacks are
refused) on inputs the trusted side chose.  Its answer is a function of the module's bytes, the
inputs and the evaluator itself (jaxgrade, JAX, jaxlib, the sandbox's XLA flags), so two
students whose functions export to the same bytes get the same answer, and the second need not
compile and run the module again.  Correct students often write the same code: in the sample
class two of three correct notebooks export the same 25 modules.

- **Keyed by everything the answer depends on.**  The entry's name is the sha256 of the request
  (its kind and fields, never its id) and of the packed values (the module's bytes and the
  inputs).  The folder is named by the assignment version, the JAX and jaxlib versions and the
  sandbox's XLA flags (:func:`grader.host.xla_cache.cache_key`): a changed test, reference,
  setting or jaxgrade is another folder.
- **Only trusted code writes it, and no sandbox can see it.**  A grading process stores the
  reply it received from an evaluator sandbox; the folder is never mounted in a sandbox.  The
  kernel cannot forge the evaluator's reply: the evaluator is another sandbox (its own PID
  namespace and, as root, its own uid).  So this cache is used only with bubblewrap.
- **Keyed by the evaluator's code too**: the folder's name also digests ``grader/sandboxed/``
  and ``grader/wire/`` (:func:`code_digest`), so a fixed analysis is never answered from before.
- **Only plain answers are kept, from an evaluator that only ran plain modules**
  (:func:`eval_plain`): a successful run whose analyses did not fail and whose custom calls are
  only JAX's shape assertions and sharding markers.  One evaluator answers every request of a
  submission, so a module that could leave state behind (a custom call into native code, an
  analysis that ran out of memory, an error) must not decide what a classmate's identical
  module is answered: after one, nothing that evaluator answers is kept.  A module that raised,
  timed out or killed its evaluator is asked again next time.
- **Folders must be ours**: an existing folder that another user owns, or that others can
  write, turns the cache off (a shared ``JAXGRADE_CACHE_DIR`` must not take planted answers).
- **An entry is read back through the same checks as a live reply** (the frame's size, the
  typed message, the values' decoding), and one that fails them is a miss.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

MAX_ENTRY_BYTES = 16 << 20  # a larger answer is not kept (it is cheap to recompute next to its size)
MAX_CACHE_BYTES = 1 << 30  # per assignment version, as each grading process counts it; past it, nothing more is written
_LEN = 8  # bytes of the header's length at the start of an entry


#: Custom-call targets JAX itself puts in the modules of plain array code (shape polymorphism's
#: assertions, sharding annotations); any other is native code that a kept answer must not follow.
PLAIN_CUSTOM_CALLS = frozenset({"shape_assertion", "Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape"})


def eval_plain(reply: Any) -> bool:
    """Whether an evaluator's ``Evaluated`` reply came from a plain module (see the module doc)."""
    analysis = reply.analysis if isinstance(reply.analysis, dict) else {}
    calls = reply.custom_calls
    return (
        "analysis_error" not in analysis
        and getattr(reply, "per_example_error", None) is None
        and calls is not None
        and set(calls) <= PLAIN_CUSTOM_CALLS
    )


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """A digest of the code that produces and decodes an answer (``grader/sandboxed/``, ``grader/wire/``)."""
    package = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for folder in ("sandboxed", "wire"):
        for path in sorted((package / folder).glob("*.py")):
            h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:12]


def beside(xla_cache_folder: Path) -> Path:
    """The evaluator cache that goes with a trusted compilation cache folder: the same key, plus
    the evaluator's code (``<root>/xla/<name>-<key>`` gives ``<root>/evals/<name>-<key>-<code>``)."""
    return xla_cache_folder.parent.parent / "evals" / f"{xla_cache_folder.name}-{code_digest()}"


class EvalCache:
    """A folder of evaluator answers (mode 0700, entries 0600, written atomically)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.hits = 0
        self.misses = 0
        self._bytes: int | None = None  # what the folder holds, counted once per process
        self._usable: bool | None = None  # the folders are ours (checked once)

    def usable(self) -> bool:
        """Whether the folder and its parent are ours and private (or not there yet)."""
        if self._usable is None:
            self._usable = True
            for d in (self.path.parent, self.path):
                try:
                    st = d.lstat()
                except FileNotFoundError:
                    continue
                except OSError:
                    st = None
                if st is None or not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
                    log.warning(
                        "not using the evaluator cache %s: %s is not a private folder of this user", self.path, d
                    )
                    self._usable = False
                    break
        return self._usable

    @staticmethod
    def key(request: dict[str, Any], fragment: dict[str, Any], payload: bytes) -> str:
        """The entry for a request header (its ``id`` left out), its values' header fragment and payload."""
        head = {k: v for k, v in request.items() if k != "id"}
        h = hashlib.sha256()
        h.update(json.dumps([head, fragment], sort_keys=True, separators=(",", ":")).encode())
        h.update(b"\0")
        h.update(payload)
        return h.hexdigest()

    def _file(self, key: str) -> Path:
        return self.path / key[:2] / key

    def get(self, key: str) -> tuple[dict[str, Any], bytes] | None:
        """The stored reply (header without its id, payload), or None."""
        if not self.usable():
            self.misses += 1
            return None
        try:
            fd = os.open(self._file(key), os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            self.misses += 1
            return None
        try:
            with os.fdopen(fd, "rb") as f:
                data = f.read(MAX_ENTRY_BYTES + 1)
            n = int.from_bytes(data[:_LEN], "big")
            header = json.loads(data[_LEN : _LEN + n].decode("utf-8"))
            if len(data) > MAX_ENTRY_BYTES or not isinstance(header, dict):
                raise ValueError("not an entry")
        except (OSError, ValueError):
            self.misses += 1
            return None
        self.hits += 1
        return header, data[_LEN + n :]

    def damaged(self, key: str) -> None:
        """The entry read back failed a reply's checks: count it as a miss and let it be rewritten."""
        self.hits, self.misses = self.hits - 1, self.misses + 1
        with contextlib.suppress(OSError):
            os.unlink(self._file(key))

    def put(self, key: str, header: dict[str, Any], payload: bytes) -> bool:
        """Store a reply (its id left out); False when it is too large or the cache is full.
        Never raises for the disk: the cache only saves time."""
        head = json.dumps({k: v for k, v in header.items() if k != "id"}, separators=(",", ":")).encode()
        data = len(head).to_bytes(_LEN, "big") + head + payload
        if len(data) > MAX_ENTRY_BYTES or not self.usable():
            return False
        try:
            if self._bytes is None:
                self._bytes = _folder_bytes(self.path)
            if self._bytes + len(data) > MAX_CACHE_BYTES:
                return False
            folder = self._file(key).parent
            for d in (self.path.parent, self.path, folder):
                d.mkdir(mode=0o700, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=".new-")  # 0600
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.replace(tmp, self._file(key))
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        except OSError:
            return False
        self._bytes += len(data)
        return True


def _folder_bytes(path: Path) -> int:
    total = 0
    with contextlib.suppress(OSError):
        for sub in os.scandir(path):
            if sub.is_dir(follow_symlinks=False):
                for entry in os.scandir(sub.path):
                    with contextlib.suppress(OSError):
                        total += entry.stat(follow_symlinks=False).st_size
    return total
