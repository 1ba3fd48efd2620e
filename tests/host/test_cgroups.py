"""Per-sandbox resources of the whole process tree: cgroups (v1 and v2), OOM scores, scratch tmpfs.

The v2 code is tested against a fake cgroupfs (a directory tree); the v1 code and the sandboxes
against the real thing, as root (CI); those tests skip elsewhere, and fail instead of skipping
where ``JAXGRADE_REQUIRE_BWRAP`` is set (CI has root, cgroup v1 and bwrap).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grader.host import cgroups, sandbox
from grader.host.cgroups import CgroupLimits, SandboxCgroup, detect, enter_prefix

REQUIRE = os.environ.get("JAXGRADE_REQUIRE_BWRAP", "") not in ("", "0")
HOST, HOST_WHY = cgroups.host_hierarchy()
SCRATCH_OK, SCRATCH_WHY = sandbox.scratch_status()


def need(ok: bool, why: str) -> None:
    if not ok:
        if REQUIRE:
            pytest.fail(f"required here (JAXGRADE_REQUIRE_BWRAP is set): {why}")
        pytest.skip(why)


# ---------------------------------------------------------------- cgroup v2 on a fake cgroupfs
def fake_v2(root: Path, controllers: str = "cpuset cpu io memory pids", procs: str = "123\n456\n") -> Path:
    root.mkdir()
    (root / "cgroup.controllers").write_text(controllers + "\n")
    (root / "cgroup.subtree_control").write_text("")
    base = root / "grader.slice"
    base.mkdir()
    (base / "cgroup.controllers").write_text(controllers + "\n")
    (base / "cgroup.subtree_control").write_text("")
    (base / "cgroup.procs").write_text(procs)
    return base


def test_v2_delegated_cgroup_moves_its_processes_to_a_leaf_and_enables_controllers(tmp_path: Path) -> None:
    base = fake_v2(tmp_path / "cg")
    hier, why = detect(tmp_path / "cg", "0::/grader.slice\n")
    assert hier is not None, why
    assert hier.version == 2 and hier.parents == {"": base / "jaxgrade"} and hier.missing == ()
    # the no-internal-processes rule: our processes go to a leaf before controllers are enabled
    assert (base / "jaxgrade-trusted" / "cgroup.procs").read_text() == "456"
    assert (base / "cgroup.subtree_control").read_text() == "+memory +pids +cpu"
    assert (base / "jaxgrade" / "cgroup.subtree_control").read_text() == "+memory +pids +cpu"


def test_v2_a_process_in_the_graders_leaf_shares_the_graders_hierarchy(tmp_path: Path) -> None:
    """A pool worker is spawned after the coordinator moved their cgroup's processes to its leaf:
    its sandboxes go beside the coordinator's, where a sweep from either process looks, not in a
    hierarchy nested inside the leaf (which the no-internal-processes rule would also refuse)."""
    base = fake_v2(tmp_path / "cg")
    first, why = detect(tmp_path / "cg", "0::/grader.slice\n")
    assert first is not None, why
    (base / "cgroup.subtree_control").write_text("memory pids cpu")  # as the kernel shows what it wrote
    leaf = base / "jaxgrade-trusted"
    (leaf / "cgroup.controllers").write_text("memory pids cpu\n")
    (leaf / "cgroup.subtree_control").write_text("")
    (leaf / "cgroup.procs").write_text("456\n789\n")
    worker, why = detect(tmp_path / "cg", "0::/grader.slice/jaxgrade-trusted\n")
    assert worker is not None, why
    assert worker.parents == first.parents == {"": base / "jaxgrade"}
    assert not (leaf / "jaxgrade").exists() and not (leaf / "jaxgrade-trusted").exists()
    assert (leaf / "cgroup.procs").read_text() == "456\n789\n"  # nobody moved


def test_v2_sandbox_cgroup_limits_accounting_and_removal(tmp_path: Path) -> None:
    base = fake_v2(tmp_path / "cg")
    hier, _ = detect(tmp_path / "cg", "0::/grader.slice\n")
    assert hier is not None
    cg = SandboxCgroup.create(hier, CgroupLimits(1 << 30, 300, 100), name="sbx-a")
    d = base / "jaxgrade" / "sbx-a"
    assert (d / "memory.max").read_text() == str(1 << 30)
    assert (d / "pids.max").read_text() == "300"
    assert (d / "cpu.weight").read_text() == "100"
    assert cg.procs_files == [str(d / "cgroup.procs")]
    (d / "cpu.stat").write_text("usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n")
    (d / "memory.events").write_text("low 0\nhigh 0\nmax 9\noom 3\noom_kill 2\n")
    assert cg.cpu_seconds() == 2.5 and cg.oom_kills() == 2
    assert cg.peak_memory() is None  # Linux < 5.19 has no memory.peak
    (d / "memory.peak").write_text("123456\n")
    assert cg.peak_memory() == 123456
    (d / "cgroup.procs").write_text("")
    cg.remove()
    assert not d.exists() and cg.dirs == {}


def test_v2_root_cgroup_needs_no_leaf_and_missing_controllers_are_named(tmp_path: Path) -> None:
    fake_v2(tmp_path / "cg", controllers="memory pids")
    hier, why = detect(tmp_path / "cg", "0::/\n")
    assert hier is not None, why
    assert not (tmp_path / "cg" / "jaxgrade-trusted").exists()
    assert hier.missing == ("cpu",)


def test_v2_without_memory_controller_is_not_usable(tmp_path: Path) -> None:
    fake_v2(tmp_path / "cg", controllers="cpu pids")
    hier, why = detect(tmp_path / "cg", "0::/grader.slice\n")
    assert hier is None and "memory controller is not available" in why


def test_v1_fake_tree_limits(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    for ctrl in ("memory", "pids", "cpu", "cpuacct"):
        (root / ctrl).mkdir(parents=True)
        (root / ctrl / "cgroup.procs").write_text("")
    (root / "memory" / "box").mkdir()
    hier, why = detect(root, "4:memory:/box\n8:pids:/\n1:cpu:/\n2:cpuacct:/\n")
    assert hier is not None, why
    assert hier.parents["memory"] == root / "memory" / "box" / "jaxgrade"  # under our own cgroup
    assert hier.parents["pids"] == root / "pids" / "jaxgrade"
    cg = SandboxCgroup.create(hier, CgroupLimits(2 << 30, 512, 50), name="s")
    assert (root / "memory" / "box" / "jaxgrade" / "s" / "memory.limit_in_bytes").read_text() == str(2 << 30)
    assert (root / "pids" / "jaxgrade" / "s" / "pids.max").read_text() == "512"
    assert (root / "cpu" / "jaxgrade" / "s" / "cpu.shares").read_text() == "512"
    (root / "cpuacct" / "jaxgrade" / "s" / "cpuacct.usage").write_text("1500000000\n")
    assert cg.cpu_seconds() == 1.5
    assert len(cg.procs_files) == 4
    cg.remove()
    assert not (root / "pids" / "jaxgrade" / "s").exists()


def test_no_hierarchy_gives_a_warning_that_says_what_is_not_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    cgroups.host_hierarchy.cache_clear()
    monkeypatch.setenv("JAXGRADE_NO_CGROUPS", "1")
    try:
        warning = cgroups.cgroup_warning()
    finally:
        cgroups.host_hierarchy.cache_clear()
    assert warning is not None and "memory, process count and CPU share" in warning and "root" in warning


def test_enter_prefix_joins_every_cgroup_and_raises_the_oom_score(tmp_path: Path) -> None:
    files = [tmp_path / "a.procs", tmp_path / "b.procs"]
    out = subprocess.run(
        [*enter_prefix([str(f) for f in files]), "sh", "-c", "echo $$; cat /proc/self/oom_score_adj"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert [f.read_text().strip() for f in files] == [out[0], out[0]]  # exec: the same process
    assert out[1] == "1000"


def test_enter_prefix_refuses_to_start_outside_its_cgroup(tmp_path: Path) -> None:
    done = subprocess.run([*enter_prefix([str(tmp_path / "gone" / "cgroup.procs")]), "true"], capture_output=True)
    assert done.returncode == 125 and b"cannot join cgroup" in done.stderr


# ---------------------------------------------------------------- the real hierarchy (root, CI)
def test_real_cgroup_bounds_memory_and_processes_of_the_tree_and_counts_cpu() -> None:
    need(HOST is not None, f"no usable cgroups here: {HOST_WHY}")
    assert HOST is not None
    cg = SandboxCgroup.create(HOST, CgroupLimits(64 * 2**20, 20, 100))
    dirs = list(cg.dirs.values())
    try:
        script = (
            "import os, signal, time\n"
            "t = time.process_time()\n"
            "while time.process_time() - t < 0.2: pass\n"
            "pid = os.fork()\n"
            "if pid == 0:\n"
            "    hog = b'x' * (200 * 2**20)\n"
            "    os._exit(0)\n"
            "print(os.waitpid(pid, 0)[1] & 0x7F, flush=True)\n"
            "forks = 0\n"
            "try:\n"
            "    for _ in range(50):\n"
            "        if os.fork() == 0:\n"
            # the sleepers let go of the output pipe, or the run would wait 30 s for its end
            "            os.close(1); os.close(2); time.sleep(30); os._exit(0)\n"
            "        forks += 1\n"
            "except OSError:\n"
            "    pass\n"
            "print(forks, flush=True)\n"
        )
        done = subprocess.run(
            [*enter_prefix(cg.procs_files), sys.executable, "-c", script], capture_output=True, text=True, timeout=60
        )
        child_signal, forks = done.stdout.split()
        assert int(forks) < 20  # pids.max: the tree, not one process
        assert int(child_signal) == signal.SIGKILL  # the OOM killer, inside the cgroup
        assert cg.oom_kills() >= 1 or HOST.version == 1  # v1 kernels before 4.13 do not count
        cpu = cg.cpu_seconds()
        assert cpu is not None and cpu >= 0.2
        peak = cg.peak_memory()  # the tree's peak, up to the limit the hog hit
        assert peak is None or 32 * 2**20 <= peak <= 64 * 2**20
        assert peak is not None or HOST.version == 2  # v1 always has memory.max_usage_in_bytes
    finally:
        cg.remove()
    assert not any(d.exists() for d in dirs)  # its sleeping children were killed, the cgroup removed


def test_real_cpu_shares_are_per_sandbox_not_per_process() -> None:
    """A sandbox of 8 busy processes gets about the CPU of a sandbox of 1, not 8 times as much."""
    need(HOST is not None and "cpu" not in HOST.missing, f"no cgroup cpu controller here: {HOST_WHY}")
    assert HOST is not None
    many = SandboxCgroup.create(HOST, CgroupLimits(1 << 30, 100, 100))
    one = SandboxCgroup.create(HOST, CgroupLimits(1 << 30, 100, 100))
    # every process spins in the same 3 s, from a moment after all of them have started: the
    # groups then compete only with each other (a process that spun as soon as it started would
    # give the group started first the CPU while the other's processes were still starting)
    start = time.time() + 2
    spin = f"import time\nwhile time.time() < {start}: time.sleep(0.01)\nwhile time.time() < {start + 3}: pass"
    cpus = os.cpu_count() or 1
    try:
        procs = [
            subprocess.Popen([*enter_prefix(many.procs_files), sys.executable, "-c", spin]) for _ in range(8 * cpus)
        ]
        procs += [subprocess.Popen([*enter_prefix(one.procs_files), sys.executable, "-c", spin]) for _ in range(cpus)]
        for p in procs:
            p.wait(timeout=60)
        a, b = many.cpu_seconds(), one.cpu_seconds()
    finally:
        many.remove()
        one.remove()
    assert a is not None and b is not None
    assert b >= 0.5 * a, (a, b)  # without groups: b would be about a / 8


def test_scratch_is_a_size_capped_tmpfs(tmp_path: Path) -> None:
    need(SCRATCH_OK, f"scratch directories cannot be size-capped here: {SCRATCH_WHY}")
    d = sandbox.make_scratch("jaxgrade-test-", 8 * 2**20)
    try:
        assert os.path.ismount(d)
        with pytest.raises(OSError, match="No space left on device"), open(d / "fill", "wb") as f:
            f.write(b"x" * (16 * 2**20))
            f.flush()
    finally:
        sandbox.remove_scratch(d)
    assert not d.exists()


# ---------------------------------------------------------------- real sandboxes in a batch
ATTACKS = Path(__file__).resolve().parents[1] / "corpus" / "hostile"
LIMITS = (
    "{cell_timeout: 8, call_timeout: 6, wall_timeout: 120, memory_total_bytes: 1073741824, scratch_bytes: 134217728}"
)


@pytest.mark.slow
def test_tree_memory_bomb_and_full_scratch_stay_in_their_sandbox(tmp_path: Path) -> None:
    """40 children x 160 MiB under a 1 GiB sandbox: the OOM killer ends children in the sandbox, the
    grader and its pool survive and grade the next notebooks; a full scratch fails only its cell."""
    need(HOST is not None and SCRATCH_OK, f"{HOST_WHY or ''} {SCRATCH_WHY or ''}".strip())
    need(sandbox.choose_isolation("auto") == "bwrap", "bubblewrap does not work here")
    from tests.minicourse import make_minicourse
    from tests.test_hostile import grade

    course = make_minicourse(tmp_path / "course", LIMITS)
    names = ["h_memory_many_children", "h_fill_scratch_disk", "honest_full"]
    run = grade(tmp_path, course, [ATTACKS / f"{n}.ipynb" for n in names], "bwrap", "res")
    assert run["code"] == 0, run["stderr"][-3000:]
    recs = run["records"]
    assert {n: (recs[n]["score"], recs[n]["status"]) for n in names} == {n: (4, "graded") for n in names}, json.dumps(
        recs, indent=1
    )[:4000]
    mem = {c["index"]: c for c in recs["h_memory_many_children"]["cells"]}
    assert mem[0]["status"] in ("error", "died", "killed", "timeout"), mem
    assert "OOM killer" in recs["h_memory_many_children"]["message"]
    disk = {c["index"]: c for c in recs["h_fill_scratch_disk"]["cells"]}
    assert disk[0]["status"] == "error" and "No space left on device" in json.dumps(disk[0]), disk
    assert recs["honest_full"]["timings"].get("cpu", 0) > 0  # the sandbox's own CPU time
    assert run["left"] == []
    assert not any(run["scratch"].iterdir()), "scratch directories (or their mounts) were left behind"
    assert not [m for m in Path("/proc/self/mounts").read_text().splitlines() if str(run["scratch"]) in m]


def test_a_sandbox_cgroup_is_removed_when_it_ends() -> None:
    need(HOST is not None, f"no usable cgroups here: {HOST_WHY}")
    need(sandbox.choose_isolation("auto") == "bwrap", "bubblewrap does not work here")
    d = sandbox.make_scratch("jaxgrade-test-", 64 * 2**20)
    proc = sandbox.SandboxProcess("grader.sandboxed.evaluator", d, sandbox.Limits(), "bwrap")
    try:
        proc.start()
        assert proc.cgroup is not None
        dirs = list(proc.cgroup.dirs.values())
        deadline = time.monotonic() + 10
        while not (Path(proc.cgroup.procs_files[0]).read_text().split()) and time.monotonic() < deadline:
            time.sleep(0.05)
        pids = Path(proc.cgroup.procs_files[0]).read_text().split()
        assert str(proc.pid) in pids  # the first process is in it, before any work is sent
        assert all(Path(f"/proc/{p}/oom_score_adj").read_text().strip() == "1000" for p in pids)
    finally:
        proc.kill()
        sandbox.remove_scratch(d)
    assert not any(x.exists() for x in dirs) and proc.cpu_seconds is not None


def test_v2_namespace_root_that_refuses_controllers_moves_its_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a container's cgroup namespace, "/" is not the real root: enabling controllers there
    fails with EBUSY while it holds processes, so they move to a leaf and it is tried again."""
    import errno

    root = tmp_path / "cg"
    fake_v2(root)
    (root / "cgroup.procs").write_text("1\n77\n")
    real_write, calls = cgroups._write, []

    def write(path: Path, value: str) -> None:
        calls.append(path)
        if path == root / "cgroup.subtree_control" and calls.count(path) == 1:
            raise OSError(errno.EBUSY, "Device or resource busy")
        real_write(path, value)

    monkeypatch.setattr(cgroups, "_write", write)
    hier, why = detect(root, "0::/\n")
    assert hier is not None, why
    assert (root / "jaxgrade-trusted" / "cgroup.procs").read_text() == "77"
    assert (root / "cgroup.subtree_control").read_text() == "+memory +pids +cpu"


