"""A stop asked of this process's grading, which no garbage collector's callback can drop.

Python runs a signal's handler between any two bytecodes, also inside a garbage collector's
callback (JAX registers one), and what the handler raises there is printed and dropped: a Ctrl-C
(or the check server's interruption of a check whose student went away) would then be lost, and
the notebook being graded would run on to its end.  So the signal handler :func:`stop` (set by
``cli._stops``, and by a Dask worker's grading process for its stop signal) and the check
server's watcher also call :func:`request`, which leaves a mark no exception can lose: a byte in
a pipe.  Every wait on a sandbox (:meth:`grader.host.sandbox.SandboxProcess.recv`)
selects on that pipe too (:func:`fd`), and raises KeyboardInterrupt as soon as it is readable,
from an ordinary frame, where nothing drops it.  It keeps raising until :func:`clear`: whoever
asked for the stop clears it once the stop is done (a command as it ends, the check server after
the check).

:func:`request` takes no lock and only writes a byte, so a signal handler may call it at any
point of the main thread.  A child made by ``os.fork`` gets a pipe of its own.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

_pipe: tuple[int, int] = (-1, -1)
_asked = False


def _new_pipe() -> None:
    global _pipe, _asked
    read, write = os.pipe()  # not inherited by the processes this one starts (PEP 446)
    for end in (read, write):
        os.set_blocking(end, False)
    _pipe, _asked = (read, write), False


_new_pipe()
if hasattr(os, "register_at_fork"):  # not on Windows (where the self-check imports this too)
    os.register_at_fork(after_in_child=_new_pipe)  # a forked child's stop is its own, not its parent's


def fd() -> int:
    """The descriptor that is readable once a stop was asked (until :func:`clear`)."""
    return _pipe[0]


def request() -> None:
    """Ask this process's grading to stop: its next (or current) wait on a sandbox raises
    KeyboardInterrupt.  Safe in a signal handler and from any thread."""
    global _asked
    _asked = True
    with contextlib.suppress(OSError):  # a full pipe (BlockingIOError) is asked already
        os.write(_pipe[1], b"!")


def stop(signum: int, frame: Any) -> None:
    """A signal handler that stops this process's grading as Python's Ctrl-C does
    (KeyboardInterrupt) and asks the stop too (:func:`request`), for a KeyboardInterrupt that a
    gc callback drops."""
    request()
    raise KeyboardInterrupt


def requested() -> bool:
    """Whether a stop was asked and not cleared since."""
    return _asked


def clear() -> None:
    """Forget the stops asked so far (the stop they asked for is done)."""
    global _asked
    _asked = False
    with contextlib.suppress(OSError):  # BlockingIOError: nothing (more) to read
        while os.read(_pipe[0], 4096):
            pass
