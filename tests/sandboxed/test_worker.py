"""The worker's wait for a fresh kernel (``grader.sandboxed.worker._until_ready``), against a
stand-in kernel client: every real kernel start in the suite goes through it, but rarely
through the path where the ``idle`` status of the first request never comes (ZeroMQ's slow
joiner: IOPub connected after the kernel published it), which these tests force.  And its
handling of a kernel stuck in a cell, with a real kernel."""

from __future__ import annotations

import asyncio
from pathlib import Path
from queue import Empty
from typing import Any

import nbformat
import pytest

from grader.sandboxed.worker import IOPUB_TIMEOUT, NotebookRunner, _patch_reply_capture, _until_ready


class StandInClient:
    """Answers ``kernel_info`` on the shell channel; publishes the request's ``idle`` status on
    IOPub only from the ``idle_from``-th request on (None: never), after some output."""

    def __init__(self, idle_from: int | None, alive: bool = True, replies: bool = True) -> None:
        self.idle_from, self.alive, self.replies = idle_from, alive, replies
        self.sent: list[str] = []
        self.shell: list[dict[str, Any]] = []
        self.iopub: list[dict[str, Any]] = []
        self.handled: list[dict[str, Any]] = []

    def kernel_info(self) -> str:
        msg_id = f"info-{len(self.sent) + 1}"
        self.sent.append(msg_id)
        if self.replies:
            self.shell.append({"parent_header": {"msg_id": "someone-else"}, "content": {}})
            self.shell.append({"parent_header": {"msg_id": msg_id}, "content": {"protocol_version": "5.3"}})
        if self.idle_from is not None and len(self.sent) >= self.idle_from:
            status = {"msg_type": "status", "parent_header": {"msg_id": msg_id}}
            self.iopub.append({**status, "content": {"execution_state": "busy"}})
            self.iopub.append({"msg_type": "stream", "parent_header": {"msg_id": msg_id}, "content": {}})
            self.iopub.append({**status, "content": {"execution_state": "idle"}})
        return msg_id

    def get_shell_msg(self, timeout: float) -> dict[str, Any]:
        if not self.shell:
            raise Empty
        return self.shell.pop(0)

    def get_iopub_msg(self, timeout: float) -> dict[str, Any]:
        if not self.iopub:
            raise Empty
        return self.iopub.pop(0)

    def is_alive(self) -> bool:
        return self.alive

    def _handle_kernel_info_reply(self, reply: dict[str, Any]) -> None:
        self.handled.append(reply)


def test_ready_at_the_idle_status_of_its_own_request() -> None:
    kc = StandInClient(idle_from=1)
    asyncio.run(_until_ready(kc, timeout=5))
    assert kc.sent == ["info-1"]
    assert [r["parent_header"]["msg_id"] for r in kc.handled] == ["info-1"]  # the protocol version is taken


def test_a_missed_idle_status_sends_the_request_again() -> None:
    """The first request's status went out before IOPub was connected: asked again, the kernel
    is ready at the second one's idle, and the reply handed over is the second one's."""
    kc = StandInClient(idle_from=2)
    asyncio.run(_until_ready(kc, timeout=5))
    assert kc.sent == ["info-1", "info-2"]
    assert [r["parent_header"]["msg_id"] for r in kc.handled] == ["info-2"]


def test_a_kernel_that_dies_first_is_said_to_have_died() -> None:
    kc = StandInClient(idle_from=None, alive=False, replies=False)
    with pytest.raises(RuntimeError, match="died"):
        asyncio.run(_until_ready(kc, timeout=5))


def test_a_kernel_that_never_gets_ready_is_given_up_at_the_deadline() -> None:
    kc = StandInClient(idle_from=None)
    with pytest.raises(RuntimeError, match=r"didn.t respond in 0\.5 seconds"):
        asyncio.run(_until_ready(kc, timeout=0.5))
    assert len(kc.sent) >= 2  # it kept asking until then


def test_a_stuck_cell_is_killed_without_waiting_for_its_output_and_the_next_cell_keeps_all_of_its(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real kernel (on the host: the runner is what the worker runs in its sandbox) whose cell
    ignores the interrupt.  nbclient waits for a cell's output once its reply is in; after a
    timeout that wait is skipped (the probe is the interrupt's grace: it cost 4 s twice per stuck
    kernel), and the next cell waits for its whole output again."""
    waits: list[float] = []
    real_wait_for = asyncio.wait_for

    def recording_wait_for(task: Any, timeout: float | None) -> Any:
        waits.append(timeout)
        return real_wait_for(task, timeout)

    monkeypatch.setattr(asyncio, "wait_for", recording_wait_for)  # nbclient's wait for a cell's output
    runner = NotebookRunner(str(tmp_path), cell_timeout=2, output_cap=10**6, max_restarts=1)
    _patch_reply_capture(runner)  # as the worker's main does
    runner.start()
    stuck_kernel = runner.kernel_pid()
    try:
        stuck = "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(1000)"
        after = "print('x' * 50_000)"
        waits.clear()
        runner.execute_notebook(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in (stuck, after)]))
    finally:
        runner.kill()
    first, second = runner.records
    assert first.status == "killed" and first.restarted, first
    assert not Path(f"/proc/{stuck_kernel}").exists(), "the stuck kernel was left running beside the fresh one"
    assert second.status == "ok" and second.output == "x" * 50_000 + "\n", second.status
    # the stuck cell and its probe: no wait; the fresh kernel's warm-up and the next cell: IOPUB_TIMEOUT
    assert waits[:2] == [0, 0], waits
    assert 0 not in waits[2:] and waits.count(IOPUB_TIMEOUT) >= 2, waits
    assert runner.client.iopub_timeout == IOPUB_TIMEOUT
