"""Trusted worker processes for a batch: a pool that survives losing one of them.

``concurrent.futures.ProcessPoolExecutor`` marks itself broken when any worker dies, and every
pending future then fails: one trusted process taken by the OOM killer (or killed by hand) lost
the whole batch.  :class:`TrustedPool` keeps a pipe and a process per slot instead, so it knows
which task a dead process was running.  That task is started again in a fresh process (once, by
default); if that one is lost too, the task is reported as :class:`Lost`, and the rest of the
batch goes on in fresh processes.

Processes are spawned (a fork after JAX has started can deadlock), or, given ``preload``, forked
from a server that imported those modules once and never started JAX (grader/batch/forkserver.py);
``initializer`` runs in each before its first task.  Each dies with the pool's process, however
that ends (:func:`die_with`).  A task that raises is a grader bug, but one that costs only that
task: it is reported as :class:`Raised`, with the worker's traceback, and the batch goes on (a TA
on a deadline gets the rest of the class graded).

The workers are trusted, and protected from the OOM killer (grader/host/cgroups.py), so a task
that grows without bound would have the machine's every other process killed first, and one
that never ends would hold the batch.  Two limits of their own end such a task as a loss
instead: ``memory_bytes``, an address-space limit (RLIMIT_AS, soft: the sandboxes a worker
starts set their own; grader/host/memory.py): running out of memory under it ends the worker,
and the task is tried again once in a fresh one, as for a death.  And ``deadline``, seconds per
task, after which the worker is killed and the task reported :class:`Lost`, not tried again: a
task that slow is a grader bug or a submission that attacks the grader, and another try would
cost as much.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import select
import signal
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any

from grader.batch import forkserver
from grader.host import interrupts
from grader.host.memory import cap_malloc_arenas, is_out_of_memory, limit_memory, memory_in_words

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Lost:
    """A task whose trusted process died ``attempts`` times before it answered."""

    attempts: int
    exitcode: int | None
    #: the grader's own limit the task ran past, in words ("its 8 GiB memory limit"), or None
    limit: str | None = None

    @property
    def cause(self) -> str:
        """The last death in words: "killed by SIGKILL", "exit code 1", "it ran past its 8 GiB
        memory limit"."""
        if self.limit:
            return f"it ran past {self.limit}"
        code = self.exitcode
        if code is None:
            return "it stopped answering"
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"killed by {name}" + (" (the out-of-memory killer sends it, as may a person)" if code == -9 else "")
        return f"exit code {code}"


@dataclass(frozen=True)
class Raised:
    """A task that raised in its trusted worker (a grader bug): the worker's traceback."""

    traceback: str

    @property
    def last_line(self) -> str:
        """The exception itself ("ValueError: ..."), the traceback's last line."""
        lines = [line for line in self.traceback.strip().splitlines() if line.strip()]
        return lines[-1].strip() if lines else "an exception without a traceback"


def over_memory(memory_bytes: int) -> str:
    """:attr:`Lost.limit` for a task that ran out of ``memory_bytes``: "its 8 GiB memory limit"."""
    return f"its {memory_in_words(memory_bytes)} memory limit"


def over_time(seconds: float) -> str:
    """:attr:`Lost.limit` for a task killed past its deadline: "its 1800 s time limit"."""
    return f"its {seconds:g} s time limit"


@dataclass
class _Slot:
    proc: Any  # multiprocessing.process.BaseProcess
    conn: Connection
    key: Hashable | None = None
    args: tuple[Any, ...] = field(default_factory=tuple)
    ends: float | None = None  # the task's deadline (time.monotonic()), if it has one
    forked: bool = False  # forked from the fork server (grader/batch/forkserver.py)
    answered: bool = False  # has answered a task


def _reap(slot: _Slot, *, kill: bool = False) -> None:
    """Wait for a worker that is ending (killed after 10 s, or at once with ``kill``) and close
    its pipe."""
    if kill:
        with contextlib.suppress(Exception):
            slot.proc.kill()
    slot.proc.join(timeout=10)
    if slot.proc.is_alive():
        with contextlib.suppress(Exception):
            slot.proc.kill()
        slot.proc.join(timeout=10)
    with contextlib.suppress(OSError):
        slot.conn.close()


