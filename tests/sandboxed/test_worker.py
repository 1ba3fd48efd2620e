"""The worker's wait for a fresh kernel (``grader.sandboxed.worker._until_ready``), against a
stand-in kernel client: every real kernel start in the suite goes through it, but rarely
through the path where the ``idle`` status of the first request never comes (ZeroMQ's slow
joiner: IOPub connected after the kernel published it), which these tests force.  And its
handling of a kernel stuck in a cell, with a real kernel."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from queue import Empty
from typing import Any

import nbformat
import pytest

from grader.sandboxed.worker import (
    IOPUB_TIMEOUT,
    NBFORMAT_VALIDATOR,
    NotebookRunner,
    _has_marker,
    _patch_reply_capture,
    _until_ready,
    read_notebook,
    validate_cells_only,
)


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


# --------------------------------------------------------------------------- a real kernel, stuck


def _runner(tmp_path: Path, *, cell_timeout: float, max_restarts: int) -> NotebookRunner:
    """A runner of a real kernel on the host, wired as the worker's main wires it."""
    runner = NotebookRunner(str(tmp_path), cell_timeout=cell_timeout, output_cap=10**6, max_restarts=max_restarts)
    _patch_reply_capture(runner)
    return runner


def _notebook(*sources: str) -> Any:
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in sources])


def _execute(runner: NotebookRunner, cells: list[str]) -> list[tuple[int, str]]:
    """Start the runner's kernel, run ``cells`` as a notebook, kill the kernel; each cell's (index, status)."""
    runner.start()
    try:
        runner.execute_notebook(_notebook(*cells))
    finally:
        runner.kill()
    return [(r.index, r.status) for r in runner.records]


def _reaped_by_marker(monkeypatch: pytest.MonkeyPatch) -> str:
    """Give this test's kernels a marker of their own: on the host (no PID namespace) the runner
    reaps only processes that carry it."""
    marker = f"test-{os.getpid()}-{time.monotonic_ns()}"
    monkeypatch.setenv("JAXGRADE_SANDBOX", marker)
    return marker


