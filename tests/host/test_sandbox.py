"""Isolation: what student code inside the sandbox can see, write, reach and leave behind.

The bwrap tests are skipped where bubblewrap does not work; the process-isolation fallback is
tested for what it promises (limits, cleanup, a visible warning), not for confinement.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from grader.host import sandbox
from grader.host.sandbox import Limits, isolation_warning
from grader.host.session import Session

REPO = Path(__file__).resolve().parents[2]
REQUIRE_BWRAP = os.environ.get("JAXGRADE_REQUIRE_BWRAP", "") not in ("", "0")  # CI: fail, never skip
HAVE_BWRAP = sandbox.bwrap_status()[0] is not None or REQUIRE_BWRAP
needs_bwrap = pytest.mark.skipif(not HAVE_BWRAP, reason=f"bwrap unavailable: {sandbox.bwrap_status()[1]}")
AS_ROOT = os.geteuid() == 0

LIMITS = Limits(cell_timeout=20, call_timeout=10)


def find_processes(token: str) -> list[int]:
    """Host pids whose command line contains ``token``."""
    needle = token.encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if needle in f.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


def wait_for(predicate, timeout: float = 10.0, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


def reap(pids: list[int]) -> None:
    """Last-resort cleanup of processes this test caused, so a failure does not leak them."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def started(notebook_json: str, isolation: str, limits: Limits = LIMITS) -> Session:
    s = Session(notebook_json, limits=limits, isolation=isolation)
    s.start()
    report = s.execute()
    assert report.ok, report.message
    return s


@pytest.fixture(scope="module")
def jail(notebook_text):
    """One bwrap sandbox running tests/notebooks/probes.ipynb."""
    if not HAVE_BWRAP:
        pytest.skip("bwrap unavailable")
    s = started(notebook_text("probes.ipynb"), "bwrap")
    assert [c.status for c in s.report.cells] == ["ok"], [c.as_dict() for c in s.report.cells]
    yield s
    s.close()


# --------------------------------------------------------------------------- bwrap confinement


@needs_bwrap
def test_runs_as_a_different_uid(jail):
    uid, euid, gid, egid = jail.call("ids").value
    assert uid != os.getuid() and euid != os.geteuid()
    assert uid != 0 and euid != 0 and gid != 0 and egid != 0
    if AS_ROOT:  # a host uid of its own, from the sandbox range
        assert uid == euid == gid == egid
        assert sandbox.SANDBOX_UID_BASE <= uid < sandbox.SANDBOX_UID_BASE + sandbox.SANDBOX_UID_COUNT
    # its /etc/passwd names that uid (tools that look up the user work) and is not the host's
    passwd = jail.call("try_read", "/etc/passwd").value
    assert passwd.startswith(f"student:x:{uid}:"), passwd
    assert "root:" not in passwd


@needs_bwrap
def test_cannot_see_reference_hidden_tests_outputs_or_other_submissions(jail, tmp_path):
    out_dir = tmp_path / "out"
    (out_dir / "results").mkdir(parents=True)
    result = out_dir / "results" / "alice.json"
    result.write_text('{"score": 10}')
    other = sandbox.make_scratch("jaxgrade-sub-")  # another student's submission
    try:
        (other / "submission.ipynb").write_text("{}")
        hidden = [
            REPO / "reference",
            REPO / "tests" / "host" / "test_sandbox.py",  # stands in for the hidden tests
            REPO / "grader" / "host" / "session.py",  # the checkout itself (only grader/ is mounted, elsewhere)
            REPO / "grading.yaml",
            out_dir,
            result,
            other / "submission.ipynb",
            jail.scratch,  # the host path of its own scratch
            Path("/root/.ssh"),
            Path("/etc/shadow"),
        ]
        host_has = [p for p in hidden if p.exists()]
        # the test is only meaningful for what the host really has
        assert result in host_has and other / "submission.ipynb" in host_has
        assert REPO / "tests" / "host" / "test_sandbox.py" in host_has
        seen = jail.call("exists", [str(p) for p in hidden]).value
        visible = [str(p) for p, s in zip(hidden, seen, strict=True) if s]
        assert visible == []
        assert jail.call("try_read", str(result)).value.startswith("refused")
        # what it does see: its own scratch and the read-only sandbox side of the grader package
        # (grader/sandboxed and grader/wire), not its trusted side (grader/grading/checks.py...)
        seen = jail.call(
            "exists",
            [
                "/sandbox/submission.ipynb",
                "/opt/jaxgrade/grader/sandboxed/kernel_side.py",
                "/opt/jaxgrade/grader/wire/protocol.py",
                "/opt/jaxgrade/grader/grading/checks.py",
                "/opt/jaxgrade/grader/host/session.py",
            ],
        ).value
        assert seen == [True, True, True, False, False]
    finally:
        import shutil

        shutil.rmtree(other, ignore_errors=True)


