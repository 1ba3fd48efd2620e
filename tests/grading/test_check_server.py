"""The background checker that keeps the next `jaxgrade check` warm (grader/grading/check_server.py).

The suite turns it off (tests/conftest.py); the tests here turn it on for the commands they run,
each with its own run folder, and stop every server they leave."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest

from grader.grading import check_server
from tests.conftest import build_notebook
from tests.minicourse import (
    SOURCES,
    as_from_a_terminal,
    make_minicourse,
    notebook,
    procs_with,
    signal_inside_a_gc_callback,
)


def _env(cache: Path, tag: str, idle: float = 120) -> dict[str, str]:
    # a student's shell sets no XLA_FLAGS (this process may have added some while grading in it)
    environ = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    return {
        **environ,
        "JAXGRADE_CHECK_SERVER": "1",
        "JAXGRADE_CHECK_SERVER_IDLE": str(idle),
        "JAXGRADE_CACHE_DIR": str(cache),
        "JAXGRADE_TEST_TAG": tag,
        "TMPDIR": str(cache / "tmp"),  # the sandboxes' scratch folders land here
    }


def _check(course: Path, nb: Path, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "grader", "--course", str(course), "check", "--assignment", "double", *extra, str(nb)]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)


def _wait(condition, timeout: float, what) -> None:  # type: ignore[no-untyped-def]
    """Until ``condition()``; ``what`` (a text, or a function that says what is wrong at the
    time of the failure) is the failure's message."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what() if callable(what) else what
        time.sleep(0.2)


def _described(pids: list[int]) -> str:
    """Each process: its pid, state and command line (what a failure to stop left running)."""
    out = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            status = Path(f"/proc/{pid}/status").read_text().splitlines()
            signals = " ".join(
                line.replace("\t", "") for line in status if line.startswith(("Sig", "ShdPnd", "Threads"))
            )
        except OSError:
            state, cmd, signals = "gone", "", ""
        out.append(f"{pid} [{state}] {signals} {cmd[:300]}")
    return "; ".join(out) or "nothing"


def _still_there(cache: Path, tag: str) -> str:
    """What a failure to stop left: each process (:func:`_described`), and each server's log
    after it was asked for its threads' stacks (SIGUSR1)."""
    left = _left(cache, tag)
    for pid in procs_with(tag):
        with contextlib.suppress(OSError):
            if b"check_server" in Path(f"/proc/{pid}/cmdline").read_bytes():  # SIGUSR1 ends any other
                os.kill(pid, signal.SIGUSR1)
    time.sleep(1)
    logs = "".join(
        f"\n--- {p.name}:\n{p.read_text(errors='replace')[-6000:]}" for p in (cache / "run").glob("check-*.log")
    )
    return f"left: {_described(left)}{logs}"


def _server_pid(run: Path) -> int | None:
    """The pid in the server's lock file (None between a server's exit, which removes it, and
    the next one's start)."""
    locks = list(run.glob("check-*.lock"))
    assert len(locks) <= 1, locks
    try:
        return int(locks[0].read_text().split()[0]) if locks else None
    except (OSError, ValueError, IndexError):
        return None


def _left(cache: Path, tag: str) -> list[int]:
    """Processes of the test: the server (its environment carries the tag) and the sandboxes
    (bubblewrap's and the worker's command lines name their scratch folders under ``cache``)."""
    mine = set(procs_with(tag))
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if str(cache).encode() in (d / "cmdline").read_bytes():
                    mine.add(int(d.name))
            except OSError:
                pass
    return sorted(mine - {os.getpid()})


def _stop_server(run: Path) -> None:
    pid = _server_pid(run)
    assert pid is not None, "no server is running"
    os.kill(pid, signal.SIGTERM)


def _scratch(cache: Path) -> list[str]:
    """The kinds of sandbox scratch folders there: "sub" (a notebook's), "eval" (its evaluator's)."""
    return sorted(p.name.split("-")[1] for p in (cache / "tmp").iterdir() if p.name.startswith("jaxgrade-"))


