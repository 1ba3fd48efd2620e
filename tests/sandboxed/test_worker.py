"""The worker's wait for a fresh kernel (``grader.sandboxed.worker._until_ready``), against a
stand-in kernel client: every real kernel start in the suite goes through it, but rarely
through the path where the ``idle`` status of the first request never comes (ZeroMQ's slow
joiner: IOPub connected after the kernel published it), which these tests force."""

from __future__ import annotations

import asyncio
from queue import Empty
from typing import Any

import pytest

from grader.sandboxed.worker import _until_ready


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
