"""A background checker that keeps the next ``jaxgrade check`` warm.

A plain ``jaxgrade check`` spends most of its 3 s before the student's first cell runs: Python
and the grader's imports, the sandbox, its kernel and ``import jax``.  ``check --watch`` hides
that within one session of work; this does it across commands.  After a check that ran in
its own process, ``jaxgrade check`` leaves a *check server*: a trusted process of the same user
(this module, ``python -m grader.grading.check_server``) that starts the next sandbox at once,
with no notebook in it, and waits.  The next ``jaxgrade check`` hands its command line to the
server before the CLI is even imported (:func:`client_main`, from :mod:`grader.entry`); the
server checks the notebook in the sandbox it started, sends back the text to print and the exit
code, and starts the next sandbox.  It exits after :data:`IDLE` seconds without a check.

What it changes, and what it does not:

- **The sandbox is the same.**  The server runs the same ``cmd_check``, with the same limits and
  isolation, and the course is read again for every check (edited tests count).  A sandbox
  started ahead is used only if the limits, the sandbox environment and the notebook's folder
  are those of the check, and both of its processes are alive; nothing of a submission is in
  it before the check hands its notebook over.
- **Only its user reaches it.**  The socket is in a folder of that user's, mode 0700
  (``$JAXGRADE_CACHE_DIR/run``, else ``$XDG_RUNTIME_DIR/jaxgrade``, else
  ``~/.cache/jaxgrade/run``), and every connection's peer credentials (``SO_PEERCRED``) must be
  that uid.  No sandbox mounts the folder.  A folder that another user owns, or that others may
  open, turns the server off.
- **It runs what the check command runs, nothing else**: a command line that is not a plain
  check, or an assignment that needs another device count than the server's JAX has, is
  declined, and the command checks in its own process as before.
- **One per installation and environment**: the socket's name digests the grader's code, the
  Python environment, the installed JAX and the packages a check runs, the environment variables
  the grader reads and the user (:func:`server_key`), so a changed grader starts a new server (the
  old one idles out).  A lock keeps a second server for the same name from starting.
- **One course per server**: the course's test code runs in the server's process, so a check of
  another course is declined, and the server makes way for one of that course.
- **Off** with ``jaxgrade check --no-server``, or ``JAXGRADE_CHECK_SERVER=0`` in the environment
  (the test suite does that, except where it tests this).
"""

from __future__ import annotations

import contextlib
import faulthandler
import hashlib
import io
import json
import os
import re
import select
import signal
import socket
import stat
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

#: Seconds a server waits for the next check before it exits (``JAXGRADE_CHECK_SERVER_IDLE``).
IDLE = 600.0
#: ``0`` turns the server off: never used, never started.
ENV = "JAXGRADE_CHECK_SERVER"
ENV_IDLE = "JAXGRADE_CHECK_SERVER_IDLE"
#: The most bytes of a request or a reply.
MAX_MESSAGE = 64 << 20
#: An AF_UNIX path must fit in ``sun_path`` (108 bytes on Linux, with its NUL).
MAX_SOCKET_PATH = 107
#: How long a client waits to be accepted (a server busy with another check keeps it waiting
#: longer, once accepted: the checks are taken in turn).
CONNECT_TIMEOUT = 2.0


class Declined(Exception):
    """The server will not run this check (another course, another device count): the command runs it itself."""


# --------------------------------------------------------------------------- where


def enabled() -> bool:
    return os.environ.get(ENV, "1").strip() not in ("0", "false", "no", "off")


def idle_seconds() -> float:
    try:
        return max(1.0, float(os.environ.get(ENV_IDLE, IDLE)))
    except ValueError:
        return IDLE


