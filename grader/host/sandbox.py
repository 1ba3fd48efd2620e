"""Starting untrusted processes: bubblewrap when it works here, a limited subprocess otherwise.

A sandbox sees a read-only system (``/usr`` and the Python installation), the sandbox side of
the grader package at ``/opt/jaxgrade/grader`` (``grader/sandboxed``, ``grader/wire`` and a
generated ``__init__.py`` that imports nothing: no trusted module, see :func:`sandbox_mounts`),
and one writable directory, its scratch (``/sandbox``): nothing of ``reference/``, the hidden
tests, the output directory or other submissions.  It has no network, its own PID namespace (so
killing it ends its whole process tree), a uid of its own (a host uid leased for it from
``SANDBOX_UID_BASE`` when the grader runs as root, :class:`UidLease`), ``--die-with-parent``,
and rlimits set by the worker before it reads any input.  Where the grader may (root, or a
delegated cgroup), each sandbox also has its own cgroup (memory, processes and CPU share of its
whole tree, :mod:`grader.host.cgroups`), an OOM score that makes the kernel pick it before any
trusted process, and a scratch directory that is a tmpfs of ``Limits.scratch_bytes``;
:func:`resource_warning` says what is not bounded.  Without bwrap the same limits apply to a
plain subprocess in its own session, and :func:`isolation_warning` says what is lost.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import platform
import re
import secrets
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from grader.host import cgroups, interrupts, zygote
from grader.host.memory import ARENAS, address_space_allowance, thread_allowance
from grader.host.xla_cache import MOUNT as XLA_MOUNT
from grader.host.xla_cache import XlaCache
from grader.host.xla_flags import sandbox_xla_flags
from grader.wire import messages, protocol

log = logging.getLogger(__name__)

Isolation = Literal["bwrap", "process"]
#: Host uids for sandboxes when the grader runs as root: one per concurrent sandbox, so that
#: RLIMIT_NPROC (counted per uid) is a per-sandbox budget and sandboxes cannot signal each other.
SANDBOX_UID_BASE = 300_000
SANDBOX_UID_COUNT = 4096
SANDBOX_ROOT = "/sandbox"
GRADER_MOUNT = "/opt/jaxgrade"
#: The subpackages of ``grader`` that run in (or talk to) the sandbox: the only grader code it sees.
SANDBOX_PACKAGES = ("sandboxed", "wire")
#: The sandbox's ``grader/__init__.py``: the package itself, without anything of the trusted side.
SANDBOX_INIT = '"""jaxgrade, sandbox side: only grader.sandboxed and grader.wire are mounted here."""\n'
GiB = 1024**3
MiB = 1024**2


class SandboxSetupError(RuntimeError):
    """The sandbox cannot be built safely on this machine (a staff/installation problem)."""


@dataclass(frozen=True)
class Limits:
    """Resource limits for one submission's sandbox."""

    memory_bytes: int = 8 * GiB  # RLIMIT_AS; XLA aborts below about 2 GiB
    max_processes: int = 256  # RLIMIT_NPROC (threads count); XLA needs about 64
    max_file_bytes: int = 64 * MiB  # RLIMIT_FSIZE
    cpu_seconds: int = 1200  # RLIMIT_CPU, summed over threads
    max_open_files: int = 1024
    cell_timeout: float = messages.CELL_TIMEOUT
    call_timeout: float = messages.CALL_TIMEOUT  # a jitted, unrolled Python loop can take a while to compile
    wall_timeout: float = 900.0  # whole submission, notebook and tests
    output_cap: int = messages.OUTPUT_CAP  # characters of printed output kept per cell
    max_restarts: int = messages.MAX_RESTARTS
    # the whole sandbox (every process of the worker's or the evaluator's tree), by its cgroup
    memory_total_bytes: int = 4 * GiB
    pids_total: int = 512  # tasks: threads count, as for max_processes
    cpu_weight: int = 100  # equal shares: a sandbox's 250 busy children get one sandbox's CPU
    scratch_bytes: int = 512 * MiB  # the scratch directory, a tmpfs of this size

    def cgroup_limits(self) -> cgroups.CgroupLimits:
        """The cgroup's limits; its tasks allow for the threads JAX starts per core
        (:func:`grader.host.memory.thread_allowance`), as :meth:`worker_args` does."""
        return cgroups.CgroupLimits(self.memory_total_bytes, self.pids_total + thread_allowance(), self.cpu_weight)

    def worker_args(self, nproc_offset: int = 0) -> list[str]:
        """The worker's rlimit flags; ``nproc_offset`` adds the processes the uid already has
        (RLIMIT_NPROC counts every process of the uid, not only the sandbox's).  The address
        space is ``memory_bytes`` and what JAX's threads reserve on this machine's cores
        (:func:`grader.host.memory.address_space_allowance`: 128 MiB on 2 cores, 4 GiB on 64),
        with the malloc arenas capped (``MALLOC_ARENA_MAX`` in :func:`sandbox_env`): without
        both, the kernel's XLA aborted on 32 cores (a correct notebook got 13/40) and 64 (0/40).
        Its processes and threads are ``max_processes`` and the threads JAX starts per core
        (:func:`grader.host.memory.thread_allowance`: 8 on 2 cores)."""
        return [
            f"--as-bytes={self.memory_bytes + address_space_allowance()}",
            f"--fsize={self.max_file_bytes}",
            f"--cpu={self.cpu_seconds}",
            f"--nproc={self.max_processes + thread_allowance() + nproc_offset}",
            f"--nofile={self.max_open_files}",
        ]


