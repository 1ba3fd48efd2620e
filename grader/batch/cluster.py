"""Grading a class on a Dask cluster: the same batch, with its sandboxes on the workers' machines.

``jaxgrade grade ... --scheduler tcp://HOST:PORT`` hands :class:`grader.batch.run.Batch` this backend
instead of the local trusted pool (:func:`grader.grading.grade.grade_many`); intake, the gradebook, the
progress line and the summary are the same code.

- **The course travels as a bundle** (:class:`CourseBundle`): ``grading.yaml`` and the assignment's
  two folders (``assignments/<name>/``, ``reference/<name>/``) as bytes, with each file's sha256,
  named by the assignment version digest.  The workers need no shared filesystem.  A worker
  unpacks it once per process into a private folder (0700), checks every file, loads the course
  from there and computes the version itself: a worker whose jaxgrade, jax or jaxlib, or whose
  reading of the course, gives another version refuses (:class:`CourseMismatch`, naming what
  differs), and the batch stops.
- **A notebook travels as bytes**, with its student key and sha256; the worker checks the sha256
  and writes the bytes to a private temporary file.  No path of the coordinator's is used there.
- **Each task grades in a trusted child process** of the Dask worker (one per worker thread,
  reused, killed with the thread that started it), as the local pool does: a crash there is not
  the Dask worker's, a lost child is replaced and the submission graded again once, then it is
  ``lost``.  The child is started with ``subprocess`` (Dask workers are daemonic processes, which
  ``multiprocessing`` forbids to have children) and sets the assignment's device count before
  JAX starts.
- **Results come back as the record's JSON**, parsed and checked on the coordinator (assignment,
  student and sha256 as sent) before the batch commits them.
- **A worker lost mid-batch**: Dask runs its tasks again elsewhere.  A task whose workers died
  more than ``distributed.scheduler.allowed-failures`` times (3 by default) ends in
  ``KilledWorker`` and becomes a ``lost`` record, never committed.  Each submission is one
  future, whose result arrives once, and the gradebook is keyed: nothing is committed twice.
- **Isolation**: a worker grades in bubblewrap, and refuses without it, unless the coordinator
  was given ``--isolation process``.
- **A batch stopped early** (Ctrl-C, a refusal, a full disk on the coordinator): the coordinator
  sets the run's ``distributed.Event`` and cancels what has not started.  A task that is grading
  looks at that event every :data:`STOP_POLL` seconds while it waits for its child; once it is
  set, it stops the child's grading as a Ctrl-C stops a local one (:data:`STOP_SIGNAL`: the
  sandboxes are closed and their folders removed), and kills the child if that takes more than
  :data:`STOP_GRACE` seconds: the notebooks being graded stop too.
- **A coordinator that dies without a word** (SIGKILL, a crash of its machine) sets nothing, but
  the scheduler drops its client and, with it, every task only that client wanted.  At the same
  looks, a task asks the scheduler for its own state, and stops its grading the same way once
  nobody waits for its result (:data:`NOT_WANTED`).  A connection lost without being closed stops
  the tasks only once the scheduler has dropped the client.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path, PurePosixPath
from typing import Any

import distributed

import grader
from grader.batch.pool import Lost, Raised, over_memory, over_time
from grader.course.config import (
    COURSE_FILE,
    Assignment,
    ConfigError,
    UnmetRequirementError,
    check_requirements,
    load_course,
)
from grader.grading.grade import (
    _bug_record,
    _init_worker,
    _lost_record,
    _task,
    cache_plan,
    memory_limit,
    raise_setup_error,
    trusted_limits,
)
from grader.grading.record import Record, cap_record
from grader.host import xla_flags
from grader.host.memory import cap_malloc_arenas, is_out_of_memory
from grader.host.sandbox import choose_isolation, sweep_after_lost_grader

log = logging.getLogger(__name__)

SKIPPED = ("__pycache__", ".ipynb_checkpoints")
CONNECT_TIMEOUT = "20s"
WORKERS_TIMEOUT = 120  # seconds to wait for a first worker


class ClusterError(Exception):
    """The cluster cannot grade this batch: ``message`` says why, ``tip`` what to do."""

    def __init__(self, message: str, tip: str) -> None:
        super().__init__(f"{message}. TIP: {tip}")
        self.message, self.tip = message, tip


class WorkerRefused(RuntimeError):
    """A worker will not grade (raised there, re-raised on the coordinator: one argument, so it pickles)."""


class CourseMismatch(WorkerRefused):
    """The worker's course version is not the coordinator's."""


class NoBubblewrap(WorkerRefused):
    """The worker has no working bubblewrap, and ``--isolation process`` was not given."""


class BadEnvironment(WorkerRefused):
    """A setting in the worker's environment is not one it can grade with (``JAXGRADE_FAST_COMPILE``:
    the coordinator checks its own before it starts, but the workers have environments of their own)."""


# --------------------------------------------------------------------------- the course bundle


def _versions() -> dict[str, str]:
    """What besides the course decides a grade: this machine's jaxgrade, jax and jaxlib."""
    found = {"jaxgrade": grader.__version__}
    for dist in ("jax", "jaxlib"):
        try:
            found[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            found[dist] = "not installed"
    return found


def fingerprint(assignment: Assignment) -> dict[str, Any]:
    """The assignment's version by part (:meth:`Assignment.fingerprint`), with jax and jaxlib."""
    return {**assignment.fingerprint(), **_versions()}


@dataclass(frozen=True)
class CourseBundle:
    """What a worker needs to grade ``name``: the course files as bytes, named by its version."""

    name: str
    version: str
    fingerprint: dict[str, Any]
    files: dict[str, bytes]  # path in the course (POSIX) -> content
    sha256: dict[str, str]

    @classmethod
    def build(cls, assignment: Assignment) -> CourseBundle:
        root = assignment.course.root
        paths = [root / COURSE_FILE]
        for folder in (assignment.student_dir, assignment.reference_dir):
            paths += sorted(
                p for p in folder.rglob("*") if p.is_file() and not any(part in SKIPPED for part in p.parts)
            )
        files = {p.relative_to(root).as_posix(): p.read_bytes() for p in paths}
        return cls(
            name=assignment.name,
            version=assignment.version(),
            fingerprint=fingerprint(assignment),
            files=files,
            sha256={rel: hashlib.sha256(data).hexdigest() for rel, data in files.items()},
        )

    @property
    def size(self) -> int:
        return sum(len(b) for b in self.files.values())


def differences(worker: dict[str, Any], coordinator: dict[str, Any]) -> list[str]:
    """What differs between two fingerprints, in words, worker first."""
    out = [
        f"{key} {worker.get(key)} on the worker, {coordinator.get(key)} on the coordinator"
        for key in ("jaxgrade", "jax", "jaxlib")
        if worker.get(key) != coordinator.get(key)
    ]
    ws, cs = _flat(worker.get("settings", {})), _flat(coordinator.get("settings", {}))
    for key in sorted(set(ws) | set(cs)):
        if ws.get(key) != cs.get(key):
            out.append(f"setting {key}: {_short(ws.get(key))} on the worker, {_short(cs.get(key))} on the coordinator")
    wf, cf = worker.get("files", {}), coordinator.get("files", {})
    out += [f"{rel} only on the coordinator" for rel in sorted(set(cf) - set(wf))]
    out += [f"{rel} only on the worker" for rel in sorted(set(wf) - set(cf))]
    out += [f"{rel} differs" for rel in sorted(set(wf) & set(cf)) if wf[rel] != cf[rel]]
    return out


def _flat(settings: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"limits": {"cell_timeout": 5}}`` -> ``{"limits.cell_timeout": 5}``."""
    out: dict[str, Any] = {}
    for key, value in settings.items():
        if isinstance(value, dict):
            out |= _flat(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = value
    return out


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 80 else text[:77] + "..."


# --------------------------------------------------------------------------- on a worker

_UNPACK_LOCK = threading.Lock()
_UNPACKED: dict[str, Path] = {}  # version -> the checked course root, in this worker process


def _here() -> str:
    """This worker's address, for messages."""
    try:
        return str(distributed.get_worker().address)
    except ValueError:
        return f"pid {os.getpid()}"


def _private_dir() -> Path:
    """``$TMPDIR/jaxgrade-courses-<uid>``, where a worker unpacks courses and keeps the notebook it
    grades: ours, mode 0700, not a link (another user could plant one)."""
    base = Path(tempfile.gettempdir()) / f"jaxgrade-courses-{os.getuid()}"
    with contextlib.suppress(FileExistsError):
        base.mkdir(mode=0o700)
    st = os.lstat(base)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise WorkerRefused(f"worker {_here()}: {base} is not a private folder of this user (mode 0700)")
    return base


LOCK = ".jaxgrade-lock"  # in each course and submission folder: held (flock) by the process that uses it
_HELD: list[int] = []  # the descriptors of this process's locks, open until it exits
_FRESH = 60.0  # seconds: a folder younger than this may not have its lock yet


def _lock(folder: Path) -> int:
    """Lock ``folder``: the descriptor holds the lock until it is closed or this process dies,
    however it dies (a lock is seen across PID namespaces, unlike a pid).  The lock file is made
    and locked under another name, then renamed to :data:`LOCK`, so that a sweep (another
    thread's, another process's) never finds it unlocked; until then the folder has no lock file,
    and a sweep leaves it alone for :data:`_FRESH` seconds."""
    making = folder / f"{LOCK}.{uuid.uuid4().hex}"
    fd = os.open(making, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.rename(making, folder / LOCK)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(making)
        raise
    return fd


def _locked_folder(base: Path, prefix: str) -> tuple[Path, int]:
    """A new folder ``base/<prefix>*`` (mode 0700), locked (:func:`_lock`), after removing the
    folders of ``prefix`` whose process is gone (:func:`_sweep`)."""
    _sweep(base, f"{prefix}*")
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=base))
    try:
        return folder, _lock(folder)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