def _in_cell(cache: Path, marker: str) -> None:
    """Until a served check's cell has written ``marker`` in its scratch folder: the server has
    taken that check and runs its notebook (a sleep here would race a loaded machine's start)."""

    def written() -> bool:
        with contextlib.suppress(OSError):  # a scratch folder may go while it is walked
            return any((cache / "tmp").glob(f"jaxgrade-sub-*/**/{marker}"))
        return False

    _wait(written, 120, lambda: f"no served cell wrote {marker}; scratch: {_scratch(cache)}")


def _first_check(
    course: Path, cache: Path, tag: str, tmp_path: Path, idle: float = 120
) -> tuple[dict[str, str], Path, Path]:
    """A correct notebook checked once, which leaves a server: the commands' environment, the
    notebook, and the server's folder, once its socket is there."""
    env = _env(cache, tag, idle)
    nb = tmp_path / "hw.ipynb"
    nb.write_text(notebook("full"), encoding="utf-8")
    first = _check(course, nb, env)
    assert first.returncode == 0, first.stderr
    run = cache / "run"
    _wait(lambda: list(run.glob("check-*.sock")), 60, "no server started")
    return env, nb, run


@pytest.fixture
def setup(tmp_path: Path):  # type: ignore[no-untyped-def]
    course = make_minicourse(tmp_path / "course")
    # the server's folder: short (a socket's path is at most 107 bytes), and reachable by another
    # user once opened up (test_another_user_gets_no_answer), which pytest's tmp_path is not
    cache = Path(tempfile.mkdtemp(prefix="jaxgrade-cs-"))
    (cache / "tmp").mkdir()
    tag = uuid.uuid4().hex
    yield course, cache, tag
    # whatever a failed test left: SIGTERM first, so that a server removes its sandboxes' folders
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in procs_with(tag):
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        deadline = time.monotonic() + 20
        while _left(cache, tag) and time.monotonic() < deadline:
            time.sleep(0.2)
    shutil.rmtree(cache, ignore_errors=True)