def _system_binds() -> list[str]:
    """bwrap arguments for the system a sandbox runs on: ``/usr`` and its links (``/lib``, …) and
    the few files of ``/etc`` that the dynamic loader and Python read, all read-only."""
    args = ["--ro-bind", "/usr", "/usr"]
    for link in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(link):
            args += ["--symlink", os.readlink(link), link]
        elif os.path.isdir(link):
            args += ["--ro-bind", link, link]
    # bwrap would create /etc for the binds below with mode 0700: unreadable once we are the leased uid
    args += ["--perms", "0755", "--dir", "/etc"]
    for f in ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/localtime", "/etc/hosts", "/etc/nsswitch.conf"):
        if os.path.exists(f):
            args += ["--ro-bind", f, f]
    if os.path.isdir("/etc/ld.so.conf.d"):
        args += ["--ro-bind", "/etc/ld.so.conf.d", "/etc/ld.so.conf.d"]
    return args


@lru_cache(maxsize=1)
def bwrap_status() -> tuple[str | None, str]:
    """(path to a working bwrap or None, why not).  The probe mounts what a sandbox mounts of the
    system, not all of ``/``: bwrap remounts every mount under what it binds read-only, and fails
    when one of them goes away meanwhile (another grading process's scratch tmpfs, unmounted and
    removed), which would turn the sandboxes off for this whole process."""
    path = shutil.which("bwrap")
    if path is None:
        return None, "bubblewrap (bwrap) is not installed"
    try:
        probe = subprocess.run(
            [path, "--unshare-all", "--die-with-parent", *_system_binds(), "true"],
            capture_output=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"bwrap could not start: {exc}"
    if probe.returncode != 0:
        return None, f"bwrap does not work here: {probe.stderr.decode(errors='replace').strip()[:300]}"
    return path, ""


@lru_cache(maxsize=1)
def bwrap_can_disable_userns() -> bool:
    """Whether this bwrap has ``--disable-userns`` (0.8.0 and later)."""
    path, _ = bwrap_status()
    if path is None:
        return False
    try:
        shown = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "--disable-userns" in shown.stdout + shown.stderr


# -- a seccomp filter against nested user namespaces
#: Per kernel ABI (``AUDIT_ARCH_*``): the numbers of unshare, clone and clone3.
_ABIS = {
    "x86_64": {0xC000003E: (272, 56, 435), 0x40000003: (310, 120, 435)},  # x86_64, i386 (int 0x80)
    "aarch64": {0xC00000B7: (97, 220, 435), 0x40000028: (337, 120, 435)},  # arm64, arm (compat)
}
_MACHINES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}
CLONE_NEWUSER = 0x10000000
_X32 = 0x40000000  # x86_64's x32 ABI: syscall numbers with this bit
_ALLOW, _ERRNO = 0x7FFF0000, 0x00050000
_EPERM, _ENOSYS = 1, 38
_LD, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|JGE|JSET|K, BPF_RET|K


def no_userns_filter(machine: str | None = None) -> bytes | None:
    """A seccomp program (classic BPF, as bwrap's ``--seccomp FD`` takes it) that refuses new
    user namespaces: ``unshare`` and ``clone`` with ``CLONE_NEWUSER`` get EPERM, ``clone3``
    ENOSYS (its flags are in memory a filter cannot read; the C library then falls back to
    ``clone``), as does every system call of an ABI not listed (x32, or an unknown one).  None on
    a machine whose numbers are not known here."""
    abis = _ABIS.get(_MACHINES.get((machine or platform.machine()).lower(), ""))
    if abis is None:
        return None
    code: list[tuple[int, int, object, object]] = [(_LD, 4, None, None)]  # the ABI
    code += [(_JEQ, arch, f"abi{i}", None) for i, arch in enumerate(abis)]
    code.append((_RET, _ERRNO | _ENOSYS, None, None))
    for i, (arch, (unshare, clone, clone3)) in enumerate(abis.items()):
        code.append((_LD, 0, None, f"abi{i}"))  # the system call's number; the last item labels it
        if arch == 0xC000003E:
            code.append((_JGE, _X32, "enosys", None))
        code += [(_JEQ, clone3, "enosys", None), (_JEQ, unshare, "flags", None), (_JEQ, clone, "flags", None)]
        code.append((_RET, _ALLOW, None, None))
    code += [(_LD, 16, None, "flags"), (_JSET, CLONE_NEWUSER, "eperm", None), (_RET, _ALLOW, None, None)]
    code += [(_RET, _ERRNO | _EPERM, None, "eperm"), (_RET, _ERRNO | _ENOSYS, None, "enosys")]
    return _assemble(code)


def _assemble(code: list[tuple[int, int, object, object]]) -> bytes:
    """``(op, k, jump-if-true label, own label)`` to ``struct sock_filter`` bytes.  A conditional
    jump goes to its label when true and falls through otherwise; labels are only forward."""
    at = {label: i for i, (_, _, _, label) in enumerate(code) if label is not None}
    out = b""
    for i, (op, k, target, _) in enumerate(code):
        jt = at[target] - i - 1 if target is not None else 0
        if not 0 <= jt < 256:
            raise ValueError("a seccomp jump out of range")
        out += struct.pack("<HBBI", op, jt, 0, k)
    return out


def isolation_warning(isolation: Isolation) -> str | None:
    if isolation == "bwrap":
        return None
    _, why = bwrap_status()
    why = why or "--isolation process was requested"
    return (
        f"WARNING: isolation is reduced ({why}). Student code runs as a plain subprocess with "
        "resource limits but can read files this user can read and use the network. "
        "Install bubblewrap (apt-get install bubblewrap) before grading a class."
    )


def choose_isolation(requested: str = "auto") -> Isolation:
    if requested == "process":
        return "process"
    path, why = bwrap_status()
    if path is None:
        if requested == "bwrap":
            raise RuntimeError(f"--isolation bwrap was requested but {why}")
        return "process"
    return "bwrap"


def _runs_as_root() -> bool:
    return os.geteuid() == 0 and shutil.which("setpriv") is not None