@contextlib.contextmanager
def _submission_folder() -> Iterator[Path]:
    """A private folder (``nb-*`` in :func:`_private_dir`) for the notebook being graded, locked
    while the task runs and removed after it.  The folder of a worker killed mid-task (SIGKILL: no
    cleanup runs) holds a student's notebook: the next task on this machine removes it (its lock
    is free).  The folder is the notebook's own, which its sandbox never sees (``protect``)."""
    folder, fd = _locked_folder(_private_dir(), "nb-")
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        os.close(fd)


def _sweep(base: Path, pattern: str = "course-*") -> None:
    """Remove the folders (``pattern``: the courses, or the submissions being graded) of worker
    processes that are gone (a SIGKILL skips their cleanup): a folder whose lock no process
    holds, or an old one that never got a lock."""
    for old in base.glob(pattern):
        try:
            fd = os.open(old / LOCK, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            with contextlib.suppress(OSError):
                if time.time() - old.lstat().st_mtime > _FRESH:
                    shutil.rmtree(old, ignore_errors=True)
            continue
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            continue  # its worker process is alive, in this PID namespace or another
        finally:
            os.close(fd)
        shutil.rmtree(old, ignore_errors=True)


def _unpack(bundle: CourseBundle) -> Path:
    root, lock = _locked_folder(_private_dir(), "course-")
    _HELD.append(lock)  # held for as long as this process lives
    atexit.register(shutil.rmtree, root, True)
    for rel, data in bundle.files.items():
        parts = PurePosixPath(rel).parts
        if not parts or PurePosixPath(rel).is_absolute() or any(p in ("", ".", "..") for p in parts):
            raise CourseMismatch(f"worker {_here()}: the course bundle holds a path outside the course: {rel!r}")
        target = root.joinpath(*parts)
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        if hashlib.sha256(target.read_bytes()).hexdigest() != bundle.sha256.get(rel):
            raise CourseMismatch(f"worker {_here()}: {rel} of the course bundle did not unpack to its sha256")
    return root


def _check(bundle: CourseBundle, root: Path) -> None:
    """Refuse unless the unpacked course gives this worker the coordinator's version."""
    try:
        assignment = load_course(root).assignment(bundle.name, staff=True)
        mine, version = fingerprint(assignment), assignment.version()
    except ConfigError as exc:
        raise CourseMismatch(
            f"worker {_here()} (jaxgrade {grader.__version__}) cannot read the course of version {bundle.version}: {exc}"
        ) from None
    diff = differences(mine, bundle.fingerprint)
    if version != bundle.version or diff:
        raise CourseMismatch(
            f"worker {_here()} refuses to grade {bundle.name}: its course version is {version}, the "
            f"coordinator's is {bundle.version}; what differs: {'; '.join(diff) or 'the version digest'}"
        )
    try:  # this worker's packages, not only the coordinator's
        check_requirements(assignment)
    except UnmetRequirementError as exc:
        raise CourseMismatch(f"worker {_here()} refuses to grade: {exc}") from None


def course_root(bundle: CourseBundle) -> Path:
    """The checked course of ``bundle`` in this worker process, unpacked on first use."""
    with _UNPACK_LOCK:
        if bundle.version not in _UNPACKED:
            root = _unpack(bundle)
            _check(bundle, root)
            _UNPACKED[bundle.version] = root
        return _UNPACKED[bundle.version]


def worker_isolation(requested: str) -> str:
    """Bubblewrap, required, unless the coordinator was told ``--isolation process``."""
    if requested == "process":
        return "process"
    try:
        return choose_isolation("bwrap")
    except RuntimeError as exc:
        raise NoBubblewrap(f"worker {_here()} cannot sandbox with bubblewrap: {exc}") from None


class _ChildLost(Exception):
    """The child died (``limit`` None), or ended after a MemoryError under its memory limit."""

    def __init__(self, exitcode: int | None, limit: str | None = None) -> None:
        super().__init__(exitcode)
        self.exitcode, self.limit = exitcode, limit


class _Overran(Exception):
    """The child was killed past the task's deadline."""

    def __init__(self, exitcode: int | None, seconds: float) -> None:
        super().__init__(exitcode)
        self.exitcode, self.seconds = exitcode, seconds


class _Stopped(Exception):
    """The coordinator stopped the batch: before this task sent anything (``sent`` False, the
    child kept), or while its child graded (the child's grading stopped and the child ended)."""

    def __init__(self, sent: bool) -> None:
        super().__init__(sent)
        self.sent = sent


#: Seconds between two looks at the run's stop event by a task waiting for its child.
STOP_POLL = 1.0
#: What stops a child's grading (:func:`_serve_child`): a signal nobody sends by accident (a
#: Ctrl-C in the worker's terminal is the worker's), then SIGKILL after STOP_GRACE seconds.
STOP_SIGNAL = signal.SIGUSR1
STOP_GRACE = 5.0


class _Child:
    """A trusted grading process of this Dask worker thread: one JSON line in, one JSON line out."""

    def __init__(self, devices: int, trusted_cache: bool) -> None:
        # the child imports the same grader as this worker, wherever it is installed, and
        # nothing from the worker's current folder (`-m` would put it first on the child's path:
        # PYTHONSAFEPATH, Python 3.11+, as grader/batch/forkserver.py's -P for a pool's workers)
        path = [str(Path(grader.__file__).resolve().parent.parent), os.environ.get("PYTHONPATH", "")]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p), "PYTHONSAFEPATH": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", __name__, str(os.getpid()), str(devices), str(int(trusted_cache))],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )

    def call(
        self,
        args: list[Any],
        stopped: Callable[[], bool] | None = None,
        limits: tuple[int | None, float | None] = (None, None),
    ) -> Any:
        """The child's answer to ``args``.  With ``stopped``, asked before and then every
        :data:`STOP_POLL` seconds while the child works: once it says so, :class:`_Stopped` is
        raised, before anything is sent, or after the child's grading was stopped (:meth:`stop`).
        ``limits``: the address space the child's task may use (a MemoryError past it ends the
        child: :class:`_ChildLost` with the limit) and the seconds it may take (past them the
        child is killed: :class:`_Overran`), as a local pool's (grader/batch/pool.py)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        if stopped is not None and stopped():
            raise _Stopped(sent=False)
        memory, seconds = limits
        ends = time.monotonic() + seconds if seconds is not None else None
        try:
            self.proc.stdin.write(json.dumps([args, memory]).encode() + b"\n")
            self.proc.stdin.flush()
            # one line per request, read whole: nothing is left in the reader's buffer between
            # two calls, so the pipe's descriptor says whether the next reply has begun (poll:
            # select() refuses descriptors from 1024 on, which a busy worker may reach)
            while (stopped is not None or ends is not None) and not self._readable(
                STOP_POLL if ends is None else max(0.0, min(STOP_POLL, ends - time.monotonic()))
            ):
                if stopped is not None and stopped():
                    self.stop()
                    raise _Stopped(sent=True)
                if ends is not None and time.monotonic() >= ends:
                    self.close()
                    raise _Overran(self.proc.returncode, seconds or 0.0)
            line = self.proc.stdout.readline()
        except (BrokenPipeError, OSError):
            line = b""
        if not line.endswith(b"\n"):  # nothing, or half a reply: the child died
            self.close()
            raise _ChildLost(self.proc.returncode)
        status, value = json.loads(line)
        if status == "memory":  # the child ends after a MemoryError
            self.close()
            raise _ChildLost(self.proc.returncode, over_memory(memory or 0))
        if status == "raised":  # a grader bug: that submission gets a grader_error record, as locally
            return Raised(f"on worker {_here()}:\n{value}")
        return value

    def _readable(self, timeout: float) -> bool:
        """Whether the child's reply pipe has something (or is closed) within ``timeout`` seconds."""
        assert self.proc.stdout is not None
        poller = select.poll()
        poller.register(self.proc.stdout.fileno(), select.POLLIN | select.POLLHUP | select.POLLERR)
        return bool(poller.poll(timeout * 1000))

    def stop(self) -> None:
        """Stop the grading under way as a Ctrl-C stops a local one (its sandboxes closed, their
        folders removed: :func:`_serve_child`), then end the child, killed if it has not
        answered within :data:`STOP_GRACE` seconds."""
        with contextlib.suppress(OSError):
            self.proc.send_signal(STOP_SIGNAL)
        with contextlib.suppress(OSError):
            self._readable(STOP_GRACE)  # its reply (a KeyboardInterrupt), or its end
        self.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        for pipe in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                if pipe is not None:
                    pipe.close()