def test_whole_sandbox_limits_are_grading_yaml_keys() -> None:
    from pydantic import ValidationError

    from grader.course.config import LimitsConfig
    from grader.host.memory import thread_allowance

    limits = LimitsConfig(memory_total_bytes=2**30, pids_total=100, cpu_weight=200, scratch_bytes=2**27).to_limits()
    # the tasks allow for the threads JAX starts per core, as the sandbox's RLIMIT_NPROC does
    assert limits.cgroup_limits() == CgroupLimits(2**30, 100 + thread_allowance(), 200)
    assert limits.scratch_bytes == 2**27
    for bad in ({"memory_total_bytes": 2**20}, {"pids_total": 10}, {"cpu_weight": 0}, {"scratch_bytes": 1}):
        with pytest.raises(ValidationError):
            LimitsConfig(**bad)


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def owners() -> dict[str, str]:
    """Owner names (cgroups.owner_tag) of graders that are gone and of graders that are not."""
    pid, start, ns = cgroups.owner_tag().split(".")
    assert pid == str(os.getpid()) and start != "0" and ns != "0", cgroups.owner_tag()
    return {
        "dead": f"{dead_pid()}.{start}.{ns}",
        "pid reused": f"{pid}.{int(start) - 1}.{ns}",  # this pid, once another (earlier) process's
        "older grader, dead": str(dead_pid()),  # names made before the start time and namespace
        "alive": cgroups.owner_tag(),
        "older grader, alive": str(os.getpid()),
        "other namespace": f"{pid}.{int(start) - 1}.{int(ns) + 1}",  # its pid 1234 is not ours
        "not a tag": "abc",
    }