def _python_roots() -> list[str]:
    roots = {os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix), os.path.realpath(sys.exec_prefix)}
    exe = os.path.realpath(sys.executable)
    roots.add(os.path.dirname(os.path.dirname(exe)))
    # site-packages outside the prefixes (user site, PYTHONPATH installs)
    import site

    for p in [*site.getsitepackages(), site.getusersitepackages()]:
        rp = os.path.realpath(p)
        if os.path.isdir(rp) and not any(rp.startswith(r + os.sep) for r in roots):
            roots.add(rp)
    # keep only the outermost, and never a system directory we bind anyway
    ordered = sorted(roots, key=len)
    out: list[str] = []
    for r in ordered:
        if r in ("/", "/usr") or any(r == o or r.startswith(o + os.sep) for o in out):
            continue
        out.append(r)
    return out


def sandbox_python(isolation: Isolation) -> str:
    """The interpreter a sandbox runs, by the path it has there.  Under bwrap only the resolved
    Python roots are mounted (:func:`_python_roots`): a Python reached through a symlinked
    directory (a venv linked from elsewhere) is absent by the path it was started as.  Only the
    directory is resolved, not the executable: a venv's ``bin/python`` is itself a link to the
    base interpreter, and Python finds the venv (``pyvenv.cfg``) from the path it is started
    as.  Without bwrap the host's own path works as it is."""
    if isolation != "bwrap":
        return sys.executable
    return os.path.join(os.path.realpath(os.path.dirname(sys.executable)), os.path.basename(sys.executable))


def grader_package_dir() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # grader/, above host/


def sandbox_mounts() -> list[tuple[str, str]]:
    """(host directory, path in the sandbox) of the grader code a bwrap sandbox sees: the
    sandbox side only.  Any other grader module (checks, session, config...) is absent there,
    so importing one from sandboxed code fails (``tests/test_layout.py``)."""
    pkg = grader_package_dir()
    return [(os.path.join(pkg, sub), f"{GRADER_MOUNT}/grader/{sub}") for sub in SANDBOX_PACKAGES]