_THREAD = threading.local()
ATTEMPTS = 2  # as the local pool: a lost child is replaced and the submission graded once more


def _in_child(
    devices: int,
    args: list[Any],
    trusted_cache: bool,
    stopped: Callable[[], bool] | None = None,
    limits: tuple[int | None, float | None] = (None, None),
) -> Any:
    """``grader.grading.grade._task(*args)`` in this thread's child (one per device count, and
    per whether it keeps its compilations: ``trusted_cache``, see ``grade._init_worker``); a
    :class:`Lost` after ``ATTEMPTS`` deaths (or MemoryErrors under ``limits``' memory), or after
    one try past ``limits``' seconds; :class:`_Stopped` (the child killed) once ``stopped()``
    says the batch was stopped."""
    children: dict[tuple[int, bool], _Child] = _THREAD.__dict__.setdefault("children", {})
    which = (devices, trusted_cache)
    exitcode: int | None = None
    limit: str | None = None
    for attempt in range(1, ATTEMPTS + 1):
        child = children.get(which) or children.setdefault(which, _Child(devices, trusted_cache))
        try:
            return child.call(args, stopped, limits)
        except _Stopped as exc:
            if exc.sent:  # ended (or killed past its grace, its sandboxes left): never used again
                del children[which]
                sweep_after_lost_grader()
            raise
        except _Overran as exc:  # another try would cost as much
            del children[which]
            sweep_after_lost_grader()  # its sandboxes' scratch and cgroups, now rather than next run
            log.warning("the trusted grading process on %s ran past %g s and was killed", _here(), exc.seconds)
            return Lost(attempt, exc.exitcode, over_time(exc.seconds))
        except _ChildLost as exc:
            del children[which]
            sweep_after_lost_grader()
            exitcode, limit = exc.exitcode, limit or exc.limit  # a try that ran past the limit, named
            log.warning(
                "the trusted grading process on %s %s; attempt %d",
                _here(),
                f"ran past {limit}" if limit else f"died (exit {exitcode})",
                attempt,
            )
    return Lost(ATTEMPTS, exitcode, limit)


