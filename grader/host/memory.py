"""Memory limits of the grader's own processes, and what JAX reserves per core.

The trusted processes that grade (grader/batch/pool.py, grader/batch/cluster.py,
grader/grading/grade.py) and the sandboxes (grader/host/sandbox.py) run JAX under an
address-space limit (RLIMIT_AS).  Address space is reserved, not used: glibc makes up to eight
malloc arenas per core, each reserving 64 MiB, and JAX starts about four threads per core, each
with an 8 MiB stack.  So a limit measured on a laptop fails on a large machine unless the arenas
are capped (:func:`cap_malloc_arenas`, or ``MALLOC_ARENA_MAX`` in a sandbox's environment) and
the limit allows for the cores (:func:`address_space_allowance`).
"""

from __future__ import annotations

import ctypes
import os
import resource

#: malloc arenas a limited process may make (glibc's M_ARENA_MAX).  glibc makes up to 8 per core,
#: each reserving 64 MiB of address space, and JAX starts about four threads per core: a JAX
#: process that has compiled a few functions reserves 1.6 GiB on 2 cores, 9 GiB on 32 and 15 GiB
#: on 64, for 0.4 GiB resident (measured with the CPU count faked).  With 4 arenas: 0.8, 2.6
#: and 4.4 GiB, the rest being the threads' stacks (:func:`address_space_allowance`).
ARENAS = 4


def cap_malloc_arenas() -> bool:
    """Cap this process's malloc arenas at :data:`ARENAS` (glibc; elsewhere nothing is done):
    call it before threads start, as the arenas they have already made stay."""
    try:
        return bool(ctypes.CDLL(None).mallopt(-8, ARENAS))  # M_ARENA_MAX
    except (OSError, AttributeError):
        return False


def cores() -> int:
    """The CPUs this process may run on (``sched_getaffinity``): what XLA sizes its thread pools
    by, and what the sandboxes started from here inherit.  Not ``os.cpu_count()``, the machine's
    online CPUs, which a cpuset makes too many and Python 3.13's ``PYTHON_CPU_COUNT`` can make
    too few."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def address_space_allowance() -> int:
    """What a JAX process reserves beyond what it uses, on this machine: its threads' stacks
    (about four threads per core, 8 MiB each) with :data:`ARENAS` malloc arenas, at 64 MiB a
    core (4.4 GiB measured on 64 cores)."""
    return 64 * 1024**2 * cores()


def thread_allowance() -> int:
    """The threads JAX starts beyond a fixed few, on this machine: about four a core (233 in one
    process on 64 cores, 17 on 2).  A sandbox's thread limits allow for them."""
    return 4 * cores()


_limited = False  # limit_memory set this process's limit: its MemoryErrors are losses


def limit_memory(memory_bytes: int) -> None:
    """Lower this process's soft address-space limit to ``memory_bytes`` (never raise it; the
    hard limit is left as it is, so that a sandbox started from here can set its own)."""
    global _limited
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    new = memory_bytes if hard == resource.RLIM_INFINITY else min(memory_bytes, hard)
    if soft == resource.RLIM_INFINITY or new < soft:
        resource.setrlimit(resource.RLIMIT_AS, (new, hard))
    _limited = True


def unlimit_memory(soft: int, hard: int) -> None:
    """Set the address-space limit back to ``(soft, hard)``, as it was before :func:`limit_memory`."""
    global _limited
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    _limited = False


def under_memory_limit() -> bool:
    """Whether :func:`limit_memory` has set this process's limit (and it is still set)."""
    return _limited


def is_out_of_memory(exc: BaseException) -> bool:
    """A MemoryError, or JAX's own out-of-memory error (``JaxRuntimeError: RESOURCE_EXHAUSTED``,
    a RuntimeError), raised in this process.  A student's are never either: they reach the
    trusted process as ``StudentRaised`` (grader/errors.py), the exception's name a string."""
    if isinstance(exc, MemoryError):
        return True
    return type(exc).__name__ in ("JaxRuntimeError", "XlaRuntimeError") and str(exc).startswith("RESOURCE_EXHAUSTED")


def memory_in_words(n: int) -> str:
    """``8589934592`` -> "8 GiB"; "1.5 GiB"; "512 MiB"."""
    gib = n / 1024**3
    return f"{gib:g} GiB" if gib >= 1 else f"{n / 1024**2:g} MiB"