def sandbox_env(isolation: Isolation, scratch: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    home = SANDBOX_ROOT if isolation == "bwrap" else scratch
    pythonpath = GRADER_MOUNT if isolation == "bwrap" else os.path.dirname(grader_package_dir())
    bindir = os.path.dirname(sandbox_python(isolation))
    env = {
        "HOME": home,
        "PATH": f"{bindir}:/usr/local/bin:/usr/bin:/bin",
        "PYTHONPATH": pythonpath,
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        "PYTHONNOUSERSITE": "1",
        # the worker and the evaluator are started with `-m` in their scratch folder: keep it off
        # their sys.path (Python 3.11+; on 3.10 they take it off as they start:
        # rlimits.drop_start_folder; the kernel is started by its path)
        "PYTHONSAFEPATH": "1",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "MPLBACKEND": "Agg",
        "MPLCONFIGDIR": f"{home}/.config/matplotlib",
        "IPYTHONDIR": f"{home}/.ipython",
        "JUPYTER_RUNTIME_DIR": f"{home}/.jaxgrade/runtime",
        "JUPYTER_DATA_DIR": f"{home}/.jaxgrade/data",
        "JUPYTER_PLATFORM_DIRS": "1",
        "PIP_NO_INDEX": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": sandbox_xla_flags(),  # an assignment with several devices sets its own (grade._env_for)
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        # glibc makes up to 8 malloc arenas a core, 64 MiB of address space each: on a large
        # machine JAX's threads alone passed the address-space limit (grader/host/memory.py)
        "MALLOC_ARENA_MAX": str(ARENAS),
        "TF_CPP_MIN_LOG_LEVEL": "2",
        # exported modules carry JAX's name stack (``jit(f)/vmap(g)/dot_general``), not the
        # notebook's file and line numbers: two students who wrote the same function in another
        # cell export the same bytes, and the evaluator cache answers the second
        # (grader/host/eval_cache.py)
        "JAX_TRACEBACK_IN_LOCATIONS_LIMIT": "0",
        "TMPDIR": f"{home}/.jaxgrade/tmp",
    }
    if extra:
        env.update(extra)
    return env


class SandboxProcess:
    """One untrusted process (a worker or an evaluator) and the framed pipes to it."""

    def __init__(
        self,
        module: str,
        scratch: Path,
        limits: Limits,
        isolation: Isolation,
        env: dict[str, str] | None = None,
        protect: tuple[Path, ...] = (),
        xla_cache: XlaCache | None = None,
    ) -> None:
        self.module = module
        # the trusted compilation cache (grader/host/xla_cache.py): bubblewrap only, where it is mounted
        self.xla_cache = xla_cache if isolation == "bwrap" else None
        self.protect = tuple(Path(p).resolve() for p in protect)
        self.scratch = Path(scratch)
        self.limits = limits
        self.isolation = isolation
        self.extra_env = env or {}
        self.marker = uuid.uuid4().hex
        self.proc: subprocess.Popen[bytes] | None = None
        self._fds: list[int] = []
        self.uid = os.getuid()  # the host uid it runs as; a leased one as root under bwrap
        self._uid_lease = UidLease()
        self.cgroup: cgroups.SandboxCgroup | None = None
        self.cpu_seconds: float | None = None  # the whole tree's CPU time, once it ended (cgroups)
        self.oom_kills = 0  # processes the OOM killer ended in it
        self.peak_memory: int | None = None  # bytes its tree held at most, once it ended (cgroups)
        #: a forked evaluator (grader/host/zygote.py): its pidfd and the pipes to it (else the
        #: process is bubblewrap's, and its stdin and stdout are the pipes)
        self.forked: tuple[int, int, int] | None = None
        self.forked_pid: int | None = None  # its host pid
        self._zygote: zygote.Zygote | None = None  # the zygote that forked it

    # -- lifecycle
    def start(self) -> None:
        for sub in ("runtime", "tmp"):
            (self.scratch / ".jaxgrade" / sub).mkdir(parents=True, exist_ok=True)
        if _runs_as_root() and self.isolation == "bwrap":  # the sandbox runs as its own uid
            self.uid = self._uid_lease.acquire()
            for dirpath, _, filenames in os.walk(self.scratch):  # (os.walk does not enter linked folders)
                os.chown(dirpath, self.uid, self.uid, follow_symlinks=False)
                for f in filenames:  # a link a sandbox left is chowned itself, never what it names
                    os.chown(os.path.join(dirpath, f), self.uid, self.uid, follow_symlinks=False)
        inner_scratch = SANDBOX_ROOT if self.isolation == "bwrap" else str(self.scratch)
        env = sandbox_env(self.isolation, str(self.scratch), self.extra_env)
        if self.xla_cache is not None:
            env.update(self.xla_cache.env())
        env["JAXGRADE_SANDBOX"] = self.marker
        shared_uid = not (_runs_as_root() and self.isolation == "bwrap")
        offset = _count_processes(os.getuid()) if shared_uid else 0
        cmd = [
            sandbox_python(self.isolation),
            "-s",
            "-m",
            self.module,
            f"--scratch={inner_scratch}",
            *self.limits.worker_args(offset),
            *(["--pid-namespace"] if self.isolation == "bwrap" else []),
        ]
        if self.module == "grader.sandboxed.worker" and os.path.ismount(self.scratch):  # a size-capped tmpfs
            cmd.append(f"--reserve-bytes={min(32 * MiB, self.limits.scratch_bytes // 8)}")
        kwargs: dict[str, Any] = {}
        cgroups.protect_trusted()  # the OOM killer picks sandboxes, never us
        hierarchy, _ = cgroups.host_hierarchy()
        if hierarchy is not None:
            try:
                self.cgroup = cgroups.SandboxCgroup.create(hierarchy, self.limits.cgroup_limits())
            except OSError as exc:  # never run a sandbox unbounded where bounds were promised
                raise SandboxSetupError(f"cannot create the sandbox's cgroup: {exc}") from None
        enter = cgroups.enter_prefix(self.cgroup.procs_files if self.cgroup else [])
        if self.isolation == "bwrap" and self.module == zygote.EVALUATOR and _runs_as_root() and not zygote.enabled():
            try:
                self._start_forked(enter, env, cmd[4:])
                return
            except zygote.ZygoteError as exc:  # started plainly below, as where no zygote can be used
                zygote.turn_off(str(exc))
                self._undo_forked()
        if self.isolation == "bwrap":
            try:
                cmd = self._bwrap_prefix(env) + cmd
            except BaseException:
                self._close_data_fds()
                self._end_cgroup()
                raise
            kwargs["pass_fds"] = tuple(self._fds)
            popen_env: dict[str, str] | None = {"PATH": "/usr/bin:/bin"}
            cwd = "/"
        else:
            popen_env = env
            cwd = str(self.scratch)
        try:
            self.proc = subprocess.Popen(
                enter + cmd,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=open(self.scratch / ".jaxgrade" / "sandbox.log", "ab"),
                cwd=cwd,
                env=popen_env,
                start_new_session=True,
                close_fds=True,
                **kwargs,
            )
        except BaseException:
            self._end_cgroup()
            raise
        for fd in self._fds:
            os.close(fd)
        self._fds = []

    def _close_data_fds(self) -> None:
        for fd in self._fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds = []

    def _start_forked(self, enter: list[str], env: dict[str, str], argv: list[str]) -> None:
        """The sandbox built by bubblewrap around a holder, and the evaluator forked into it by
        the zygote (grader/host/zygote.py).  Raises :class:`zygote.ZygoteError` where it could not
        be; what was started is then ended by :meth:`_undo_forked`."""
        try:
            cmd = self._bwrap_prefix(env, holder=True) + zygote.HOLDER
        except BaseException:
            self._close_data_fds()
            self._end_cgroup()
            raise
        try:
            self.proc = subprocess.Popen(
                enter + cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=open(self.scratch / ".jaxgrade" / "sandbox.log", "ab"),
                cwd="/",
                env={"PATH": "/usr/bin:/bin"},
                start_new_session=True,
                close_fds=True,
                pass_fds=tuple(self._fds),
            )
        except BaseException:
            self._close_data_fds()
            self._end_cgroup()
            raise
        self._close_data_fds()
        assert self.proc.stdout is not None
        said = _first_line(self.proc.stdout.fileno(), time.monotonic() + 60)
        if said != b"ready\n":
            raise zygote.ZygoteError(f"the sandbox around the evaluator did not start (it said {said[:80]!r})")
        holder = _leaf(self.proc.pid)
        to_r, to_w = os.pipe()
        from_r, from_w = os.pipe()
        log_fd = os.open(self.scratch / ".jaxgrade" / "sandbox.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            pid, pidfd, self._zygote = zygote.spawn(
                env,
                holder=holder,
                sandbox=self.proc.pid,
                uid=self.uid,
                procs_files=self.cgroup.procs_files if self.cgroup else [],
                seccomp=no_userns_filter(),
                argv=argv,
                stdin=to_r,
                stdout=from_w,
                stderr=log_fd,
            )
        except BaseException:
            os.close(to_w)
            os.close(from_r)
            raise
        finally:
            for fd in (to_r, from_w, log_fd):
                os.close(fd)
        self.forked = (pidfd, to_w, from_r)
        self.forked_pid = pid

    def _undo_forked(self) -> None:
        """End what :meth:`_start_forked` started, so that the sandbox starts plainly."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            if self.proc.stdout:
                self.proc.stdout.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)
            self.proc = None
        if self.cgroup is not None:
            self.cgroup.kill_all()
        self._close_forked()

    def _close_forked(self) -> None:
        if self.forked is not None:
            for fd in self.forked:
                with contextlib.suppress(OSError):
                    os.close(fd)
            self.forked = None

    def _bwrap_prefix(self, env: dict[str, str], holder: bool = False) -> list[str]:
        """bwrap arguments; as root: no user namespace, then setpriv to the leased uid (for a
        zygote's ``holder``: root's uid with no capability, which the forked evaluator, the
        leased uid, can neither signal nor trace)."""
        bwrap, _ = bwrap_status()
        assert bwrap is not None
        as_root = _runs_as_root()
        args = [bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
        if as_root:
            # capabilities are all cleared when setpriv switches to the leased uid; CAP_SETPCAP lets
            # it empty the bounding set too (without it --bounding-set=-all silently does nothing)
            args += [
                "--cap-drop",
                "ALL",
                "--cap-add",
                "CAP_SETUID",
                "--cap-add",
                "CAP_SETGID",
                "--cap-add",
                "CAP_DAC_OVERRIDE",
                "--cap-add",
                "CAP_SETPCAP",
            ]
        else:
            args += ["--unshare-user", "--uid", "1000", "--gid", "1000"]
            if bwrap_can_disable_userns():  # bwrap 0.8.0: no user namespace inside this one
                args.append("--disable-userns")
        # no nested user namespace (its root could mount and reach more of the kernel) either way,
        # as root too, where the sandbox has no user namespace of its own for --disable-userns
        program = no_userns_filter()
        if program is not None:
            args += ["--seccomp", str(self._data_fd(program))]
        args += ["--die-with-parent", "--new-session", "--hostname", "sandbox", *_system_binds()]
        uid = self.uid if as_root else 1000
        args += ["--file", str(self._data_fd(f"student:x:{uid}:{uid}:student:/sandbox:/bin/sh\n")), "/etc/passwd"]
        # the writable places first: a Python installation under /tmp (a CI checkout) is then
        # mounted inside the sandbox's /tmp instead of being hidden by it
        args += ["--bind", str(self.scratch), SANDBOX_ROOT]
        args += ["--bind", str(self.scratch / ".jaxgrade" / "tmp"), "/tmp"]
        made: set[str] = {"/", "/usr", "/tmp", "/etc", SANDBOX_ROOT}
        # the grader package: a tmpfs of its own that holds only the sandbox side and a generated
        # __init__.py (not the host's, which is trusted code), made read-only below once they
        # are mounted (a directory bwrap makes is writable in a user namespace)
        package = f"{GRADER_MOUNT}/grader"
        args += _parents(package, made)
        args += ["--tmpfs", package]
        made.add(package)
        args += ["--perms", "0444", "--ro-bind-data", str(self._data_fd(SANDBOX_INIT)), f"{package}/__init__.py"]
        binds = [(r, r) for r in _python_roots() if not r.startswith("/usr/")]
        binds += sandbox_mounts()
        for src, dest in binds:
            for secret in self.protect:
                if secret == Path(src) or Path(src) in secret.parents:
                    raise SandboxSetupError(
                        f"the sandbox would expose {secret}: it lies inside {src}, which the sandbox must "
                        "mount (the Python installation or the grader package). Install jaxgrade in a "
                        "virtual environment outside the course directory."
                    )
            args += _parents(dest, made)
            args += ["--ro-bind", src, dest]
        args += ["--remount-ro", package]
        if self.xla_cache is not None:
            args += _parents(XLA_MOUNT, made)
            args += self.xla_cache.bind_args()
        args += ["--proc", "/proc", "--dev", "/dev", "--chdir", SANDBOX_ROOT, "--clearenv"]
        for k, v in env.items():
            args += ["--setenv", k, v]
        if as_root:
            args += [
                "setpriv",
                *([] if holder else [f"--reuid={self.uid}", f"--regid={self.uid}"]),
                "--clear-groups",
                "--bounding-set=-all",
                "--inh-caps=-all",
                "--",
            ]
        return args

    def _data_fd(self, data: str | bytes) -> int:
        r, w = os.pipe()
        os.write(w, data.encode() if isinstance(data, str) else data)
        os.close(w)
        self._fds.append(r)
        return r

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        if self.forked is not None and zygote.ended(self.forked[0]):
            return False
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """End the sandbox and every process in it."""
        if self.proc is None:  # it never started (start() failed part-way): what it took, given back
            self._end_cgroup()
            self._close_data_fds()
            self._close_forked()
            self._uid_lease.release()
            return
        if self.forked is not None and self._zygote is not None and zygote.ended(self.forked[0]):
            self._zygote.retired = True  # it ended of itself: its zygote forks no more (grader/host/zygote.py)
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.kill()
        except ProcessLookupError:
            pass
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                if stream:
                    stream.close()
            except OSError:
                pass
        self._close_forked()  # a forked evaluator died with the sandbox's PID namespace
        if self.forked_pid is not None:  # and is reaped by the zygote: its uid is free only then
            _wait_reaped(self.forked_pid, self.uid)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL does not fail
            log.error("sandbox process %s did not exit after SIGKILL", self.proc.pid)
        if self.isolation == "process":
            sweep_marker(self.marker)
        self._end_cgroup()
        self._uid_lease.release()

    def _end_cgroup(self) -> None:
        """Kill what is left in the sandbox's cgroup, note its CPU time, and remove it."""
        if self.cgroup is None:
            return
        self.cgroup.kill_all()
        self.cpu_seconds = self.cgroup.cpu_seconds()
        self.oom_kills = self.cgroup.oom_kills()
        self.peak_memory = self.cgroup.peak_memory()
        self.cgroup.remove()
        self.cgroup = None

    # -- framed I/O
    def _pipes(self) -> tuple[int, int]:
        """(to it, from it)."""
        if self.forked is not None:
            return self.forked[1], self.forked[2]
        assert self.proc is not None and self.proc.stdin is not None and self.proc.stdout is not None
        return self.proc.stdin.fileno(), self.proc.stdout.fileno()

    def send(self, header: dict[str, Any], payload: bytes = b"") -> None:
        try:
            protocol.write_frame(self._pipes()[0], header, payload)
        except (BrokenPipeError, OSError) as exc:
            raise protocol.ChannelClosed(f"the sandbox is gone ({exc})") from None

    def recv(self, timeout: float, max_payload: int = protocol.MAX_PAYLOAD_BYTES) -> tuple[dict[str, Any], bytes]:
        """The sandbox's next frame, within ``timeout`` seconds; KeyboardInterrupt at once when
        this process's grading is asked to stop (grader/host/interrupts.py), whatever it waits for."""
        return protocol.read_frame(
            self._pipes()[1],
            deadline=time.monotonic() + timeout,
            max_payload=max_payload,
            interrupt=interrupts.fd(),
        )


def _first_line(fd: int, deadline: float) -> bytes:
    """What a process wrote to ``fd`` up to its first newline (at most 64 bytes), by ``deadline``;
    KeyboardInterrupt at once when this process's grading is asked to stop."""
    import select

    said = b""
    while not said.endswith(b"\n") and len(said) < 64:
        stop = interrupts.fd()
        ready, _, _ = select.select([fd] if stop is None else [fd, stop], [], [], max(0.0, deadline - time.monotonic()))
        if stop is not None and stop in ready:
            raise KeyboardInterrupt
        if not ready:
            break
        chunk = os.read(fd, 1)
        if not chunk:
            break
        said += chunk
    return said


def _wait_reaped(pid: int, uid: int, timeout: float = 5.0) -> None:
    """Wait until process ``pid`` of ``uid`` is gone from the process table (reaped)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if os.stat(f"/proc/{pid}").st_uid != uid:  # the number is another process's now
                return
        except OSError:
            return
        time.sleep(0.01)
    log.warning("the forked evaluator %s was not reaped in %.0f s", pid, timeout)


def _leaf(pid: int) -> int:
    """The last of a line of single children from ``pid``: bubblewrap's sandboxed process (bwrap
    outside, bwrap as the PID namespace's init, then the command it runs)."""
    while True:
        try:
            with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as f:
                children = f.read().split()
        except OSError as exc:
            raise zygote.ZygoteError(f"the sandbox's process {pid} is gone ({exc})") from None
        if not children:
            return pid
        if len(children) != 1:
            raise zygote.ZygoteError(f"the sandbox's process {pid} has {len(children)} children, not one")
        pid = int(children[0])


class UidLease:
    """A host uid reserved for one sandbox (an flock on a file per uid, across processes)."""

    def __init__(self) -> None:
        self._fd: int | None = None

    def acquire(self) -> int:
        import fcntl
        import random

        # one machine-wide place (not $TMPDIR, which differs between processes): every jaxgrade
        # on this machine must see every lease, or two sandboxes could share a uid
        lock_dir = Path("/run/jaxgrade-uids" if os.access("/run", os.W_OK) else "/tmp/jaxgrade-uids")
        lock_dir.mkdir(mode=0o700, exist_ok=True)
        start = random.randrange(SANDBOX_UID_COUNT)
        for i in range(SANDBOX_UID_COUNT):
            uid = SANDBOX_UID_BASE + (start + i) % SANDBOX_UID_COUNT
            fd = os.open(lock_dir / str(uid), os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            if _uid_has_processes(uid):  # a leftover of a grader killed with SIGKILL
                os.close(fd)
                continue
            self._fd = fd
            return uid
        raise SandboxSetupError(f"all {SANDBOX_UID_COUNT} sandbox uids are in use")

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _count_processes(uid: int, stop_at: int | None = None) -> int:
    """Processes (thread groups) and their threads owned by ``uid``, as RLIMIT_NPROC counts them."""
    n = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}").st_uid != uid:
                continue
            n += len(os.listdir(f"/proc/{entry}/task"))
        except OSError:
            continue
        if stop_at is not None and n >= stop_at:
            break
    return n


def _uid_has_processes(uid: int) -> bool:
    return _count_processes(uid, stop_at=1) > 0


def sweep_marker(marker: str) -> int:
    """Kill leftover processes that carry a sandbox's environment marker (fallback mode)."""
    killed = 0
    needle = f"JAXGRADE_SANDBOX={marker}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle in f.read():
                    os.kill(int(entry), signal.SIGKILL)
                    killed += 1
        except (OSError, ProcessLookupError):
            continue
    return killed


def _parents(dest: str, made: set[str]) -> list[str]:
    """``--dir`` arguments for the missing ancestors of a mount point, world-traversable."""
    out: list[str] = []
    parts = Path(dest).parent.parts
    for i in range(2, len(parts) + 1):
        d = str(Path(*parts[:i]))
        if d not in made:
            made.add(d)
            out += ["--perms", "0755", "--dir", d]
    return out


#: Scratch directories this process made and has not removed (:func:`remove_own_scratch`).
_SCRATCH: set[Path] = set()


def make_scratch(prefix: str = "jaxgrade-", size_bytes: int | None = None) -> Path:
    """A fresh scratch directory outside the repository and the output directory; with
    ``size_bytes`` and as root, a tmpfs of that size, so a cell that fills it gets ENOSPC
    ("No space left on device") and the disk the gradebook lives on is not touched.  Its lock
    (:func:`_hold_scratch_lock`, where ``$TMPDIR`` can hold one) says it is in use for as long
    as this process lives; the first scratch folder a process makes in a ``$TMPDIR`` sweeps
    that folder's abandoned ones (:func:`sweep_abandoned_scratch`)."""
    # named and registered before it is made, not by tempfile.mkdtemp, which makes it first: a
    # Ctrl-C between the two left a folder that no cleanup knew (check --watch, seen in the
    # suite).  Registered and not made (a Ctrl-C before mkdir) costs nothing: removing it is a
    # no-op.  96 random bits: a name that exists is someone else's, and is not kept registered.
    # The lock comes first, while the name is known to no one else.
    base = Path(tempfile.gettempdir()).absolute()
    _sweep_abandoned_scratch_once(str(base))
    path = _locked_folder(base, prefix)
    try:
        os.chmod(path, 0o700)
        if size_bytes is not None and scratch_status()[0]:
            done = _mount_tmpfs(path, f"size={int(size_bytes)},mode=0700,nosuid,nodev")
            if done.returncode != 0:
                log.warning(
                    "scratch %s is not size-capped: mount failed: %s", path, done.stderr.decode(errors="replace")[:300]
                )
    except BaseException:  # Ctrl-C during the mount included: nothing is left behind
        remove_scratch(path)
        raise
    return path


def _locked_folder(base: Path, prefix: str) -> Path:
    """A new folder ``base/<prefix><24 hex digits>`` under its held lock, registered for
    :func:`remove_scratch` before it is made (:func:`make_scratch`)."""
    for attempt in range(100):
        path = base / f"{prefix}{secrets.token_hex(12)}"
        _SCRATCH.add(path)
        try:
            _hold_scratch_lock(path)
            os.mkdir(path, 0o700)
            return path
        except OSError as exc:
            _release_scratch_lock(path)
            _SCRATCH.discard(path)
            if not isinstance(exc, FileExistsError) or attempt == 99:
                raise
    raise AssertionError("unreachable")


def _mount_tmpfs(path: Path, options: str) -> subprocess.CompletedProcess[bytes]:
    """A tmpfs on ``path``, its source naming this process (whose it is, for sweep_stale_scratch)."""
    source = f"{SCRATCH_SOURCE}{cgroups.owner_tag()}"
    return subprocess.run(["mount", "-t", "tmpfs", "-o", options, source, str(path)], capture_output=True)


def remove_scratch(path: Path) -> None:
    """Remove a scratch directory made by :func:`make_scratch` (unmounting its tmpfs), then its lock."""
    if os.path.ismount(path):
        # lazy: a sandbox's mount namespace that is still going away does not keep it busy
        subprocess.run(["umount", "-l", str(path)], capture_output=True)
    try:
        shutil.rmtree(path, ignore_errors=True)
        _SCRATCH.discard(path)
    finally:
        # the folder first: a lock whose folder is gone is removed; one whose folder could not
        # be removed is left, released, for a later grader's sweep to try again
        _release_scratch_lock(path, remove=not os.path.lexists(path))


def remove_own_scratch() -> None:
    """Remove every scratch directory this process still has: for a long-running command that
    stops (``check --watch``), once its sandboxes are closed, whatever moment Ctrl-C chose."""
    for path in list(_SCRATCH):
        remove_scratch(path)


#: The held lock of each scratch directory this process made (:func:`_hold_scratch_lock`).
_SCRATCH_LOCKS: dict[Path, int] = {}
#: The locks of the directories :func:`make_scratch` names (a prefix, 24 hex digits), and the
#: temporary names they are made under.
_SCRATCH_LOCK_NAME = re.compile(r"\.(jaxgrade-[a-z-]*[0-9a-f]{24})\.lock")
_TEMPORARY_LOCK_NAME = re.compile(r"\.jaxgrade-lock-[0-9a-f]{24}")
#: Seconds after which a temporary lock name is abandoned: its maker links it to its name at once.
TEMPORARY_LOCK_AGE = 60.0


def _lock_of(path: Path) -> Path:
    """``.<name>.lock`` beside the scratch directory ``<name>``: out of any sandbox's reach."""
    return path.with_name(f".{path.name}.lock")


def _same_file(path: Path, fd: int) -> bool:
    try:
        st, own = os.stat(path, follow_symlinks=False), os.fstat(fd)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)


