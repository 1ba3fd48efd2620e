"""The XLA flags of every sandbox, and which of them the installed jaxlib accepts.

Every sandbox runs XLA without its own thread pool (``--xla_cpu_multi_thread_eigen=false``): a
sandbox's processes share one cgroup's CPU, and a batch runs one sandbox per core.

Where the installed jaxlib knows it, a sandbox also compiles with XLA:CPU's older fusion
emitters (``--xla_cpu_use_fusion_emitters=false``).  Compiling is most of what grading spends in
a sandbox: the student's eager operations and jitted functions on the hidden shapes, and the
evaluator's exported modules.  The newer (MLIR) emitters compile a program of thousands of small
operations three times slower: a ``jax.jit`` of a Python loop over a 64-row batch (the sample
class's carol) took 6.4 s to compile with them and 2.1 s without, on one core 11.8 s and 2.7 s
(bench/README.md, "Session 10: compiling with the older emitters").  Both emitters compute the same
operations; results can differ in the last bits (contracted multiply-adds), which every numeric
check's tolerance absorbs, and every check that compares exactly compares a sandbox's results
with the same sandbox's, or integers.  The flag only selects code generation: it decides nothing
a test reads, and a sandbox that changed its own flags would only slow itself down.

XLA aborts a process whose ``XLA_FLAGS`` holds a flag it does not know (and ignores every flag
after a word that is not a flag), so a flag beyond the first is used only after a trusted probe
(:func:`accepted`) has started this jaxlib's CPU client with it; a jaxlib that dropped the flag
grades as before, only slower.  ``JAXGRADE_FAST_COMPILE=0`` in the grader's environment turns
it off.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from functools import cache

log = logging.getLogger(__name__)

#: Every sandbox: no thread pool of XLA's own.
BASE_FLAGS = ("--xla_cpu_multi_thread_eigen=false",)
#: Faster compiles, where this jaxlib accepts them (:func:`accepted`).
FAST_COMPILE_FLAGS = ("--xla_cpu_use_fusion_emitters=false",)
#: ``JAXGRADE_FAST_COMPILE=0`` (or ``false``, ``no``, ``off``) leaves FAST_COMPILE_FLAGS out.
SWITCH = "JAXGRADE_FAST_COMPILE"

# Starts the CPU client, which parses XLA_FLAGS (importing jaxlib does not); through JAX itself
# if this jaxlib's own module is laid out otherwise.  An unknown flag aborts before "ok".
_PROBE = """
try:
    from jaxlib import _jax
    _jax.get_tfrt_cpu_client()
except Exception:
    import jax
    jax.devices("cpu")
print("ok")
"""


@cache
def accepted(flags: tuple[str, ...]) -> bool:
    """Whether this Python's jaxlib starts a CPU client with ``flags`` as its ``XLA_FLAGS``:
    asked once per process, in a child process (about 0.2 s), because XLA ends a process that
    names a flag it does not know."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "JAX_PLATFORMS": "cpu", "XLA_FLAGS": " ".join(flags)}
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-c", _PROBE],
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("could not ask jaxlib whether it accepts %s (%s): sandboxes compile without it", flags, exc)
        return False
    ok = done.returncode == 0 and done.stdout.strip().endswith("ok")
    if not ok:
        said = (done.stderr.strip().splitlines() or ["no message"])[-1][:300]
        log.info("this jaxlib does not accept %s (%s): sandboxes compile without it", " ".join(flags), said)
    return ok


def fast_compile_enabled() -> bool:
    return os.environ.get(SWITCH, "1").strip().lower() not in ("0", "false", "no", "off")


def fast_compile_flags() -> list[str]:
    """FAST_COMPILE_FLAGS where they are on and this jaxlib accepts them, else nothing."""
    return list(FAST_COMPILE_FLAGS) if fast_compile_enabled() and accepted(FAST_COMPILE_FLAGS) else []


def sandbox_xla_flags(devices: int = 1) -> str:
    """``XLA_FLAGS`` for a sandbox of an assignment with ``devices`` host devices."""
    flags = list(BASE_FLAGS)
    if devices > 1:
        flags.insert(0, f"--xla_force_host_platform_device_count={devices}")
    return " ".join(flags + fast_compile_flags())


#: The ``XLA_FLAGS`` this process was given, recorded when :func:`add_to_process` first changes it.
_GIVEN: list[str | None] = []


def add_to_process(flags: list[str]) -> None:
    """Add ``flags`` to this (trusted) process's own ``XLA_FLAGS``, for its JAX (before it starts
    a backend), remembering the value it was given (:func:`given_environ`)."""
    current = os.environ.get("XLA_FLAGS")
    missing = [flag for flag in flags if flag not in (current or "").split()]
    if not missing:
        return
    if not _GIVEN:
        _GIVEN.append(current)
    os.environ["XLA_FLAGS"] = " ".join([current or "", *missing]).strip()


def given_environ() -> dict[str, str]:
    """This process's environment as it was given: without the flags :func:`add_to_process`
    added.  What a command is for (the check server's key) and what it hands on to a process
    that sets its own flags depend on the user's environment, not on what grading did to it."""
    env = dict(os.environ)
    if _GIVEN:
        if _GIVEN[0] is None:
            env.pop("XLA_FLAGS", None)
        else:
            env["XLA_FLAGS"] = _GIVEN[0]
    return env