def die_with(parent: int, *, forked: bool = False, server: int | None = None) -> None:
    """SIGKILL this trusted process when ``parent`` ends, however it ends (a SIGKILL too), so
    that no grading goes on unseen after ``jaxgrade grade`` (or a Dask worker) is gone; its
    sandboxes die with it (bwrap ``--die-with-parent``).  A child of ``parent``:
    ``PR_SET_PDEATHSIG``, and an exit at once where ``parent`` died before that took effect.  A
    pool worker ``forked`` from the fork server (``server``: its pid, where the pool could tell)
    is the server's child: ``PR_SET_PDEATHSIG`` makes it die with the server (the pool learns
    its workers' ends from the server, so a worker must not outlive it), and a thread waiting on
    a pidfd of ``parent`` with the pool's process."""
    if sys.platform.startswith("linux"):
        pr_set_pdeathsig = 1
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if not forked:
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)
        return
    if server is not None and os.getppid() != server:  # the server died before prctl took effect
        os._exit(1)
    try:
        pidfd = os.pidfd_open(parent)
    except (OSError, AttributeError):
        os._exit(1)

    def watch() -> None:
        select.select([pidfd], [], [])  # readable once the process has ended
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="jaxgrade-parent-watch", daemon=True).start()


def _serve(
    conn: Connection,
    initializer: Callable[..., None] | None,
    initargs: tuple[Any, ...],
    memory_bytes: int | None = None,
    parent: int | None = None,
    env: dict[str, str] | None = None,
    forked: forkserver.Forked | None = None,
) -> None:
    """The worker's loop: one task at a time, until ``None`` or the parent's end closes.  A task
    that runs out of ``memory_bytes`` ends the worker (what it leaves behind is no state to
    grade the next submission in).  ``env`` is the pool's process's environment (a fork server's
    child has the server's); ``forked``: what a worker forked from the fork server takes from
    the pool besides (grader/batch/forkserver.py).  A forked worker whose packages are not what
    a spawned one would import answers its first task with ``("origins", why)`` and ends."""
    if env is not None and os.environ != env:
        os.environ.clear()
        os.environ.update(env)
    why = None
    if forked is not None:
        forked.adopt()
        why = forkserver.differs()
    if memory_bytes is not None:
        cap_malloc_arenas()  # before any thread starts (JAX's, in the initializer or a task)
    if parent is not None:
        die_with(parent, forked=forked is not None, server=forked.server if forked is not None else None)
    if why is not None:
        with contextlib.suppress(Exception):  # the task's module may not import with these packages
            if conn.recv() is None:
                return
        with contextlib.suppress(EOFError, OSError):
            conn.send(("origins", why))
        return
    if initializer is not None:
        initializer(*initargs)
    if memory_bytes is not None:
        limit_memory(memory_bytes)
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        fn, args = task
        try:
            reply: tuple[str, Any] = ("ok", fn(*args))
        except BaseException as exc:  # everything goes back to the parent, which decides
            reply = ("memory", "") if is_out_of_memory(exc) else ("raised", traceback.format_exc())
        conn.send(reply)
        if reply[0] == "memory":
            return


#: Seconds :meth:`TrustedPool.close` waits for the sweeps after lost workers (each stale cgroup
#: may take 7.5 s to empty; a scratch folder with no tmpfs under it, as long as removing it takes).
SWEEP_WAIT = 60.0


