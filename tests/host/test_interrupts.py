"""grader/host/interrupts.py: a stop asked of this process's grading, which no garbage
collector's callback can drop, ends the wait on a sandbox that is going on."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from grader.host import interrupts
from grader.host.sandbox import Limits
from grader.host.session import Session


@pytest.fixture(autouse=True)
def _cleared():
    interrupts.clear()
    yield
    interrupts.clear()


def test_a_request_stays_until_cleared_and_from_any_thread() -> None:
    assert not interrupts.requested()
    worker = threading.Thread(target=interrupts.request)
    worker.start()
    worker.join()
    assert interrupts.requested() and interrupts.requested()  # looking does not take it
    interrupts.clear()
    assert not interrupts.requested()


def test_requests_never_block_even_when_the_pipe_is_full() -> None:
    for _ in range(70_000):  # more bytes than a pipe holds (64 KiB)
        interrupts.request()
    assert interrupts.requested()
    interrupts.clear()
    assert not interrupts.requested()


def test_a_forked_childs_request_is_its_own() -> None:
    """A child made by os.fork (in a fresh interpreter here: the suite's own may have JAX
    running) starts with no stop asked, though its parent asked one, and a stop it asks is its
    own: the parent's waits do not see it."""
    script = (
        "import os, select\n"
        "from grader.host import interrupts\n"
        "interrupts.request()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    clean = not interrupts.requested() and not select.select([interrupts.fd()], [], [], 0)[0]\n"
        "    interrupts.request()\n"
        "    os._exit(0 if clean and interrupts.requested() else 1)\n"
        "_, status = os.waitpid(pid, 0)\n"
        "interrupts.clear()\n"
        "print(os.waitstatus_to_exitcode(status), interrupts.requested(), bool(select.select([interrupts.fd()], [], [], 0)[0]))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["0", "False", "False"], done.stderr[-2000:]


def test_a_request_stops_the_notebook_being_run(make_notebook, isolation) -> None:
    """Asked while a cell runs (as a Ctrl-C whose KeyboardInterrupt a gc callback dropped asks
    it), the wait for the notebook raises KeyboardInterrupt, instead of returning the notebook's
    report once the cell is over (60 s later)."""
    session = Session(
        make_notebook("import time\ntime.sleep(60)"), limits=Limits(cell_timeout=120), isolation=isolation
    )
    timer = threading.Timer(3.0, interrupts.request)
    try:
        session.start()
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            session.execute()
    finally:
        timer.cancel()
        session.close()
