"""Trusted workers forked from a process that has imported their heavy modules once.

A spawned trusted worker imports JAX, pytest and the notebook machinery before its first task:
about 1.5 CPU seconds in session 35, more or less with the machine's speed that day
(bench/README.md, "Session 35"), paid again by every worker of every batch.  A :class:`~grader.batch.pool.TrustedPool` given
``preload`` starts its workers from multiprocessing's fork server instead: one process imports
those modules, never starting a JAX backend (a fork after that can deadlock), and each worker
is a fork of it, ready at once.  The server lives as long as the process that started it (the
``jaxgrade grade`` command, a test session's worker), so every later pool of that process pays
only for grader's own modules (which come from the pool's ``sys.path``, not the server's).

The server and its children are trusted code, started from the trusted process: nothing a
student wrote reaches them (sandboxes are started by the workers, as before, with
``close_fds``).  A forked worker must behave as a spawned one would, and this module sees to the
ways it could differ:

- **its environment.**  A child of the server inherits the server's environment, the one this
  process had when the server started, and the modules it preloaded read theirs then (JAX's
  ``JAX_*`` settings, the BLAS threads).  So the server is used only while this process's
  environment is the one it started with, but for jaxgrade's own ``JAXGRADE_*`` settings, which
  no preloaded module reads; otherwise the pool spawns, as before.  The worker then takes this
  process's environment as its own (``grader.batch.pool._serve``); only its
  ``/proc/PID/environ``, the environment it was started with, stays the server's.
- **its modules.**  The server, like every spawned worker and multiprocessing's resource
  tracker, starts with ``-P`` (Python 3.11+: :func:`safe_path`), so the current folder is not on
  its path: a folder of submissions there with a ``jax/``, ``pytest/`` or ``multiprocessing/`` in
  it cannot plant code in a trusted process (before, a spawned worker's bootstrap imported a
  ``multiprocessing/`` found there).  Once multiprocessing has given a forked worker this
  process's ``sys.path``, the worker checks that every package it holds is the file that path
  would import, as a spawned worker's would (:func:`differs`); where one is not (another JAX
  earlier on this process's path), it answers its first task with that, the server is turned
  off for this process and the pool spawns.
- **its output, and its random state.**  The worker takes this process's stdout and stderr in
  place of the server's (:class:`Forked`), which may have been redirected since (pytest's
  capture), and draws NumPy's global random state afresh (a fork copies it; Python's own
  ``random`` is reseeded by Python).
- **its death.**  A forked worker's parent is the server, so ``PR_SET_PDEATHSIG`` names the
  server: it dies with the server, whose reports are the pool's only view of it (a worker that
  outlived the server would grade on, unseen); and a thread waiting on a pidfd of the pool's
  process makes it die with that too (``grader.batch.pool._die_with``).  A server lost mid-batch
  (the OOM killer, a ``kill``) costs the notebooks its workers were grading a try each, as any
  lost worker does.  A forked worker that exits before its first answer (its server lost, or an
  import that failed before :func:`differs` could look) turns the server off: the pool spawns
  from then on.
- **what is not the same.**  Forked workers share the server's string hash seed (spawned ones
  draw their own), and start with the server's mappings in their address space (about 80 MB
  more than a spawned worker's before its first task, against a limit of 8 GiB and more).

Where any of this is not available (Python before 3.11, no ``pidfd_open``, no fork server, a
fork server this process did not start) the pool spawns its workers, as it always did.
``JAXGRADE_FORKSERVER=0`` spawns them too: the baseline of ``bench/pool_start.py``.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import sys
import threading
from collections.abc import Iterator, Sequence
from multiprocessing.context import BaseContext
from typing import Any

log = logging.getLogger(__name__)

#: What a trusted grading worker imports before its first notebook, as package names: JAX and
#: what the tests run on, pytest, and what reading a course and a notebook takes.  grader's
#: own modules are not among them: they come from this process's ``sys.path`` in the worker.
GRADING = (
    "jax.numpy",
    "pytest",
    "nbformat",
    "yaml",
    "pydantic",
    "packaging.requirements",
    "jsonschema",
    "filelock",
)

_lock = threading.Lock()
#: the environment and preload the running server was started with; None before it starts
_server: dict[str, Any] | None = None
#: why the server is not used in this process (a failed start, a worker's modules from
#: elsewhere); None while nothing has gone wrong
_off: str | None = None


def unavailable() -> str | None:
    """Why this platform cannot start trusted workers from a fork server, or None."""
    if os.environ.get("JAXGRADE_FORKSERVER", "") == "0":
        return "JAXGRADE_FORKSERVER=0"
    if sys.version_info < (3, 11):
        return "Python before 3.11 cannot keep the current folder off a child's path (-P)"
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return "this platform has no fork server"
    if not hasattr(os, "pidfd_open"):
        return "this platform has no pidfd_open"
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError as exc:  # a kernel before Linux 5.3, or a seccomp filter
        return f"pidfd_open fails here: {exc}"
    return _off


def context(preload: Sequence[str]) -> tuple[BaseContext, bool]:
    """The context to start a worker in, and whether it is the fork server's (then the worker
    gets a :class:`Forked` besides).  The server is started here, the first time, with
    ``preload`` and this process's environment, and started again where it has died since (so
    that :func:`server_pid` names the one the worker will be forked from); a later call with
    another environment or another ``preload`` gets the spawn context."""
    global _server, _off
    spawn = multiprocessing.get_context("spawn")
    if not preload:
        return spawn, False
    with _lock:
        why = unavailable()
        if why is not None:
            return spawn, False
        env = _read_at_import(os.environ)
        if _server is None and server_pid() is not None:  # another's server: its environment is not known
            return spawn, False
        if _server is not None and (_server["env"] != env or _server["preload"] != tuple(preload)):
            return spawn, False
        ctx = multiprocessing.get_context("forkserver")
        if _server is None:
            ctx.set_forkserver_preload(list(preload))
        try:
            with safe_path():
                from multiprocessing import forkserver

                forkserver.ensure_running()  # nothing where it runs; a new one where it died
        except Exception as exc:  # the server's start, not a task: spawn instead
            _off = f"the fork server did not start: {exc}"
            log.info("spawning the trusted workers: %s", _off)
            return spawn, False
        _server = {"env": env, "preload": tuple(preload)}
        return ctx, True


def _read_at_import(env: Any) -> dict[str, str]:
    """The environment but for ``JAXGRADE_*``: what the preloaded modules may have read."""
    return {k: v for k, v in env.items() if not k.startswith("JAXGRADE_")}


def turn_off(why: str) -> None:
    """Spawn this process's trusted workers from now on (a forked worker was not what a spawned
    one would have been)."""
    global _off
    with _lock:
        if _off is None:
            _off = why
            log.warning("spawning the trusted workers from now on: %s", why)


def server_pid() -> int | None:
    """The pid of this process's fork server, where multiprocessing tells it (None before one
    starts)."""
    from multiprocessing import forkserver

    return getattr(getattr(forkserver, "_forkserver", None), "_forkserver_pid", None)


_flags_lock = threading.RLock()


@contextlib.contextmanager
def safe_path() -> Iterator[None]:
    """While a worker, the server or multiprocessing's resource tracker starts, their ``python
    -c`` gets ``-P`` (Python 3.11+): the current folder is left off their ``sys.path``.  Done
    through multiprocessing's own list of the interpreter's flags for its children, not the
    environment, which other threads may be reading."""
    from multiprocessing import util

    with _flags_lock:  # read and replaced under the lock: a second thread must not take ours as theirs
        flags = getattr(util, "_args_from_interpreter_flags", None)
        if sys.version_info < (3, 11) or flags is None or sys.flags.safe_path:
            yield
            return

        def with_safe_path() -> list[str]:
            args = flags()
            return args if "-P" in args else [*args, "-P"]

        util._args_from_interpreter_flags = with_safe_path
        try:
            yield
        finally:
            util._args_from_interpreter_flags = flags


class Forked:
    """What a worker forked from the server takes from the pool's process besides its task: the
    server's pid (to make sure it dies with it) and this process's stdout and stderr (the
    server's are this process's as they were when it started)."""

    def __init__(self, server: int | None, fds: dict[int, Any]) -> None:
        self.server = server
        self._fds = fds

    @classmethod
    def from_here(cls) -> Forked:
        return cls(server_pid(), {fd: fd for fd in (1, 2) if _is_open(fd)})

    def __reduce__(self) -> tuple[Any, ...]:
        from multiprocessing import reduction  # a duplicate of each, sent with the worker's start

        return (Forked, (self.server, {fd: reduction.DupFd(fd) for fd in self._fds}))

    def adopt(self) -> None:
        """In the worker: this process's stdout and stderr, NumPy's random state drawn afresh."""
        for target, dup in self._fds.items():
            with contextlib.suppress(Exception):
                fd = dup.detach() if hasattr(dup, "detach") else dup
                (sys.stdout if target == 1 else sys.stderr).flush()
                os.dup2(fd, target)
                os.close(fd)
        numpy = sys.modules.get("numpy")
        if numpy is not None:
            with contextlib.suppress(Exception):
                numpy.random.seed()


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def origins() -> dict[str, str]:
    """The file each top-level package this process holds came from (the standard library's,
    the namespace packages and the built-in ones left out)."""
    found: dict[str, str] = {}
    for name, module in list(sys.modules.items()):
        if "." in name or name.startswith("__") or name in sys.stdlib_module_names:
            continue
        path = getattr(module, "__file__", None)
        if isinstance(path, str):
            found[name] = os.path.realpath(path)
    return found


def _would_import(name: str) -> str | None:
    """The file a fresh import of the top-level package ``name`` would load with this process's
    ``sys.path`` and import hooks: the first finder's answer, as the import system asks them."""
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        try:
            spec = find(name, None)
        except (ImportError, ValueError):
            continue
        if spec is not None:
            return spec.origin
    return None


def differs() -> str | None:
    """In a forked worker, once multiprocessing has given it the pool's ``sys.path``: None where
    every package it holds is the file that path would import (what a spawned worker would
    hold); else the first that is not, in words."""
    for name, path in sorted(origins().items()):
        here = _would_import(name)
        if here is None or os.path.realpath(here) != path:
            return f"the fork server's {name} is {path}, this process's path finds {here}"
    return None