def _hold_scratch_lock(path: Path) -> None:
    """Say that this process uses ``path`` for as long as it lives: its lock (:func:`_lock_of`),
    locked (``flock``) by a descriptor this process holds.  The kernel drops the lock when the
    process dies, however it dies, so a later grader that can take it knows the directory was
    abandoned (:func:`sweep_abandoned_scratch`).  Made under a random temporary name, locked,
    then linked to its name (which fails rather than replace a file there): a sweeper never
    sees a lock under its name that is not yet held (and sweeps temporary names only once they
    are :data:`TEMPORARY_LOCK_AGE` seconds old).

    Raises FileExistsError where a file has that name (another name is then tried).  Where
    ``$TMPDIR`` cannot hold such a lock (no hard links, no flock), the folder goes without one:
    a cleanup aid never stops a grading."""
    tmp = path.with_name(f".jaxgrade-lock-{secrets.token_hex(12)}")
    try:
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:  # the folder's own mkdir says what is wrong with $TMPDIR, if anything
        log.debug("scratch %s goes without a lock: %s", path, exc)
        return
    _SCRATCH_LOCKS[path] = fd  # registered at once: remove_scratch releases it whatever happens next
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.link(tmp, _lock_of(path))
    except FileExistsError:
        raise
    except OSError as exc:
        log.debug("scratch %s goes without a lock: %s", path, exc)
        _SCRATCH_LOCKS.pop(path, None)
        os.close(fd)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _release_scratch_lock(path: Path, remove: bool = True) -> None:
    """Let go of ``path``'s lock, removing the file first (only if it is still the one this
    process locked) with ``remove``."""
    fd = _SCRATCH_LOCKS.get(path)
    if fd is None:
        return
    try:
        del _SCRATCH_LOCKS[path]
        if remove and _same_file(_lock_of(path), fd):
            with contextlib.suppress(OSError):
                os.unlink(_lock_of(path))
    finally:
        os.close(fd)