def _stuck_reaps(runner: NotebookRunner, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Every cell the runner sends to reap its kernel's children that does not come back "ok"
    (one sent to a stuck kernel times out), filled in as the runner goes."""
    failed: list[tuple[str, str]] = []
    real_synthetic = runner._synthetic

    def recording_synthetic(code: str, timeout: float) -> tuple[str, dict[str, Any]]:
        status, reply = real_synthetic(code, timeout)
        if "reap_children" in code and status != "ok":
            failed.append((code, status))
        return status, reply

    monkeypatch.setattr(runner, "_synthetic", recording_synthetic)
    return failed


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
    runner = _runner(tmp_path, cell_timeout=2, max_restarts=1)
    runner.start()
    stuck_kernel = runner.kernel_pid()
    try:
        stuck = "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(1000)"
        waits.clear()
        runner.execute_notebook(_notebook(stuck, "print('x' * 50_000)"))
    finally:
        runner.kill()
    first, second = runner.records
    assert first.status == "killed" and first.restarted, first
    assert not Path(f"/proc/{stuck_kernel}").exists(), "the stuck kernel was left running beside the fresh one"
    assert second.status == "ok" and second.output == "x" * 50_000 + "\n", second.status
    # the stuck cell: no wait (and no probe is sent to a kernel that did not answer the interrupted
    # cell); the fresh kernel's warm-up and the next cell: IOPUB_TIMEOUT
    assert waits[:1] == [0], waits
    assert 0 not in waits[1:] and waits.count(IOPUB_TIMEOUT) >= 2, waits
    assert runner.client.iopub_timeout == IOPUB_TIMEOUT


def test_a_cell_out_of_time_is_located_at_the_line_it_was_running(tmp_path: Path) -> None:
    """A cell interrupted at its time limit: its record says which line of the student's code was
    running (from the interrupted request's own reply, the KeyboardInterrupt's traceback), in
    the cell itself or in a function an earlier cell defined; the kernel goes on."""
    runner = _runner(tmp_path, cell_timeout=2, max_restarts=1)
    cells = [
        "def spin(n):\n    total = 0\n    while True:\n        total += n",
        "x = 1\nspin(x)",
        "y = 0\nwhile True:\n    y += 1",
        "print(x + 1)",
    ]
    statuses = _execute(runner, cells)
    assert statuses == [(0, "ok"), (1, "timeout"), (2, "timeout"), (3, "ok")], statuses
    in_function, in_cell = runner.records[1].location, runner.records[2].location
    assert in_function is not None and in_function.cell == 0, runner.records[1]
    assert (in_function.lineno, in_function.text) in ((3, "while True:"), (4, "total += n")), in_function
    assert in_cell is not None and in_cell.cell == 2, runner.records[2]
    assert (in_cell.lineno, in_cell.text) in ((2, "while True:"), (3, "y += 1")), in_cell
    assert runner.records[3].output == "2\n" and runner.restarts == 0


def test_a_cell_that_raises_a_cell_timeout_error_of_its_own_is_an_error_not_a_timeout(tmp_path: Path) -> None:
    """Whether a cell ran out of time is nbclient's timeout to say, not the ename of the reply the
    kernel chose: a cell raising an exception it named CellTimeoutError is an error like any
    other, its kernel neither probed nor replaced."""
    runner = _runner(tmp_path, cell_timeout=30, max_restarts=1)
    statuses = _execute(
        runner, ["class CellTimeoutError(Exception):\n    pass\n\nraise CellTimeoutError('mine')", "print(1)"]
    )
    assert statuses == [(0, "error"), (1, "ok")], runner.records
    assert runner.records[0].ename == "CellTimeoutError" and runner.restarts == 0


def test_a_replay_that_gets_stuck_is_replayed_again_without_that_cell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cell 2 gets stuck and leaves a process behind; in the replay, cell 0 (fine the first time)
    gets stuck too.  The stray is reaped without a cell sent to the stuck kernel, the fresh
    kernel that got stuck is replaced again, and the cells after cell 0 are replayed in one that
    answers: cell 3 still sees cell 1's definition."""
    _reaped_by_marker(monkeypatch)
    runner = _runner(tmp_path, cell_timeout=2, max_restarts=3)
    stuck_reaps = _stuck_reaps(runner, monkeypatch)
    hang = "signal.signal(signal.SIGINT, signal.SIG_IGN)\n    time.sleep(1000)"
    cells = [
        f"import os, signal, subprocess, time\nif os.path.exists('replayed'):\n    {hang}\nopen('replayed', 'w').close()",
        "x = 41",
        f"subprocess.Popen(['sleep', '1000'], start_new_session=True)\nif True:\n    {hang}",  # out of reach of SIGINT
        "print(x + 1)",
    ]
    statuses = _execute(runner, cells)
    assert statuses == [(0, "ok"), (1, "ok"), (2, "killed"), (3, "ok")], statuses
    assert runner.records[2].strays == 1 and runner.records[2].restarted, runner.records[2]
    assert runner.records[3].output == "42\n", runner.records[3]
    assert runner.restarts == 2 and runner.ok_cells == [1, 3], (runner.restarts, runner.ok_cells)
    assert stuck_reaps == [], "a stuck kernel was asked to reap its children"


#: IPython startup files (the sandbox's IPYTHONDIR is in its scratch) that end every kernel
#: started after them: before it answers, and once it answers but while it imports JAX
ENDINGS = {
    "at-start": "import os; os._exit(3)",
    "importing-jax": (
        "import os, sys\n"
        "class EndAtJax:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'jax':\n"
        "            os._exit(3)\n"
        "sys.meta_path.insert(0, EndAtJax())\n"
    ),
}


@pytest.mark.parametrize("ending", sorted(ENDINGS))
def test_a_kernel_that_cannot_be_started_again_ends_the_notebook_without_crashing_the_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ending: str
) -> None:
    """Cell 0 plants a startup file that ends every later kernel; cell 1 gets the kernel stuck.
    Its replacement dies starting, and so does the one tried for the next cell: the stuck cell is
    recorded as killed with no restart, the next is not run, and the runner goes on to report
    (before, the start's error ended the worker, and a kernel that died importing JAX was taken
    for a fresh one)."""
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    startup = tmp_path / "ipython" / "profile_default" / "startup"
    cells = [
        f"import os, signal, time\nos.makedirs({str(startup)!r}, exist_ok=True)\n"
        f"open(os.path.join({str(startup)!r}, '00-end.py'), 'w').write({ENDINGS[ending]!r})",
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(1000)",
        "x = 1",
    ]
    runner = _runner(tmp_path, cell_timeout=2, max_restarts=2)
    runner.start()
    try:
        runner.execute_notebook(_notebook(*cells))
    finally:
        runner.kill()
    statuses = [(r.index, r.status, r.restarted) for r in runner.records]
    assert statuses == [(0, "ok", None), (1, "killed", False), (2, "skipped", None)], statuses
    assert runner.restarts == 2 and not runner.alive  # tried again for cell 2, while restarts were left