class TrustedPool:
    """``jobs`` worker processes (spawned, or forked from the fork server where ``preload`` names
    what it imports); :meth:`run` yields ``(key, result | Lost)`` as they end."""

    def __init__(
        self,
        jobs: int,
        *,
        initializer: Callable[..., None] | None = None,
        initargs: tuple[Any, ...] = (),
        attempts: int = 2,
        memory_bytes: int | None = None,
        on_death: Callable[[], None] | None = None,
        preload: Sequence[str] = (),
    ) -> None:
        if jobs < 1 or attempts < 1:
            raise ValueError("jobs and attempts must be at least 1")
        self.jobs, self.attempts = jobs, attempts
        self.memory_bytes = memory_bytes
        #: called once a worker that died or was killed in a task is gone (what it left, swept),
        #: in a thread of its own: the results of the other workers are not kept waiting on it
        self.on_death = on_death
        self._sweeps: list[threading.Thread] = []
        self._sweeping = threading.Lock()  # one at a time
        #: modules the workers' fork server imports once (grader/batch/forkserver.py); () spawns them
        self.preload = tuple(preload)
        self._init, self._initargs = initializer, initargs
        self._slots: list[_Slot] = []
        self._limit_hit: dict[Hashable, str | None] = {}  # a task's first try past the memory limit
        self.started = 0  # processes started, replacements included (for tests and logs)

    def __enter__(self) -> TrustedPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close(kill=exc[0] is not None)

    def _start(self) -> _Slot:
        ctx, forked = forkserver.context(self.preload)
        parent, child = ctx.Pipe(duplex=True)
        extra = forkserver.Forked.from_here() if forked else None
        proc = ctx.Process(
            target=_serve,
            args=(child, self._init, self._initargs, self.memory_bytes, os.getpid(), dict(os.environ), extra),
            daemon=True,
        )
        try:
            with forkserver.safe_path():
                proc.start()
        except Exception as exc:
            parent.close()
            if not forked:
                raise
            forkserver.turn_off(f"a worker did not start from it: {exc}")
            return self._start()
        finally:
            child.close()
        self.started += 1
        return _Slot(proc, parent, forked=forked)

    def run(
        self,
        fn: Callable[..., Any],
        tasks: Sequence[tuple[Hashable, tuple[Any, ...]]],
        *,
        deadline: Callable[[Hashable], float | None] | None = None,
    ) -> Iterator[tuple[Hashable, Any]]:
        """Run ``fn(*args)`` for every ``(key, args)``; yield ``(key, result)``, ``(key, Lost)`` or
        ``(key, Raised)`` (never tried again: a bug does not go away in a fresh process).
        ``deadline(key)`` is the seconds a try of that task may take (None: no limit).

        ``fn`` must be importable by name (a module-level function): it is sent to a worker
        process.  Closing the generator early (an exception in the caller's loop) kills every
        worker, so nothing goes on grading unseen."""
        queue = deque(tasks)
        tries: dict[Hashable, int] = {}
        self._limit_hit = {}
        try:
            while queue or any(s.key is not None for s in self._slots):
                while len(self._slots) < self.jobs and sum(s.key is None for s in self._slots) < len(queue):
                    self._slots.append(self._start())
                for i, slot in enumerate(self._slots):
                    if slot.key is None and queue and not slot.proc.is_alive():
                        slot.proc.join(timeout=1)  # died between tasks: nothing lost, replace it
                        if slot.forked and not slot.answered:  # as in _lost: spawn the next ones
                            forkserver.turn_off("a worker forked from it ended before its first task")
                        with contextlib.suppress(OSError):
                            slot.conn.close()
                        slot = self._slots[i] = self._start()
                    if slot.key is None and queue:
                        slot.key, slot.args = queue.popleft()
                        tries[slot.key] = tries.get(slot.key, 0) + 1
                        seconds = deadline(slot.key) if deadline is not None else None
                        slot.ends = time.monotonic() + seconds if seconds is not None else None
                        try:
                            slot.conn.send((fn, slot.args))
                        except (OSError, ValueError):
                            pass  # a process dead before its task: seen below as lost
                busy = [s for s in self._slots if s.key is not None]
                # a stop asked of this process (a Ctrl-C whose KeyboardInterrupt a gc callback
                # dropped: grader/host/interrupts.py) ends the wait as the Ctrl-C would have
                ends = [s.ends for s in busy if s.ends is not None]
                timeout = max(0.0, min(ends) - time.monotonic()) if ends else None
                ready = set(wait([s.conn for s in busy] + [s.proc.sentinel for s in busy] + [interrupts.fd()], timeout))
                if interrupts.fd() in ready:
                    raise KeyboardInterrupt
                for slot in busy:
                    key = slot.key
                    if slot.conn not in ready and slot.proc.sentinel not in ready:
                        if slot.ends is not None and time.monotonic() >= slot.ends:
                            yield key, self._overran(slot, key, tries, deadline)
                        continue
                    try:
                        status, value = slot.conn.recv()
                    except (EOFError, OSError):
                        yield from self._lost(slot, key, tries, queue)
                        continue
                    if status == "memory":  # the worker ends: a loss, tried once more
                        yield from self._lost(slot, key, tries, queue, limit=over_memory(self.memory_bytes or 0))
                        continue
                    if status == "origins":  # a forked worker that must not grade: no try, spawn
                        forkserver.turn_off(str(value))
                        self._drop(slot)
                        tries[key] -= 1
                        queue.appendleft((key, slot.args))
                        continue
                    slot.key, slot.args, slot.ends, slot.answered = None, (), None, True
                    yield key, Raised(str(value)) if status == "raised" else value
        except BaseException:
            self.close(kill=True)
            raise

    def _lost(
        self,
        slot: _Slot,
        key: Hashable,
        tries: dict[Hashable, int],
        queue: deque[tuple[Hashable, tuple[Any, ...]]],
        limit: str | None = None,
    ) -> Iterator[tuple[Hashable, Any]]:
        args = slot.args
        _reap(slot)  # it said it ran out of memory, or died: it ends, or is killed
        exitcode = slot.proc.exitcode
        if slot.forked and not slot.answered and limit is None and exitcode is not None and exitcode > 0:
            # an exit before its first answer: a package of the server's that this process's
            # path would not import may have failed an import before forkserver.differs could
            # look (a spawned worker would have been fine); the retry is spawned
            forkserver.turn_off(f"a worker forked from it exited before its first answer (exit code {exitcode})")
        self._slots.remove(slot)
        self._after_death()
        limit = self._limit_hit.setdefault(key, limit) or limit  # a try that ran past it, named
        lost = Lost(tries[key], exitcode, limit)
        if tries[key] < self.attempts:
            log.warning("the trusted process grading %s was lost (%s); grading it again", key, lost.cause)
            queue.appendleft((key, args))
            return
        yield key, lost

    def _drop(self, slot: _Slot) -> None:
        """A worker that ended before it took its task (nothing of it to sweep)."""
        _reap(slot)
        self._slots.remove(slot)

    def _overran(
        self,
        slot: _Slot,
        key: Hashable,
        tries: dict[Hashable, int],
        deadline: Callable[[Hashable], float | None] | None,
    ) -> Lost:
        """Kill the worker of a task past its deadline: a :class:`Lost`, not tried again."""
        _reap(slot, kill=True)
        self._slots.remove(slot)
        self._after_death()
        seconds = deadline(key) if deadline is not None else None
        lost = Lost(tries[key], slot.proc.exitcode, over_time(seconds or 0.0))
        log.warning("the trusted process grading %s was killed: %s", key, lost.cause)
        return lost

    def _after_death(self) -> None:
        if self.on_death is None:
            return
        sweep = threading.Thread(target=self._call_on_death, name="jaxgrade-sweep", daemon=True)
        self._sweeps = [t for t in self._sweeps if t.is_alive()] + [sweep]
        sweep.start()

    def _call_on_death(self) -> None:
        assert self.on_death is not None
        with self._sweeping:
            try:
                self.on_death()
            except Exception as exc:  # sweeping up only saves resources: never a reason to stop the batch
                log.warning("after a trusted process was lost: %s", exc)

    def close(self, *, kill: bool = False) -> None:
        """Stop every worker: ask them to finish (or kill them) and wait.  A worker killed in a
        task (``kill``: a Ctrl-C, an error in the caller) is swept after as a lost one is
        (``on_death``), before this returns: its sandboxes' scratch is not left to the next run."""
        killed = False
        for slot in self._slots:
            if kill and slot.key is not None:
                killed = True
                with contextlib.suppress(Exception):
                    slot.proc.kill()
            else:
                with contextlib.suppress(OSError, ValueError):
                    slot.conn.send(None)
        for slot in self._slots:
            _reap(slot)
        self._slots = []
        if killed:
            self._after_death()
        for sweep in self._sweeps:  # what a lost worker left is swept before the batch ends
            sweep.join(timeout=SWEEP_WAIT)
        self._sweeps = []

    def pids(self) -> list[int]:
        """The live workers' process ids."""
        return [s.proc.pid for s in self._slots if s.proc.pid is not None and s.proc.is_alive()]