_WARM_LOCK = threading.Lock()
_WARM_TRIED: set[str] = set()


def _cache_for(assignment: Assignment, root: Path, iso: str, stopped: Callable[[], bool] | None = None) -> str | None:
    """This machine's trusted compilation cache: warmed by the first task that finds none (the
    others grade without it meanwhile)."""
    if iso != "bwrap":
        return None
    final, warm, _ = cache_plan(assignment, 0)  # the wider one if it is there; never warmed here
    if warm and _WARM_LOCK.acquire(blocking=False):
        try:
            if str(final) not in _WARM_TRIED:  # the folder's name covers the starter too
                _WARM_TRIED.add(str(final))
                warm_args = ["warm", str(root), assignment.name, iso, str(final), False]
                try:
                    _in_child(
                        assignment.config.devices,
                        warm_args,
                        trusted_cache=True,
                        stopped=stopped,
                        limits=trusted_limits(assignment),
                    )
                except _Stopped:  # a later batch warms it
                    _WARM_TRIED.discard(str(final))
                    raise
        finally:
            _WARM_LOCK.release()
    return str(final)  # the child reads it only once it is published


#: Seconds a task waits for the scheduler to say whether its run was stopped, and the asks in a
#: row that may fail before it stops asking.
STOP_ASK_TIMEOUT = 2.0
STOP_ASK_FAILURES = 3
#: The scheduler's states of a running task's key that say nobody waits for its result: the
#: coordinator's client was dropped (it died, or its connection closed) or it cancelled the task.
#: While the task runs and is wanted, the key is ``processing``, or, where the scheduler has given
#: it to another worker meanwhile (this one taken for dead), ``waiting``, ``queued``,
#: ``no-worker``, ``memory`` or ``erred``: every state but these three grades on.
NOT_WANTED = frozenset({None, "released", "forgotten"})


