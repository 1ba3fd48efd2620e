"""The XLA flags of every sandbox, and which of them the installed jaxlib accepts.

Every sandbox runs XLA without its own thread pool (``--xla_cpu_multi_thread_eigen=false``): a
sandbox's processes share one cgroup's CPU, and a batch runs one sandbox per core.

Compiling is most of what grading spends in a sandbox: the student's eager operations and
jitted functions on the hidden shapes, and the evaluator's exported modules, each a small program
compiled once and run on small inputs.  So, where the installed jaxlib knows them, a sandbox
compiles for compile time rather than run time (:data:`FAST_COMPILE_FLAGS`):

- XLA:CPU's older fusion emitters (``--xla_cpu_use_fusion_emitters=false``).  The newer (MLIR)
  emitters compile a program of thousands of small operations three times slower: a ``jax.jit``
  of a Python loop over a 64-row batch (the sample class's carol) took 6.4 s to compile with them
  and 2.1 s without, on one core 11.8 s and 2.7 s (bench/README.md, "Session 10: compiling with
  the older emitters").
- LLVM without its optimization passes (``--xla_backend_optimization_level=0``).  With the older
  emitters, LLVM's passes were half of each small program's compile: the evaluator's 25 modules
  of a vmap_convolve grading compiled in 0.99 CPU s instead of 2.2, and a class of prng_keys
  notebooks graded in 0.76x the time (bench/README.md, "Session 25").  Element-wise loops that
  XLA generates run slower (a fused 4M-element expression: 20 ms against 7.6); matrix products
  and convolutions run in XLA's precompiled kernels, as before.  The limits (``cell_timeout``
  60 s, ``call_timeout`` 120 s) leave that room many times over on the bundled assignments'
  inputs.
- One LLVM module per program (``--xla_cpu_parallel_codegen_split_count=1``): XLA splits a
  program into parts to generate code on several threads, and a sandbox compiles on one.

The flags only select how code is generated, not which operations are computed (none turns on
XLA's fast-math, which is off by default).  Results can differ from other flags' in the last bits
(contracted multiply-adds), which every numeric check's tolerance absorbs, and every check that
compares exactly compares a sandbox's results with the same sandbox's, or integers.  They decide
nothing a test reads, and a sandbox that changed its own flags would only slow itself down.

XLA aborts a process whose ``XLA_FLAGS`` holds a flag it does not know (and ignores every flag
after a word that is not a flag), so a flag beyond the first is used only after a trusted probe
(:func:`accepted`) has started this jaxlib's CPU client with it; a jaxlib that dropped a flag
grades without it, only slower (JAX 0.12, on Python 3.12+, has no older emitters).

``JAXGRADE_FAST_COMPILE`` in the grader's environment chooses: ``0`` (or ``false``, ``no``,
``off``) none of them; unset, ``1`` (``true``, ``yes``, ``on``) all; or the names of the ones to
keep, separated by commas (``xla_cpu_use_fusion_emitters`` keeps the older emitters and LLVM's
passes, for a course whose notebooks run long element-wise computations).  A name may carry the
flag's value here (``--xla_backend_optimization_level=0``), never another: these are switches,
not a way to pass XLA other values.  A trusted grading process keeps a flag of the same name
that its own ``XLA_FLAGS`` sets.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import cache

log = logging.getLogger(__name__)

#: Every sandbox: no thread pool of XLA's own.
BASE_FLAGS = ("--xla_cpu_multi_thread_eigen=false",)
#: Faster compiles, where this jaxlib accepts them (:func:`accepted`), each on its own.
FAST_COMPILE_FLAGS = (
    "--xla_cpu_use_fusion_emitters=false",
    "--xla_backend_optimization_level=0",
    "--xla_cpu_parallel_codegen_split_count=1",
)
#: Which of FAST_COMPILE_FLAGS to use (:func:`chosen`).
SWITCH = "JAXGRADE_FAST_COMPILE"
_OFF = ("0", "false", "no", "off")
_ON = ("", "1", "true", "yes", "on")

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


def flag_name(flag: str) -> str:
    """``xla_backend_optimization_level`` for ``--xla_backend_optimization_level=0``."""
    return flag.lstrip("-").split("=", 1)[0]


def chosen() -> tuple[str, ...]:
    """The FAST_COMPILE_FLAGS that :data:`SWITCH` asks for (module docstring), before the probe.
    A word that is none of them, or one of them with another value, is an error that says what
    the setting takes."""
    return _choice()[0]


def _choice() -> tuple[tuple[str, ...], bool]:
    """:func:`chosen`, and whether :data:`SWITCH` named the flags by hand (rather than all or none)."""
    given = os.environ.get(SWITCH, "1")
    value = given.strip().lower()
    if value in _OFF:
        return (), False
    if value in _ON:
        return FAST_COMPILE_FLAGS, False
    ours = {flag_name(flag): flag for flag in FAST_COMPILE_FLAGS}
    words = value.replace(",", " ").split()
    wrong = [
        word
        for word in words
        if flag_name(word) not in ours or ("=" in word and word.lstrip("-") != ours[flag_name(word)].lstrip("-"))
    ]
    if wrong or not words:
        said = f"names {', '.join(wrong)}" if wrong else "names no flag"
        raise ValueError(
            f"{SWITCH}={given!r} {said}: it takes 0 (or false, no, off: none of the fast-compile flags), "
            "1 (or true, yes, on: all of them), or the names of those to keep, separated by commas: " + ", ".join(ours)
        )
    names = {flag_name(word) for word in words}
    return tuple(flag for flag in FAST_COMPILE_FLAGS if flag_name(flag) in names), True


def fast_compile_flags() -> list[str]:
    """The chosen FAST_COMPILE_FLAGS that this jaxlib accepts (:func:`_usable`)."""
    flags, by_hand = _choice()
    return list(_usable(flags, by_hand)) if flags else []


@cache
def _usable(flags: tuple[str, ...], by_hand: bool) -> tuple[str, ...]:
    """Those of ``flags`` this jaxlib accepts, found once per process (every sandbox asks): one
    probe for all of them, and, only where a jaxlib refuses them together, one for each (side
    by side).  A flag named ``by_hand`` that it refuses is warned about."""
    if accepted(flags):
        return flags
    with ThreadPoolExecutor(len(flags)) as probes:
        answers = list(probes.map(lambda flag: accepted((flag,)), flags))
    for flag, ok in zip(flags, answers):
        if by_hand and not ok:
            log.warning("%s names %s, which this jaxlib does not accept: sandboxes compile without it", SWITCH, flag)
    return tuple(flag for flag, ok in zip(flags, answers) if ok)


def sandbox_xla_flags(devices: int = 1) -> str:
    """``XLA_FLAGS`` for a sandbox of an assignment with ``devices`` host devices."""
    flags = list(BASE_FLAGS)
    if devices > 1:
        flags.insert(0, f"--xla_force_host_platform_device_count={devices}")
    return " ".join(flags + fast_compile_flags())


#: The ``XLA_FLAGS`` this process was given, recorded when :func:`add_to_process` first changes it.
_GIVEN: list[str | None] = []


def add_to_process(flags: Sequence[str], defaults: Sequence[str] = ()) -> None:
    """Add ``flags`` to this (trusted) process's own ``XLA_FLAGS``, for its JAX (before it starts
    a backend), remembering the value it was given (:func:`given_environ`); and ``defaults``
    where ``XLA_FLAGS`` names no flag of the same name (the user's value is kept)."""
    current = os.environ.get("XLA_FLAGS")
    named = {flag_name(word) for word in (current or "").split()}
    wanted = [*flags, *(flag for flag in defaults if flag_name(flag) not in named)]
    missing = [flag for flag in wanted if flag not in (current or "").split()]
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
