"""The sandboxed worker: executes one notebook with nbclient, then answers requests about it.

Runs inside the sandbox (untrusted territory).  It talks to the trusted grader over the
inherited stdin/stdout pipes with :mod:`grader.wire.protocol` frames and to the student's kernel
through nbclient.  Requests reach the kernel as small synthetic cells that call
:func:`grader.sandboxed.kernel_side.serve`; a request that hangs is interrupted, and a kernel that cannot
be interrupted (XLA ignores SIGINT) or that dies is replaced by a fresh one in which the
notebook's cells that worked are replayed, so one bad cell or call costs only itself.

Started as ``python -m grader.sandboxed.worker --scratch DIR [limits]`` by :mod:`grader.host.sandbox`.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypeVar

from grader.sandboxed import rlimits
from grader.sandboxed.rlimits import apply_limits
from grader.wire import messages, protocol

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_CELL_LOC = re.compile(r"(?:Cell In\s*\[(\d+)\]|<ipython-input-(\d+)-[0-9a-f]+>),\s*(?:line|in)\s*(\d+)?")
_CELL_LINE = re.compile(r"^-*>\s*(\d+)\s")

#: Seconds nbclient waits, once a cell's reply is in, for the rest of its output (IOPub).  Not
#: after a timeout: the cell was interrupted, and the probe that follows (messages.PROBE_TIMEOUT) is the
#: interrupt's grace; waiting for the output of a kernel that may be stuck cost 4 s twice.
IOPUB_TIMEOUT = 4
#: The requests the worker forwards to the kernel (:func:`grader.sandboxed.kernel_side.serve`).
KERNEL_REQUESTS = (messages.Probe, messages.Call, messages.Export, messages.Count)
SEND_TIMEOUT = 5.0
#: Seconds the probe after an interrupt gets at least, when the interrupted request's reply took
#: most of messages.PROBE_TIMEOUT (:meth:`NotebookRunner._answers_after_interrupt`).
PROBE_FLOOR = 1.0
#: Passes over /proc that :meth:`NotebookRunner.reap_strays` makes at most, until one finds nothing.
REAP_PASSES = 10
#: The variable that chooses nbformat's validator (:func:`validate_cells_only`).
NBFORMAT_VALIDATOR = "NBFORMAT_VALIDATOR"
#: The script the kernel is started as (ipykernel without its debugger), by its path: ``python -m``
#: would look the module up in the kernel's working directory, the scratch folder, first.
KERNEL_LAUNCHER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernel_launcher.py")
WARMUP = (
    "import numpy, jax, jax.numpy, os as __jaxgrade_os__, sys as __jaxgrade_sys__\n"
    "__jaxgrade_sys__.path.append(__jaxgrade_os__.getcwd())\n"
    "del __jaxgrade_os__, __jaxgrade_sys__\n"
    # a failed cell's frames (and their locals) are let go of once it is over
    "__import__('grader.sandboxed.kernel_side', fromlist=['_']).forget_errors_after_each_cell()"
)


async def _until_ready(kc: Any, timeout: float) -> None:
    """Wait until the kernel answers ``kernel_info`` and its IOPub channel carries that request's
    ``idle`` status: then IOPub is connected and the kernel's start is over.

    jupyter_client's own wait (``wait_for_ready``) ends by reading IOPub until it has been
    silent for 0.2 s: a fixed 0.2 s of every kernel start, so of every submission.  The
    ``idle`` of our own request tells the same thing as soon as it arrives.  Where it does not
    come (IOPub not connected yet: ZeroMQ's slow joiner), the request is sent again, as
    jupyter_client does."""
    from queue import Empty

    from nbclient.util import ensure_async

    deadline = time.monotonic() + timeout
    while True:
        msg_id = kc.kernel_info()
        reply = None
        try:
            while reply is None:
                left = min(1.0, deadline - time.monotonic())
                msg = await ensure_async(kc.get_shell_msg(timeout=max(0.01, left)))
                if msg.get("parent_header", {}).get("msg_id") == msg_id:
                    reply = msg
        except Empty:
            pass
        if reply is not None:
            try:
                while time.monotonic() < deadline:  # a kernel that prints for ever is not ready
                    msg = await ensure_async(kc.get_iopub_msg(timeout=0.2))
                    if (
                        msg.get("msg_type") == "status"
                        and msg.get("parent_header", {}).get("msg_id") == msg_id
                        and msg.get("content", {}).get("execution_state") == "idle"
                    ):
                        handle = getattr(kc, "_handle_kernel_info_reply", None)  # the protocol version
                        if handle is not None:
                            handle(reply)
                        return
            except Empty:
                pass
        if not await ensure_async(kc.is_alive()):
            raise RuntimeError("Kernel died before replying to kernel_info")
        if time.monotonic() > deadline:
            raise RuntimeError(f"Kernel didn't respond in {timeout:g} seconds")


def _kernel_manager_class() -> Any:
    """nbclient's kernel manager, starting :mod:`grader.sandboxed.kernel_launcher` (ipykernel
    without its debugger) by its path where the kernel spec starts ``python -m ipykernel_launcher``."""
    from jupyter_client.manager import AsyncKernelManager

    class Manager(AsyncKernelManager):
        def format_kernel_cmd(self, extra_arguments: list[str] | None = None) -> list[str]:
            cmd = super().format_kernel_cmd(extra_arguments)
            for i in range(len(cmd) - 1):
                if cmd[i] == "-m" and cmd[i + 1] == "ipykernel_launcher":
                    return [*cmd[:i], KERNEL_LAUNCHER, *cmd[i + 2 :]]
            return cmd

    return Manager


def _make_client(nb: Any, scratch: str, cell_timeout: float, output_cap: int) -> Any:
    from nbclient import NotebookClient
    from nbclient.util import ensure_async, run_sync

    class CappedClient(NotebookClient):
        """nbclient with a per-cell cap on kept output (the kernel may print hundreds of MB), and
        a kernel start that does not wait for 0.2 s of silence (:func:`_until_ready`)."""

        async def async_start_new_kernel_client(self) -> Any:
            assert self.km is not None
            try:
                self.kc = self.km.client()
                await ensure_async(self.kc.start_channels())
                await _until_ready(self.kc, self.startup_timeout)
            except Exception:
                await self._async_cleanup_kernel()
                raise
            self.kc.allow_stdin = False
            return self.kc

        start_new_kernel_client = run_sync(async_start_new_kernel_client)

        async def _async_poll_for_reply(self, msg_id: str, *args: Any) -> Any:
            self._jaxgrade_pending = msg_id  # the request an interrupt answers (NotebookRunner._interrupted_reply)
            self._jaxgrade_timed_out = False
            return await super()._async_poll_for_reply(msg_id, *args)

        async def _async_handle_timeout(self, timeout: int, cell: Any = None) -> Any:
            # said here, not by the reply's ename: a cell can raise a CellTimeoutError of its own
            self._jaxgrade_timed_out = True
            self.iopub_timeout = 0  # interrupted: no wait for its output (NotebookRunner._exec restores it)
            return await super()._async_handle_timeout(timeout, cell)

        def output(self, outs: Any, msg: Any, display_id: Any, cell_index: int) -> Any:
            kept = sum(len(str(o.get("text", ""))) for o in outs if o.get("output_type") == "stream")
            if msg["msg_type"] == "stream":
                if kept >= output_cap:
                    return None
                content = msg["content"]
                content["text"] = content.get("text", "")[: max(0, output_cap - kept)]
            elif msg["msg_type"] in ("display_data", "execute_result", "update_display_data"):
                return None  # rich outputs (plots, HTML) are not needed for grading
            return super().output(outs, msg, display_id, cell_index)

    return CappedClient(
        nb,
        timeout=cell_timeout,
        timeout_func=lambda cell: cell.metadata.get("jaxgrade_timeout", cell_timeout),
        kernel_name="python3",
        kernel_manager_class=_kernel_manager_class(),
        allow_errors=True,
        interrupt_on_timeout=True,
        error_on_timeout={"ename": "CellTimeoutError", "evalue": "timeout", "traceback": []},
        startup_timeout=120,
        shutdown_kernel="immediate",  # a kernel that failed to start is killed, not asked to stop (5 s)
        iopub_timeout=IOPUB_TIMEOUT,
        shell_timeout_interval=1,
        record_timing=False,
        resources={"metadata": {"path": scratch}},
    )


class NotebookRunner:
    """Owns the kernel: executes cells, detects hangs and deaths, restarts and replays."""

    def __init__(self, scratch: str, cell_timeout: float, output_cap: int, max_restarts: int) -> None:
        import nbformat

        self.scratch = scratch
        self.cell_timeout = cell_timeout
        self.output_cap = output_cap
        self.max_restarts = max_restarts
        self.restarts = 0
        self.holder = nbformat.v4.new_notebook()
        self.client = _make_client(self.holder, scratch, cell_timeout, output_cap)
        self.cells: list[Any] = []
        self.records: list[messages.CellReport] = []
        self.exec_map: dict[int, int] = {}
        self.ok_cells: list[int] = []
        self.alive = False
        self.own_pid_namespace = False

    # -- kernel lifecycle
    def start(self) -> None:
        self.client.km = self.client.create_kernel_manager()
        # the scratch folder is not on the kernel's sys.path while it starts (KERNEL_LAUNCHER), so a
        # `numpy.py` or `grader/` planted there before a restart cannot shadow what it imports;
        # WARMUP appends it last, so a student's own helper module still imports
        self.client.start_new_kernel(cwd=self.scratch)
        self.client.start_new_kernel_client()
        self._bound_sends()
        self.alive = True
        self.exec_map = {}
        status, _ = self._synthetic(WARMUP, 120)
        if not self.alive or self._timed_out():  # died or stuck importing JAX
            self.alive = False
            raise RuntimeError(f"the kernel {'died' if status == 'died' else 'got stuck'} importing JAX")

    def _bound_sends(self) -> None:
        """A send to the kernel gives up after SEND_TIMEOUT instead of blocking for ever: ZeroMQ
        blocks a send when the peer is gone, and a cell that writes garbage into the kernel's own
        sockets (or kills its I/O threads) leaves exactly that."""
        import zmq

        kc = self.client.kc
        for name in ("shell_channel", "control_channel", "stdin_channel"):
            sock = getattr(getattr(kc, name, None), "socket", None)
            if sock is not None:
                sock.setsockopt(zmq.SNDTIMEO, int(SEND_TIMEOUT * 1000))
                sock.setsockopt(zmq.LINGER, 0)

    def kernel_pid(self) -> int | None:
        try:
            proc = self.client.km.provisioner.process  # jupyter_client's local provisioner
            return int(proc.pid) if proc is not None else None
        except AttributeError:
            return None

    def reap_strays(self) -> int:
        """Kill processes a cell left running (background jobs, sleepers, fork bombs): they would
        hold the sandbox's process budget, so the kernel could not start threads later."""
        keep = {os.getpid(), 1}
        pid = os.getppid()
        while pid > 1 and pid not in keep:  # the worker's ancestors (bwrap's init, setpriv)
            keep.add(pid)
            pid = _parent_of(pid)
        kernel = self.kernel_pid()
        if kernel is not None:
            keep.add(kernel)
        marker = os.environ.get("JAXGRADE_SANDBOX", "")
        killed = 0
        dead: set[int] = set()
        # again until a pass finds nothing: a process may fork while a pass lists /proc (a
        # daemon's double fork), and its child, not listed yet, would outlive a single pass
        for _ in range(REAP_PASSES):
            found = 0
            for entry in os.listdir("/proc"):
                if not entry.isdigit() or int(entry) in keep or int(entry) in dead:
                    continue
                if not self.own_pid_namespace and not _has_marker(int(entry), marker):
                    continue  # without a PID namespace, only processes that carry this sandbox's marker
                try:
                    os.kill(int(entry), signal.SIGKILL)
                except OSError:
                    continue
                dead.add(int(entry))  # a zombie until its parent reaps it: not killed twice
                found += 1
            killed += found
            if not found:
                break
        if killed and self.alive:
            # the kernel's own children stay zombies (counted by RLIMIT_NPROC) until it reaps them
            self._synthetic("__import__('grader.sandboxed.kernel_side').sandboxed.kernel_side.reap_children()", 10)
        return killed

    def kill(self) -> None:
        """Kill the kernel, then drop its channels.  The kernel goes first, and the channels get
        a bounded wait: a cell that broke its own sockets leaves the heartbeat thread stuck, and
        ``stop_channels`` would join it for ever."""
        import threading

        from nbclient.util import run_sync

        try:
            if self.client.km is not None:  # an AsyncKernelManager (nbclient's): its calls are coroutines
                run_sync(self.client.km.shutdown_kernel)(now=True)
        except Exception:
            traceback.print_exc()
        kc = self.client.kc
        if kc is not None:

            def stop() -> None:
                try:
                    kc.stop_channels()
                except Exception:
                    traceback.print_exc()

            t = threading.Thread(target=stop, daemon=True)
            t.start()
            t.join(SEND_TIMEOUT)
        self.alive = False

    def restart_and_replay(self, skip: int | None = None) -> bool:
        """Replace the kernel and re-run the cells that worked; False when out of restarts.  A
        replayed cell that leaves the fresh kernel stuck or dead is dropped, and the kernel is
        replaced again (while restarts are left): the cells after it are replayed in one that answers."""
        self.kill()
        self.reap_strays()  # what the old kernel started after the last reaping (no cell is run: not alive)
        if self.restarts >= self.max_restarts:
            return False
        self.restarts += 1
        try:
            self.start()
        except Exception:  # no fresh kernel (one that died starting, no process left to fork): say so
            traceback.print_exc()
            self.kill()
            return False
        for i in list(self.ok_cells):
            if i == skip:
                continue
            status, _ = self._run(self.cells[i], i)
            if status != "ok":
                self.ok_cells.remove(i)
                if status in ("stuck", "died"):
                    return self.restart_and_replay(skip=skip)
        return self.alive

    # -- execution
    def _synthetic(self, code: str, timeout: float) -> tuple[str, dict[str, Any]]:
        import nbformat

        cell = nbformat.v4.new_code_cell(code)
        cell.metadata["jaxgrade_timeout"] = timeout
        return self._exec(cell, -1, store_history=False)

    def _exec(self, cell: Any, index: int, store_history: bool = True) -> tuple[str, dict[str, Any]]:
        import zmq
        from nbclient.exceptions import DeadKernelError

        self.holder.cells = [cell]  # nbclient writes the executed cell back into its notebook
        try:
            self.client.execute_cell(cell, 0, store_history=store_history)
        except (DeadKernelError, zmq.ZMQError):  # dead, or unreachable (see _bound_sends)
            self.alive = False
            return "died", {}
        finally:
            self.client.iopub_timeout = IOPUB_TIMEOUT  # lowered for a cell that timed out
        reply = getattr(self.client, "_jaxgrade_last_reply", None) or {}
        return reply.get("status", "ok"), reply

    def _timed_out(self) -> bool:
        """Whether the last cell ran out of time and was interrupted (nbclient's timeout, not a
        reply the kernel chose)."""
        return bool(getattr(self.client, "_jaxgrade_timed_out", False))

    def _run(self, cell: Any, index: int) -> tuple[str, dict[str, Any]]:
        status, reply = self._exec(cell, index)
        if status == "ok" or (status == "error" and not self._timed_out()):
            self._note_count(reply, index)
            return status, reply
        if status == "died":
            return "died", reply
        # timed out and interrupted: is the kernel responsive again?
        answers, interrupted = self._answers_after_interrupt()
        if answers:
            self._note_count(interrupted or {}, index)  # functions it defined before the interrupt are this cell's
            return "timeout", interrupted or reply  # its traceback says where the cell was
        return "stuck", reply

    def _note_count(self, reply: dict[str, Any], index: int) -> None:
        """Remember that the reply's execution count is cell ``index`` (tracebacks name counts)."""
        count = reply.get("execution_count")
        if isinstance(count, int):
            self.exec_map[count] = index

    def _answers_after_interrupt(self) -> tuple[bool, dict[str, Any] | None]:
        """Whether the kernel, within messages.PROBE_TIMEOUT of an interrupt, answers the request
        it was running and then a trivial cell; and that first answer (None if it did not come).
        One that does not answer is stuck: no cell is run in it any more (``alive`` is False)
        until it is replaced.  Both waits share the one PROBE_TIMEOUT (the probe gets at least
        PROBE_FLOOR of it)."""
        deadline = time.monotonic() + messages.PROBE_TIMEOUT
        interrupted, came = self._interrupted_reply(deadline)
        if not came:  # still running what was interrupted (or dead): a probe would only queue behind it
            self.alive = False
            return False, None
        probe, _ = self._synthetic("pass", max(PROBE_FLOOR, deadline - time.monotonic()))
        if probe != "ok":
            self.alive = False
        return probe == "ok", interrupted

    def _interrupted_reply(self, deadline: float) -> tuple[dict[str, Any] | None, bool]:
        """The content of the kernel's reply to the request that was interrupted (for a cell
        stopped by the interrupt: a KeyboardInterrupt with the traceback of where it was), and
        whether it came before ``deadline`` (``time.monotonic()``) while the kernel lived.  Where
        nbclient did not say which request that was, (None, True): the probe alone decides.
        Only feedback reads the content (where the cell was); it decides nothing."""
        from queue import Empty

        from nbclient.util import ensure_async, run_sync

        msg_id = getattr(self.client, "_jaxgrade_pending", None)
        kc, km = self.client.kc, self.client.km
        if msg_id is None or kc is None:
            return None, True

        async def read() -> dict[str, Any] | None:
            while (left := deadline - time.monotonic()) > 0:
                try:  # a second at a time: a kernel that died meanwhile is seen within one
                    msg = await ensure_async(kc.shell_channel.get_msg(timeout=min(1.0, left)))
                except Empty:
                    if km is not None and not await ensure_async(km.is_alive()):
                        return None
                    continue
                if isinstance(msg, dict) and msg.get("parent_header", {}).get("msg_id") == msg_id:
                    content = msg.get("content")
                    return content if isinstance(content, dict) else {}
            return None

        try:
            content = run_sync(read)()
        except Exception:  # the channel is gone: the probe says whether the kernel is
            return None, True
        return content, content is not None

    def execute_notebook(
        self, nb: Any, *, skip: set[int] = frozenset(), on_cell: Callable[[int], None] | None = None
    ) -> None:
        """Run the notebook's code cells in order, except ``skip``; ``on_cell(i)`` before cell i."""
        self.cells = []
        for cell in nb.cells:
            if cell.cell_type != "code":
                self.cells.append(None)
                continue
            import nbformat

            clean = nbformat.v4.new_code_cell(cell.source)
            self.cells.append(clean)
        for i, cell in enumerate(self.cells):
            if cell is None or not cell.source.strip() or i in skip:
                continue
            if on_cell is not None:
                on_cell(i)
            rec: dict[str, Any] = {"index": i, "status": "ok"}
            if not self.alive and not self.restart_and_replay():  # another try while restarts are left
                rec["status"] = "skipped"
                rec["message"] = "not run: the kernel could not be restarted"
                self.records.append(_report(rec))
                continue
            t0 = time.monotonic()
            status, reply = self._run(cell, i)
            rec["duration"] = round(time.monotonic() - t0, 3)
            strays = self.reap_strays()
            if strays:
                rec["strays"] = strays
            if status == "ok":
                self.ok_cells.append(i)
            elif status == "error":
                rec.update(self._error_info(reply, i))
                rec["status"] = "error"
            elif status == "timeout":
                rec.update(status="timeout", message=f"interrupted after {self.cell_timeout:g}s")
                loc = _locate(_traceback(reply), self.exec_map, self.cells, i, syntax_error=False)
                if loc:  # the student's line it was running when the time ran out (maybe a function's, in another cell)
                    rec["location"] = loc
            elif status in ("stuck", "died"):
                why = (
                    f"did not stop within {messages.PROBE_TIMEOUT:g}s of an interrupt after running "
                    f"{self.cell_timeout:g}s (a long jitted computation, SIGINT ignored, or a kernel that stopped answering): the kernel was killed"
                    if status == "stuck"
                    else "the kernel died while running this cell (os._exit, a crash, or out of memory)"
                )
                rec.update(status="killed" if status == "stuck" else "died", message=why)
                restarted = self.restart_and_replay(skip=i)
                rec["restarted"] = restarted
                if restarted:
                    rec["message"] += "; a fresh kernel replayed the cells before it and execution went on"
            rec["output"] = _stream_text(cell)[: min(self.output_cap, messages.MAX_TEXT)]
            self.records.append(_report(rec))

    def _error_info(self, reply: dict[str, Any], index: int) -> dict[str, Any]:
        tb = _traceback(reply)
        info: dict[str, Any] = {
            "ename": str(reply.get("ename", ""))[:200],
            "evalue": str(reply.get("evalue", ""))[:2000],
        }
        loc = _locate(tb, self.exec_map, self.cells, index)
        if loc:
            info["location"] = loc
        return info

    # -- requests
    def request(self, req_path: str, resp_path: str, timeout: float) -> messages.Reply | None:
        """Run one request in the kernel; return the worker's own reply when it failed there, or
        None when the kernel wrote a response file."""
        if not self.alive and not self.restart_and_replay():
            return messages.Dead(why="the kernel is gone and could not be restarted")
        # binds no name in the notebook's namespace: its code (a function the tests call, with
        # globals()[computed name]) finds no handle on the kernel side there (grader/intake/review.py)
        code = f'__import__("grader.sandboxed.kernel_side", fromlist=["serve"]).serve({req_path!r}, {resp_path!r})'
        import nbformat

        cell = nbformat.v4.new_code_cell(code)
        cell.metadata["jaxgrade_timeout"] = timeout
        status, reply = self._exec(cell, -1, store_history=False)
        timed_out = status == "error" and self._timed_out()
        stuck = timed_out and not self._answers_after_interrupt()[0]
        self.reap_strays()  # after the probe: a stuck kernel is not asked to reap its children
        if status == "ok" and os.path.exists(resp_path):
            return None
        if status == "died":
            return messages.Died(restarted=self.restart_and_replay())
        if timed_out:
            return messages.TimedOut(timeout=timeout, restarted=self.restart_and_replay() if stuck else None)
        why = f"the request failed in the kernel: {reply.get('ename')}: {reply.get('evalue')}"
        return messages.Dead(why=why[:2000])


