"""Trusted workers forked from a fork server (grader/batch/forkserver.py): each forked worker is
what a spawned one would be (its environment, its packages, its death with the pool's process),
and where it could not be, the pool spawns.

The fork server is one per process, so every test runs its pools in a Python of its own: a
script written here, run with the test's environment and folder."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from grader.batch import forkserver

REPO = Path(__file__).resolve().parents[2]
#: the scripts' environment: these tests are about the fork server, whatever this run's setting
BASE_ENV = {k: v for k, v in os.environ.items() if k != "JAXGRADE_FORKSERVER"}

pytestmark = pytest.mark.skipif(
    forkserver.unavailable() not in (None, "JAXGRADE_FORKSERVER=0"), reason=f"{forkserver.unavailable()}"
)

PROLOGUE = f"""
import json, os, sys, time
sys.path.insert(0, {str(REPO)!r})
from grader.batch import forkserver
from grader.batch.pool import TrustedPool

def about():
    return {{
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "env": dict(os.environ),
        "jax_preloaded": "jax" in sys.modules,
        "cpu": time.process_time(),
    }}

def run(preload, tasks=2, jobs=1):
    with TrustedPool(jobs, preload=preload) as pool:
        return [r for _, r in pool.run(about, [(i, ()) for i in range(tasks)])]
"""


def script_text(body: str, defs: str = "") -> str:
    """The script: PROLOGUE, ``defs`` (the tasks, importable by the workers) and ``body`` under
    ``if __name__ == "__main__"`` (a worker imports the script as its main module)."""
    main = textwrap.indent(textwrap.dedent(body), "    ")
    return PROLOGUE + textwrap.dedent(defs) + "\nif __name__ == '__main__':\n" + main


def run_script(tmp_path: Path, body: str, *, defs: str = "", cwd: Path | None = None, env: dict | None = None) -> dict:
    script = tmp_path / "script.py"
    script.write_text(script_text(body, defs), encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, str(script)],
        cwd=cwd or tmp_path,
        env={**BASE_ENV, **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_preloading_pool_forks_its_workers_with_this_processs_environment(tmp_path: Path) -> None:
    out = run_script(
        tmp_path,
        """
        os.environ["SET_BEFORE"] = "1"
        forked = run(forkserver.GRADING, tasks=3, jobs=2)
        os.environ["JAXGRADE_LATER"] = "x"  # jaxgrade's own settings: the server still serves
        later = run(forkserver.GRADING)
        spawned = run(())
        print(json.dumps({"me": os.getpid(), "env": dict(os.environ), "forked": forked,
                          "later": later, "spawned": spawned, "off": forkserver._off}))
        """,
    )
    me = out["me"]
    assert out["off"] is None
    for r in out["forked"] + out["later"]:
        assert r["ppid"] != me and r["jax_preloaded"], r  # a child of the server, JAX imported
    # the pool's environment as it was at each pool's start, whatever the server's was
    assert all(r["env"] == {k: v for k, v in out["env"].items() if k != "JAXGRADE_LATER"} for r in out["forked"])
    assert all(r["env"] == out["env"] for r in out["later"] + out["spawned"])
    assert all(r["ppid"] == me and not r["jax_preloaded"] for r in out["spawned"])


def test_another_environment_or_the_switch_off_spawns_the_workers(tmp_path: Path) -> None:
    out = run_script(
        tmp_path,
        """
        first = run(forkserver.GRADING)
        os.environ["JAX_ENABLE_X64"] = "1"  # read as JAX is imported: not the server's JAX
        other = run(forkserver.GRADING)
        del os.environ["JAX_ENABLE_X64"]
        again = run(forkserver.GRADING)
        os.environ["JAXGRADE_FORKSERVER"] = "0"
        off = run(forkserver.GRADING)
        print(json.dumps({"me": os.getpid(), "first": first, "other": other, "again": again, "off": off}))
        """,
    )
    me = out["me"]
    assert all(r["ppid"] != me for r in out["first"] + out["again"])
    assert all(r["ppid"] == me and r["env"].get("JAX_ENABLE_X64") == "1" for r in out["other"])
    assert all(r["ppid"] == me for r in out["off"])


def test_a_package_this_process_would_import_from_elsewhere_turns_the_server_off(tmp_path: Path) -> None:
    """Another ``yaml`` first on the pool's ``sys.path`` (not the server's): a forked worker would
    hold the server's, a spawned one this one; the pool spawns, and the worker imports it."""
    other = tmp_path / "elsewhere"
    (other / "yaml").mkdir(parents=True)
    (other / "yaml" / "__init__.py").write_text("WHICH = 'elsewhere'\n", encoding="utf-8")
    out = run_script(
        tmp_path,
        defs="""
        def which():
            import yaml
            return os.getppid(), getattr(yaml, "WHICH", yaml.__file__)
        """,
        body=f"""
        run(forkserver.GRADING)  # the server starts with this process's path as it was
        sys.path.insert(0, {str(other)!r})
        with TrustedPool(1, preload=forkserver.GRADING) as pool:
            got = [r for _, r in pool.run(which, [(0, ())])]
        print(json.dumps({{"me": os.getpid(), "got": got, "off": forkserver._off}}))
        """,
    )
    assert out["got"] == [[out["me"], "elsewhere"]]
    assert out["off"] is not None and "yaml" in out["off"] and str(other) in out["off"]