def test_a_check_leaves_a_server_and_the_next_check_uses_its_sandbox(setup, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A student's second check: answered by the server, in a sandbox it started after the first
    one (no startup in the record), with the same result and output as a check of its own; a
    wrong notebook's exit code too.  SIGTERM stops the server and leaves nothing behind."""
    course, cache, tag = setup
    env = _env(cache, tag)
    nb = tmp_path / "hw.ipynb"
    nb.write_text(notebook("full"), encoding="utf-8")
    first = _check(course, nb, env, "--json")
    assert first.returncode == 0, first.stderr
    assert "a checker stays ready in the background" in first.stderr
    run = cache / "run"
    assert stat.S_IMODE(run.stat().st_mode) == 0o700
    _wait(lambda: list(run.glob("check-*.sock")), 60, "no server started")
    (sock,) = run.glob("check-*.sock")
    assert stat.S_IMODE(sock.stat().st_mode) == 0o600
    _wait(lambda: _scratch(cache) == ["eval", "sub"], 60, "no sandbox was started ahead")
    time.sleep(4)  # the student reads the result

    second = _check(course, nb, env, "--json")
    assert second.returncode == 0, second.stderr
    assert "a checker stays ready" not in second.stderr  # answered by the server, which starts none
    a, b = json.loads(first.stdout), json.loads(second.stdout)
    # the sandbox was started ahead: its start (if not over yet) began seconds before the check
    assert b["timings"]["startup"] < a["timings"]["startup"]
    assert (
        (b["score"], b["max_score"], b["status"]) == (a["score"], a["max_score"], a["status"]) == (2.0, 2.0, "graded")
    )
    assert [(t["name"], t["status"]) for t in b["tests"]] == [(t["name"], t["status"]) for t in a["tests"]]

    nb.write_text(notebook("zero"), encoding="utf-8")  # an edit: a wrong notebook, text output
    served = _check(course, nb, env)
    local = _check(course, nb, env, "--no-server")
    assert "a checker stays ready" not in served.stderr and served.returncode == local.returncode == 1
    assert served.stdout == local.stdout and "double" in served.stdout

    pid = _server_pid(run)
    assert pid is not None
    os.kill(pid, signal.SIGTERM)
    _wait(
        lambda: not list(run.glob("check-*.sock")), 30, lambda: f"the server did not stop; {_still_there(cache, tag)}"
    )
    _wait(
        lambda: not _left(cache, tag) and not _scratch(cache),
        30,
        lambda: f"left: {_described(_left(cache, tag))}; scratch: {_scratch(cache)}",
    )


def test_an_idle_server_exits_and_cleans_up(setup, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    course, cache, tag = setup
    _, _, run = _first_check(course, cache, tag, tmp_path, idle=3)
    _wait(lambda: not list(run.glob("check-*.sock")), 60, "the idle server did not exit")
    assert not list(run.glob("check-*.lock"))  # its pid goes with it: nobody kills a reused pid
    assert not list(run.glob("check-*.log"))  # an empty log too
    _wait(
        lambda: not _left(cache, tag) and not _scratch(cache),
        30,
        lambda: f"left: {_described(_left(cache, tag))}; scratch: {_scratch(cache)}",
    )


def test_no_server_is_left_when_it_is_turned_off(setup, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    course, cache, tag = setup
    nb = tmp_path / "hw.ipynb"
    nb.write_text(notebook("full"), encoding="utf-8")
    for env, extra in ((_env(cache, tag), ("--no-server",)), ({**_env(cache, tag), "JAXGRADE_CHECK_SERVER": "0"}, ())):
        done = _check(course, nb, env, *extra)
        assert done.returncode == 0 and "background" not in done.stderr
    time.sleep(1)
    assert not (cache / "run").exists() or not list((cache / "run").glob("check-*.sock"))
    assert _left(cache, tag) == []


def test_another_user_gets_no_answer(setup, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Even with the folder and socket opened to everyone, a connection from another uid is
    closed without a reply (its peer credentials are checked), and the server goes on."""
    if os.getuid() != 0 or not Path("/usr/bin/setpriv").exists():
        pytest.skip("needs root and setpriv to connect as another user")
    course, cache, tag = setup
    env, nb, run = _first_check(course, cache, tag, tmp_path)
    (sock,) = run.glob("check-*.sock")
    for p in (cache, run):
        p.chmod(0o755)
    sock.chmod(0o777)
    request = json.dumps({"argv": ["check", str(nb)], "cwd": "/"}).encode()
    probe = (
        "import socket, struct, sys\n"
        f"s = socket.socket(socket.AF_UNIX); s.connect({str(sock)!r})\n"
        "try:\n"
        f"    s.sendall(struct.pack('>I', {len(request)}) + {request!r})\n"
        "    print(repr(s.recv(100)))\n"
        # closed before it read the request: as it read it (a reset), or before it was sent (a broken pipe)
        "except (ConnectionResetError, BrokenPipeError):\n"
        "    print(repr(b''))\n"
    )
    as_other = ["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    # a Python that user may run (this one may live under /root: pyenv), for a probe of the stdlib only
    python = next(
        (p for p in (sys.executable, "/usr/bin/python3") if subprocess.run([*as_other, p, "-c", ""]).returncode == 0),
        None,
    )
    if python is None:
        pytest.skip("no Python that another user may run")
    other = subprocess.run([*as_other, python, "-c", probe], capture_output=True, text=True, timeout=120)
    assert other.returncode == 0, other.stderr
    assert other.stdout.strip() == "b''"  # closed, unanswered
    run.chmod(0o700)
    _wait(lambda: _scratch(cache) == ["eval", "sub"], 60, "no sandbox was started ahead")
    second = _check(course, nb, env, "--json")  # the server is still there for its user
    assert second.returncode == 0 and "a checker stays ready" not in second.stderr, second.stderr
    _stop_server(run)
    _wait(lambda: not _left(cache, tag), 30, lambda: f"the server did not stop; {_still_there(cache, tag)}")


def test_a_silent_peer_does_not_hold_the_server_and_ctrl_c_stops_a_served_check(setup, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A connection that sends nothing is dropped after REQUEST_TIMEOUT, so the checks behind
    it are answered; a student's Ctrl-C during a served check (a cell that sleeps) interrupts
    it on the server, so the next check is answered at once, not after the sleep."""
    _, cache, tag = setup
    course = make_minicourse(tmp_path / "patient", limits="{cell_timeout: 300}")  # a cell may sleep 120 s
    env, nb, run = _first_check(course, cache, tag, tmp_path)
    (sock,) = run.glob("check-*.sock")
    silent = socket.socket(socket.AF_UNIX)
    silent.connect(str(sock))
    try:
        t0 = time.monotonic()
        served = _check(course, nb, env)
        assert served.returncode == 0 and "a checker stays ready" not in served.stderr, served.stderr
        assert time.monotonic() - t0 < check_server.REQUEST_TIMEOUT + 30
    finally:
        silent.close()

    slow = tmp_path / "slow.ipynb"
    cell = "import pathlib, time\npathlib.Path('in-the-cell').touch()\ntime.sleep(120)"
    slow.write_text(build_notebook(cell, SOURCES["full"][0]), encoding="utf-8")
    cmd = [sys.executable, "-m", "grader", "--course", str(course), "check", "--assignment", "double", str(slow)]
    client = subprocess.Popen(
        as_from_a_terminal(cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    _in_cell(cache, "in-the-cell")  # the served check is in its sleeping cell
    client.send_signal(signal.SIGINT)
    try:
        _, err = client.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        client.kill()
        _, err = client.communicate()
        log = "".join(f.read_text(errors="replace")[-2000:] for f in run.glob("check-*.log"))
        pytest.fail(f"the command did not stop on Ctrl-C; its stderr: {err[-2000:]}\nthe server's log: {log}")
    assert client.returncode == 130, err
    t0 = time.monotonic()
    after = _check(course, nb, env)
    assert after.returncode == 0 and "a checker stays ready" not in after.stderr, after.stderr
    assert time.monotonic() - t0 < 30, "the interrupted check went on (its cell sleeps 120 s)"
    _stop_server(run)
    _wait(
        lambda: not _left(cache, tag) and not _scratch(cache),
        30,
        lambda: f"left: {_described(_left(cache, tag))}; scratch: {_scratch(cache)}",
    )


def test_a_server_serves_one_course(setup, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A check of another course is declined (the course's test code runs in the server's
    process): the command checks on its own, and the server makes way for one of that course."""
    course, cache, tag = setup
    env, nb, run = _first_check(course, cache, tag, tmp_path)
    first = _server_pid(run)
    other = make_minicourse(tmp_path / "other")
    done = _check(other, nb, env, "--json")
    assert done.returncode == 0 and "a checker stays ready" in done.stderr  # checked on its own, left a server
    _wait(lambda: _server_pid(run) not in (first, None), 60, "the first server did not make way")
    _stop_server(run)
    _wait(lambda: not _left(cache, tag), 30, lambda: f"the server did not stop; {_still_there(cache, tag)}")


def test_a_sigterm_that_another_thread_takes_stops_an_idle_server(setup, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The kernel may hand a SIGTERM to any thread that does not block it, and native threads
    (OpenBLAS's, started as numpy is imported) do not.  Python runs the handler only in the main thread, asleep in select(): the
    server must wake for it (its wakeup descriptor), not sleep on until its idle time is up
    (120 s here; before the fix it stopped only then)."""
    import ctypes

    course, cache, tag = setup
    _, _, run = _first_check(course, cache, tag, tmp_path)
    _wait(lambda: _scratch(cache) == ["eval", "sub"], 60, "no sandbox was started ahead")
    pid = _server_pid(run)
    assert pid is not None

    def waiting() -> bool:  # idle in select(), where only the wakeup descriptor wakes it
        with contextlib.suppress(OSError):
            return any(w in Path(f"/proc/{pid}/task/{pid}/wchan").read_text() for w in ("select", "poll"))
        return False

    _wait(waiting, 60, "the server never waited in select()")

    def takes_sigterm(tid: int) -> bool:
        status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
        blocked = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigBlk:")), 16)
        return not blocked & (1 << (signal.SIGTERM - 1))

    others = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task") if int(t) != pid and takes_sigterm(int(t)))
    if not others:

        def thread(tid: str) -> str:
            with contextlib.suppress(OSError):
                name = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
                status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
                return (
                    f"{name} (SigBlk {next(ln.split()[1] for ln in status.splitlines() if ln.startswith('SigBlk:'))})"
                )
            return f"{tid} (gone)"

        threads = ", ".join(thread(t) for t in sorted(os.listdir(f"/proc/{pid}/task")) if int(t) != pid)
        pytest.skip(
            "this server has no other thread that takes SIGTERM: the kernel can only give it to the main one "
            f"(its other threads: {threads or 'none'})"
        )
    libc = ctypes.CDLL(None, use_errno=True)
    sys_tgkill = {"x86_64": 234, "aarch64": 131}.get(os.uname().machine)
    if sys_tgkill is None:
        pytest.skip(f"tgkill's number on {os.uname().machine} is not known here")
    assert libc.syscall(sys_tgkill, pid, others[0], signal.SIGTERM) == 0, ctypes.get_errno()
    _wait(lambda: not _left(cache, tag), 30, lambda: f"the server did not stop; {_still_there(cache, tag)}")
    assert not list(run.glob("check-*.sock")) and not list(run.glob("check-*.lock"))


def test_a_sigterm_handled_inside_a_garbage_collector_callback_stops_the_server(setup, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Python runs a signal's handler between any two bytecodes, also inside a garbage
    collector's callback (JAX registers one), and an exception raised there is printed and
    swallowed: a handler that raised SystemExit left the server running, asleep with its
    sandboxes, until its idle time was up (the suite's flake of sessions 9 to 12; its log said
    "Exception ignored in: <function _xla_gc_callback ...> SystemExit").  The server here gets
    its SIGTERM inside such a callback, as it starts."""
    course, cache, tag = setup
    nb = tmp_path / "hw.ipynb"
    nb.write_text(notebook("full"), encoding="utf-8")
    run = cache / "run"
    run.mkdir(mode=0o700)
    script = signal_inside_a_gc_callback("grader.grading.check_server:main", "target._SERVING is not None")
    args = ["--socket", str(run / "check-gc.sock"), "--course", str(course), "--assignment", "double"]
    args += ["--notebook", str(nb), "--idle", "120"]
    log = run / "check-gc.log"  # where a server's stderr goes (a stack dump too: _still_there)
    with log.open("ab") as err:
        server = subprocess.Popen([sys.executable, "-c", script, *args], env=_env(cache, tag), stderr=err)
    try:
        server.wait(timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the server did not stop; {_still_there(cache, tag)}")
    assert server.returncode == 0, log.read_text(errors="replace")[-3000:] if log.exists() else ""
    _wait(lambda: not _left(cache, tag), 20, lambda: f"left: {_still_there(cache, tag)}")
    assert not list(run.glob("check-gc.*"))


# --------------------------------------------------------------------------- units


def test_the_lock_is_taken_on_the_file_that_is_there(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server before this one removes its lock file as it exits; a lock taken meanwhile on
    the removed file would hide this server (its pid written nowhere) and let a third one in."""
    import fcntl

    lock_path = tmp_path / "check-x.lock"
    flock = fcntl.flock
    removed = []

    def racing_flock(fd: int, op: int) -> None:
        if not removed:  # the server before: its file is unlinked just after this one opened it
            removed.append(os.fstat(fd).st_ino)
            lock_path.unlink()
        flock(fd, op)

    monkeypatch.setattr(fcntl, "flock", racing_flock)
    fd = check_server._take_lock(lock_path)
    assert fd is not None and removed
    try:
        mine = os.fstat(fd)  # the file at lock_path (the removed one's inode number may be reused)
        assert mine.st_nlink == 1 and mine.st_ino == lock_path.stat().st_ino
        monkeypatch.setattr(fcntl, "flock", flock)
        assert check_server._take_lock(lock_path) is None  # held: another server keeps its place
    finally:
        os.close(fd)
    again = check_server._take_lock(lock_path)  # released: the next one takes it
    assert again is not None
    os.close(again)


def test_only_a_plain_check_is_handed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAXGRADE_CHECK_SERVER", "1")
    assert check_server.wanted(["check", "hw.ipynb"])
    assert check_server.wanted(["--course", "c", "check", "--json", "hw.ipynb"])
    for argv in (["check", "--watch", "hw.ipynb"], ["check", "--no-server", "hw.ipynb"], ["check", "-h"], ["list"]):
        assert not check_server.wanted(argv), argv
    monkeypatch.setenv("JAXGRADE_CHECK_SERVER", "0")
    assert not check_server.wanted(["check", "hw.ipynb"])


def test_the_server_declines_what_is_not_a_plain_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever reaches the socket, only `check` runs there: any other command, `--watch`, a
    malformed request or a bad command line is declined, and the command runs it itself."""
    import struct

    monkeypatch.chdir(tmp_path)  # _handle moves to the request's folder
    for request in (
        {"argv": ["grade", "--assignment", "double", "--out", str(tmp_path / "out"), "x.ipynb"], "cwd": str(tmp_path)},
        {"argv": ["check", "--watch", "x.ipynb"], "cwd": str(tmp_path)},
        {"argv": ["check", "--no-such-option"], "cwd": str(tmp_path)},
        {"argv": "check x.ipynb", "cwd": str(tmp_path)},
        {"argv": ["check", "x.ipynb"], "cwd": str(tmp_path / "gone")},
        b'{"argv": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",  # too deep for the JSON reader
    ):
        a, b = socket.socketpair()
        with a, b:
            data = request if isinstance(request, bytes) else json.dumps(request).encode()
            a.sendall(struct.pack(">I", len(data)) + data)
            check_server._handle(b)
            reply = check_server._recv(a)
        assert "decline" in reply and "code" not in reply, (request, reply)
    assert not (tmp_path / "out").exists()


def test_a_stopping_server_declines_the_check_it_was_sent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A SIGTERM that came while a request arrived: no check is begun (the command checks on
    its own), so the server stops now, not after a whole check."""
    import struct

    state = check_server._Serving(devices=1)
    state.stopping = True
    monkeypatch.setattr(check_server, "_SERVING", state)
    monkeypatch.chdir(tmp_path)
    a, b = socket.socketpair()
    with a, b:
        data = json.dumps({"argv": ["check", "x.ipynb"], "cwd": str(tmp_path)}).encode()
        a.sendall(struct.pack(">I", len(data)) + data)
        check_server._handle(b)
        reply = check_server._recv(a)
    assert reply == {"decline": "the check server is stopping"}


def test_a_check_whose_student_went_away_stops_even_if_the_sigint_is_lost() -> None:
    """The watcher interrupts a check whose client went away with a SIGINT, whose
    KeyboardInterrupt a gc callback may drop (JAX registers one); it also asks for the stop
    (grader/host/interrupts.py), which ends the check's wait on its sandbox. Here the SIGINT is
    lost for sure (ignored) and the check waits on a sandbox that says nothing for 60 s: it ends
    as interrupted (130), and the stop is cleared for the next check."""
    import io

    from grader.host import interrupts
    from grader.wire import protocol

    quiet_r, quiet_w = os.pipe()  # a sandbox's channel, silent

    def main(argv, out, err):  # type: ignore[no-untyped-def]
        protocol.read_frame(quiet_r, deadline=time.monotonic() + 60, interrupt=interrupts.fd())
        return 0  # the channel said something: never here

    client, conn = socket.socketpair()
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        threading.Timer(1.0, client.close).start()  # the student pressed Ctrl-C
        code = check_server._run_check(
            SimpleNamespace(main=main), ["check"], SimpleNamespace(verbose=False), conn, io.StringIO(), io.StringIO()
        )
    finally:
        signal.signal(signal.SIGINT, before)
        conn.close()
        for fd in (quiet_r, quiet_w):
            os.close(fd)
    assert code == 130
    assert not interrupts.requested()


def test_a_sigint_from_outside_as_the_check_ends_does_not_leave_the_watcher_waiting_on_the_client() -> None:
    """A SIGINT from outside (``kill -INT``) whose KeyboardInterrupt lands as the check's end
    takes the watcher's lock, before it marks the check done: the check ends as interrupted
    (130) at once, not when the student's client goes away. The KeyboardInterrupt is raised at
    that very line by a trace function (a signal cannot be timed to land there)."""
    import io
    import linecache

    stopped: list[bool] = []

    def main(argv, out, err):  # type: ignore[no-untyped-def]
        caller = sys._getframe(1)  # _run_check's

        def tracer(frame, event, arg):  # type: ignore[no-untyped-def]
            line = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
            if frame is caller and event == "line" and line == "finish()":
                sys.settrace(before_trace)
                frame.f_trace = None
                stopped.append(True)
                raise KeyboardInterrupt
            return tracer

        caller.f_trace = tracer
        sys.settrace(tracer)
        return 0

    before_trace = sys.gettrace()  # a debugger's or coverage's, given back
    client, conn = socket.socketpair()
    went_away: list[bool] = []

    def go_away() -> None:  # so that the code before the fix ends too (its watcher waits on the client)
        went_away.append(True)
        client.close()

    before = signal.signal(signal.SIGINT, signal.SIG_IGN)  # the watcher's own SIGINT, if it sends one
    timer = threading.Timer(20.0, go_away)
    timer.start()
    try:
        code = check_server._run_check(
            SimpleNamespace(main=main), ["check"], SimpleNamespace(verbose=False), conn, io.StringIO(), io.StringIO()
        )
    finally:
        sys.settrace(before_trace)
        timer.cancel()
        signal.signal(signal.SIGINT, before)
        conn.close()
        client.close()
    assert stopped == [True]  # the KeyboardInterrupt did land where the test means it to
    assert code == 130
    assert not went_away, "the check waited for its client to go away"


def test_a_server_declines_another_device_count_and_makes_way(monkeypatch: pytest.MonkeyPatch) -> None:
    state = check_server._Serving(devices=1)
    monkeypatch.setattr(check_server, "_SERVING", state)
    four = SimpleNamespace(name="pmap", config=SimpleNamespace(devices=4), course=SimpleNamespace(root=Path("/c")))
    with pytest.raises(check_server.Declined, match="4"):
        check_server.take_ahead(four, Path("/c/hw.ipynb"), "auto")
    assert state.retire


def test_the_server_hands_its_sandbox_to_the_next_check_and_starts_ahead_for_that_notebook(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ahead = SimpleNamespace()
    state = check_server._Serving(devices=1)
    monkeypatch.setattr(check_server, "_SERVING", state)
    one = SimpleNamespace(name="double", config=SimpleNamespace(devices=1), course=SimpleNamespace(root=Path("/c")))
    state.ahead = ahead
    assert check_server.take_ahead(one, Path("/home/s/other/a.ipynb"), "bwrap") is ahead  # ready_ahead decides
    assert state.ahead is None  # handed over: never to two checks
    assert state.next is not None and state.next[1] == Path("/home/s/other/a.ipynb")  # started ahead next


def test_a_run_folder_others_can_open_turns_the_server_off(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("JAXGRADE_CHECK_SERVER", "1")
    monkeypatch.setenv("JAXGRADE_CACHE_DIR", str(tmp_path))
    assert check_server.run_dir() == tmp_path / "run"
    (tmp_path / "run").chmod(0o755)
    assert check_server.run_dir() is None and check_server.socket_path() is None


def test_a_socket_path_too_long_for_sun_path_is_reached_through_its_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A deep JAXGRADE_CACHE_DIR (a long home, pytest-xdist's folders) does not turn the server
    off: the socket is bound and reached as /proc/self/fd/N/NAME, and still lies in the folder."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    monkeypatch.setenv("JAXGRADE_CHECK_SERVER", "1")
    monkeypatch.setenv("JAXGRADE_CACHE_DIR", str(deep))
    path = check_server.socket_path()
    assert path is not None and path.parent == deep / "run"
    assert len(os.fsencode(path)) > check_server.MAX_SOCKET_PATH
    with pytest.raises(OSError), socket.socket(socket.AF_UNIX) as plain:  # what the plain path gives
        plain.bind(str(path))
    listener = socket.socket(socket.AF_UNIX)
    with check_server._address(path) as address:
        assert address.startswith("/proc/self/fd/") and address.endswith(path.name)
        listener.bind(address)
    listener.listen(1)
    assert stat.S_ISSOCK(path.lstat().st_mode)
    client = socket.socket(socket.AF_UNIX)
    with check_server._address(path) as address:
        client.connect(address)
    conn, _ = listener.accept()
    check_server._send(client, {"argv": ["check"]})
    assert check_server._recv(conn) == {"argv": ["check"]}
    for s in (conn, client, listener):
        s.close()
    path.parent.chmod(0o755)  # opened to others since it was checked: not reached through it
    with pytest.raises(OSError, match="only this user"), check_server._address(path):
        pass
    path.parent.chmod(0o700)
    real_isdir = os.path.isdir
    monkeypatch.setattr(os.path, "isdir", lambda p: False if p == "/proc/self/fd" else real_isdir(p))
    assert check_server.socket_path() is None  # no /proc to shorten it through: no server


def test_a_server_that_cannot_listen_says_why_and_leaves_no_lock(tmp_path: Path) -> None:
    """A long socket path in a folder that others may open (changed after the command checked
    it): the server does not listen through it, exits 1 with the reason in its log, and leaves
    no lock; the next check then runs in its own process."""
    run = tmp_path / ("d" * 60) / ("e" * 60) / "run"
    run.mkdir(parents=True, mode=0o755)
    sock = run / "check-test.sock"
    cmd = [sys.executable, "-m", "grader.grading.check_server", "--socket", str(sock), "--course", str(tmp_path)]
    cmd += ["--assignment", "double", "--notebook", str(tmp_path / "hw.ipynb")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=str(Path(__file__).parents[2]))
    assert done.returncode == 1, done.stderr
    assert "cannot listen at" in done.stderr and "only this user" in done.stderr, done.stderr
    assert sorted(p.name for p in run.iterdir()) == []


def test_a_run_folder_under_a_folder_others_may_swap_turns_the_server_off(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    (shared / "mine").mkdir(parents=True)
    shared.chmod(0o777)  # anyone may rename what is in it
    assert not check_server._nobody_else_can_swap(shared / "mine")
    shared.chmod(0o1777)  # /tmp's way: only the owner may
    assert check_server._nobody_else_can_swap(shared / "mine")


def test_sigterm_during_a_served_check_stops_the_server_after_it(setup, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """pytest would take a SystemExit raised inside a test for that test's failure: the check
    in progress ends as it would have, its student gets the right result, then the server stops."""
    course, cache, tag = setup
    env, nb, run = _first_check(course, cache, tag, tmp_path)
    pid = _server_pid(run)
    assert pid is not None
    cell = "import pathlib, time\npathlib.Path('in-the-cell').touch()\ntime.sleep(4)"
    nb.write_text(build_notebook(cell, SOURCES["full"][0]), encoding="utf-8")
    cmd = [sys.executable, "-m", "grader", "--course", str(course), "check", "--assignment", "double", "--json"]
    client = subprocess.Popen([*cmd, str(nb)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    _in_cell(cache, "in-the-cell")  # the server has taken the check: SIGTERM comes during it
    os.kill(pid, signal.SIGTERM)
    stdout, stderr = client.communicate(timeout=120)
    assert client.returncode == 0, stderr
    record = json.loads(stdout)
    assert record["score"] == record["max_score"] == 2.0 and "a checker stays ready" not in stderr
    _wait(
        lambda: not _left(cache, tag) and not _scratch(cache),
        30,
        lambda: f"left: {_described(_left(cache, tag))}; scratch: {_scratch(cache)}",
    )


def test_a_served_check_loads_neither_the_cli_nor_jax_in_the_command(tmp_path: Path) -> None:
    """The point of grader.entry: the command that a server answers imports neither grader.cli
    nor JAX (a stand-in server answers it here), and prints what the server sent, stderr first."""
    (tmp_path / "cache").mkdir()
    script = """
import socket, sys, threading
from grader.grading import check_server as cs
path = cs.socket_path()
srv = socket.socket(socket.AF_UNIX)
with cs._address(path) as address:
    srv.bind(address)
srv.listen(1)
def serve():
    conn, _ = srv.accept()
    cs._recv(conn)
    cs._send(conn, {"code": 3, "out": "served out\\n", "err": "served err\\n"})
    conn.close()
threading.Thread(target=serve, daemon=True).start()
from grader import entry
code = entry.main(["check", "hw.ipynb"])
print("loaded:", "grader.cli" in sys.modules, "jax" in sys.modules, file=sys.stderr)
sys.exit(code)
"""
    env = {**os.environ, "JAXGRADE_CHECK_SERVER": "1", "JAXGRADE_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 3, done.stderr
    assert done.stdout == "served out\n"
    assert done.stderr.startswith("served err\n") and "loaded: False False" in done.stderr, done.stderr
