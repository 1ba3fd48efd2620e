"""Isolation: what student code inside the sandbox can see, write, reach and leave behind.

The bwrap tests are skipped where bubblewrap does not work; the process-isolation fallback is
tested for what it promises (limits, cleanup, a visible warning), not for confinement.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest

from grader.host import memory, sandbox
from grader.host.memory import thread_allowance
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
def test_the_kernel_runs_with_the_sandboxes_xla_flags(jail):
    """The student's kernel inherits the flags the trusted side chose (grader/host/xla_flags.py),
    which the trusted compilation cache's key names."""
    assert jail.call("environ", "XLA_FLAGS").value == sandbox.sandbox_xla_flags()


@needs_bwrap
def test_holds_no_capability_and_can_gain_none(jail):
    """No capability now, none in the bounding set (so no file capability or setuid program could
    give one back), and no_new_privs."""
    fields = jail.call("capabilities").value
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(fields[cap], 16) == 0, (cap, fields[cap])
    assert fields["NoNewPrivs"] == "1"


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
    limits = Limits(cell_timeout=60, call_timeout=10)  # max_processes: 256, and 4 a core
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
        assert 0 < bomb.strays < limits.max_processes + thread_allowance(), bomb.as_dict()
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
        scratch = s.scratch
    finally:
        s.close()
    try:
        assert wait_for(lambda: not find_processes(token), timeout=10), find_processes(token)
        assert b"grader.sandboxed.worker" not in _cmdline(worker_pid)
        assert scratch is not None and not scratch.exists() and s.scratch is None
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
@pytest.mark.skipif(not AS_ROOT, reason="sandboxes run as a leased uid only when the grader is root")
def test_a_sandbox_that_fails_to_start_gives_back_its_uid_and_pipes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its uid is leased (and data pipes made) before the sandbox's cgroup is created; a cgroup
    that cannot be made fails the start, and its kill() (Session.close) must give both back."""

    def no_cgroup(*args: object, **kwargs: object) -> object:
        raise OSError("no cgroup for this test")

    monkeypatch.setattr(sandbox.cgroups, "host_hierarchy", lambda: (Path("/nonexistent"), ""))
    monkeypatch.setattr(sandbox.cgroups.SandboxCgroup, "create", no_cgroup)
    proc = sandbox.SandboxProcess("grader.sandboxed.worker", tmp_path, Limits(), "bwrap")
    proc._data_fd(b"data the sandbox would read")
    fds = list(proc._fds)
    with pytest.raises(sandbox.SandboxSetupError, match="cgroup"):
        proc.start()
    assert proc._uid_lease._fd is not None  # leased, and held until the kill
    proc.kill()
    assert proc._uid_lease._fd is None and proc._fds == []
    for fd in fds:
        with pytest.raises(OSError):
            os.fstat(fd)


@needs_bwrap
@pytest.mark.skipif(not AS_ROOT, reason="mounting a tmpfs needs root")
def test_the_bwrap_probe_holds_while_other_mounts_come_and_go(tmp_path: Path) -> None:
    """Another grading process mounts and removes scratch tmpfs folders under $TMPDIR all the
    time.  A probe that binds all of ``/`` failed about once in 50 (bwrap remounts every mount
    under a bind, and fails on one that went away meanwhile: CI saw a whole corpus turn into
    grader errors), and a failed probe turns bubblewrap off for the whole process."""
    stop = threading.Event()

    def churn() -> None:
        while not stop.is_set():
            folder = tempfile.mkdtemp(prefix="jaxgrade-test-churn-")
            subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "jaxgrade-test-churn", folder], check=False)
            subprocess.run(["umount", folder], check=False)
            os.rmdir(folder)

    churner = threading.Thread(target=churn)
    churner.start()
    try:
        failures = [why for path, why in (sandbox.bwrap_status.__wrapped__() for _ in range(1000)) if path is None]
    finally:
        stop.set()
        churner.join()
    assert not failures, f"{len(failures)} of 1000 probes failed, e.g. {failures[0]}"


@needs_bwrap
def test_refuses_to_mount_a_python_that_contains_protected_files(tmp_path: Path) -> None:
    """A venv created inside the course directory would expose reference/: refuse to start."""
    secret = Path(sys.prefix) / "reference"
    proc = sandbox.SandboxProcess("grader.sandboxed.worker", tmp_path, Limits(), "bwrap", protect=(secret,))
    with pytest.raises(sandbox.SandboxSetupError, match="the sandbox would expose"):
        proc.start()
    assert proc.proc is None


@pytest.mark.parametrize("isolation", ["bwrap", "process"])
def test_a_python_reached_through_a_symlink_still_runs_the_sandbox(tmp_path: Path, isolation: str) -> None:
    """A venv linked from elsewhere (``/tmp/x/venv -> /work/.venv``): bwrap mounts the resolved
    Python, so a sandbox started by the linked path found no interpreter and every notebook was
    a student's error ("the sandbox stopped while running the notebook")."""
    if isolation == "bwrap" and not HAVE_BWRAP:
        pytest.skip("bwrap unavailable")
    inside = os.path.relpath(sys.executable, sys.prefix)
    if inside.startswith(os.pardir):
        pytest.skip(f"this Python ({sys.executable}) is not inside its prefix ({sys.prefix})")
    link = tmp_path / "linked-python"
    link.symlink_to(sys.prefix, target_is_directory=True)
    python = link / inside
    args = ["check", "--no-server", "--isolation", isolation, "--assignment", "vmap_convolve"]
    done = subprocess.run(
        [str(python), "-m", "grader", "--course", str(REPO), *args, str(REPO / "examples/class/alice.ipynb")],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "7/7 public tests passed" in done.stdout, done.stdout
    assert "sandbox stopped" not in done.stdout


# --------------------------------------------------------------------------- nested user namespaces


def bwrap_with_filter(*cmd: str) -> subprocess.CompletedProcess[str]:
    """``cmd`` in a plain bwrap sandbox under :func:`sandbox.no_userns_filter`, as the sandbox's uid would."""
    program = sandbox.no_userns_filter()
    assert program is not None, "no seccomp numbers for this machine"
    r, w = os.pipe()
    os.write(w, program)
    os.close(w)
    as_uid = ["setpriv", "--reuid=301000", "--regid=301000", "--clear-groups", "--"] if AS_ROOT else []
    # the system as a sandbox sees it, not all of / (a bind of / fails when a mount under it goes
    # away meanwhile: test_the_bwrap_probe_holds_while_other_mounts_come_and_go)
    mounts = [
        *sandbox._system_binds(),
        # its parents world-traversable, as the sandbox makes them: a Python under /root (pyenv)
        *sandbox._parents(sys.base_prefix, set()),
        "--ro-bind",
        sys.base_prefix,
        sys.base_prefix,
        "--proc",
        "/proc",
        "--dev",
        "/dev",
    ]
    try:
        return subprocess.run(
            ["bwrap", "--unshare-pid", "--seccomp", str(r), *mounts, *as_uid, *cmd],
            pass_fds=(r,),
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        os.close(r)


@needs_bwrap
def test_the_seccomp_filter_refuses_user_namespaces_and_nothing_ordinary() -> None:
    """unshare(2) and clone(2) with CLONE_NEWUSER are refused, clone3 is ENOSYS (the C library
    falls back to clone: threads and subprocesses still work), other namespaces are not touched
    (as root; the grader's own bwrap needs them)."""
    refused = bwrap_with_filter("unshare", "-U", "true")
    assert refused.returncode != 0 and "Operation not permitted" in refused.stderr, refused
    probe = (
        "import ctypes, os, subprocess, threading\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "pid = libc.syscall(56, 0x10000000 | 17, 0, 0, 0, 0)\n"  # clone(CLONE_NEWUSER | SIGCHLD)
        "if pid == 0:\n    os._exit(0)\n"
        "clone_errno = ctypes.get_errno()\n"
        "print(pid, clone_errno, libc.syscall(435, 0, 0), ctypes.get_errno())\n"  # clone3
        "t = threading.Thread(target=print, args=('thread',)); t.start(); t.join()\n"
        "print(subprocess.run(['echo', 'child'], capture_output=True, text=True).stdout.strip())\n"
    )
    ran = bwrap_with_filter(os.path.realpath(sys.executable), "-c", probe)  # the base Python: the venv is not mounted
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["-1", "1", "-1", "38", "thread", "child"], ran.stdout
    if AS_ROOT:  # without the filter, this user namespace would be made (the control)
        plain = subprocess.run(["bwrap", *sandbox._system_binds(), "unshare", "-U", "true"], capture_output=True)
        assert plain.returncode == 0, plain.stderr


def test_the_seccomp_filter_is_none_where_the_numbers_are_unknown() -> None:
    assert sandbox.no_userns_filter("riscv64") is None
    assert len(sandbox.no_userns_filter("x86_64") or b"") % 8 == 0  # struct sock_filter, 8 bytes each


@needs_bwrap
def test_bwrap_gets_the_filter_and_disable_userns_only_where_it_has_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    proc = sandbox.SandboxProcess("grader.sandboxed.worker", tmp_path, Limits(), "bwrap")
    monkeypatch.setattr(sandbox, "_runs_as_root", lambda: False)
    for supported in (True, False):
        monkeypatch.setattr(sandbox, "bwrap_can_disable_userns", (lambda s: lambda: s)(supported))
        args = proc._bwrap_prefix({})
        assert "--seccomp" in args and ("--disable-userns" in args) == supported
        for fd in proc._fds:
            os.close(fd)
        proc._fds = []


def test_a_ctrl_c_just_as_a_scratch_folder_is_made_leaves_none_behind(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The folder is known to this process's cleanup (what `check --watch` runs at Ctrl-C)
    from the moment it exists: a KeyboardInterrupt right after the mkdir leaves nothing."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    real_mkdir = os.mkdir

    def mkdir_then_ctrl_c(path, *args, **kwargs):  # type: ignore[no-untyped-def]
        real_mkdir(path, *args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "mkdir", mkdir_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        sandbox.make_scratch("jaxgrade-sub-")
    monkeypatch.setattr(os, "mkdir", real_mkdir)
    made = [p for p in tmp_path.iterdir() if not p.name.startswith(".")]  # and its lock, .<name>.lock
    assert len(made) == 1 and made[0] in sandbox._SCRATCH and made[0] in sandbox._SCRATCH_LOCKS
    for path in [p for p in sandbox._SCRATCH if p.parent == tmp_path]:  # remove_own_scratch, for this folder only
        sandbox.remove_scratch(path)
    assert list(tmp_path.iterdir()) == []


MAKE_SCRATCH_AND_WAIT = """
import sys, time
from grader.host.sandbox import make_scratch
size = int(sys.argv[1]) if len(sys.argv) > 1 else None
for prefix in ("jaxgrade-sub-", "jaxgrade-eval-"):
    path = make_scratch(prefix, size)
    (path / "written-by-a-cell").write_bytes(b"x" * 4096)
    print(path, flush=True)
time.sleep(600)
"""


#: A grader killed while it probes for a scratch tmpfs (sandbox.scratch_status): it stops right
#: after the command named by its argument (the probe's mount, or its umount), as a SIGKILL
#: there would leave it.
PROBE_KILLED = """
import subprocess, sys, time
from grader.host import sandbox
real = subprocess.run
def run(cmd, *args, **kwargs):
    done = real(cmd, *args, **kwargs)
    if cmd[0] == sys.argv[1]:
        print("stopped", flush=True)
        time.sleep(600)
    return done
subprocess.run = run
sandbox.scratch_status()
"""


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("mount") is None, reason="the probe mounts a tmpfs: root only")
@pytest.mark.parametrize("after", ["mount", "umount"])
def test_a_probe_left_by_a_grader_killed_while_it_probed_is_swept(tmp_path: Path, after: str) -> None:
    """The scratch probe is made, mounted and removed as a sandbox's scratch is (a folder under
    a lock that dies with its maker, a mount that names it): a grader killed between its mount
    and its removal (a Ctrl-C's kill of a trusted worker that had just started: session 30's
    CI) left both for good; the sweeps after a lost worker take them, and leave a live grader's
    probe alone."""
    base = tmp_path / "tmp"
    base.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-c", PROBE_KILLED, after],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(base)},
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "stopped"
    finally:
        proc.kill()
        proc.wait()
    (left,) = base.glob("jaxgrade-probe-*")
    assert os.path.ismount(left) == (after == "mount")
    live = sandbox._locked_folder(base, "jaxgrade-probe-")  # this grader's, probing
    try:
        # a mount goes with its folder (its lock, after); a folder without one goes by its lock
        assert (str(left) in sandbox.sweep_stale_scratch()) == (after == "mount")
        assert sandbox.sweep_abandoned_scratch(base) == ([] if after == "mount" else [str(left)])
        assert sorted(p.name for p in base.iterdir()) == sorted([live.name, f".{live.name}.lock"])
        assert not os.path.ismount(left)
    finally:
        sandbox.remove_scratch(live)
    assert list(base.iterdir()) == []


@pytest.mark.parametrize("kind", ["plain", "tmpfs"])
def test_scratch_folders_of_a_grader_killed_with_sigkill_are_removed_by_the_next_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, kind: str
) -> None:
    """Without root there is no tmpfs scratch to sweep by its mount: each scratch folder has a
    lock beside it (``.<folder>.lock``) that its grader holds while it lives.  A grader killed
    with SIGKILL leaves its folders; the next grader's first scratch folder removes them (and
    their locks), and leaves alone a live grader's folders, its own, and any folder without a
    lock.  As root, the tmpfs mounts are unmounted first, and their folders and locks go too."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    size: list[str] = []
    if kind == "plain":
        monkeypatch.setenv("JAXGRADE_NO_SCRATCH_TMPFS", "1")  # plain folders, as without root
    elif not sandbox.scratch_status()[0]:
        pytest.skip(f"no tmpfs scratch here: {sandbox.scratch_status()[1]}")
    else:
        size = [str(1 << 20)]
    env = {**os.environ, "TMPDIR": str(tmp_path)}

    def grader_with_scratch() -> tuple[subprocess.Popen, list[Path]]:
        proc = subprocess.Popen([sys.executable, "-c", MAKE_SCRATCH_AND_WAIT, *size], stdout=subprocess.PIPE, env=env)
        assert proc.stdout is not None
        return proc, [Path(proc.stdout.readline().decode().strip()) for _ in range(2)]

    killed, left = grader_with_scratch()
    alive, used = grader_with_scratch()
    stray = tmp_path / "jaxgrade-sub-0123456789abcdef01234567"  # no lock: not known to be a grader's
    stray.mkdir()
    try:
        killed.send_signal(signal.SIGKILL)
        killed.wait(timeout=10)
        assert all(p.is_dir() and sandbox._lock_of(p).exists() for p in left)
        assert all(os.path.ismount(p) == (kind == "tmpfs") for p in [*left, *used])
        own = sandbox.make_scratch("jaxgrade-sub-")  # this process's first scratch folder in tmp_path: it sweeps
        try:
            assert not [p for p in left if p.exists() or sandbox._lock_of(p).exists()], "not swept"
            assert all((p / "written-by-a-cell").exists() for p in used), "a live grader's folder was swept"
            assert stray.is_dir()
            assert sandbox.sweep_abandoned_scratch(tmp_path) == []  # nothing else is abandoned: own included
            assert own.is_dir()
        finally:
            sandbox.remove_scratch(own)
        assert not own.exists() and not sandbox._lock_of(own).exists()
    finally:
        alive.kill()
        alive.wait(timeout=10)
    if kind == "tmpfs":  # (another grader's stale mounts elsewhere on this machine go too)
        assert sorted(p for p in sandbox.sweep_stale_scratch() if Path(p).parent == tmp_path) == sorted(map(str, used))
        assert sandbox.sweep_abandoned_scratch(tmp_path) == []  # their folders went with the mounts
    else:
        assert sorted(sandbox.sweep_abandoned_scratch(tmp_path)) == sorted(map(str, used))
    assert sorted(p.name for p in tmp_path.iterdir()) == [stray.name]


def test_a_sweep_leaves_alone_a_lock_its_grader_removed_while_the_sweep_looked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A sweeper that opens a lock just before its grader removes the folder and the lock and
    lets go: the sweeper's flock then succeeds, on a file no longer there. That is not an
    abandoned folder, and not an error (it would fail the sweeping grader's scratch folder)."""
    folder = tmp_path / "jaxgrade-sub-0123456789abcdef01234567"
    folder.mkdir()
    lock = sandbox._lock_of(folder)
    lock.write_bytes(b"")
    real_open = os.open

    def open_then_its_grader_removes_it(path, flags, *args, **kwargs):  # type: ignore[no-untyped-def]
        fd = real_open(path, flags, *args, **kwargs)
        if Path(path) == lock:  # remove_scratch's order: the folder, the lock, then the lock's descriptor
            folder.rmdir()
            lock.unlink()
        return fd

    monkeypatch.setattr(os, "open", open_then_its_grader_removes_it)
    assert sandbox.sweep_abandoned_scratch(tmp_path) == []
    monkeypatch.setattr(os, "open", real_open)
    assert list(tmp_path.iterdir()) == []


def test_a_tmpdir_that_cannot_hold_a_lock_still_gets_scratch_folders(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A filesystem without hard links (or flock) for $TMPDIR: the folder goes without its lock
    (a cleanup aid), and grading goes on; a name taken by a file is another name's turn."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("JAXGRADE_NO_SCRATCH_TMPFS", "1")

    def no_links(*args: object, **kwargs: object) -> None:
        raise OSError(1, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    path = sandbox.make_scratch("jaxgrade-sub-")
    assert path.is_dir() and path not in sandbox._SCRATCH_LOCKS
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no lock, no temporary file left
    sandbox.remove_scratch(path)
    assert list(tmp_path.iterdir()) == []


def test_a_temporary_lock_name_is_swept_only_once_it_is_old(tmp_path: Path) -> None:
    """A process that died while it made a lock leaves its temporary name: swept, but only once
    it is old enough that its maker cannot still be about to lock and link it."""
    fresh = tmp_path / ".jaxgrade-lock-00112233445566778899aabb"
    old = tmp_path / ".jaxgrade-lock-ffeeddccbbaa998877665544"
    fresh.write_bytes(b"")
    old.write_bytes(b"")
    when = time.time() - sandbox.TEMPORARY_LOCK_AGE - 5
    os.utime(old, (when, when))
    assert sandbox.sweep_abandoned_scratch(tmp_path) == []  # they are no folders
    assert sorted(p.name for p in tmp_path.iterdir()) == [fresh.name]


def test_a_folder_that_cannot_be_removed_keeps_its_lock_released_for_a_later_sweep(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("JAXGRADE_NO_SCRATCH_TMPFS", "1")
    path = sandbox.make_scratch("jaxgrade-sub-")
    monkeypatch.setattr(sandbox.shutil, "rmtree", lambda *a, **k: None)  # e.g. a busy mount
    sandbox.remove_scratch(path)
    monkeypatch.undo()
    assert path.is_dir() and sandbox._lock_of(path).exists() and path not in sandbox._SCRATCH_LOCKS
    assert sandbox.sweep_abandoned_scratch(tmp_path) == [str(path)]  # released: a later sweep takes it
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="root gives scratch folders to sandbox uids")
def test_root_sweeps_folders_it_gave_to_a_sandbox_uid_and_no_others(tmp_path: Path) -> None:
    made = {}
    for owner in (sandbox.SANDBOX_UID_BASE + 7, 12345):  # a sandbox's uid; another user's
        folder = tmp_path / f"jaxgrade-sub-{owner:024x}"
        folder.mkdir()
        (folder / "a-cell-wrote-this").write_bytes(b"x")
        os.chown(folder, owner, owner)
        sandbox._lock_of(folder).write_bytes(b"")  # root's, free: its grader is gone
        made[owner] = folder
    assert sandbox.sweep_abandoned_scratch(tmp_path) == [str(made[sandbox.SANDBOX_UID_BASE + 7])]
    assert made[12345].is_dir() and sandbox._lock_of(made[12345]).exists()


def test_a_lock_name_that_is_taken_is_left_alone_and_another_name_is_tried(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("JAXGRADE_NO_SCRATCH_TMPFS", "1")
    taken, other = "a" * 24, "b" * 24
    theirs = tmp_path / f".jaxgrade-sub-{taken}.lock"
    theirs.write_bytes(b"someone's")
    held = os.open(theirs, os.O_RDONLY)  # a live grader's lock, which no sweep takes
    fcntl.flock(held, fcntl.LOCK_EX)
    names = iter([taken, "1" * 24, other, "2" * 24])
    monkeypatch.setattr(sandbox.secrets, "token_hex", lambda n: next(names))
    path = sandbox.make_scratch("jaxgrade-sub-")
    os.close(held)
    try:
        assert path.name == f"jaxgrade-sub-{other}" and path in sandbox._SCRATCH_LOCKS
        assert theirs.read_bytes() == b"someone's" and not (tmp_path / f"jaxgrade-sub-{taken}").exists()
        assert not [p for p in tmp_path.iterdir() if p.name.startswith(".jaxgrade-lock-")]
    finally:
        sandbox.remove_scratch(path)


FAKE_CPUS = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
static int ncpu(void) { const char *s = getenv("FAKE_NCPU"); return s ? atoi(s) : 64; }
int sched_getaffinity(pid_t pid, size_t size, cpu_set_t *mask) {
    if (ncpu() > (int)(size * 8)) { errno = EINVAL; return -1; }  /* as the kernel: a mask too small */
    memset(mask, 0, size);
    for (int i = 0; i < ncpu(); i++) CPU_SET_S(i, size, mask);
    return 0;
}
long sysconf(int name) {
    static long (*real)(int) = 0;
    if (!real) real = dlsym(RTLD_NEXT, "sysconf");
    if (name == _SC_NPROCESSORS_ONLN || name == _SC_NPROCESSORS_CONF) return ncpu();
    return real(name);
}
int get_nprocs(void) { return ncpu(); }
int get_nprocs_conf(void) { return ncpu(); }
"""


@needs_bwrap
@pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox sees /usr only: the shim is put in /usr/local/lib")
@pytest.mark.skipif(
    not shutil.which("cc") and not REQUIRE_BWRAP, reason="building the CPU-count shim needs a C compiler"
)
@pytest.mark.parametrize("cores", [32, 128])
def test_a_correct_notebook_gets_full_marks_on_a_machine_of_many_cores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make_notebook, cores: int
) -> None:
    """JAX starts about four threads per core, and glibc up to eight malloc arenas per core of
    64 MiB of address space each: on 32 cores the kernel's XLA aborted under the sandbox's 8 GiB
    (a correct notebook got 13/40, kept as graded), on 64 it got 0/40, and on 128 its threads
    passed the sandbox's 256.  The sandbox's processes are shown that many CPUs here (an
    LD_PRELOAD shim of sched_getaffinity and sysconf), and the grader counts as many."""
    from grader.course.config import load_course
    from grader.grading.grade import grade_one

    source = tmp_path / "fake_cpus.c"
    source.write_text(FAKE_CPUS)
    shim = Path("/usr/local/lib") / f"jaxgrade-test-fake-cpus-{uuid.uuid4().hex}.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(shim), str(source), "-ldl"], check=True)
    shim.chmod(0o755)  # the sandbox's leased uid reads it: ld.so ignores, with a warning, one it cannot
    real_env = sandbox.sandbox_env

    def shown_many_cpus(*args, **kwargs):  # type: ignore[no-untyped-def]
        env = {**real_env(*args, **kwargs), "LD_PRELOAD": str(shim), "FAKE_NCPU": str(cores)}
        # glibc counts the cores for its arena cap itself (the shim does not reach it): its default,
        # 8 a core, unless the sandbox's environment sets one
        env.setdefault("MALLOC_ARENA_MAX", str(8 * cores))
        return env

    monkeypatch.setattr(sandbox, "sandbox_env", shown_many_cpus)
    monkeypatch.setattr(memory, "cores", lambda: cores)
    repo = Path(__file__).resolve().parents[2]
    try:
        with started(make_notebook("import os\ndef cpus(x):\n    return len(os.sched_getaffinity(0))"), "bwrap") as s:
            assert s.call("cpus", 0).value == cores  # the shim is in force in the sandbox
        assignment = load_course(repo).assignment("vmap_convolve")
        rec = grade_one(assignment, repo / "examples" / "class" / "alice.ipynb", isolation="bwrap")
    finally:
        shim.unlink()
    failed = [(t.name, t.message) for t in rec.tests if t.status != "passed"]
    assert (rec.status, rec.score, failed) == ("graded", rec.max_score, []), rec.message
