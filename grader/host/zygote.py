"""Evaluators forked from a process that imported JAX once, into sandboxes that bubblewrap made.

Every evaluator sandbox used to start a Python that imported JAX before its first answer: about
0.9 CPU s on this machine (0.5 to 1.1 depending on the day) for every submission whose modules
the evaluator cache did not hold.  Here a *zygote*, a trusted process that imported the evaluator
and JAX once (and never starts a JAX backend), forks each evaluator instead:

1. The trusted side starts the sandbox with bubblewrap exactly as for a plain evaluator (the same
   namespaces, mounts, seccomp program and cgroup), but with a *holder* in it in place of
   ``python -m grader.sandboxed.evaluator``: a shell that says it is ready, then sleeps, as root's
   uid with no capability (so that the evaluator, the leased uid, can neither trace nor signal it).
2. It hands the zygote, over a socket, a pidfd of the holder and the holder's root directory (so
   the zygote never looks a path up in the sandbox), the protocol pipes and the log file, the
   leased uid, the sandbox's cgroup, its seccomp program, environment and command line.
3. The zygote forks a child, which closes the zygote's descriptors, joins the cgroup, enters the
   holder's mount, PID, network, IPC, UTS and cgroup namespaces and its root, gives up root as
   ``setpriv`` does for a plain sandbox (no groups, the leased uid and gid, no capabilities in any
   set, an empty bounding set, ``no_new_privs``), installs the same seccomp program and forks the
   evaluator, which is then inside the sandbox's PID namespace, and hands a pidfd of it back.
   The evaluator closes every descriptor but its pipes and log, becomes dumpable (as a process
   that execs is), takes the sandbox's environment and runs
   :func:`grader.sandboxed.evaluator.main` as ``python -m`` would.  Its parent ends at once; the
   zygote, a child subreaper, reaps it.

What the evaluator sees is what a plain one sees: ``tests/host/test_zygote.py`` compares the
two, item by item (credentials, capabilities, seccomp, signal handlers, namespaces, root, file
descriptors, limits, cgroup, OOM score).  What differs: its memory holds the zygote's imports (no
trusted module: the zygote imports only what a sandbox may, from a ``grader`` package laid out as
in a sandbox), its command line and initial environment block are the zygote's, its string hash
seed is the zygote's (``random`` and NumPy are reseeded), the pages it shares with the zygote
are charged to the trusted side's cgroup, and its memory layout is every sibling's: a zygote is
replaced after :data:`FORKS` evaluators, and at once where one ended of itself (SECURITY.md).

Only where it can work is it used: as root under bubblewrap, on Linux with ``pidfd_open`` and
``setns`` on a pidfd (5.8), and with ``JAXGRADE_ZYGOTE`` not ``0``.  A zygote that fails to start
or to fork is turned off for the process, and evaluators start plainly, as before.  There is one
per trusted process and sandbox environment (the JAX settings are read at import), at most
:data:`KEEP`; a closed one ends once its evaluators have, and one whose process ended reaps what
is left (for a minute at most) and ends.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import logging
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: The module a zygote forks (it imports it, and JAX, once).
EVALUATOR = "grader.sandboxed.evaluator"
#: What the sandbox's first process runs in place of the evaluator: it says it is ready once
#: bubblewrap has built the sandbox (mounts, namespaces, uid), then holds the sandbox open.
HOLDER = ["/bin/sh", "-c", "echo ready && exec sleep infinity"]
#: Namespaces an evaluator joins (not the user namespace: as root, bubblewrap makes none).
CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWPID, CLONE_NEWNET = (
    0x00020000,
    0x02000000,
    0x04000000,
    0x08000000,
    0x20000000,
    0x40000000,
)
NAMESPACES = CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWPID | CLONE_NEWNET
_PR_CAPBSET_DROP, _PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _PR_SET_DUMPABLE = 24, 38, 22, 4
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, _PR_SET_PDEATHSIG, _PR_SET_CHILD_SUBREAPER = 47, 4, 1, 36
_SECCOMP_MODE_FILTER = 2
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
#: The descriptors a request carries, in this order.
FDS = ("pidfd", "root", "stdin", "stdout", "stderr")
MAX_REQUEST = 1 << 20
#: Zygotes kept at once by a process (about 150 MB each), the least recently used ended first: a
#: grading process needs one for its students' evaluators, and one for the trusted warm's.
KEEP = 2
#: Evaluators one zygote forks before a new one replaces it.  Every one it forks has its memory's
#: layout (address randomization, the stack canary, glibc's pointer guard), which a plain one draws
#: afresh: a replacement bounds what an exploit of XLA could learn from evaluators it crashed.  A
#: zygote whose evaluator ended of itself (a crash, a limit) is replaced at once.
FORKS = 32

_lock = threading.Lock()
_zygotes: dict[tuple[tuple[str, str], ...], Zygote] = {}
_closed: list[Zygote] = []  # closed, ending once their evaluators have: waited for at exit
_off = ""  # why the zygote is off for this process ("" while it is not)


class ZygoteError(RuntimeError):
    """The zygote could not fork this evaluator (the caller starts it plainly instead)."""


# --------------------------------------------------------------------------- the trusted side


def enabled() -> str:
    """Why evaluators cannot be forked here ("" where they can)."""
    if _off:
        return _off
    if os.environ.get("JAXGRADE_ZYGOTE", "1") == "0":
        return "JAXGRADE_ZYGOTE=0"
    if not sys.platform.startswith("linux") or not hasattr(os, "pidfd_open"):
        return "needs Linux and os.pidfd_open"
    if os.geteuid() != 0:
        return "needs root (the zygote enters namespaces bubblewrap made)"
    return ""


def turn_off(why: str) -> None:
    """Start evaluators plainly from now on in this process, and say why once."""
    global _off
    with _lock:
        if _off:
            return
        _off = why
        zygotes = list(_zygotes.values())
        _zygotes.clear()
    log.warning("evaluators start plainly from now on: %s", why)
    for z in zygotes:
        _close(z)


def _close(zygote: Zygote) -> None:
    zygote.close()
    _closed.append(zygote)


def spawn(
    env: dict[str, str],
    *,
    holder: int,
    sandbox: int,
    uid: int,
    procs_files: list[str],
    seccomp: bytes | None,
    argv: list[str],
    stdin: int,
    stdout: int,
    stderr: int,
) -> tuple[int, int, Zygote]:
    """Fork an evaluator into the sandbox whose first process is ``holder`` (a host pid, below
    bubblewrap's ``sandbox``); return
    its host pid, a pidfd of it and the zygote that forked it.  ``env`` is the sandbox's
    environment.  Raises :class:`ZygoteError`."""
    key = tuple(sorted((k, v) for k, v in env.items() if k != "JAXGRADE_SANDBOX"))
    ended = []
    try:
        with _lock:
            _closed[:] = [z for z in _closed if z.proc.poll() is None]  # (poll reaps the ended)
            zygote = _zygotes.pop(key, None)
            if zygote is not None and (not zygote.alive() or zygote.retired or zygote.forks >= FORKS):
                ended.append(zygote)
                zygote = None
            if zygote is None:
                try:
                    zygote = Zygote(dict(key))
                except Exception as exc:
                    raise ZygoteError(f"the zygote could not start: {type(exc).__name__}: {exc}") from None
            _zygotes[key] = zygote  # the most recently used last
            while len(_zygotes) > KEEP:
                ended.append(_zygotes.pop(next(iter(_zygotes))))
    finally:
        for z in ended:
            _close(z)
    return *zygote.spawn(
        holder=holder,
        sandbox=sandbox,
        uid=uid,
        procs_files=procs_files,
        seccomp=seccomp,
        env=env,
        argv=argv,
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
    ), zygote


def close_all() -> None:
    """End every zygote of this process (at its exit, too)."""
    import time

    with _lock:
        zygotes = [*_zygotes.values(), *_closed]
        _zygotes.clear()
        _closed.clear()
    for z in zygotes:
        z.close()
    deadline = time.monotonic() + 10
    for z in zygotes:
        z.end(max(0.0, deadline - time.monotonic()))


atexit.register(close_all)


def _sandbox_layout() -> str:
    """A folder holding a ``grader`` package laid out as in a sandbox: the generated
    ``__init__.py`` and the sandbox side's subpackages (links to this installation's), so that
    the zygote can import no trusted module."""
    from grader.host.sandbox import SANDBOX_INIT, SANDBOX_PACKAGES, grader_package_dir

    # 0700, ours alone; not named like a sandbox's scratch folder ("jaxgrade-…")
    top = tempfile.mkdtemp(prefix="jaxgrade.zygote-")
    pkg = Path(top) / "grader"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(SANDBOX_INIT, encoding="utf-8")
    for sub in SANDBOX_PACKAGES:
        os.symlink(os.path.join(grader_package_dir(), sub), pkg / sub)
    return top


class Zygote:
    """One zygote process, and the socket its requests go through."""

    def __init__(self, env: dict[str, str]) -> None:
        from grader.host.sandbox import GRADER_MOUNT, sandbox_python

        self._layout = _sandbox_layout()
        self._log = Path(self._layout) / "zygote.log"  # what it says as it starts, for a failure's message
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.mount = GRADER_MOUNT
        self._lock = threading.Lock()
        zenv = {**env, "PYTHONPATH": self._layout}
        safe = ["-P"] if sys.version_info >= (3, 11) else []  # (3.10: the script drops its folder itself)
        log = open(self._log, "wb")
        try:
            self.proc = subprocess.Popen(
                # the interpreter by the path a sandbox runs it by (the resolved one): its module
                # path is then the sandbox's, the layout's place but for (a Python reached through a
                # link would find modules, later, by a path the sandbox does not have)
                [sandbox_python("bwrap"), "-s", *safe, os.path.abspath(__file__), str(os.getpid())],
                stdin=theirs.fileno(),
                stdout=subprocess.DEVNULL,
                stderr=log,
                env=zenv,
                cwd="/",
                close_fds=True,
                start_new_session=True,
            )
        except BaseException:
            ours.close()
            theirs.close()
            self._remove_layout()
            raise
        finally:
            log.close()
        theirs.close()
        self.sock = ours
        self._started = False
        self._serial = 0  # the requests' numbers: an answer must carry its request's
        self.forks = 0
        self.retired = False  # no more forks from it (grader/host/sandbox.py retires one whose evaluator died)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _ready(self) -> None:
        """Wait for its imports (seconds on a slow day)."""
        if self._started:
            return
        said = b""
        if _wait_readable(self.sock, 120):
            with contextlib.suppress(OSError):
                said = self.sock.recv(256)
        if said != b"ready":
            with contextlib.suppress(OSError):
                said += b" " + self._log.read_bytes()[-300:]
            raise ZygoteError(f"the zygote did not start: {said.decode(errors='replace').strip() or 'it said nothing'}")
        self._started = True

    def spawn(self, *, holder: int, sandbox: int, env: dict[str, str], **request: Any) -> tuple[int, int]:
        with self._lock:
            try:
                return self._spawn(holder, sandbox, env, request)
            finally:
                self.forks += 1

    def _spawn(self, holder: int, sandbox: int, env: dict[str, str], request: dict[str, Any]) -> tuple[int, int]:
        from grader.host.sandbox import SANDBOX_ROOT

        self._ready()
        self._serial += 1
        request |= {"id": self._serial, "mount": self.mount, "cwd": SANDBOX_ROOT}
        seccomp = request.pop("seccomp")
        streams = [request.pop("stdin"), request.pop("stdout"), request.pop("stderr")]
        body = json.dumps({**request, "env": env, "seccomp": seccomp.hex() if seccomp else None}).encode()
        if len(body) > MAX_REQUEST:
            raise ZygoteError("the request is too large")
        held: list[int] = []
        try:
            held.append(os.pidfd_open(holder))
            held.append(os.open(f"/proc/{holder}/root", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC))
            # the pid named the holder, a process of bubblewrap's (``sandbox``), when both were
            # opened: it still does (its pidfd polls readable once it ended, and a pid is given
            # again only after that), and it still descends from bubblewrap
            if not _descends(holder, sandbox) or ended(held[0]):
                raise ZygoteError("the sandbox ended before its evaluator was forked")
        except OSError as exc:
            for fd in held:
                os.close(fd)
            raise ZygoteError(f"the sandbox's holder is gone ({exc})") from None
        try:
            self.sock.settimeout(60)
            socket.send_fds(self.sock, [body], [*held, *streams])
            _wait_readable(self.sock, 60)
            answer, got, _, _ = socket.recv_fds(self.sock, MAX_REQUEST, 1)
        except BaseException as exc:
            # an answer not read now would be taken for the next request's: this zygote is done
            self.close()
            if isinstance(exc, OSError):
                raise ZygoteError(f"the zygote did not answer ({exc})") from None
            raise
        finally:
            for fd in held:
                os.close(fd)
        try:
            reply = json.loads(answer)
        except ValueError:
            reply = None
        if not isinstance(reply, dict) or reply.get("id") != self._serial:
            for fd in got:
                os.close(fd)
            self.close()
            raise ZygoteError(f"the zygote answered {answer[:200]!r}")
        if type(reply.get("pid")) is not int or len(got) != 1:
            for fd in got:
                os.close(fd)
            raise ZygoteError(f"the zygote could not fork the evaluator: {reply.get('error')}")
        return reply["pid"], got[0]

    def close(self) -> None:
        """No more requests: it ends once the evaluators it forked have (it reaps them)."""
        self.retired = True
        with contextlib.suppress(OSError):
            self.sock.close()
        self._remove_layout()

    def end(self, timeout: float = 10.0) -> None:
        """:meth:`close`, and wait for it to end (killed after ``timeout``)."""
        self.close()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)

    def _remove_layout(self) -> None:
        import shutil

        shutil.rmtree(self._layout, ignore_errors=True)


def ended(pidfd: int) -> bool:
    """Whether the process of this pidfd has ended (it polls readable then)."""
    import select

    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    return bool(poller.poll(0))


def _wait_readable(sock: socket.socket, timeout: float) -> bool:
    """Whether ``sock`` has something to read within ``timeout`` seconds; KeyboardInterrupt at
    once where this process's grading is asked to stop (grader/host/interrupts.py)."""
    import select

    from grader.host import interrupts

    poller = select.poll()
    poller.register(sock, select.POLLIN)
    poller.register(interrupts.fd(), select.POLLIN)
    ready = {fd for fd, _ in poller.poll(timeout * 1000)}
    if interrupts.fd() in ready:
        raise KeyboardInterrupt
    return sock.fileno() in ready


