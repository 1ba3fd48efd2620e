"""A control group per sandbox: memory, processes and a CPU share for its whole process tree.

rlimits bound one process at a time (40 children of 160 MiB each pass an 8 GiB address-space
limit), so a sandbox also gets its own cgroup when the grader may make one (root, or a delegated
cgroup): ``memory`` (the OOM killer then picks inside the sandbox, never a trusted process),
``pids`` and an equal CPU weight (a sandbox with 250 busy children gets one share of the CPU, not
250), and its CPU time is read from there.  Both hierarchies work: cgroup v1 (one mount per
controller, ``memory.limit_in_bytes``, ``pids.max``, ``cpu.shares``, ``cpuacct.usage``) and v2
(one tree, ``memory.max``, ``pids.max``, ``cpu.weight``, ``cpu.stat``).  Where neither is
usable, :func:`cgroup_warning` says what is not bounded.

The sandbox's first process joins its cgroup before it runs anything (:func:`enter_prefix`, a
``sh`` step before ``bwrap``), so every process it starts is counted from the beginning.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import signal
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Literal

log = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
PARENT = "jaxgrade"  # the grader's sandboxes live under <the grader's own cgroup>/jaxgrade/
TRUSTED_LEAF = "jaxgrade-trusted"  # v2: where the grader moves its cgroup's processes (no internal processes rule)
V1_CONTROLLERS = ("memory", "pids", "cpu", "cpuacct")
V2_CONTROLLERS = ("memory", "pids", "cpu")


@dataclass(frozen=True)
class CgroupLimits:
    memory_bytes: int  # the whole tree's memory (and swap)
    pids: int  # tasks (threads count) in the whole tree
    cpu_weight: int = 100  # v2 scale (1..10000, default 100); v1 cpu.shares = weight * 1024 / 100


@dataclass
class Hierarchy:
    """Where sandbox cgroups go: per controller (v1) or one directory (v2, key "")."""

    version: Literal[1, 2]
    parents: dict[str, Path]
    missing: tuple[str, ...] = ()  # controllers that could not be used


def _self_paths(text: str) -> dict[str, str]:
    """/proc/self/cgroup: controller -> path ("" for the v2 line)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, names, path = parts
        for name in names.split(",") if names else [""]:
            out[name] = path
    return out


def _base(mount: Path, path: str) -> Path:
    """The grader's own cgroup under ``mount``; the mount root when the path is not visible
    there (a container that mounts its own cgroup as the root)."""
    candidate = mount / path.lstrip("/")
    return candidate if path and candidate.is_dir() else mount