def test_a_request_that_gets_the_kernel_stuck_is_probed_before_its_strays_are_reaped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call of the student's function that leaves a process and ignores the interrupt: the
    worker probes the kernel first, so the reaping of that process runs no cell in the stuck
    kernel (it waited 10 s on it before the restart), and the reply says the kernel was restarted."""
    from grader.wire import messages, protocol

    marker = _reaped_by_marker(monkeypatch)
    runner = _runner(tmp_path, cell_timeout=10, max_restarts=2)
    stuck_reaps = _stuck_reaps(runner, monkeypatch)
    hang = (
        "import signal, subprocess, time\n"
        "def hang(x):\n"
        "    subprocess.Popen(['sleep', '1000'], start_new_session=True)  # out of reach of SIGINT\n"
        "    signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "    time.sleep(1000)\n"
    )
    request = messages.Call(1, 2.0, name="hang")
    frag, payload = protocol.pack_values({"args": [1], "kwargs": {}})
    req_path, resp_path = str(tmp_path / "req-1"), str(tmp_path / "resp-1")
    fd = os.open(req_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        protocol.write_frame(fd, {**request.encode(), **frag}, payload)
    finally:
        os.close(fd)
    runner.start()
    try:
        runner.execute_notebook(_notebook(hang))
        reply = runner.request(req_path, resp_path, 2.0)
    finally:
        runner.kill()
    assert isinstance(reply, messages.TimedOut) and reply.restarted is True, reply
    assert stuck_reaps == [], "a stuck kernel was asked to reap its children"
    left = [int(e) for e in os.listdir("/proc") if e.isdigit() and _has_marker(int(e), marker)]
    assert left == [], f"processes of the stuck call were left running: {left}"


# --------------------------------------------------------------------------- the kernel it starts


def test_the_kernel_starts_without_ipykernels_debugger_and_the_student_can_still_import_debugpy(
    tmp_path: Path,
) -> None:
    """grader/sandboxed/kernel_launcher.py: ipykernel's start leaves debugpy unimported (its
    debugger is never used in grading, and importing it was 0.06 s of CPU in every kernel start),
    and a notebook that imports debugpy itself gets it."""
    runner = _runner(tmp_path, cell_timeout=60, max_restarts=0)
    runner.start()
    try:
        runner.execute_notebook(
            _notebook(
                "import os, sys\nprint(b'grader/sandboxed/kernel_launcher.py' in open(f'/proc/{os.getpid()}/cmdline', 'rb').read())\n"
                "print(sorted(m for m in sys.modules if m.split('.')[0] in ('debugpy', '_pydevd_bundle')))",
                "import debugpy\nprint(debugpy.__name__)",
            )
        )
    finally:
        runner.kill()
    assert [r.status for r in runner.records] == ["ok", "ok"], runner.records
    assert runner.records[0].output == "True\n[]\n", runner.records[0]
    assert runner.records[1].output == "debugpy\n", runner.records[1]


def test_files_planted_in_the_scratch_folder_shadow_nothing_the_restarted_kernel_imports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cell plants `grader/`, `ipykernel/` and `numpy.py` in its working directory (the scratch
    folder) and kills its kernel: the kernel started again imports ours, not those, with or
    without PYTHONSAFEPATH (Python 3.10 has none: `python -m` would have found the planted
    `grader/` first), and the working directory comes last on the student's sys.path, so a
    helper module of the student's own still imports."""
    monkeypatch.delenv("PYTHONSAFEPATH", raising=False)
    plant = (
        "import os\n"
        "for d in ('grader', 'ipykernel'):\n"
        "    os.makedirs(d, exist_ok=True)\n"
        "    open(f'{d}/__init__.py', 'w').write('import os; os._exit(3)')\n"
        "open('numpy.py', 'w').write('import os; os._exit(3)')\n"
        "open('my_helper.py', 'w').write('ANSWER = 42')\n"
        "os._exit(1)"
    )
    look = (
        "import os, sys, numpy, ipykernel, my_helper\n"
        "print(my_helper.ANSWER, numpy.__file__.startswith(os.getcwd()), ipykernel.__file__.startswith(os.getcwd()))\n"
        "print([p for p in sys.path if p in ('', '.', os.getcwd())] == [sys.path[-1]])"
    )
    runner = _runner(tmp_path, cell_timeout=60, max_restarts=1)
    assert _execute(runner, [plant, look]) == [(0, "died"), (1, "ok")], runner.records
    assert runner.records[1].output == "42 False False\nTrue\n", runner.records[1]