def run_dir() -> Path | None:
    """The user's folder for the server's socket, lock and log, made 0700; None when it cannot
    be trusted (another owner, open to others, not a folder)."""
    explicit = os.environ.get("JAXGRADE_CACHE_DIR")
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if explicit:
        folder = Path(explicit) / "run"
    elif runtime:
        folder = Path(runtime) / "jaxgrade"
    else:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        folder = Path(base) / "jaxgrade" / "run"
    folder = Path(os.path.abspath(folder))
    try:
        folder.mkdir(parents=True, mode=0o700, exist_ok=True)
        st = folder.lstat()
    except OSError:
        return None
    if not _private_folder(st):
        return None
    return folder if _nobody_else_can_swap(folder.parent) else None


def _private_folder(st: os.stat_result) -> bool:
    """A folder of this user's that no one else may open (what the run folder must be)."""
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077


def _nobody_else_can_swap(folder: Path) -> bool:
    """Whether no other user can rename ``folder`` or any folder above it (and so put another
    user's socket where ours is looked for): each is ours or root's, and open to writing by
    others only with the sticky bit (``/tmp``), as ssh asks of the folders above its keys."""
    uid = os.getuid()
    for d in (folder, *folder.parents):
        try:
            st = d.lstat()
        except OSError:
            return False
        if st.st_uid not in (0, uid) or (st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX):
            return False
    return True


#: Installed packages whose upgrade a server must not outlive (their ``__init__.py`` is
#: rewritten by an install: its path, size and mtime go into the key, found without importing).
KEYED_PACKAGES = ("jax", "jaxlib", "numpy", "pytest", "nbclient", "jupyter_client", "ipykernel")
#: Environment variables a served check must share with the command (what the grader reads).
KEYED_ENV = re.compile(r"^(JAXGRADE_|JAX_|XLA_|TMPDIR$|PATH$|PYTHONPATH$|HOME$)")


def server_key() -> str:
    """What a server is for: this grader's code (every file of the package), this Python
    environment (its prefix: a venv) and the packages above as installed, the environment
    variables the grader reads, this user.  A server is never asked by a command that differs."""
    import importlib.util

    h = hashlib.sha256(f"{sys.prefix}\0{sys.version}\0{os.getuid()}".encode())
    root = Path(__file__).resolve().parents[1]
    for path in sorted(root.rglob("*")):
        if path.suffix in (".py", ".html", ".j2", ".txt") and path.is_file():
            h.update(b"\0" + path.relative_to(root).as_posix().encode() + b"\0")
            h.update(path.read_bytes())
    for name in KEYED_PACKAGES:
        spec = importlib.util.find_spec(name)
        origin = spec.origin if spec is not None else None
        try:
            st = os.stat(origin) if origin else None
        except OSError:
            st = None
        h.update(f"\0{name}={origin}:{st and st.st_size}:{st and st.st_mtime_ns}".encode())
    from grader.host import xla_flags  # light: the client imports no JAX

    given = xla_flags.given_environ()  # not what this check's own grading added to XLA_FLAGS
    for key in sorted(k for k in given if KEYED_ENV.match(k) and k not in (ENV,)):
        h.update(f"\0{key}={given[key]}".encode())
    return h.hexdigest()[:20]


def socket_path() -> Path | None:
    folder = run_dir()
    if folder is None:
        return None
    path = folder / f"check-{server_key()}.sock"
    if len(os.fsencode(path)) > MAX_SOCKET_PATH and not os.path.isdir("/proc/self/fd"):
        return None  # too long for sun_path, and no /proc to shorten it through (_address)
    return path


@contextlib.contextmanager
def _address(path: Path) -> Iterator[str]:
    """What to bind or connect to for ``path``: the path itself, or, when it is too long for
    ``sun_path`` (a deep ``JAXGRADE_CACHE_DIR``), the same file reached through a descriptor of
    its folder (``/proc/self/fd/N/NAME``), which is short.  The folder is opened without
    following a link, and must be a folder of this user's that no one else may open, as
    :func:`run_dir` checked it (the server checks it here again: the command that started it did
    the first check)."""
    if len(os.fsencode(path)) <= MAX_SOCKET_PATH:
        yield str(path)
        return
    fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        if not _private_folder(os.fstat(fd)):
            raise OSError(f"{path.parent} is not a folder of this user's that only this user may open")
        short = f"/proc/self/fd/{fd}/{path.name}"
        if len(os.fsencode(short)) > MAX_SOCKET_PATH:
            raise OSError(f"the socket's name is too long: {path.name}")
        yield short
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- framing