def test_a_forked_worker_writes_where_the_pool_writes_now_and_draws_its_own_random_numbers(tmp_path: Path) -> None:
    """The pool's stdout redirected after the server started (as pytest's capture does): a
    forked worker prints there, not to the server's; two forked workers draw different NumPy
    random numbers (a fork copies the global state)."""
    late = tmp_path / "late.txt"
    out = run_script(
        tmp_path,
        defs="""
        def speak():
            import numpy
            print("from the worker", flush=True)
            return os.getppid(), float(numpy.random.rand()), os.getpid()
        """,
        body=f"""
        run(forkserver.GRADING)  # the server starts with this process's stdout
        saved = os.dup(1)
        fd = os.open({str(late)!r}, os.O_WRONLY | os.O_CREAT, 0o600)
        os.dup2(fd, 1)
        with TrustedPool(2, preload=forkserver.GRADING) as pool:
            got = [r for _, r in pool.run(speak, [(0, ()), (1, ())])]
        os.dup2(saved, 1)
        print(json.dumps({{"me": os.getpid(), "got": got}}))
        """,
    )
    assert all(ppid != out["me"] for ppid, _, _ in out["got"])
    assert late.read_text().count("from the worker") == 2
    (_, first, one), (_, second, other) = out["got"]
    assert one != other and first != second


def test_packages_planted_in_the_current_folder_reach_no_worker(tmp_path: Path) -> None:
    """A folder of submissions as the current folder, with a ``jax`` and a ``multiprocessing`` in
    it: neither the server nor a spawned worker imports them (multiprocessing starts both with
    ``python -c``, whose path begins with the current folder, so without ``-P`` a spawned
    worker's bootstrap imported the ``multiprocessing`` there)."""
    planted = tmp_path / "submissions"
    marker = tmp_path / "PLANTED"
    for name in ("jax", "multiprocessing", "pytest"):
        (planted / name).mkdir(parents=True)
        (planted / name / "__init__.py").write_text(
            f"open({str(marker)!r}, 'a').write({name!r} + '\\n')\nraise ImportError('planted')\n", encoding="utf-8"
        )
    out = run_script(
        tmp_path,
        """
        forked = run(forkserver.GRADING)
        spawned = run(())
        print(json.dumps({"me": os.getpid(), "forked": forked, "spawned": spawned, "off": forkserver._off}))
        """,
        cwd=planted,
    )
    assert not marker.exists(), marker.read_text()
    assert out["off"] is None and all(r["ppid"] != out["me"] and r["jax_preloaded"] for r in out["forked"])


def test_a_server_that_cannot_start_leaves_the_pool_spawning(tmp_path: Path) -> None:
    """A preloaded module that raises (not an ImportError) ends the server as it starts: the
    pool spawns its workers instead, and every task is done."""
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "boom.py").write_text("raise RuntimeError('not today')\n", encoding="utf-8")
    out = run_script(
        tmp_path,
        """
        done = run(("boom",), tasks=3, jobs=2)
        print(json.dumps({"me": os.getpid(), "done": done, "off": forkserver._off}))
        """,
        env={"PYTHONPATH": str(lib)},
    )
    assert len(out["done"]) == 3 and all(r["ppid"] == out["me"] for r in out["done"])
    assert out["off"] is not None