def _stop_event(name: str | None) -> Callable[[], bool] | None:
    """Whether the batch was stopped, asked through this worker's client: the coordinator has
    set the run's stop event (:func:`grade_on_cluster`), or the scheduler no longer wants this
    task's result (:data:`NOT_WANTED`: the coordinator is gone).  Where the scheduler cannot say
    (no client, no answer within :data:`STOP_ASK_TIMEOUT`, :data:`STOP_ASK_FAILURES` times in a
    row), the task says so once and grades on without looking again."""
    if not name:
        return None
    try:
        client = distributed.get_client(timeout=5)
    except Exception as exc:  # grading goes on; only an early stop would not reach this task
        log.warning("worker %s cannot watch for the batch's stop: %s", _here(), exc)
        return None
    try:  # outside a task (a test), there is no key to ask about: the event alone
        key = distributed.get_worker().get_current_task()
    except Exception:
        key = None
    failures: list[Exception] = []  # in a row

    def ask() -> bool:
        if client.sync(client.scheduler.event_is_set, name=name, callback_timeout=STOP_ASK_TIMEOUT) is True:
            return True
        if key is None:
            return False
        states = client.sync(client.scheduler.get_task_status, keys=[key], callback_timeout=STOP_ASK_TIMEOUT)
        return isinstance(states, dict) and states.get(key, "missing") in NOT_WANTED

    def stopped() -> bool:
        if len(failures) >= STOP_ASK_FAILURES:
            return False
        try:
            answer = ask()
        except Exception as exc:
            failures.append(exc)
            if len(failures) == STOP_ASK_FAILURES:
                log.warning("worker %s stops watching for the batch's stop: %s", _here(), exc)
            return False
        failures.clear()
        return answer

    return stopped