def _send(conn: socket.socket, message: dict[str, Any]) -> None:
    data = json.dumps(message, ensure_ascii=False).encode("utf-8")
    conn.sendall(struct.pack(">I", len(data)) + data)


def _recv_exact(conn: socket.socket, n: int, deadline: float | None = None) -> bytes:
    chunks, left = [], n
    while left:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("the request did not arrive in time")
            conn.settimeout(remaining)
        chunk = conn.recv(min(left, 1 << 20))
        if not chunk:
            raise ConnectionError("the other side closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _recv(conn: socket.socket, deadline: float | None = None) -> dict[str, Any]:
    """One message; with ``deadline`` (``time.monotonic()``), all of it must have arrived by then."""
    (n,) = struct.unpack(">I", _recv_exact(conn, 4, deadline))
    if n > MAX_MESSAGE:
        raise ValueError(f"a message of {n} bytes")
    message = json.loads(_recv_exact(conn, n, deadline).decode("utf-8"))
    if not isinstance(message, dict):
        raise ValueError("not a message")
    return message


# --------------------------------------------------------------------------- the client


def wanted(argv: list[str]) -> bool:
    """Whether this command line may be handed to a server: a check, not ``--watch`` (which keeps
    its own sandbox ahead), not ``--no-server``, not a request for help.  The server parses it
    with the real parser and declines anything else."""
    if not enabled() or "check" not in argv:
        return False
    return not any(a in argv for a in ("--watch", "--no-server", "-h", "--help"))


#: Seconds of a check after which it says it is still going (a cell that loops runs to its limit).
STILL_CHECKING_AFTER = 10.0


@contextlib.contextmanager
def still_checking(err: TextIO, stopped: str) -> Iterator[None]:
    """A check that takes longer than :data:`STILL_CHECKING_AFTER` says so once, and why it may:
    a student whose cell loops forever waited a minute in silence (a walkthrough).  ``stopped``:
    when such a cell is stopped ("after 60 s")."""
    done = threading.Event()

    def say() -> None:
        if not done.wait(STILL_CHECKING_AFTER):
            print(
                f"(still checking after {STILL_CHECKING_AFTER:g} s: a cell that does not finish is stopped "
                f"{stopped}, and the result names it; Ctrl-C stops the check)",
                file=err,
                flush=True,
            )

    threading.Thread(target=say, name="jaxgrade-still-checking", daemon=True).start()
    try:
        yield
    finally:
        done.set()


def client_main(argv: list[str], out: TextIO | None = None, err: TextIO | None = None) -> int | None:
    """Run ``jaxgrade ARGV`` in a check server, if one is there and takes it: the exit code, with
    the server's output printed; None when the command must run here (no server, declined, or
    the server went away mid-check: the check is then run again here)."""
    if not wanted(argv):
        return None
    path = socket_path()
    if path is None or not path.exists():
        return None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.settimeout(CONNECT_TIMEOUT)
        try:
            with _address(path) as address:
                conn.connect(address)
        except OSError:
            return None
        if not _same_user(conn):  # a socket that another user's process answers: not ours
            return None
        conn.settimeout(None)
        try:
            _send(conn, {"argv": list(argv), "cwd": os.getcwd()})
            with still_checking(err or sys.stderr, "at its time limit"):
                reply = _recv(conn)
        except (OSError, ValueError, RecursionError):
            return None
    except KeyboardInterrupt:
        print("jaxgrade: interrupted", file=err or sys.stderr)
        return 130
    finally:
        conn.close()
    if "decline" in reply or not isinstance(reply.get("code"), int):
        return None
    # warnings (stderr) come before the result, as a check in its own process prints them
    (err or sys.stderr).write(str(reply.get("err", "")))
    (err or sys.stderr).flush()
    (out or sys.stdout).write(str(reply.get("out", "")))
    return int(reply["code"])


def start(course: Path, assignment: str, notebook: Path, isolation: str, devices: int) -> bool:
    """Leave a server behind for the next check of ``notebook`` (after a check that ran in this
    process); it starts that check's sandbox at once.  False when servers are off or there is no
    trustworthy folder for one.  A server already there for the same key keeps its place (the
    new one sees the lock and exits)."""
    if not enabled():
        return False
    path = socket_path()
    if path is None:
        return False
    cmd = [sys.executable, "-m", "grader.grading.check_server", "--socket", str(path)]  # absolute
    cmd += ["--course", str(course), "--assignment", assignment, "--notebook", str(Path(notebook).resolve())]
    cmd += ["--isolation", isolation, "--devices", str(int(devices)), "--idle", str(idle_seconds())]
    # this very package: a checkout run with `python -m grader` is not on the server's path
    # (it starts in /), an installed one is (and its site-packages must not go before the stdlib)
    import site

    source = str(Path(__file__).resolve().parents[2])
    from grader.host import xla_flags

    env = xla_flags.given_environ()  # the server sets its own flags, as this process did
    if source not in {*site.getsitepackages(), site.getusersitepackages()}:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [source, os.environ.get("PYTHONPATH")]))
    # appended to (a server already running keeps its log); the server that gets the lock empties it
    fd = os.open(path.with_suffix(".log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    try:
        subprocess.Popen(
            cmd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=fd,
            stderr=fd,
            cwd="/",
            start_new_session=True,  # not the terminal's: a Ctrl-C in the shell is not for it
            close_fds=True,
        )
    finally:
        os.close(fd)
    return True


# --------------------------------------------------------------------------- the server


class _Serving:
    """The server's state: the course it serves, its JAX's device count, the sandbox it started ahead."""

    def __init__(self, devices: int, course: Path | None = None) -> None:
        self.devices = devices
        self.course = str(course) if course is not None else None
        self.ahead: Any = None  # a Session started with no notebook (grade.ready_ahead says whether it fits)
        self.next: tuple[Any, Path, str] | None = None  # (assignment, notebook, isolation) to start ahead for
        self.retire = False  # declined a check (another course, another device count): make way
        self.stopping = False  # SIGTERM/SIGHUP came: stop where the server loop looks (after a running check)


_SERVING: _Serving | None = None


def serving() -> bool:
    """Whether this process is a check server (``cmd_check`` then takes its sandbox from here)."""
    return _SERVING is not None


def take_ahead(assignment: Any, notebook: Path, isolation: str) -> Any:
    """In a server: the sandbox started ahead (None if there is none), which this check uses if
    :func:`grader.grading.grade.ready_ahead` says it fits; :class:`Declined` for another course
    or an assignment that needs another device count (the server then exits after saying so,
    to make way for one that fits).  The next check of the same notebook gets a sandbox started
    ahead after this one."""
    state = _SERVING
    if state is None:
        return None
    if state.course is not None and str(assignment.course.root) != state.course:
        # the course's test code runs in this process: one course per server, whatever it leaves
        state.retire = True
        raise Declined(f"this server checks the course in {state.course}")
    if assignment.config.devices != state.devices:
        state.retire = True
        raise Declined(
            f"this server's JAX has {state.devices} device(s); {assignment.name} needs {assignment.config.devices}"
        )
    state.next = (assignment, Path(notebook).resolve(), isolation)
    session, state.ahead = state.ahead, None
    return session


def _same_user(conn: socket.socket) -> bool:
    try:
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except (OSError, AttributeError):
        return False
    _pid, uid, _gid = struct.unpack("3i", creds)
    return uid == os.getuid()


#: Seconds a connection may take to send its request (a peer that sends nothing must not hold
#: the server, and every check after it, for ever).
REQUEST_TIMEOUT = 10.0


def _handle(conn: socket.socket) -> None:
    """Answer one connection: a plain check is run as the command would run it, with its output
    captured; anything else is declined.  A client that goes away (Ctrl-C) stops its check."""
    from grader import cli

    try:
        return _answer(cli, conn)
    finally:
        with contextlib.suppress(OSError):
            os.chdir("/")  # not the student's folder between checks


def _answer(cli: Any, conn: socket.socket) -> None:
    try:
        request = _recv(conn, time.monotonic() + REQUEST_TIMEOUT)
        conn.settimeout(None)
        argv, cwd = request.get("argv"), request.get("cwd")
        if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv) or not isinstance(cwd, str):
            raise ValueError("a malformed request")
        os.chdir(cwd)
    except (OSError, ValueError, RecursionError) as exc:
        with contextlib.suppress(OSError):
            _send(conn, {"decline": f"cannot take this request: {exc}"})
        return
    if _SERVING is not None and _SERVING.stopping:  # a SIGTERM came while the request did: no check begun
        with contextlib.suppress(OSError):
            _send(conn, {"decline": "the check server is stopping"})
        return
    out, err = io.StringIO(), io.StringIO()
    reply: dict[str, Any]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                args = cli.build_parser().parse_args(argv)
            except SystemExit:
                args = None
            if args is None:
                reply = {"decline": "not a command line this server runs"}
            elif args.func is not cli.cmd_check or args.watch or args.no_server:
                reply = {"decline": "not a plain check"}
            else:
                reply = {"code": _run_check(cli, argv, args, conn, out, err)}
    except Declined as exc:
        reply = {"decline": str(exc)}
    except Exception:  # a bug of ours: the command checks on its own and shows it; the server goes on
        import traceback

        traceback.print_exc()
        reply = {"decline": "the check server failed; checking here"}
    if "code" in reply:
        reply |= {"out": out.getvalue(), "err": err.getvalue()}
    with contextlib.suppress(OSError):  # the student pressed Ctrl-C: nobody to tell
        conn.settimeout(REQUEST_TIMEOUT)  # nor may a client that does not read hold the server
        _send(conn, reply)


def _run_check(cli: Any, argv: list[str], args: Any, conn: socket.socket, out: TextIO, err: TextIO) -> int:
    """``cli.main(argv)``, with this check's own log handler, while a thread watches the
    client: if it goes away (the student pressed Ctrl-C), the check is interrupted as a Ctrl-C
    interrupts a check in its own process (the sandbox is closed, nothing is kept)."""
    import logging
    import threading

    from grader.host import interrupts

    root = logging.getLogger()
    handler = logging.StreamHandler(err)
    saved = (root.handlers[:], root.level)
    root.handlers[:] = [handler]  # cli.main's basicConfig then keeps it
    root.setLevel(logging.INFO if args.verbose else logging.WARNING)
    # a plain flag and a pipe that wakes the watcher, not a threading.Event: a KeyboardInterrupt
    # can land inside Event.set(), with its condition's lock taken and never given back (the
    # watcher and the join would then hang); a list's append and os.write are single calls
    done: list[bool] = []
    wake_r, wake_w = os.pipe()
    lock = threading.Lock()  # the watcher interrupts only while the check runs: never after it

    def finish() -> None:
        done.append(True)
        with contextlib.suppress(OSError):
            os.write(wake_w, b"\0")

    def watch() -> None:
        while not done:
            try:
                readable, _, _ = select.select([conn, wake_r], [], [])
                if done:
                    return
                gone = conn in readable and not conn.recv(1, socket.MSG_PEEK)
            except (OSError, ValueError):
                gone = True
            if not gone and conn in readable:  # the client sent more than its request: not gone
                time.sleep(0.2)
            if gone:
                with lock:
                    if not done:
                        # the SIGINT's KeyboardInterrupt stops the check at once, unless a gc
                        # callback drops it; the request then stops its next wait on a sandbox.
                        # The signal first: a request first could wake the wait, whose
                        # KeyboardInterrupt the SIGINT's would then cut short, in the cleanup
                        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
                        interrupts.request()
                return

    watcher = threading.Thread(target=watch, name="check-server-client", daemon=True)
    watcher.start()
    try:
        try:
            return int(cli.main(argv, out, err))
        finally:
            with lock:
                finish()
    except KeyboardInterrupt:  # the watcher's, come just as cli.main was returning
        return 130
    finally:
        # where a SIGINT from outside lands as the inner finally takes the lock, `done` is not set
        # yet: the watcher would go on (and the join below wait) until the client went away
        finish()
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        watcher.join()
        for fd in (wake_r, wake_w):
            os.close(fd)
        interrupts.clear()  # this check's interruption is done: the next sandbox (started ahead) must not see it


def _start_ahead(state: _Serving) -> None:
    """Start the sandbox for the next check of the notebook last checked."""
    from grader.grading.grade import prestart

    if state.stopping or state.next is None or state.ahead is not None:
        return
    assignment, notebook, isolation = state.next
    # a SIGTERM now stops the server once the sandbox is started (and so closed), never halfway
    # through starting it (the handler only notes it: state.stopping)
    try:
        state.ahead = prestart(assignment, notebook, isolation)
    except Exception as exc:  # the next check starts its own sandbox, and says why if it cannot
        print(f"check server: could not start a sandbox ahead: {exc}", file=sys.stderr, flush=True)
        state.ahead = None


def serve(
    path: Path, *, course: Path, assignment: str, notebook: Path, isolation: str, devices: int, idle: float
) -> int:
    """The server's life: take the lock, listen, start the first sandbox ahead, then answer
    checks one at a time until ``idle`` seconds pass without one (or SIGTERM/SIGHUP)."""
    global _SERVING
    from grader import cli
    from grader.course.config import load_course
    from grader.grading.grade import _set_trusted_devices
    from grader.host.cgroups import protect_trusted
    from grader.host.sandbox import remove_own_scratch

    _set_trusted_devices(devices, fast_compile=True)  # before JAX starts in this process
    state = _Serving(devices, course)

    def stop(signum: int, frame: Any) -> None:
        # only noted, never raised from here: a handler runs between any two bytecodes, also
        # inside a garbage collector's callback (JAX has one), which swallows an exception (the
        # server went on, asleep, with its sandboxes), or in a running check, where pytest would
        # take it for the test's.  The wakeup descriptor ends the wait; the loop stops there.
        state.stopping = True

    # a signal wakes the idle wait below whichever thread the kernel gives it to: native threads
    # (OpenBLAS's, started as numpy is imported) do not block SIGTERM, and Python runs a handler
    # only in the main thread, which select() would otherwise leave asleep until the idle time is
    # up; the byte also stays there for a signal that comes just before the wait
    wake, woken = socket.socketpair()
    for end in (wake, woken):
        end.setblocking(False)
    wakeup_before = signal.set_wakeup_fd(woken.fileno(), warn_on_full_buffer=False)
    # before the pid is written where a kill finds it: a SIGTERM is only ever noted, and the
    # finally clause below cleans up whatever was started
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stop)
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1 PID`: what it is doing, in its log
    # SIGINT is how a check is interrupted when its client goes away (_run_check's watcher); the
    # server is in a session of its own, so the terminal's Ctrl-C never reaches it
    signal.signal(signal.SIGINT, signal.default_int_handler)
    lock = _take_lock(path.with_suffix(".lock"))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        if lock is None:
            return 0  # a server for this key is there already
        os.ftruncate(lock, 0)
        os.write(lock, f"{os.getpid()}\n".encode())
        with contextlib.suppress(OSError):  # the log (stderr) is this server's from now on
            os.ftruncate(2, 0)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        old = os.umask(0o177)
        try:
            with _address(path) as address:
                listener.bind(address)
        except OSError as exc:  # no server, then: every check runs in its own process, as before
            print(f"jaxgrade check server: cannot listen at {path}: {exc}", file=sys.stderr)
            return 1
        finally:
            os.umask(old)
        listener.listen(16)
        protect_trusted()
        _SERVING = state
        try:
            if not state.stopping:
                first = load_course(course).assignment(assignment, staff=False, starter=False)
                state.next = (first, notebook, isolation)
                _start_ahead(state)
        except Exception as exc:
            print(f"check server: nothing started ahead: {exc}", file=sys.stderr, flush=True)
        if state.stopping:  # a SIGTERM while it started
            return 0
        import jax.numpy  # noqa: F401 - the checks' trusted side, warm before the first one
        import pytest  # noqa: F401

        cli.build_parser()
        deadline = time.monotonic() + idle
        while not state.stopping:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            # again before each wait: code that ran in a check (a course's test code, say) may
            # have set a wakeup descriptor of its own, or none
            signal.set_wakeup_fd(woken.fileno(), warn_on_full_buffer=False)
            ready, _, _ = select.select([listener, wake], [], [], left)
            if wake in ready:  # a signal (its handler has run: SIGTERM set state.stopping)
                with contextlib.suppress(OSError):
                    wake.recv(4096)
            if listener not in ready or state.stopping:
                continue
            try:
                conn, _ = listener.accept()
                with conn:
                    if _same_user(conn):
                        _handle(conn)
            except KeyboardInterrupt:  # an interruption that came as its check ended: nothing to stop
                pass
            if state.retire or state.stopping:
                break
            _start_ahead(state)
            if state.stopping:
                break
            deadline = time.monotonic() + idle
    finally:
        _SERVING = None
        if state.ahead is not None:
            state.ahead.close()
        remove_own_scratch()
        if lock is not None:
            _remove_own_files(lock, path)
        listener.close()
        signal.set_wakeup_fd(wakeup_before)
        wake.close()
        woken.close()
        if lock is not None:
            os.close(lock)
    return 0


def _take_lock(lock_path: Path) -> int | None:
    """A descriptor that holds the lock of the file at ``lock_path`` (the server's place), or
    None while another server holds it.  The server before this one removes its lock file as it
    exits: a lock taken on a file that is no longer there would leave this server unseen (the
    pid it writes goes nowhere) and the place free for another, so it is taken again on the
    file there now."""
    import fcntl

    for _ in range(20):
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return None
        try:
            mine, there = os.fstat(fd), os.stat(lock_path, follow_symlinks=False)
            if (mine.st_dev, mine.st_ino) == (there.st_dev, there.st_ino):
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)
    return None


def _remove_own_files(lock: int, path: Path) -> None:
    """Remove the server's socket, lock and (empty) log, while they are still this server's:
    the lock file there is the one ``lock`` holds (the folder was not removed and remade for a
    newer server meanwhile).  A log with something in it stays, to say what went wrong."""
    lock_path = path.with_suffix(".lock")
    with contextlib.suppress(OSError):
        mine, there = os.fstat(lock), os.stat(lock_path)
        if (mine.st_dev, mine.st_ino) != (there.st_dev, there.st_ino):
            return
        for own in (path, lock_path):
            with contextlib.suppress(FileNotFoundError):  # no socket: it never listened
                own.unlink()
        if os.fstat(2).st_size == 0:
            path.with_suffix(".log").unlink()


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m grader.grading.check_server", description=__doc__.splitlines()[0])
    ap.add_argument("--socket", required=True, type=Path)
    ap.add_argument("--course", required=True, type=Path)
    ap.add_argument("--assignment", required=True)
    ap.add_argument("--notebook", required=True, type=Path)
    ap.add_argument("--isolation", default="auto")
    ap.add_argument("--devices", type=int, default=1)
    ap.add_argument("--idle", type=float, default=IDLE)
    a = ap.parse_args(argv)
    return serve(
        a.socket,
        course=a.course,
        assignment=a.assignment,
        notebook=a.notebook,
        isolation=a.isolation,
        devices=a.devices,
        idle=a.idle,
    )


if __name__ == "__main__":
    # run as grader.grading.check_server, the module cmd_check asks whether it is in a server
    from grader.grading import check_server

    sys.exit(check_server.main())