@pytest.mark.parametrize("preload", [True, False], ids=["forked", "spawned"])
def test_a_worker_dies_with_the_pools_process_even_by_sigkill(tmp_path: Path, preload: bool) -> None:
    pids = tmp_path / "pids"
    script = tmp_path / "script.py"
    defs = f"""
    def hold():
        open({str(pids)!r}, "w").write(f"{{os.getpid()}} {{os.getppid()}}")
        time.sleep(600)
    """
    body = f"""
    with TrustedPool(1, preload=forkserver.GRADING if {preload} else ()) as pool:
        list(pool.run(hold, [(0, ())]))
    """
    script.write_text(script_text(body, defs), encoding="utf-8")
    proc = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path, env=BASE_ENV)
    try:
        deadline = time.monotonic() + 120
        while not (pids.exists() and pids.read_text()) and time.monotonic() < deadline:
            time.sleep(0.1)
        worker, parent = map(int, pids.read_text().split())
        assert (parent != proc.pid) is preload
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 10
        while _alive(worker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(worker), "the worker outlived the pool's process"
    finally:
        proc.kill()
        proc.wait()


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def test_a_forked_grading_worker_keeps_its_compilations_and_the_sandboxes_flags(tmp_path: Path) -> None:
    """grade_many's worker setup (``_init_worker``) in a worker whose JAX the server imported:
    JAX has not started there, so the device count, the compile flags and the kept compilations
    still take."""
    out = run_script(
        tmp_path,
        defs="""
        def compile_here():
            import jax, jax.numpy as jnp
            jax.jit(lambda x: x * 2 + 1)(jnp.arange(3.0)).block_until_ready()
            return os.getppid(), jax.device_count(), os.environ.get("XLA_FLAGS", ""), jax.config.jax_compilation_cache_dir
        """,
        body="""
        from grader.grading.grade import _init_worker

        with TrustedPool(1, initializer=_init_worker, initargs=(2, None, True), preload=forkserver.GRADING) as pool:
            got = [r for _, r in pool.run(compile_here, [(0, ())])]
        print(json.dumps({"me": os.getpid(), "got": got}))
        """,
        env={"JAXGRADE_CACHE_DIR": str(tmp_path / "cache")},
    )
    from grader.host.xla_flags import fast_compile_flags

    [[ppid, devices, flags, folder]] = out["got"]
    assert ppid != out["me"] and devices == 2
    assert all(flag in flags.split() for flag in fast_compile_flags())
    assert folder and Path(folder).is_dir() and any(p.name.endswith("-cache") for p in Path(folder).iterdir())


def test_a_fork_server_killed_mid_task_costs_that_task_a_try_and_the_pool_spawns_from_then_on(tmp_path: Path) -> None:
    """The worker dies with the server (the pool would not see it end otherwise): its task is
    graded again, by a spawned worker."""
    started = tmp_path / "started"
    out = run_script(
        tmp_path,
        defs=f"""
        def slow():
            open({str(started)!r}, "w").write(str(os.getpid()))
            time.sleep(3)
            return os.getppid()
        """,
        body=f"""
        import signal, threading
        first = run(forkserver.GRADING)  # the server is up
        killed = []
        def kill_the_server():
            while not os.path.exists({str(started)!r}):
                time.sleep(0.05)
            killed.append(forkserver.server_pid())
            os.kill(killed[0], signal.SIGKILL)
        threading.Thread(target=kill_the_server, daemon=True).start()
        with TrustedPool(1, preload=forkserver.GRADING) as pool:
            got = [r for _, r in pool.run(slow, [(0, ())])]
            started_workers = pool.started
        print(json.dumps({{"me": os.getpid(), "got": [repr(g) if not isinstance(g, int) else g for g in got],
                          "killed": killed, "off": forkserver._off, "started": started_workers}}))
        """,
    )
    assert out["got"] == [out["me"]], out  # graded again, by a spawned worker: not a Lost
    assert out["started"] == 2 and out["killed"] and "exited before its first answer" in out["off"]


def test_a_task_that_will_not_import_with_the_servers_packages_is_graded_by_a_spawned_worker(tmp_path: Path) -> None:
    """Another ``yaml`` first on the pool's path, and modules that need it: the task's module
    (which fails to unpickle in a forked worker) and the main script itself (which a forked
    worker imports before it can check anything). Every task is done, by spawned workers."""
    other = tmp_path / "elsewhere"
    (other / "yaml").mkdir(parents=True)
    (other / "yaml" / "__init__.py").write_text("WHICH = 'elsewhere'\n", encoding="utf-8")
    (other / "needs_it.py").write_text(
        "import os\nfrom yaml import WHICH\n\ndef which():\n    return os.getppid(), WHICH\n", encoding="utf-8"
    )
    for where in ("task", "main"):
        out = run_script(
            tmp_path,
            defs=f"""
            sys.path.insert(0, {str(other)!r})
            if {where == "main"!r} and __name__ != "__main__":
                from yaml import WHICH  # a forked worker's import of this script fails
            """,
            body=f"""
            sys.path.remove({str(other)!r})
            run(forkserver.GRADING)  # the server starts without the other yaml on its path
            sys.path.insert(0, {str(other)!r})
            import needs_it
            with TrustedPool(1, preload=forkserver.GRADING) as pool:
                got = [r for _, r in pool.run(needs_it.which, [(0, ()), (1, ())])]
            print(json.dumps({{"me": os.getpid(), "got": [list(g) if isinstance(g, tuple) else repr(g) for g in got],
                              "off": forkserver._off}}))
            """,
        )
        assert out["got"] == [[out["me"], "elsewhere"]] * 2, (where, out)
        assert out["off"] is not None, where
