"""Evaluators forked by the zygote (grader/host/zygote.py) are what plain ones are.

A forked evaluator is compared with one bubblewrap started, from the host's side of /proc:
credentials, capabilities, seccomp, namespaces, root, working folder, file descriptors, limits,
cgroup, OOM score.  Both answer the same request alike.  A zygote that cannot fork turns itself
off and evaluators start plainly; a zygote dies with the process that started it.  Root and
bubblewrap only (CI): elsewhere no zygote is used, and ``test_no_zygote_where_it_cannot_work``
says so.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from grader.host import sandbox, zygote
from grader.host.sandbox import Limits, SandboxProcess, make_scratch, remove_scratch
from grader.wire import messages, protocol

REQUIRE_BWRAP = os.environ.get("JAXGRADE_REQUIRE_BWRAP", "") not in ("", "0")
usable = os.geteuid() == 0 and sandbox.bwrap_status()[0] is not None
needs_zygote = pytest.mark.skipif(
    not usable and not REQUIRE_BWRAP, reason="the zygote works as root under bubblewrap only"
)


@pytest.fixture
def zygote_on(monkeypatch):
    monkeypatch.setenv("JAXGRADE_ZYGOTE", "1")
    monkeypatch.setattr(zygote, "_off", "")
    yield
    zygote.close_all()


def _start(forked: bool, monkeypatch) -> tuple[SandboxProcess, Path]:
    monkeypatch.setenv("JAXGRADE_ZYGOTE", "1" if forked else "0")
    scratch = make_scratch("jaxgrade-eval-", Limits().scratch_bytes)
    proc = SandboxProcess(zygote.EVALUATOR, scratch, Limits(), "bwrap")
    proc.start()
    header, _ = proc.recv(120)
    assert header.get("op") == "ready" and header.get("ok"), header
    assert (proc.forked is not None) == forked, zygote.enabled()
    return proc, scratch


def _evaluator_pid(proc: SandboxProcess) -> tuple[int, int]:
    """(the evaluator's host pid, the sandbox's first process's)."""
    first = sandbox._leaf(proc.proc.pid)
    return (proc.forked_pid or first), first


def _view(pid: int, first: int, uid: int) -> dict:
    status = dict(
        line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":\t" in line
    )
    view = {
        k: status[k]
        # its signal handlers and mask too: a fresh Python's
        for k in (
            "Groups",
            "CapInh",
            "CapPrm",
            "CapEff",
            "CapBnd",
            "CapAmb",
            "NoNewPrivs",
            "Seccomp",
            "SigBlk",
            "SigIgn",
            "SigCgt",
        )
    }
    view["uids"] = status["Uid"].split() == [str(uid)] * 4 and status["Gid"].split() == [str(uid)] * 4
    view["pid namespace depth"] = len(status["NSpid"].split())
    for ns in ("mnt", "pid", "net", "ipc", "uts", "cgroup", "user"):
        view[f"{ns} namespace is the sandbox's"] = os.readlink(f"/proc/{pid}/ns/{ns}") == os.readlink(
            f"/proc/{first}/ns/{ns}"
        )
    view["root"] = os.readlink(f"/proc/{pid}/root")
    view["cwd"] = os.readlink(f"/proc/{pid}/cwd")
    fds = sorted(int(fd) for fd in os.listdir(f"/proc/{pid}/fd"))
    view["descriptors"] = [(fd, os.readlink(f"/proc/{pid}/fd/{fd}").split(":")[0].rsplit("/", 1)[-1]) for fd in fds]
    view["limits"] = Path(f"/proc/{pid}/limits").read_text()
    view["in the sandbox's cgroup"] = Path(f"/proc/{pid}/cgroup").read_text().count("jaxgrade")
    view["oom_score_adj"] = Path(f"/proc/{pid}/oom_score_adj").read_text()
    return view


@needs_zygote
def test_a_forked_evaluator_sees_what_a_plain_one_sees(zygote_on, monkeypatch) -> None:
    views = {}
    for forked in (True, False):
        proc, scratch = _start(forked, monkeypatch)
        try:
            views[forked] = _view(*_evaluator_pid(proc), proc.uid)
        finally:
            proc.kill()
            remove_scratch(scratch)
    differ = {k: (views[True][k], views[False][k]) for k in views[False] if views[True][k] != views[False][k]}
    assert differ == {}, differ
    plain = views[False]
    assert plain["uids"] and plain["CapEff"] == plain["CapBnd"] == "0000000000000000" and plain["NoNewPrivs"] == "1"
    assert plain["Seccomp"] == "2" and plain["root"] == "/" and plain["cwd"] == sandbox.SANDBOX_ROOT
    assert plain["pid namespace depth"] == 2 and all(v for k, v in plain.items() if k.endswith("sandbox's"))


def _eval_frame(rid: int) -> tuple[dict, bytes, np.ndarray]:
    import jax
    import jax.numpy as jnp
    from jax import export

    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    blob = export.export(jax.jit(lambda a: jnp.sin(a) @ a.T))(jax.ShapeDtypeStruct(x.shape, x.dtype)).serialize()
    frag, payload = protocol.pack_values({"module": np.frombuffer(bytes(blob), np.uint8), "args": [x]})
    return {**messages.Eval(rid).encode(), **frag}, payload, np.sin(x) @ x.T


@needs_zygote
def test_a_forked_evaluator_answers_as_a_plain_one(zygote_on, monkeypatch) -> None:
    got = {}
    for forked in (True, False, True):
        proc, scratch = _start(forked, monkeypatch)
        try:
            header, payload, want = _eval_frame(7)
            proc.send(header, payload)
            reply, blob = proc.recv(120)
            assert reply.get("kind") == "evaluated", reply
            got.setdefault(forked, []).append(protocol.unpack_values(reply, blob)["result"])
        finally:
            proc.kill()
            remove_scratch(scratch)
    for result in got[True] + got[False]:
        np.testing.assert_allclose(result, want, rtol=1e-5)
    np.testing.assert_array_equal(got[True][0], got[False][0])


@needs_zygote
def test_an_evaluator_that_ends_is_seen_dead_and_leaves_nothing(zygote_on, monkeypatch) -> None:
    proc, scratch = _start(True, monkeypatch)
    pid = proc.forked_pid
    try:
        assert proc.alive()
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while proc.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not proc.alive()
        with pytest.raises(protocol.ChannelClosed):
            proc.recv(10)
    finally:
        proc.kill()
        remove_scratch(scratch)
    status = Path(f"/proc/{pid}/status")
    assert not status.exists(), status.read_text()[:300]
    assert not sandbox._uid_has_processes(proc.uid)
    # an evaluator that ended of itself (a crash: maybe an exploit probing the layout every fork
    # shares) retires its zygote: the next evaluator comes from a new one
    assert proc._zygote is not None and proc._zygote.retired
    again, scratch = _start(True, monkeypatch)
    try:
        assert again._zygote is not proc._zygote and again._zygote.forks == 1
    finally:
        again.kill()
        remove_scratch(scratch)


@needs_zygote
def test_a_zygote_is_replaced_after_its_forks(zygote_on, monkeypatch) -> None:
    monkeypatch.setattr(zygote, "FORKS", 2)
    seen = []
    for _ in range(3):
        proc, scratch = _start(True, monkeypatch)
        seen.append(proc._zygote)
        proc.kill()
        remove_scratch(scratch)
    assert seen[0] is seen[1] and seen[2] is not seen[1]


@needs_zygote
def test_the_holder_is_root_without_capabilities_out_of_the_evaluators_reach(zygote_on, monkeypatch) -> None:
    """The sandbox's first process is not the evaluator's uid: an evaluator taken over cannot
    trace it (to run outside its own rlimits) nor signal it."""
    proc, scratch = _start(True, monkeypatch)
    try:
        holder = sandbox._leaf(proc.proc.pid)
        status = dict(
            line.split(":\t", 1) for line in Path(f"/proc/{holder}/status").read_text().splitlines() if ":\t" in line
        )
        assert status["Uid"].split() == ["0"] * 4, status["Uid"]
        assert status["CapEff"] == status["CapPrm"] == status["CapBnd"] == "0000000000000000"
        assert status["NoNewPrivs"] == "1" and status["Seccomp"] == "2"
        as_evaluator = ["setpriv", f"--reuid={proc.uid}", f"--regid={proc.uid}", "--clear-groups", "--"]
        signalled = subprocess.run([*as_evaluator, "kill", "-0", str(holder)], capture_output=True, text=True)
        assert signalled.returncode != 0 and "not permitted" in signalled.stderr, signalled
    finally:
        proc.kill()
        remove_scratch(scratch)


@needs_zygote
def test_an_answer_not_read_is_never_taken_for_the_next_requests(zygote_on, monkeypatch) -> None:
    """A wait for the zygote's answer cut short (Ctrl-C) ends that zygote: its late answer must
    not be read as the next request's (another sandbox's evaluator pid)."""
    import socket as socket_module

    real = socket_module.recv_fds
    calls = {"n": 0}

    def interrupted_once(sock, *args):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 1:
            raise KeyboardInterrupt
        return real(sock, *args)

    monkeypatch.setattr(zygote.socket, "recv_fds", interrupted_once)
    first = SandboxProcess(zygote.EVALUATOR, make_scratch("jaxgrade-eval-"), Limits(), "bwrap")
    with pytest.raises(KeyboardInterrupt):
        first.start()
    first.kill()
    remove_scratch(first.scratch)
    proc, scratch = _start(True, monkeypatch)
    try:
        first_of_sandbox = sandbox._leaf(proc.proc.pid)
        ns = os.readlink(f"/proc/{proc.forked_pid}/ns/pid")
        assert ns == os.readlink(f"/proc/{first_of_sandbox}/ns/pid"), "the pid is not this sandbox's evaluator"
        assert proc.alive()
    finally:
        proc.kill()
        remove_scratch(scratch)


@needs_zygote
def test_a_zygote_that_cannot_fork_is_turned_off_and_evaluators_start_plainly(zygote_on, monkeypatch) -> None:
    monkeypatch.setattr(zygote, "HOLDER", ["/bin/sh", "-c", "echo not-ready; exec sleep infinity"])
    scratch = make_scratch("jaxgrade-eval-", Limits().scratch_bytes)
    proc = SandboxProcess(zygote.EVALUATOR, scratch, Limits(), "bwrap")
    try:
        proc.start()
        header, _ = proc.recv(120)
        assert header.get("op") == "ready" and proc.forked is None
        assert "did not start" in zygote.enabled()
    finally:
        proc.kill()
        remove_scratch(scratch)
    assert not sandbox._uid_has_processes(proc.uid)


def test_the_zygotes_package_holds_only_the_sandbox_side() -> None:
    layout = Path(zygote._sandbox_layout())
    try:
        pkg = layout / "grader"
        assert sorted(p.name for p in pkg.iterdir()) == ["__init__.py", *sorted(sandbox.SANDBOX_PACKAGES)]
        assert (pkg / "__init__.py").read_text() == sandbox.SANDBOX_INIT
        for sub in sandbox.SANDBOX_PACKAGES:
            assert (pkg / sub).resolve() == Path(sandbox.grader_package_dir(), sub).resolve()
    finally:
        import shutil

        shutil.rmtree(layout)


@needs_zygote
def test_the_zygote_dies_with_the_process_that_started_it(tmp_path: Path) -> None:
    script = tmp_path / "starts.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import os, sys, time
            sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
            from grader.host import zygote
            from grader.host.sandbox import Limits, SandboxProcess, make_scratch
            p = SandboxProcess(zygote.EVALUATOR, make_scratch("jaxgrade-eval-"), Limits(), "bwrap")
            p.start()
            p.recv(120)
            z = next(iter(zygote._zygotes.values()))
            print(z.proc.pid, p.forked_pid, z._layout, flush=True)
            time.sleep(600)
            """
        )
    )
    env = {k: v for k, v in os.environ.items() if k != "JAXGRADE_ZYGOTE"}
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline().split()
        assert len(line) == 3 and line[1] != "None", line
        zygote_pid, evaluator_pid = map(int, line[:2])
        layout = Path(line[2])
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in (zygote_pid, evaluator_pid)):
        time.sleep(0.05)
    assert not Path(f"/proc/{zygote_pid}").exists(), "the zygote outlived its process"
    assert not Path(f"/proc/{evaluator_pid}").exists(), "the evaluator outlived its process"
    # its package folder is gone too, though the process was killed before any cleanup of its own
    assert not layout.exists(), f"the zygote's folder {layout} was left behind"


def test_no_zygote_where_it_cannot_work(monkeypatch) -> None:
    monkeypatch.setattr(zygote, "_off", "")
    monkeypatch.setenv("JAXGRADE_ZYGOTE", "0")
    assert zygote.enabled() == "JAXGRADE_ZYGOTE=0"
    monkeypatch.setenv("JAXGRADE_ZYGOTE", "1")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert "root" in zygote.enabled()