def test_the_reaper_kills_a_child_forked_while_it_listed_proc(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stray that forks while the reaper lists /proc (a daemon's double fork) leaves a child
    that listing did not see; the reaper lists again until a pass finds nothing, so the child is
    killed too. /proc is a fake here, so that the fork lands between the listing and the kill
    every time (on real processes the window is a few microseconds: once in about 70 runs of
    test_no_process_survives_close[process] under load)."""
    from types import SimpleNamespace

    from grader.sandboxed import worker

    parent, child = 5_000_001, 5_000_002  # above Linux's PID_MAX_LIMIT (2**22): never a real process
    procs = {parent}
    killed: list[int] = []
    real_listdir, real_kill = os.listdir, os.kill

    def listdir(path: Any = ".") -> list[str]:
        if path != "/proc":
            return real_listdir(path)
        return [*(str(p) for p in sorted(procs)), "self", "meminfo"]

    def kill(pid: int, sig: int) -> None:
        if pid not in (parent, child):
            return real_kill(pid, sig)
        if pid not in procs:
            raise ProcessLookupError(pid)
        procs.discard(pid)
        killed.append(pid)
        if pid == parent:
            procs.add(child)  # it had forked after the listing, before the SIGKILL
        return None

    monkeypatch.setattr(worker.os, "listdir", listdir)
    monkeypatch.setattr(worker.os, "kill", kill)
    runner = SimpleNamespace(kernel_pid=lambda: None, own_pid_namespace=True, alive=False)
    assert NotebookRunner.reap_strays(runner) == 2  # type: ignore[arg-type]
    assert killed == [parent, child] and not procs


def test_a_failed_cell_leaves_nothing_of_its_frames_alive_and_its_error_is_still_reported(tmp_path: Path) -> None:
    """IPython keeps the last exception (for ``%debug``), and its traceback keeps the frames of the
    code that raised, with their locals: a cell that failed after building large arrays held them
    for the rest of the grading (on Python 3.12, the 4 GiB of tokens of a line that IPython's
    tokenizer gave up on).  The kernel lets go of them once the cell is over; the cell's error
    is reported as ever, and a later error too."""
    runner = _runner(tmp_path, cell_timeout=60, max_restarts=0)
    cells = [
        "import gc, weakref\nimport numpy as np\n\nclass Table:\n    pass\n\nkept = []",
        "def load():\n    table = Table()\n    table.rows = np.ones(1000)\n    kept.append(weakref.ref(table))\n"
        "    raise FileNotFoundError('data.csv')\n\nbefore = 'defined before the error'\nload()",
        "print(kept[0]() is None, before, load.__name__)",
        "gc.collect()\nprint(kept[0]() is None)",
        # an exception group (3.11+) whose member is also kept by the notebook: its frames are cleared all the same
        "def deep():\n    rows = Table()\n    kept.append(weakref.ref(rows))\n    raise KeyError('x')\n\n"
        "try:\n    deep()\nexcept KeyError as exc:\n    caught = exc\n\n"
        + (
            "raise ExceptionGroup('both', [caught, ValueError('y')])" if sys.version_info >= (3, 11) else "raise caught"
        ),
        "print(kept[1]() is None)",
        # a generator the error went through, still suspended: the notebook can resume it
        "def produce():\n    try:\n        yield 1\n    except KeyError as exc:\n        kept.append(exc)\n        yield 2\n        yield 3\n\n"
        "gen = produce()\nnext(gen)\ngen.throw(KeyError('k'))\nraise kept[-1]",
        "print(next(gen))",
    ]
    statuses = _execute(runner, cells)
    assert statuses == [
        (0, "ok"),
        (1, "error"),
        (2, "ok"),
        (3, "ok"),
        (4, "error"),
        (5, "ok"),
        (6, "error"),
        (7, "ok"),
    ], runner.records
    assert runner.records[7].output == "3\n", "a suspended generator in the traceback was closed"
    assert runner.records[1].ename == "FileNotFoundError" and "data.csv" in runner.records[1].evalue
    # located at the student's line, in the function the cell called (from the reply's traceback)
    where = runner.records[1].location
    assert where is not None and (where.cell, where.lineno, where.text) == (
        1,
        5,
        "raise FileNotFoundError('data.csv')",
    ), where
    assert runner.records[4].ename == ("ExceptionGroup" if sys.version_info >= (3, 11) else "KeyError"), runner.records[
        4
    ]
    assert runner.records[5].output == "True\n", "an exception group's members keep their frames"
    assert runner.records[3].output == "True\n", "the failed cell's locals are still alive"
    assert runner.records[2].output.startswith("True "), "freed only by a garbage collection, not as the cell ended"
    # what the failed cell defined before its error is still there: only the frames' locals went
    assert runner.records[2].output == "True defined before the error load\n", runner.records[2]


REPO = Path(__file__).resolve().parents[2]


def _without_ids(node: Any) -> Any:
    """``node`` without its cells' ids (which nbformat's validation adds where a 4.5 notebook
    lacks them, and which nothing sends to the kernel: nbclient does not)."""
    if isinstance(node, dict):
        return {k: _without_ids(v) for k, v in node.items() if k != "id"}
    if isinstance(node, list):
        return [_without_ids(v) for v in node]
    return node


@pytest.mark.filterwarnings("ignore:Cell is missing an id field")  # nbformat.read's, on a Colab notebook
def test_the_worker_reads_every_notebook_of_the_repository_as_nbformat_reads_it() -> None:
    """``read_notebook`` leaves out nbformat.read's whole-notebook validation, which only logged
    what it found: the notebooks it gives are the same, cell ids aside, and so are its errors."""
    paths = sorted(
        p
        for folder in ("tests", "examples", "assignments")
        for p in (REPO / folder).rglob("*.ipynb")
        if p.stat().st_size < 1_000_000  # the hostile corpus's JSON bombs: intake refuses them
    )
    assert len(paths) > 200

    def outcome(read: Callable[[Path], Any], path: Path) -> Any:
        try:
            return _without_ids(read(path))
        except Exception as exc:  # the corpora hold a notebook that is not JSON
            return type(exc)

    for path in paths:
        ours = outcome(lambda p: read_notebook(str(p)), path)
        assert ours == outcome(lambda p: nbformat.read(p, as_version=4), path), path


def test_the_worker_checks_its_cells_and_outputs_without_building_a_whole_notebook_validator_and_the_kernel_keeps_nbformats_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``validate_cells_only``: the worker's outputs and request cells are still validated (by
    jsonschema, as before), fastjsonschema's whole-notebook validator (0.14 to 0.18 CPU s to
    build) is never built, and the kernel's environment does not carry the worker's choice."""
    import nbformat.validator

    monkeypatch.setattr(nbformat.validator, "validators", {})  # nbformat's cache of built validators
    monkeypatch.setenv(NBFORMAT_VALIDATOR, "fastjsonschema")  # restored after the test
    validate_cells_only()
    path = tmp_path / "submission.ipynb"
    nbformat.write(
        _notebook(
            "import os\nprint(os.environ.get('NBFORMAT_VALIDATOR'))",
            "from IPython.display import HTML\nHTML('<b>x</b>')",
        ),
        path,
    )
    nb = read_notebook(str(path))
    runner = _runner(tmp_path, cell_timeout=60, max_restarts=0)
    runner.start()
    nbformat.validator.validators.clear()  # built so far: the runner's empty notebook's, the write's
    try:
        runner.execute_notebook(nb)
        status, _ = runner._synthetic("1 + 1", 30)  # a request's cell
    finally:
        runner.kill()
    assert [r.status for r in runner.records] == ["ok", "ok"], runner.records
    assert runner.records[0].output == "None\n", runner.records[0]
    assert status == "ok"
    built = {type(v).__name__ for v in nbformat.validator.validators.values()}
    assert built == {"JsonSchemaValidator"}, built  # the outputs and cells were checked, by jsonschema only
    with pytest.raises(nbformat.ValidationError):  # and a malformed one is still refused
        nbformat.v4.new_output("display_data", data=5)