@needs_bwrap
def test_cannot_write_outside_its_scratch(jail, tmp_path):
    tag = "jg-canary-" + uuid.uuid4().hex[:12]
    canary = tmp_path / "canary.txt"
    canary.write_text("original")
    os.chmod(tmp_path, 0o777)  # even if it could see it, permissions would not stop it
    os.chmod(canary, 0o666)
    site = next(p for p in sys.path if p.endswith("site-packages"))
    # (path inside the sandbox, host path that must stay untouched)
    targets = [
        (str(canary), None),
        (f"/usr/{tag}", f"/usr/{tag}"),
        (f"/usr/lib/{tag}", f"/usr/lib/{tag}"),
        (f"/opt/jaxgrade/grader/{tag}", str(REPO / "grader" / tag)),
        (f"/opt/jaxgrade/grader/sandboxed/{tag}", str(REPO / "grader" / "sandboxed" / tag)),
        (f"/opt/jaxgrade/grader/wire/{tag}", str(REPO / "grader" / "wire" / tag)),
        (f"/opt/jaxgrade/{tag}", None),
        (f"{sys.prefix}/{tag}", f"{sys.prefix}/{tag}"),
        (f"{site}/{tag}.pth", f"{site}/{tag}.pth"),
        (f"{os.path.realpath(sys.base_prefix)}/{tag}", f"{os.path.realpath(sys.base_prefix)}/{tag}"),
        (f"/etc/{tag}", f"/etc/{tag}"),
        (f"/{tag}", f"/{tag}"),
        (str(REPO / tag), str(REPO / tag)),
        (f"/proc/{tag}", None),
        ("/etc/ld.so.cache", None),
    ]
    host_paths = [Path(h) for _, h in targets if h]
    try:
        results = jail.call("try_write", [t for t, _ in targets]).value
        written = [t for (t, _), r in zip(targets, results, strict=True) if r == "written"]
        assert written == [], results
        made = jail.call("try_mkdir", [f"/usr/{tag}.d", f"/opt/{tag}.d", str(REPO / f"{tag}.d")]).value
        assert all(r.startswith("refused") for r in made), made
        # its /tmp is its own: writing there works and does not reach the host's /tmp
        assert jail.call("try_write", [f"/tmp/{tag}", f"/sandbox/{tag}"]).value == ["written", "written"]
        assert not Path(f"/tmp/{tag}").exists()
        assert (jail.scratch / tag).read_text() == "pwned"
        assert canary.read_text() == "original"
        assert [p for p in host_paths if p.exists()] == []
        assert not Path(f"/usr/{tag}.d").exists() and not (REPO / f"{tag}.d").exists()
    finally:
        for p in [*host_paths, Path(f"/tmp/{tag}"), Path(f"/usr/{tag}.d"), REPO / f"{tag}.d"]:
            if p.is_dir():
                p.rmdir()
            elif p.exists():
                p.unlink()


@needs_bwrap
def test_has_no_network(jail):
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(5)
    server.settimeout(0.5)
    port = server.getsockname()[1]
    try:
        # the host's loopback is reachable from here...
        probe = socket.create_connection(("127.0.0.1", port), timeout=2)
        server.accept()[0].close()
        probe.close()
        # ...but not from the sandbox
        local = jail.call("try_connect", "127.0.0.1", port).value
        assert local.startswith("refused"), local
        with pytest.raises(socket.timeout):
            server.accept()
        remote = jail.call("try_connect", "1.1.1.1", 53).value
        assert remote.startswith("refused"), remote
    finally:
        server.close()