def grade_task(bundle: CourseBundle, request: dict[str, Any]) -> dict[str, Any]:
    """The Dask task: grade one notebook sent as bytes; ``{"record": ...}`` or ``{"lost": ...}``."""
    try:
        xla_flags.chosen()
    except ValueError as exc:
        raise BadEnvironment(f"worker {_here()} refuses to grade: {exc}") from None
    root = course_root(bundle)
    iso = worker_isolation(request["isolation"])
    data: bytes = request["notebook"]
    if hashlib.sha256(data).hexdigest() != request["sha256"]:
        raise RuntimeError(f"worker {_here()}: {request['student']}'s notebook arrived with another sha256")
    assignment = load_course(root).assignment(bundle.name, staff=not request["public_only"])
    stopped = _stop_event(request.get("stop"))
    try:
        cache = _cache_for(assignment, root, iso, stopped) if request["cache"] else None
        with _submission_folder() as tmp:
            path = tmp / "submission.ipynb"
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            args = ["grade", str(root), bundle.name, str(path), request["student"], iso, request["public_only"], cache]
            result = _in_child(
                assignment.config.devices,
                args,
                trusted_cache=cache is not None,
                stopped=stopped,
                limits=trusted_limits(assignment),
            )
    except _Stopped:  # nobody waits for this result
        return {"stopped": True, "worker": _here()}
    if isinstance(result, Lost):
        return {"lost": {"attempts": result.attempts, "exitcode": result.exitcode, "limit": result.limit}}
    if isinstance(result, Raised):
        return {"raised": result.traceback}
    raise_setup_error(result, f"on worker {_here()}: ")  # _received lets it through: the batch stops
    return {"record": result, "worker": _here()}