GONE = {"dead", "pid reused", "older grader, dead"}


def test_a_grader_is_gone_when_its_pid_is_or_names_another_process_and_never_judged_across_namespaces() -> None:
    assert {k for k, tag in owners().items() if cgroups.owner_gone(tag)} == GONE


def test_cgroups_of_a_grader_killed_with_sigkill_are_swept(tmp_path: Path) -> None:
    fake_v2(tmp_path / "cg")
    hier, _ = detect(tmp_path / "cg", "0::/grader.slice\n")
    assert hier is not None
    made = {k: SandboxCgroup.create(hier, CgroupLimits(1 << 30, 100), name=f"sbx-{t}-a") for k, t in owners().items()}
    made["new"] = SandboxCgroup.create(hier, CgroupLimits(1 << 30, 100))  # named by this process
    for cg in made.values():
        (cg.dirs[""] / "cgroup.procs").write_text("")
    assert cgroups.sweep_stale(hier) == len(GONE)
    assert {k for k, cg in made.items() if not cg.dirs[""].exists()} == GONE


def test_scratch_mounts_of_a_grader_killed_with_sigkill_are_swept(monkeypatch: pytest.MonkeyPatch) -> None:
    removed: list[Path] = []
    monkeypatch.setattr(sandbox, "remove_scratch", removed.append)
    tags = owners()
    mounts = "".join(
        f"jaxgrade-scratch-{t} /tmp/jaxgrade-sub-{i} tmpfs rw,size=524288k 0 0\n" for i, t in enumerate(tags.values())
    )
    mounts += "tmpfs /run tmpfs rw 0 0\n"
    gone = [f"/tmp/jaxgrade-sub-{i}" for i, k in enumerate(tags) if k in GONE]
    assert sandbox.sweep_stale_scratch(mounts) == gone
    assert removed == [Path(p) for p in gone]


def test_killing_a_cgroups_processes_never_signals_a_pid_that_left_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pid read from cgroup.procs whose process exits before the kill, and whose pid then goes to
    a process outside the sandbox: that process is not signalled. Here a live process outside any
    sandbox is listed on the first read and gone from the second, as such a pid would be."""
    fake_v2(tmp_path / "cg")
    hier, _ = detect(tmp_path / "cg", "0::/grader.slice\n")
    assert hier is not None
    cg = SandboxCgroup.create(hier, CgroupLimits(1 << 30, 100))
    outsider = subprocess.Popen(["sleep", "60"])
    member = subprocess.Popen(["sleep", "60"])
    try:
        reads = iter([{outsider.pid, member.pid}, {member.pid}])
        monkeypatch.setattr(SandboxCgroup, "_procs", lambda self: next(reads, set()))
        cg.kill_all(timeout=5)
        assert member.wait(timeout=10) == -signal.SIGKILL
        time.sleep(0.2)
        assert outsider.poll() is None, "a process outside the cgroup was killed"
    finally:
        for p in (outsider, member):
            p.kill()
            p.wait()