@needs_bwrap
def test_fork_bomb_hits_the_process_limit_without_hurting_the_grader(make_notebook):
    token = str(uuid.uuid4().int)[:15]
    limits = Limits(cell_timeout=60, call_timeout=10)  # max_processes: 256
    nb = make_notebook(
        "import subprocess\nprocs = []",
        f"for i in range(1000):\n    procs.append(subprocess.Popen(['sleep', '600', '0.{token}']))",
        "def alive(x):\n    return x + 1",
    )
    s = started(nb, "bwrap", limits)
    leftovers: list[int] = []
    try:
        cells = {c.index: c for c in s.report.cells}
        bomb = cells[1]
        assert bomb.status == "error", bomb.as_dict()
        assert bomb.ename in ("BlockingIOError", "OSError", "PermissionError"), bomb.as_dict()
        assert bomb.location is not None and bomb.location.cell == 1
        # what the bomb started was killed (and reaped) after its cell, and the record says so
        assert 0 < bomb.strays < limits.max_processes, bomb.as_dict()
        assert find_processes(token) == []
        # the grader is unaffected: it can still start processes, and the sandbox still answers
        assert subprocess.run(["true"]).returncode == 0
        assert cells[2].status == "ok"
        assert s.call("alive", 1).value == 2
    finally:
        s.close()
        leftovers = wait_for(lambda: not find_processes(token), timeout=10) or find_processes(token)
        reap(find_processes(token))
    assert leftovers is True, f"sandbox processes survived close(): {leftovers}"


# --------------------------------------------------------------------------- both isolation modes


@pytest.mark.parametrize("isolation", ["bwrap", "process"])
def test_no_process_survives_close(notebook_text, isolation):
    if isolation == "bwrap" and not HAVE_BWRAP:
        pytest.skip("bwrap unavailable")
    token = "jgtok-" + uuid.uuid4().hex
    s = started(notebook_text("probes.ipynb"), isolation)
    try:
        # both a detached child and a double-forked daemon ran inside the call...
        # (a third may be seen for an instant: the daemon's first fork, about to exit)
        assert s.call("spawn_leftovers", token).value >= 2
        # ...and the worker killed them as soon as the call was answered
        assert wait_for(lambda: not find_processes(token), timeout=10), find_processes(token)
        assert s.call("add", 1, 2).value == 3
        worker_pid = s.worker.pid
    finally:
        s.close()
    try:
        assert wait_for(lambda: not find_processes(token), timeout=10), find_processes(token)
        assert b"grader.sandboxed.worker" not in _cmdline(worker_pid)
        assert s.scratch is not None and not s.scratch.exists()
    finally:
        reap(find_processes(token))


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_process_isolation_warns_and_still_works(notebook_text):
    warning = isolation_warning("process")
    assert isinstance(warning, str) and warning.strip()
    assert "WARNING" in warning and "network" in warning
    assert isolation_warning("bwrap") is None
    assert sandbox.choose_isolation("process") == "process"
    s = started(notebook_text("probes.ipynb"), "process")
    try:
        assert [c.status for c in s.report.cells] == ["ok"]
        assert s.call("add", 2, 3).value == 5
        uid = s.call("ids").value[0]
        assert isinstance(uid, int)
    finally:
        s.close()


def test_choose_isolation_prefers_bwrap_when_it_works():
    assert sandbox.choose_isolation("auto") == ("bwrap" if HAVE_BWRAP else "process")
    if not HAVE_BWRAP:
        with pytest.raises(RuntimeError):
            sandbox.choose_isolation("bwrap")


@needs_bwrap
def test_refuses_to_mount_a_python_that_contains_protected_files(tmp_path: Path) -> None:
    """A venv created inside the course directory would expose reference/: refuse to start."""
    secret = Path(sys.prefix) / "reference"
    proc = sandbox.SandboxProcess("grader.sandboxed.worker", tmp_path, Limits(), "bwrap", protect=(secret,))
    with pytest.raises(sandbox.SandboxSetupError, match="the sandbox would expose"):
        proc.start()
    assert proc.proc is None