def _serve_child(parent: int, devices: int, trusted_cache: bool) -> None:
    """The child's loop (``python -m`` this module): ``grader.grading.grade._task`` per line of
    stdin.  :data:`STOP_SIGNAL` stops the task under way as a Ctrl-C stops a local grading: a
    KeyboardInterrupt, and a stop request that ends its next wait on a sandbox should a gc
    callback drop the KeyboardInterrupt (:mod:`grader.host.interrupts`)."""
    from grader.host import interrupts

    cap_malloc_arenas()  # before any thread: the address-space limit of each task counts them
    # the device count, the compile settings, OOM protection, death with the worker thread
    _init_worker(devices, parent, trusted_cache)
    signal.signal(STOP_SIGNAL, interrupts.stop)
    replies = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # whatever trusted code prints goes to stderr, never into a reply
    for line in sys.stdin:
        interrupts.clear()
        args, memory = json.loads(line)
        try:
            with contextlib.nullcontext() if memory is None else memory_limit(memory):
                reply = ["ok", _task(*args)]
        except BaseException as exc:  # the worker decides what a failure means
            # out of memory, the child ends: what it leaves is no state to grade in
            reply = ["memory", ""] if is_out_of_memory(exc) else ["raised", traceback.format_exc()]
        replies.write(json.dumps(reply) + "\n")
        replies.flush()
        if reply[0] == "memory":
            return


# --------------------------------------------------------------------------- on the coordinator


def _course_of(bundle: CourseBundle) -> CourseBundle:
    """The bundle as a task of its own: Dask copies it to each worker once, and computes it again
    (from the scheduler's copy) if every worker holding it is lost."""
    return bundle