def _write(path: Path, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def detect(root: Path = CGROUP_ROOT, self_cgroup: str | None = None) -> tuple[Hierarchy | None, str]:
    """The usable hierarchy (making the parent directories), or (None, why not)."""
    if self_cgroup is None:
        try:
            self_cgroup = Path("/proc/self/cgroup").read_text()
        except OSError as exc:
            return None, f"cannot read /proc/self/cgroup ({exc})"
    paths = _self_paths(self_cgroup)
    try:
        if (root / "cgroup.controllers").is_file():
            return _detect_v2(root, paths.get("", "/"))
        return _detect_v1(root, paths)
    except OSError as exc:
        return None, f"cannot create cgroups under {root} ({exc.strerror or exc})"


def _detect_v1(root: Path, paths: dict[str, str]) -> tuple[Hierarchy | None, str]:
    parents: dict[str, Path] = {}
    missing: list[str] = []
    for ctrl in V1_CONTROLLERS:
        mount = root / ctrl
        if not (mount / "cgroup.procs").is_file():
            missing.append(ctrl)
            continue
        parent = _base(mount, paths.get(ctrl, "/")) / PARENT
        try:
            parent.mkdir(exist_ok=True)
        except OSError:
            missing.append(ctrl)
            continue
        parents[ctrl] = parent
    if "memory" not in parents:
        return None, f"no writable cgroup v1 memory controller under {root}"
    return Hierarchy(1, parents, tuple(missing)), ""


def _detect_v2(root: Path, path: str) -> tuple[Hierarchy | None, str]:
    base = _base(root, path)
    if base != root and base.name == TRUSTED_LEAF:
        # a grader process that an earlier one moved to its leaf (a pool worker, spawned after the
        # coordinator's detection): the same hierarchy as that one's, not one nested in the leaf,
        # so that a sweep from either finds the other's sandboxes
        base = base.parent
    available = (base / "cgroup.controllers").read_text().split()
    wanted = [c for c in V2_CONTROLLERS if c in available]
    if "memory" not in wanted:
        return None, f"the memory controller is not available to {base} (cgroup v2; not delegated?)"
    enabled = (base / "cgroup.subtree_control").read_text().split()
    if not set(wanted) <= set(enabled):
        # "no internal processes": a non-root cgroup with controllers for its children holds no
        # process itself, so ours (and our neighbours in it) move to a leaf first; the root of a
        # cgroup namespace looks like the root but is not exempt, hence the retry on EBUSY
        if base != root:
            _move_to_leaf(base)
        try:
            _write(base / "cgroup.subtree_control", " ".join(f"+{c}" for c in wanted))
        except OSError as exc:
            if exc.errno != errno.EBUSY:
                raise
            _move_to_leaf(base)
            _write(base / "cgroup.subtree_control", " ".join(f"+{c}" for c in wanted))
    parent = base / PARENT
    parent.mkdir(exist_ok=True)
    _write(parent / "cgroup.subtree_control", " ".join(f"+{c}" for c in wanted))
    missing = tuple(c for c in V2_CONTROLLERS if c not in wanted)
    return Hierarchy(2, {"": parent}, missing), ""


def _move_to_leaf(base: Path) -> None:
    leaf = base / TRUSTED_LEAF
    leaf.mkdir(exist_ok=True)
    for _ in range(5):  # processes may fork while we move them
        pids = (base / "cgroup.procs").read_text().split()
        if not pids:
            break
        for pid in pids:
            try:
                _write(leaf / "cgroup.procs", pid)
            except OSError as exc:
                if exc.errno != errno.ESRCH:
                    raise


@lru_cache(maxsize=1)
def host_hierarchy() -> tuple[Hierarchy | None, str]:
    """This machine's usable hierarchy, detected once per process (stale cgroups swept)."""
    if os.environ.get("JAXGRADE_NO_CGROUPS", "") not in ("", "0"):
        return None, "JAXGRADE_NO_CGROUPS is set"
    hier, why = detect()
    if hier is not None:
        sweep_stale(hier)
    return hier, why


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _pid_namespace() -> str:
    """The inode of this process's PID namespace ("" where /proc does not say)."""
    try:
        link = os.readlink("/proc/self/ns/pid")  # "pid:[4026531836]"
    except OSError:
        return ""
    digits = link.rpartition("[")[2].rstrip("]")
    return digits if digits.isdigit() else ""


def _start_time(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks after boot, /proc/PID/stat's 22nd field); ""
    where there is no such process, None where that cannot be read (then it is taken as alive)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
    except (FileNotFoundError, ProcessLookupError):
        return ""
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()  # the name before it may hold spaces and parentheses
    return fields[19] if len(fields) > 19 and fields[19].isdigit() else None


#: (pid, tag) of :func:`owner_tag`, made once per process (a spawned worker is a new process).
_OWNER: tuple[int, str] | None = None


def owner_tag() -> str:
    """This process's name in what it makes for its sandboxes (their cgroups, their scratch
    mounts), which a later sweep reads to tell whether its maker is gone: ``PID.START.PIDNS``, its
    pid, when it started and its PID namespace.  With the start time, a pid that a new process
    reuses is not taken for the maker; with the namespace, a grader in another PID namespace
    (whose pids mean other processes here) is never judged, and so never swept, from this one."""
    global _OWNER
    pid = os.getpid()
    if _OWNER is None or _OWNER[0] != pid:
        start = _start_time(pid) or "0"
        _OWNER = (pid, f"{pid}.{start}.{_pid_namespace() or '0'}")
    return _OWNER[1]


def owner_gone(tag: str) -> bool:
    """Whether the grading process named by ``tag`` (:func:`owner_tag`; a bare pid in names made
    before it) is gone, so that what it made may be swept.  False where that cannot be told: a
    maker in another PID namespace, a name that is not ours, a /proc that will not say."""
    parts = tag.split(".")
    if not all(re.fullmatch(r"[0-9]{1,12}", p) for p in parts) or len(parts) not in (1, 3):
        return False
    if len(parts) == 3 and parts[2] != (_pid_namespace() or "0"):
        return False
    pid = int(parts[0])
    if len(parts) == 1 or parts[1] == "0":  # an older grader's name, or a maker without its start time
        return not _pid_alive(pid)
    start = _start_time(pid)
    return start is not None and start != parts[1]  # gone, or its pid is another process's now


def sweep_stale(hierarchy: Hierarchy) -> int:
    """Remove the cgroups of sandboxes whose grader process is gone (a grader killed with
    SIGKILL never removes them), killing what is left in them; returns how many."""
    stale: dict[str, dict[str, Path]] = {}
    for ctrl, parent in hierarchy.parents.items():
        try:
            names = [d.name for d in parent.iterdir() if d.is_dir() and d.name.startswith("sbx-")]
        except OSError:
            continue
        for name in names:
            if owner_gone(name.split("-")[1]):
                stale.setdefault(name, {})[ctrl] = parent / name
    for dirs in stale.values():
        SandboxCgroup(hierarchy, dirs).remove()
    return len(stale)


def cgroup_warning() -> str | None:
    """What is not bounded, once, where per-sandbox cgroups are not (fully) available."""
    hier, why = host_hierarchy()
    if hier is None:
        return (
            f"WARNING: no per-sandbox cgroups ({why}). A submission's memory, process count and CPU "
            "share are bounded per process only (rlimits), not for its whole process tree: many "
            "children can together exhaust the machine's memory, and the OOM killer may then pick a "
            "trusted process. Run the grader as root or give it a delegated cgroup."
        )
    if hier.missing:
        return f"WARNING: cgroup controllers not available for sandboxes: {', '.join(hier.missing)} (not bounded)"
    return None


@dataclass
class SandboxCgroup:
    """One sandbox's cgroup (one directory per v1 controller, one in v2)."""

    hierarchy: Hierarchy
    dirs: dict[str, Path] = field(default_factory=dict)

    @classmethod
    def create(cls, hierarchy: Hierarchy, limits: CgroupLimits, name: str | None = None) -> SandboxCgroup:
        name = name or f"sbx-{owner_tag()}-{uuid.uuid4().hex[:12]}"
        cg = cls(hierarchy)
        try:
            for ctrl, parent in hierarchy.parents.items():
                d = parent / name
                d.mkdir()
                cg.dirs[ctrl] = d
            cg._apply(limits)
        except BaseException:
            cg.remove()
            raise
        return cg

    def _apply(self, limits: CgroupLimits) -> None:
        if self.hierarchy.version == 2:
            d = self.dirs[""]
            _write(d / "memory.max", str(limits.memory_bytes))
            if (d / "memory.swap.max").exists():
                _write(d / "memory.swap.max", "0")
            if "pids" not in self.hierarchy.missing:
                _write(d / "pids.max", str(limits.pids))
            if "cpu" not in self.hierarchy.missing:
                _write(d / "cpu.weight", str(limits.cpu_weight))
            return
        mem = self.dirs["memory"]
        _write(mem / "memory.limit_in_bytes", str(limits.memory_bytes))
        if (mem / "memory.memsw.limit_in_bytes").exists():  # memory + swap, no more than memory
            try:
                _write(mem / "memory.memsw.limit_in_bytes", str(limits.memory_bytes))
            except OSError:  # swap accounting off
                pass
        if "pids" in self.dirs:
            _write(self.dirs["pids"] / "pids.max", str(limits.pids))
        if "cpu" in self.dirs:
            _write(self.dirs["cpu"] / "cpu.shares", str(max(2, limits.cpu_weight * 1024 // 100)))

    @property
    def procs_files(self) -> list[str]:
        """The files a process writes its pid to in order to join (each directory once)."""
        seen: dict[str, str] = {}
        for d in self.dirs.values():
            seen.setdefault(os.path.realpath(d), str(d / "cgroup.procs"))
        return list(seen.values())

    def _procs(self) -> set[int]:
        pids: set[int] = set()
        for f in self.procs_files:
            try:
                pids.update(int(p) for p in Path(f).read_text().split())
            except (OSError, ValueError):
                continue
        return pids

    def cpu_seconds(self) -> float | None:
        """CPU time of every process that ran in the sandbox, or None when it is not accounted."""
        try:
            if self.hierarchy.version == 2:
                for line in (self.dirs[""] / "cpu.stat").read_text().splitlines():
                    key, _, value = line.partition(" ")
                    if key == "usage_usec":
                        return int(value) / 1e6
                return None
            if "cpuacct" in self.dirs:
                return int((self.dirs["cpuacct"] / "cpuacct.usage").read_text()) / 1e9
        except (OSError, ValueError):
            return None
        return None

    def peak_memory(self) -> int | None:
        """The most memory the sandbox's processes held at once (bytes), or None when the kernel
        does not say (v2 before Linux 5.19 has no ``memory.peak``)."""
        d = self.dirs.get("") if self.hierarchy.version == 2 else self.dirs.get("memory")
        name = "memory.peak" if self.hierarchy.version == 2 else "memory.max_usage_in_bytes"
        try:
            return int((d / name).read_text().strip())  # type: ignore[operator]
        except (OSError, ValueError, TypeError):
            return None

    def oom_kills(self) -> int:
        """Processes the kernel's OOM killer ended in this sandbox."""
        d = self.dirs.get("") if self.hierarchy.version == 2 else self.dirs.get("memory")
        name = "memory.events" if self.hierarchy.version == 2 else "memory.oom_control"
        try:
            for line in (d / name).read_text().splitlines():  # type: ignore[operator]
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError, TypeError):
            pass
        return 0

    def kill_all(self, timeout: float = 5.0) -> None:
        if self.hierarchy.version == 2 and (self.dirs[""] / "cgroup.kill").exists():
            try:
                _write(self.dirs[""] / "cgroup.kill", "1")
            except OSError:
                pass
        deadline = time.monotonic() + timeout
        while (pids := self._procs()) and time.monotonic() < deadline:
            _kill_members(pids, self._procs)
            time.sleep(0.02)

    def remove(self) -> None:
        """Kill what is left in the cgroup and remove it."""
        if not self.dirs:
            return
        self.kill_all()
        for ctrl, d in list(self.dirs.items()):
            for attempt in range(50):  # EBUSY while the last processes exit
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as exc:
                    if exc.errno == errno.ENOTEMPTY and not _on_cgroupfs(d):
                        _rmtree_fake(d)  # a fake cgroupfs in tests: files in it are ours
                        break
                    if attempt == 49:
                        log.warning("could not remove cgroup %s: %s", d, exc)
                    time.sleep(0.05)
            self.dirs.pop(ctrl, None)


def _kill_members(pids: set[int], members: Callable[[], set[int]]) -> None:
    """SIGKILL each of ``pids`` (read from a cgroup) that is still a member of it.  Between that
    read and the signal, a process may exit and its pid go to a new process outside the sandbox:
    each process is pinned first (a pidfd, which keeps naming the same process), then the members
    are read again, and only a pinned process still among them is signalled, through its pidfd.
    (Its pid cannot pass to another process while it lives, so "still a member" is about it.)
    Where pidfds are missing (Linux before 5.3) or refused, a plain kill of a pid still listed."""
    fds: dict[int, int | None] = {}
    try:
        for pid in pids:
            try:
                fds[pid] = os.pidfd_open(pid)
            except ProcessLookupError:
                continue
            except (AttributeError, OSError):  # no pidfds here
                fds[pid] = None
        now = members()
        for pid, fd in fds.items():
            if pid not in now:
                continue
            try:
                if fd is None:
                    raise OSError("no pidfd")
                signal.pidfd_send_signal(fd, signal.SIGKILL)
            except ProcessLookupError:
                pass
            except OSError:  # no pidfd, or refused (a seccomp profile, EPERM): a plain kill
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
    finally:
        for fd in fds.values():
            if fd is not None:
                os.close(fd)


def _on_cgroupfs(path: Path) -> bool:
    return not str(path).startswith(tempfile_root())


def tempfile_root() -> str:
    import tempfile

    return tempfile.gettempdir()


def _rmtree_fake(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def enter_prefix(procs_files: list[str], oom_score_adj: int = 1000) -> list[str]:
    """A command prefix that joins the cgroups and raises the OOM score before it execs the rest.

    It runs before bwrap, so the sandbox's first process, and everything it starts, is in the
    cgroup before any student code exists; if it cannot join, the sandbox does not start."""
    if not procs_files and not os.path.exists("/proc/self/oom_score_adj"):
        return []  # not Linux: nothing to join, no OOM score
    script = (
        'while [ "$1" != -- ]; do echo $$ > "$1" || { echo "jaxgrade: cannot join cgroup $1" >&2; exit 125; }; '
        "shift; done; shift; "
        f"echo {int(oom_score_adj)} 2>/dev/null >/proc/self/oom_score_adj; "
        'exec "$@"'
    )
    return ["/bin/sh", "-c", script, "jaxgrade-enter", *procs_files, "--"]


_protected = False


def protect_trusted(adj: int = -1000) -> None:
    """The OOM killer never picks this (trusted) process: oom_score_adj -1000 as root, else as
    low as we may.  Children inherit it until :func:`enter_prefix` raises theirs."""
    global _protected
    if _protected:
        return
    _protected = True
    try:
        _write(Path("/proc/self/oom_score_adj"), str(adj))
    except OSError as exc:  # lowering needs CAP_SYS_RESOURCE
        log.debug("cannot lower oom_score_adj: %s", exc)