def _traceback(reply: dict[str, Any]) -> list[str]:
    """An execute reply's traceback lines, without their colours."""
    tb = reply.get("traceback")
    return [_ANSI.sub("", line) for line in tb if isinstance(line, str)] if isinstance(tb, list) else []


def _report(rec: dict[str, Any]) -> messages.CellReport:
    """A cell's record (built up as a dict while the cell runs) as the message part."""
    loc = rec.pop("location", None)
    return messages.CellReport(**rec, location=messages.Where(**loc) if loc else None)


def _parent_of(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        return int(data[data.rindex(b")") + 2 :].split()[1])
    except (OSError, ValueError, IndexError):
        return 1


def _has_marker(pid: int, marker: str) -> bool:
    if not marker:
        return False
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f"JAXGRADE_SANDBOX={marker}".encode() in f.read()
    except OSError:
        return False


def _stream_text(cell: Any) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append(str(out.get("text", "")))
    return "".join(parts)


def _locate(
    tb: list[str], exec_map: dict[int, int], cells: list[Any], index: int, *, syntax_error: bool = True
) -> dict[str, Any] | None:
    """Find the innermost notebook frame in an IPython traceback: cell index, line, text.  With
    ``syntax_error``, a traceback with no notebook frame is read as a SyntaxError's, whose
    ``line N`` is the cell's own."""
    found = None
    current = None
    for block in tb:
        in_cell = False  # each block is one frame: only a notebook frame's arrow is the student's line
        for line in block.splitlines():
            m = _CELL_LOC.search(line)
            if m:
                count = int(m.group(1) or m.group(2))
                current = exec_map.get(count, index if count not in exec_map else None)
                found = {"cell": current, "lineno": int(m.group(3)) if m.group(3) else None}
                in_cell = True
                continue
            m2 = _CELL_LINE.match(line)
            if m2 and found is not None and in_cell:
                found["lineno"] = int(m2.group(1))
    if found and found.get("cell") is not None and found.get("lineno"):
        cell = cells[found["cell"]]
        lines = cell.source.splitlines() if cell is not None else []
        if 0 < found["lineno"] <= len(lines):
            found["text"] = lines[found["lineno"] - 1].strip()[:300]
    if found is None and syntax_error:
        # a SyntaxError has no cell frame: its traceback names the line directly
        for block in tb:
            m3 = re.search(r"line (\d+)", block)
            if m3:
                found = {"cell": index, "lineno": int(m3.group(1))}
        if found:
            lines = cells[index].source.splitlines()
            if 0 < found["lineno"] <= len(lines):
                found["text"] = lines[found["lineno"] - 1].strip()[:300]
    return found


def _patch_reply_capture(runner: NotebookRunner) -> None:
    """Keep the last execute reply's content (nbclient passes it only to hooks)."""

    def on_executed(cell: Any, cell_index: int, execute_reply: Any) -> None:
        runner.client._jaxgrade_last_reply = (execute_reply or {}).get("content", {})

    def on_start(cell: Any, cell_index: int) -> None:
        runner.client._jaxgrade_last_reply = None

    runner.client.on_cell_executed = on_executed
    runner.client.on_cell_start = on_start


_R = TypeVar("_R", bound=messages.Request)


def validate_cells_only() -> None:
    """Have nbformat check the notebooks, cells and outputs this process builds (the empty
    notebook nbclient is handed, nbclient's outputs, the requests' cells) with jsonschema, which
    checked the cells and outputs before too, without compiling fastjsonschema's validator of
    whole notebooks, which the worker does not need (:func:`read_notebook`).

    nbformat validates a cell or an output with jsonschema whichever validator is chosen (its
    fastjsonschema validator hands a part of the schema over to jsonschema), but building the
    default one compiles the whole schema into Python code: 0.14 to 0.19 CPU s at every
    worker's start, for nothing (bench/worker_start.py).  nbformat reads ``NBFORMAT_VALIDATOR``
    whenever it looks a validator up, so it stays set in the worker; the kernel launcher takes it
    out of the kernel's environment (:mod:`grader.sandboxed.kernel_launcher`), so the student's
    own nbformat is as ever.  (The worker starts the launcher where the kernel spec says ``python
    -m ipykernel_launcher``, as ipykernel's own spec, the one a sandbox finds, does.)"""
    os.environ[NBFORMAT_VALIDATOR] = "jsonschema"


def read_notebook(path: str) -> Any:
    """The notebook the trusted side wrote into the scratch folder, as ``nbformat.read(path,
    as_version=4)`` gives it, without its whole-notebook validation: that only logs what it
    finds, and the trusted side judged the notebook before it was sent (``grader.intake``).
    With jsonschema (:func:`validate_cells_only`) it would take seconds for a notebook of
    thousands of cells."""
    import nbformat

    with open(path, encoding="utf-8") as f:
        return nbformat.convert(nbformat.reader.reads(f.read()), 4)


def _expect(proto_in: int, cls: type[_R]) -> _R | None:
    """The host's next request, which must be a ``cls``; None (the worker exits) otherwise."""
    header, _ = protocol.read_frame(proto_in)
    try:
        request = messages.decode_request(header, cls)
    except messages.MessageError:
        return None
    assert isinstance(request, cls)
    return request


def main(argv: list[str] | None = None) -> int:
    p = rlimits.parser("grader.sandboxed.worker")
    p.add_argument("--reserve-bytes", type=int, default=0, help="room held for requests while the notebook runs")
    args = p.parse_args(argv)
    apply_limits(args)
    _undumpable()
    validate_cells_only()

    # Keep the protocol pipes private; everything the kernel inherits goes to a log file.
    proto_in, proto_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    log = os.open(os.path.join(args.scratch, ".jaxgrade", "worker.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    sys.stderr = os.fdopen(2, "w", buffering=1)

    reserve = _reserve_space(os.path.join(args.scratch, ".jaxgrade", "reserve"), args.reserve_bytes)
    start = _expect(proto_in, messages.Start)
    if start is None:
        return 2
    runner = NotebookRunner(
        args.scratch, cell_timeout=start.cell_timeout, output_cap=start.output_cap, max_restarts=start.max_restarts
    )
    runner.own_pid_namespace = args.pid_namespace
    _patch_reply_capture(runner)
    t0 = time.monotonic()
    try:
        runner.start()
    except Exception as exc:
        failed = messages.Ready(ok=False, error=f"kernel failed to start: {exc}"[:2000])
        protocol.write_frame(proto_out, failed.encode())
        return 1
    protocol.write_frame(proto_out, messages.Ready(startup=round(time.monotonic() - t0, 3)).encode())

    execute = _expect(proto_in, messages.Execute)
    if execute is None:  # closed (or garbage) before any notebook: the kernel goes with the worker
        runner.kill()
        return 2
    nb = read_notebook(os.path.join(args.scratch, execute.notebook))
    t0 = time.monotonic()
    runner.execute_notebook(
        nb,
        skip=set(execute.skip),
        on_cell=lambda i: protocol.write_frame(proto_out, messages.CellStarted(index=i).encode()),
    )
    executed = messages.Executed(
        cells=tuple(runner.records),
        exec_map=dict(runner.exec_map),
        restarts=runner.restarts,
        alive=runner.alive,
        duration=round(time.monotonic() - t0, 3),
    )
    protocol.write_frame(proto_out, executed.encode())

    if reserve:  # a notebook that filled its scratch: the requests below still have room
        try:
            os.unlink(reserve)
        except OSError:
            pass
    req_dir = os.path.join(args.scratch, ".jaxgrade")
    n = 0
    while True:
        try:
            header, payload = protocol.read_frame(proto_in)
        except protocol.ChannelClosed:
            break
        try:
            request = messages.decode_request(header, *KERNEL_REQUESTS)
        except messages.MessageError as exc:
            rid = header.get("id") if type(header.get("id")) is int else None
            protocol.write_frame(
                proto_out, messages.Dead(why=f"the worker cannot read the request: {exc}", id=rid).encode()
            )
            continue
        assert isinstance(request, messages.KernelRequest)
        n += 1
        req_path = os.path.join(req_dir, f"req-{n}")
        resp_path = os.path.join(req_dir, f"resp-{n}")
        fd = os.open(req_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            protocol.write_frame(fd, header, payload)
        finally:
            os.close(fd)
        err = runner.request(req_path, resp_path, request.timeout)
        if err is not None:
            protocol.write_frame(proto_out, replace(err, id=request.id).encode())
        else:
            rfd = os.open(resp_path, os.O_RDONLY)
            try:
                rhead, rpayload = protocol.read_frame(rfd)
            finally:
                os.close(rfd)
            # the kernel's reply goes on as it is (the trusted side decodes it), with the exec_map
            protocol.write_frame(proto_out, messages.stamp_exec_map(rhead, runner.exec_map), rpayload)
        for path in (req_path, resp_path):
            try:
                os.unlink(path)
            except OSError:
                pass
    runner.kill()
    return 0


PR_SET_DUMPABLE = 4


def _undumpable() -> bool:
    """Make the worker non-dumpable, before the kernel starts.  The kernel runs as the worker's
    uid, without capabilities: a non-dumpable worker refuses it ``/proc/<worker>/fd``, ``mem``
    and ``environ``, ``ptrace`` and ``pidfd_getfd``, so it cannot take the frame pipes to the
    trusted side (``h_steal_worker_pipe``).  The kernel's own exec makes it dumpable again.
    False where there is no ``prctl`` (not Linux: the fallback mode, no boundary anyway)."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _reserve_space(path: str, size: int) -> str | None:
    """Room for the requests, held while the notebook runs: a notebook that fills its (size-
    capped) scratch directory fails its own cell, and its tests can still be sent afterwards."""
    if size <= 0:
        return None
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.posix_fallocate(fd, 0, size)
        finally:
            os.close(fd)
        return path
    except OSError:
        return None


if __name__ == "__main__":
    rlimits.drop_start_folder()  # started as a program: not when main() is called in a process of ours
    sys.exit(main())