def _descends(pid: int, ancestor: int, depth: int = 4) -> bool:
    """Whether ``ancestor`` is among the first ``depth`` ancestors of ``pid``."""
    for _ in range(depth):
        try:
            with open(f"/proc/{pid}/status", encoding="ascii") as f:
                pid = int(next(line.split()[1] for line in f if line.startswith("PPid:")))
        except (OSError, StopIteration, ValueError):
            return False
        if pid == ancestor:
            return True
    return False


# --------------------------------------------------------------------------- the zygote


def _libc() -> Any:
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _serve(parent: int) -> None:
    """The zygote's loop: import once, then fork an evaluator for each request on fd 0, until
    the socket closes or ``parent`` (the trusted process, not the thread that started us, as
    ``PR_SET_PDEATHSIG`` would watch) ends; then reap what is left and end."""
    import select

    libc = _libc()
    watch = os.pidfd_open(parent)
    if os.getppid() != parent:
        os._exit(1)
    # an evaluator's parent (the child that entered the sandbox) ends at once; the evaluator is
    # then ours, not the machine's init's (which may never reap it: a zombie of the leased uid
    # keeps the uid from being leased again), and is reaped as soon as it ends
    _check(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "prctl(CHILD_SUBREAPER)")
    signal.signal(signal.SIGCHLD, _reap)
    sock = socket.socket(fileno=os.dup(0))
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.close(devnull)
    # what an evaluator imports, once; nothing here starts a JAX backend (a fork after that may hang)
    import gc

    import jax
    import jax.numpy  # noqa: F401
    from jax import export  # noqa: F401
    from jax._src.interpreters import mlir  # noqa: F401

    import grader.sandboxed.evaluator  # noqa: F401

    leaked = sorted(m for m in sys.modules if m == "grader" or m.startswith("grader."))
    trusted = [m for m in leaked if m != "grader" and not m.startswith(("grader.sandboxed", "grader.wire"))]
    if trusted:  # never: the layout holds no trusted module
        sock.send(b"trusted modules imported: " + ", ".join(trusted).encode()[:200])
        os._exit(1)
    gc.collect()
    gc.freeze()  # what the imports made is never touched by a child's collections (fewer copied pages)
    sock.send(b"ready")
    # the layout served the imports only (an evaluator finds `grader` at the sandbox's mount, and
    # the trusted side reads the log only when no "ready" came): removed here, it is gone even
    # where the trusted process ends without its atexit (a pool worker's os._exit, a kill)
    import shutil

    shutil.rmtree(os.environ.get("PYTHONPATH", ""), ignore_errors=True)
    while True:
        ready, _, _ = select.select([sock, watch], [], [])
        if watch in ready:
            break
        try:
            body, fds, _, _ = socket.recv_fds(sock, MAX_REQUEST, len(FDS))
        except OSError:
            break
        if not body:
            break
        pidfd: list[int] = []
        request: dict[str, Any] = {}
        try:
            request = json.loads(body)
            reply = _fork_one(request, fds)
            pidfd = [reply.pop("pidfd")]
        except Exception as exc:  # the trusted side starts the evaluator plainly and says why
            reply = {"error": f"{type(exc).__name__}: {exc}"[:500]}
        finally:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
        reply["id"] = request.get("id") if isinstance(request, dict) else None
        try:
            socket.send_fds(sock, [json.dumps(reply).encode()], pidfd)
        except OSError:
            break
        finally:
            for fd in pidfd:
                os.close(fd)
    # the evaluators still running end with their sandboxes: reap them, so that none is left to an
    # init that may never reap it (a minute at most, then they are the init's)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.alarm(60)
    with contextlib.suppress(ChildProcessError):
        while True:
            os.waitpid(-1, 0)
    os._exit(0)