def sweep_abandoned_scratch(base: Path | None = None) -> list[str]:
    """Remove the scratch directories (and their locks) in ``base`` (``$TMPDIR``) of grader
    processes that died without removing them (SIGKILL, the OOM killer, a session that ended):
    the lock beside each is free once its process is gone.  Only where the lock is this user's,
    and the folder this user's (or, for root, a sandbox uid's: :meth:`Sandbox.start` gives them
    the folder); not tmpfs mounts (:func:`sweep_stale_scratch` unmounts them); and temporary
    lock names left by a process that died while it made one.  Returns the directories removed."""
    base = Path(tempfile.gettempdir()).absolute() if base is None else base
    try:
        names = os.listdir(base)
    except OSError:
        return []
    swept = []
    for name in names:
        try:
            folder = _sweep_one(base, name)
        except OSError as exc:  # someone else's leftovers: never a reason to fail a grading
            log.debug("sweeping %s: %s", base / name, exc)
            continue
        if folder is not None:
            swept.append(folder)
    return swept


def _sweep_one(base: Path, name: str) -> str | None:
    """Sweep ``base/name`` if it is an abandoned lock (:func:`sweep_abandoned_scratch`): its
    folder first, then the lock.  Returns the folder, if there was one and it is gone."""
    match = _SCRATCH_LOCK_NAME.fullmatch(name)
    if not match and not _TEMPORARY_LOCK_NAME.fullmatch(name):
        return None
    lock = base / name
    folder = base / match.group(1) if match else None
    try:
        fd = os.open(lock, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid() or not stat.S_ISREG(st.st_mode) or folder in _SCRATCH_LOCKS:
            return None
        if folder is None and time.time() - st.st_mtime < TEMPORARY_LOCK_AGE:
            return None  # a temporary name its maker may not have locked yet
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held: its grader is alive
            return None
        if not _same_file(lock, fd):  # its grader removed it (and let go) since it was opened here
            return None
        removed = folder is not None and _remove_abandoned(folder)
        if folder is not None and os.path.lexists(folder):
            return None  # a mount, someone else's, or not removable: the lock stays for a later sweep
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lock)  # and a lock whose folder is gone (unmounted and removed) goes too
        return str(folder) if removed else None
    finally:
        os.close(fd)


