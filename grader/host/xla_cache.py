"""A JAX compilation cache that only trusted code writes and every sandbox of a batch reads.

Most of a correct notebook's grading time is XLA compiling small computations, in the kernel
(the eager calls the tests make) and in the evaluator (the exported modules).  A persistent
compilation cache removes most of it, but a cache that a sandbox writes and another reads lets
one submission poison its neighbours (an executable stored under the key of another
computation).  So:

- **Only trusted code writes it.** Before a batch, the assignment's reference solution is graded
  once, in an ordinary sandbox whose only code is the reference and the tests, with a writable
  staging folder as its cache.  The trusted side then copies the regular files it finds there
  into a fresh folder that it owns, and renames it into place.  One cache per assignment
  version, JAX version and sandbox XLA flags, so a changed test or reference is a new cache.
- **Every sandbox reads it, read-only.** It is bind-mounted read-only at :data:`MOUNT`, with JAX
  told never to write (a minimum compile time no compilation reaches).  The folder is mode 0711:
  a sandbox can open an entry whose name it computes, but not list them.

What a sandbox can learn from it (SECURITY.md): whether the reference's run compiled a given
computation, by computing its cache key (or by timing its own calls, which shows the same);
never the list of entries, the hidden inputs' values, or the reference's code unless it already
holds exactly the same computation.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import platform
import re
import shutil
import stat
import sys
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

log = logging.getLogger(__name__)

MOUNT = "/jaxgrade-xla-cache"  # where a sandbox sees it
ENTRY = re.compile(r"^[A-Za-z0-9_.-]{1,200}$")  # JAX's entry names: a hex key and a suffix
MAX_ENTRY_BYTES = 64 << 20
MAX_CACHE_BYTES = 512 << 20
NEVER = "1e9"  # seconds: no compilation takes this long, so a reading sandbox never writes


@dataclass(frozen=True)
class XlaCache:
    """A cache folder on the host, and whether the sandbox may write it (warming only)."""

    path: Path
    writable: bool = False

    def env(self) -> dict[str, str]:
        env = {
            "JAX_COMPILATION_CACHE_DIR": MOUNT,
            "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0" if self.writable else NEVER,
            "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
            "JAX_COMPILATION_CACHE_MAX_SIZE": "-1",  # no eviction: no lock file, no access-time writes
        }
        if self.writable:
            # the entries are read by student sandboxes: keep the reference's function names and
            # cell file names out of their debug locations (JAX's cache key leaves them out, so
            # hits are unchanged; every sandbox already leaves file locations out: sandbox_env)
            env |= {"JAX_HLO_SOURCE_FILE_CANONICALIZATION_REGEX": ".*"}
            if keeps_a_frame_at_limit_zero():
                # no traceback frames, so no function names: a location is then the file (made
                # empty above) and the line
                env |= {"JAX_INCLUDE_FULL_TRACEBACKS_IN_LOCATIONS": "0"}
        return env

    def bind_args(self) -> list[str]:
        return ["--bind" if self.writable else "--ro-bind", str(self.path), MOUNT]


def keeps_a_frame_at_limit_zero() -> bool:
    """Whether the installed JAX keeps one traceback frame (a function's name, its file and line)
    in a module's locations even with ``JAX_TRACEBACK_IN_LOCATIONS_LIMIT=0``: JAX before 0.7
    (measured: 0.6.2 keeps it; 0.7.2, 0.8.0 and 0.10.2 keep none)."""
    from packaging.version import InvalidVersion, Version

    try:
        return Version(_version("jax")) < Version("0.7")
    except InvalidVersion:
        return False


def cache_root() -> Path:
    """``$JAXGRADE_CACHE_DIR``, else ``$XDG_CACHE_HOME/jaxgrade``, else ``~/.cache/jaxgrade``."""
    explicit = os.environ.get("JAXGRADE_CACHE_DIR")
    if explicit:
        return Path(explicit) / "xla"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "jaxgrade" / "xla"


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return ""


#: How the warming run writes its entries; a change makes every cache a new one, so that entries
#: written the old way are never read again (2: no function names in them on JAX before 0.7 either).
WARMING_FORMAT = 2


def cache_key(assignment_version: str, env: dict[str, str]) -> str:
    """What an entry's validity depends on beyond JAX's own key: the assignment version (tests,
    reference, settings, jaxgrade), the JAX and jaxlib versions, the sandbox's XLA flags and how
    the warming run writes (:data:`WARMING_FORMAT`)."""
    parts = [assignment_version, _version("jax"), _version("jaxlib"), env.get("XLA_FLAGS", ""), WARMING_FORMAT]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:20]


def cache_dir(name: str, assignment_version: str, env: dict[str, str]) -> Path:
    return cache_root() / f"{name}-{cache_key(assignment_version, env)}"


def ready(path: Path) -> XlaCache | None:
    """The read-only cache at ``path``, if it has been warmed (and is ours)."""
    try:
        st = path.lstat()
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        return None
    return XlaCache(path)


def _make_home() -> Path:
    """The folder above ``xla/``, ``evals/`` and ``trusted/``, made 0700 where it is missing, whatever
    the umask (a 002 one would make it group-writable, and the private caches refuse that)."""
    home = cache_root().parent
    home.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        home.mkdir(mode=0o700)
    return home


def staging() -> Path:
    """A fresh folder for a warming sandbox to write: world-writable (the sandbox runs as a
    leased uid), inside a folder only we can enter."""
    root = cache_root()
    _make_home()
    root.mkdir(exist_ok=True)
    os.chmod(root, 0o711)
    private = Path(tempfile.mkdtemp(prefix=".warm-", dir=root))  # 0700: no other host user gets in
    folder = private / "cache"
    folder.mkdir()
    os.chmod(folder, 0o777)
    return folder


def publish(staged: Path, final: Path) -> int:
    """Copy the regular, well-named files of ``staged`` into a fresh folder we own and rename it
    to ``final``; returns the entries kept.  Links, folders, FIFOs, devices, odd names and
    oversized files are left out (:func:`read_entry`); so is everything past :data:`MAX_CACHE_BYTES`."""
    new = Path(tempfile.mkdtemp(prefix=".new-", dir=final.parent))
    kept, total = 0, 0
    try:
        for name in sorted(os.listdir(staged)):
            if not ENTRY.match(name):
                continue
            data = read_entry(os.path.join(staged, name))
            if data is None or total + len(data) > MAX_CACHE_BYTES:
                continue
            target = new / name
            target.write_bytes(data)
            os.chmod(target, 0o644)
            kept, total = kept + 1, total + len(data)
        os.chmod(new, 0o711)
        try:
            os.rename(new, final)
        except OSError:  # another batch published it first: theirs is as good
            shutil.rmtree(new, ignore_errors=True)
    except BaseException:
        shutil.rmtree(new, ignore_errors=True)
        raise
    finally:
        shutil.rmtree(staged.parent, ignore_errors=True)
    return kept


#: The grading processes' own cache (:func:`use_trusted_cache`): at most this much, least
#: recently used entries evicted first.
TRUSTED_MAX_BYTES = 256 << 20


def trusted_root() -> Path:
    """``<root>/trusted``, beside ``xla/`` and ``evals/``: the grading processes' own compilations,
    never mounted into a sandbox."""
    return cache_root().parent / "trusted"


def _host_key() -> str:
    """This kind of machine (architecture and CPU features), which compiled code depends on: a
    home shared by several machines (NFS, a cluster's workers) keeps a folder for each kind."""
    features = ""
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    features = line.split(":", 1)[1].strip()
                    break
    return hashlib.sha256(f"{platform.machine()}\0{features}".encode()).hexdigest()[:12]


def trusted_folder() -> Path:
    return trusted_root() / _host_key()


def jax_started() -> bool:
    """Whether this process's JAX has started a backend or a compilation cache already (then its
    settings are fixed: the flags it compiles with, the cache folder it uses)."""
    if "jax" not in sys.modules:
        return False
    try:
        from jax._src import compilation_cache, xla_bridge

        return bool(xla_bridge.backends_are_initialized()) or getattr(compilation_cache, "_cache", None) is not None
    except Exception:  # another JAX's internals: assume the worst
        return True


def _private(folders: list[Path]) -> Path | None:
    """Make each folder where missing (mode 0700, whatever the umask); the first that is not a
    folder of ours that only we may write, or None."""
    for d in folders:
        with contextlib.suppress(FileExistsError):
            d.mkdir(mode=0o700)
        st = d.lstat()
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
            return d
    return None


def _drop_unfinished(folder: Path) -> None:
    """Remove entries without their access-time file: JAX writes that file after the entry, so
    such an entry may be half written (a worker killed while writing it), and with one of them
    there JAX's eviction fails on every write, which stops the cache filling."""
    import filelock

    try:
        with filelock.FileLock(str(folder / ".lockfile"), timeout=10):  # JAX's own lock of the folder
            for entry in folder.glob("*-cache"):
                if not entry.with_name(entry.name[: -len("-cache")] + "-atime").exists():
                    with contextlib.suppress(OSError):
                        entry.unlink()
    except (filelock.Timeout, OSError) as exc:
        log.info("could not look for unfinished entries in %s: %s", folder, exc)


def use_trusted_cache() -> Path | None:
    """Keep what this grading process compiles (the reference solution on the hidden inputs,
    the checks' own JAX) in :func:`trusted_folder`, and read what earlier grading processes kept:
    a pool worker's first notebook then spends about 0.8 s on its trusted side instead of 1.8 s
    (bench/README.md).  Only grading processes read or write it, and only where the sandboxes
    are bubblewrap (the caller's part): a kernel outside bubblewrap runs as this user and could
    write it (:func:`forget_trusted`).  JAX locks the folder for every read and write
    (``filelock``), so concurrent workers never see half an entry.  Returns the folder, or None
    where this process's JAX has started already, or the folder is not ours and private."""
    try:
        import filelock  # noqa: F401 - without it JAX neither locks nor evicts
    except ImportError:
        return None
    if jax_started():
        log.info("not keeping this process's compilations: its JAX has started already")
        return None
    folder = trusted_folder()
    try:
        bad = _private([_make_home(), trusted_root(), folder])
    except OSError as exc:
        log.warning("not keeping the grader's own compilations in %s: %s", folder, exc)
        return None
    if bad is not None:
        log.warning("not keeping the grader's own compilations in %s: %s is not a private folder", folder, bad)
        return None
    _drop_unfinished(folder)
    import jax

    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    jax.config.update("jax_compilation_cache_max_size", TRUSTED_MAX_BYTES)
    return folder


def forget_trusted() -> None:
    """Remove the grading processes' kept compilations: after a run whose kernels ran as this
    user (no bubblewrap), which could have written there."""
    with contextlib.suppress(OSError):
        shutil.rmtree(trusted_root())


def read_entry(path: str) -> bytes | None:
    """The bytes of a staged entry, or None when it is not a regular file of at most
    :data:`MAX_ENTRY_BYTES`.  The sandbox wrote the staging folder: the type is judged on the
    opened file (``fstat``), never on the name, so a link is refused (``O_NOFOLLOW``) and a FIFO
    or a device swapped in after a listing is opened without blocking (``O_NONBLOCK``) and
    never read (a FIFO with no writer would hang the trusted side; a device could be endless)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_ENTRY_BYTES:
            return None
        with os.fdopen(fd, "rb", closefd=False) as src:
            data = src.read(MAX_ENTRY_BYTES + 1)
        return data if len(data) <= MAX_ENTRY_BYTES else None  # it grew while we read
    except OSError:
        return None
    finally:
        os.close(fd)


def discard(staged: Path) -> None:
    with contextlib.suppress(OSError):
        shutil.rmtree(staged.parent)