def _reap(*_: Any) -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def _fork_one(request: dict[str, Any], fds: list[int]) -> dict[str, Any]:
    """Fork the child that enters the sandbox; its answer: the evaluator's host pid and a pidfd
    of it (made by its parent, before anything could reap it: no pid reused in between)."""
    if len(fds) != len(FDS):
        raise ValueError(f"{len(fds)} descriptors, not {len(FDS)}")
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    child = os.fork()
    if child == 0:  # the child: enter the sandbox, fork the evaluator, hand it over, end
        status = 1
        try:
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the zygote's reaper is not the evaluator's
            keep = {*fds, theirs.fileno()}
            for fd in os.listdir("/proc/self/fd"):  # nothing of the zygote's goes on (its socket first)
                if int(fd) not in keep:
                    with contextlib.suppress(OSError):
                        os.close(int(fd))
            pid = _enter(request, dict(zip(FDS, fds)))
            pidfd = os.pidfd_open(pid)
            socket.send_fds(theirs, [str(pid).encode()], [pidfd])
            status = 0
        except BaseException as exc:
            with contextlib.suppress(BaseException):
                theirs.send(f"error {type(exc).__name__}: {exc}".encode()[:500])
        finally:
            os._exit(status)
    theirs.close()
    try:
        ours.settimeout(60)
        said, got, _, _ = socket.recv_fds(ours, 600, 1)
    finally:
        ours.close()
    text = said.decode(errors="replace")
    if not text.isdigit() or len(got) != 1:
        for fd in got:
            os.close(fd)
        raise RuntimeError(text.removeprefix("error ") or "the child ended without a word")
    return {"pid": int(text), "pidfd": got[0]}