def _remove_abandoned(folder: Path) -> bool:
    """Remove the folder of an abandoned lock, unless it is a mount or not this user's scratch
    folder (:func:`_scratch_owner`); whether there was one to remove."""
    if os.path.ismount(folder):
        return False
    try:
        st = os.lstat(folder)
    except FileNotFoundError:
        return False
    if not stat.S_ISDIR(st.st_mode) or not _scratch_owner(st.st_uid):
        return False
    shutil.rmtree(folder, ignore_errors=True)
    return True


def _scratch_owner(uid: int) -> bool:
    """Whether ``uid`` may own a scratch folder of this user's: this user, or, for root, the
    sandbox uid it gave the folder to (:meth:`Sandbox.start`)."""
    if uid == os.geteuid():
        return True
    return os.geteuid() == 0 and SANDBOX_UID_BASE <= uid < SANDBOX_UID_BASE + SANDBOX_UID_COUNT


@lru_cache(maxsize=4)
def _sweep_abandoned_scratch_once(base: str) -> None:
    _sweep_scratch(base)


def _sweep_scratch(base: str) -> None:
    """Unmount (as root) and remove the scratch of grader processes that are gone; never raises."""
    try:
        if os.geteuid() == 0:  # unmounted first, so that their folders and locks go too
            sweep_stale_scratch()
        swept = sweep_abandoned_scratch(Path(base))
    except Exception as exc:  # someone else's leftovers: never a reason to fail a grading
        log.warning("could not sweep abandoned scratch folders in %s: %s", base, exc)
        return
    if swept:
        log.info("removed %d scratch folder(s) left by grader processes that died: %s", len(swept), ", ".join(swept))