def _connect(scheduler: str) -> distributed.Client:
    try:
        client = distributed.Client(scheduler, timeout=CONNECT_TIMEOUT, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:
        raise ClusterError(
            f"cannot reach the Dask scheduler at {scheduler}: {exc}",
            "Start one (`dask scheduler`) and its workers (`dask worker ADDRESS`), or check --scheduler's "
            "host and port.",
        ) from None
    try:
        client.wait_for_workers(1, timeout=WORKERS_TIMEOUT)
    except TimeoutError:
        client.close()
        raise ClusterError(
            f"the Dask scheduler at {scheduler} has had no worker for {WORKERS_TIMEOUT} s",
            f"Start workers with `dask worker {scheduler}` on machines with jaxgrade and bubblewrap.",
        ) from None
    return client


def _received(assignment: Assignment, path: Path, student: str, sha: str, future: distributed.Future) -> Record:
    """The record a future brought back, checked; a ``lost`` record for a submission Dask gave up on."""
    try:
        reply = future.result()
    except distributed.KilledWorker as exc:
        rec = _lost_record(assignment, path, student, Lost(1, None))
        rec.message = (
            "not graded: every Dask worker that graded this notebook died before it answered "
            f"({exc}); this is not the student's doing and it is not a score. Run the same command "
            "again to grade it: a lost result is never kept"
        )
        return rec
    except CourseMismatch as exc:
        raise ClusterError(
            str(exc),
            "Install on the workers the same jaxgrade, jax and jaxlib as here (results graded so far are kept)",
        ) from None
    except BadEnvironment as exc:
        raise ClusterError(
            str(exc), "Set it on the workers as on this machine, or unset it there (results graded so far are kept)"
        ) from None
    except NoBubblewrap as exc:
        raise ClusterError(
            str(exc),
            "Install bubblewrap on the workers (and allow unprivileged user namespaces, or run them as root); "
            "or pass --isolation process to grade there without it",
        ) from None
    if "stopped" in reply:  # only this coordinator sets its run's event, and only as it stops
        raise ClusterError(
            f"worker {reply.get('worker')} stopped grading {student}: this batch's stop event was set while it ran",
            "Run the same command again (results graded so far are kept); only the coordinator should set it",
        )
    if "lost" in reply:
        return _lost_record(assignment, path, student, Lost(**reply["lost"]))
    if "raised" in reply:  # a grader bug while grading this one: never kept, the batch goes on
        return _bug_record(assignment, path, student, Raised(str(reply["raised"])))
    try:
        rec = Record.from_dict(reply["record"])
    except (TypeError, ValueError, KeyError) as exc:
        raise ClusterError(
            f"a worker sent back for {student} something that is not a result record ({exc})",
            "Install on the workers the same jaxgrade as here",
        ) from None
    if (rec.assignment, rec.student, rec.submission_sha256) != (assignment.name, student, sha):
        raise ClusterError(
            f"worker {reply.get('worker')} sent back {rec.student}'s result for {rec.assignment} "
            f"(sha256 {rec.submission_sha256[:12]}) when asked for {student}'s",
            "Check who can reach the scheduler's port: only the coordinator and the workers should",
        )
    rec.source = str(path)  # where the TA's file is, not the worker's temporary copy
    return cap_record(rec)


def grade_on_cluster(
    assignment: Assignment,
    paths: list[Path],
    *,
    scheduler: str,
    students: dict[Path, str] | None = None,
    isolation: str = "auto",
    public_only: bool = False,
    on_result: Callable[[Path, Record], None] | None = None,
    cache: bool = True,
) -> dict[Path, Record]:
    """Grade ``paths`` on the Dask cluster at ``scheduler``, like :func:`grader.grading.grade.grade_many`:
    ``on_result`` is called (in this thread) for each record as it arrives."""
    students = students or {}
    bundle = CourseBundle.build(assignment)
    out: dict[Path, Record] = {}
    run = uuid.uuid4().hex[:8]
    with _connect(scheduler) as client:
        course = client.submit(_course_of, bundle, key=f"jaxgrade-course-{bundle.version}-{run}", pure=False)
        stop = f"jaxgrade-stop-{bundle.version}-{run}"  # set if the batch stops early: running tasks stop too
        futures: dict[distributed.Future, tuple[Path, str, str]] = {}
        try:
            for p in paths:
                data = p.read_bytes()
                student, sha = students.get(p) or p.stem, hashlib.sha256(data).hexdigest()
                request = {
                    "student": student,
                    "sha256": sha,
                    "notebook": data,
                    "isolation": isolation,
                    "public_only": public_only,
                    "cache": cache,
                    "stop": stop,
                }
                key = f"jaxgrade-{assignment.name}-{student}-{sha[:12]}-{run}"
                futures[client.submit(grade_task, course, request, key=key, pure=False)] = (p, student, sha)
            for future in distributed.as_completed(futures, loop=client.loop):
                p, student, sha = futures.pop(future)
                rec = _received(assignment, p, student, sha, future)
                out[p] = rec
                if on_result:
                    on_result(p, rec)
        finally:
            if futures:  # stopped early (a refusal, a full disk, Ctrl-C): the running tasks stop their
                # gradings at their next look at the event (the event stays on the scheduler: one
                # small entry per stopped batch); nothing more starts
                try:
                    with contextlib.suppress(Exception):
                        distributed.Event(stop, client=client).set()
                finally:  # a second Ctrl-C during the set: still start nothing more
                    client.cancel(list(futures), force=True)
    return out


if __name__ == "__main__":
    _serve_child(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:] == ["1"])