def _enter(request: dict[str, Any], fds: dict[str, int]) -> int:
    """In the zygote's child: become a process of the sandbox as ``setpriv`` makes one, then fork
    the evaluator there.  Returns its host pid."""
    libc = _libc()
    uid = int(request["uid"])
    if uid <= 0:
        raise ValueError("the evaluator needs a leased uid")
    with open("/proc/sys/kernel/cap_last_cap", encoding="ascii") as f:
        last = int(f.read())
    for procs in request["procs_files"]:  # bounded before anything else; a join that fails stops here
        with open(procs, "w", encoding="ascii") as f:
            f.write(str(os.getpid()))
    with open("/proc/self/oom_score_adj", "w", encoding="ascii") as f:  # the OOM killer picks sandboxes first
        f.write("1000")
    _check(libc.setns(fds["pidfd"], NAMESPACES), "setns")
    os.fchdir(fds["root"])
    os.chroot(".")
    os.chdir(request["cwd"])
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    for cap in range(last + 1):
        _check(libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0), f"prctl(CAPBSET_DROP {cap})")
    os.setresuid(uid, uid, uid)
    _check(libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "prctl(CAP_AMBIENT_CLEAR_ALL)")
    header = struct.pack("II", _LINUX_CAPABILITY_VERSION_3, 0)
    data = bytes(24)  # effective, permitted, inheritable: none, in both 32-bit halves
    _check(libc.capset(header, data), "capset")
    _check(libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")
    if request.get("seccomp"):
        program = bytes.fromhex(request["seccomp"])
        buf = ctypes.create_string_buffer(program, len(program))
        fprog = struct.pack("HxxxxxxQ", len(program) // 8, ctypes.addressof(buf))
        _check(libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, fprog, 0, 0), "prctl(SECCOMP)")
    pid = os.fork()  # the first process this makes is inside the sandbox's PID namespace
    if pid == 0:
        code = 1
        try:
            code = _become(request, fds)
        finally:
            os._exit(code)
    return pid


def _become(request: dict[str, Any], fds: dict[str, int]) -> int:
    """In the sandbox, as its uid: the evaluator, as ``python -s -m grader.sandboxed.evaluator``
    started by bubblewrap would be."""
    os.setsid()
    os.dup2(fds["stdin"], 0)
    os.dup2(fds["stdout"], 1)
    os.dup2(fds["stderr"], 2)
    os.closerange(3, 1 << 20)
    # a process whose uid changed is not dumpable (so no process of the sandbox could reach it
    # while it held the descriptors just closed); one that execs, as a plain sandbox's, is again
    _check(_libc().prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0), "prctl(DUMPABLE)")
    # the handlers are a fresh Python's (the zygote's SIGCHLD reaper was reset before the fork);
    # the mask, none blocked
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    os.environ.clear()
    os.environ.update(request["env"])
    os.environ["PWD"] = request["cwd"]  # as bubblewrap's --chdir sets it
    mount = request["mount"]
    sys.path[:] = [mount, *sys.path[1:]]  # the layout's place: where a sandbox finds `grader`
    for name, module in list(sys.modules.items()):
        if name == "grader" or name.startswith("grader."):
            if hasattr(module, "__path__"):
                module.__path__ = [os.path.join(mount, *name.split("."))]
    sys.path_importer_cache.clear()
    sys.argv = [os.path.join(mount, "grader", "sandboxed", "evaluator.py"), *request["argv"]]
    tempfile.tempdir = None
    import random

    import numpy

    random.seed()  # the zygote's states, drawn once, would be every evaluator's
    numpy.random.seed()
    from grader.sandboxed import evaluator

    try:
        return int(evaluator.main(request["argv"]) or 0)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1


if __name__ == "__main__":
    # started by path: its own folder (grader/host, trusted code) is not on sys.path (-P), and a
    # Python without -P drops it here
    if sys.path and os.path.dirname(os.path.realpath(__file__)) == os.path.realpath(sys.path[0] or "."):
        del sys.path[0]
    _serve(int(sys.argv[1]))