def sweep_after_lost_grader() -> None:
    """Sweep at once what a grading process that was killed mid-notebook left (a pool worker past
    its deadline or its memory limit, or killed): its sandboxes' cgroups, with anything still
    running in them, and its scratch folders and tmpfs mounts, which would otherwise hold their
    memory until the next run's sweep.  Only what belongs to processes that are gone.  Never
    raises: what it cannot remove is left for the next run's sweep."""
    try:
        hier, _ = cgroups.host_hierarchy()
        if hier is not None:
            cgroups.sweep_stale(hier)
    except Exception as exc:  # someone else's leftovers, or ours for later: never a reason to fail a batch
        log.warning("could not sweep the cgroups of grader processes that are gone: %s", exc)
    _sweep_scratch(str(Path(tempfile.gettempdir()).absolute()))


SCRATCH_SOURCE = "jaxgrade-scratch-"


def sweep_stale_scratch(mounts: str | None = None) -> list[str]:
    """Unmount and remove scratch tmpfs mounts whose grader process is gone (SIGKILL): their
    contents would otherwise hold memory until the next reboot.  Returns their paths."""
    if mounts is None:
        try:
            mounts = Path("/proc/self/mounts").read_text()
        except OSError:
            return []
    swept = []
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 3 or fields[2] != "tmpfs" or not fields[0].startswith(SCRATCH_SOURCE):
            continue
        if cgroups.owner_gone(fields[0][len(SCRATCH_SOURCE) :]):
            path = Path(fields[1].replace("\\040", " "))
            remove_scratch(path)
            swept.append(str(path))
    return swept


@lru_cache(maxsize=1)
def scratch_status() -> tuple[bool, str]:
    """(scratch directories can be size-capped tmpfs mounts here, why not)."""
    if os.environ.get("JAXGRADE_NO_SCRATCH_TMPFS", "") not in ("", "0"):
        return False, "JAXGRADE_NO_SCRATCH_TMPFS is set"
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False, "the grader is not root (mounting a size-capped tmpfs needs root)"
    # made, mounted and removed as a sandbox's scratch is: a grader killed while it probes leaves
    # a folder under a lock that dies with it and a mount that names it, for the sweeps to take
    probe = _locked_folder(Path(tempfile.gettempdir()).absolute(), "jaxgrade-probe-")
    try:
        done = _mount_tmpfs(probe, "size=1m")
        if done.returncode != 0:
            return False, f"mount -t tmpfs failed: {done.stderr.decode(errors='replace').strip()[:200]}"
        subprocess.run(["umount", str(probe)], capture_output=True)
        _sweep_abandoned_scratch_once(str(Path(tempfile.gettempdir()).absolute()))  # stale mounts first
        return True, ""
    finally:
        remove_scratch(probe)


def resource_warning() -> str | None:
    """What about a sandbox's resources is not bounded here (None when everything is)."""
    parts = []
    cg = cgroups.cgroup_warning()
    if cg:
        parts.append(cg)
    ok, why = scratch_status()
    if not ok:
        parts.append(
            f"WARNING: scratch directories are not size-capped ({why}): a submission can fill the disk "
            "that holds $TMPDIR (keep the output directory on another filesystem)."
        )
    return "\n".join(parts) or None
