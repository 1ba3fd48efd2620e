"""A tiny course for batch tests: one assignment, ``double``, whose notebooks grade in seconds.

``make_minicourse(root)`` writes grading.yaml, the assignment and reference trees; ``notebook(kind)``
returns a submission's JSON text: "full" (4/4), "half" (public right, hidden wrong: 2/4), "zero"
(nothing defined: 0/4), "crash" (the kernel dies: an error record).
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

from tests.conftest import build_notebook

GRADING = """\
course: Mini course
seed: 1
late_policy: {percent_per_day: 25, max_percent: 50}
assignments:
  double:
    title: Doubling
    canvas_id: "555"
    moodle_id: "77"
    due: 2026-11-01T23:59:00+00:00
"""

ASSIGNMENT = """\
name: double
title: Doubling
notebook: double.ipynb
functions: [double]
"""

PUBLIC = '''
import numpy as np
import pytest

@pytest.mark.points(1)
@pytest.mark.category("numerics")
def test_double_small(submission):
    """double(x) is 2 * x."""
    assert submission.double(np.arange(3.0)).tolist() == [0.0, 2.0, 4.0]

@pytest.mark.points(1)
@pytest.mark.category("numerics")
def test_double_scalar(submission):
    """double works on a scalar array."""
    assert float(submission.double(np.float64(2.0))) == 4.0
'''

HIDDEN = '''
# jaxgrade-secret-marker: the hidden tests
import numpy as np
import pytest
from grader.testing import assert_close

@pytest.mark.points(2)
@pytest.mark.category("numerics")
@pytest.mark.parametrize("n", [5, 1000])
def test_double_hidden(submission, reference, rng, n):
    """double agrees with the reference on hidden inputs."""
    x = rng.normal(size=n)
    assert_close(submission.double(x), reference.double(x))
'''

SOLUTION = "# jaxgrade-secret-marker: the reference solution\ndef double(x):\n    return 2 * x\n"
SECRET = "jaxgrade-secret-marker"  # in the reference and the hidden tests: attacks look for it

SOURCES = {
    "full": ["def double(x):\n    return 2 * x"],
    "half": ["import numpy as np\ndef double(x):\n    x = np.asarray(x)\n    return 2 * x if x.size < 5 else x"],
    "zero": ["print('I did not do it')"],
    "crash": ["import os\nos._exit(3)"],
}


def make_minicourse(root: Path, limits: str = "") -> Path:
    """The course at ``root``; ``limits`` is YAML for grading.yaml's ``limits:`` (e.g. "{cell_timeout: 5}")."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "grading.yaml").write_text(GRADING + (f"limits: {limits}\n" if limits else ""))
    student = root / "assignments" / "double"
    reference = root / "reference" / "double"
    (student / "tests").mkdir(parents=True)
    (reference / "tests").mkdir(parents=True)
    (student / "assignment.yaml").write_text(ASSIGNMENT)
    (student / "double.ipynb").write_text(build_notebook("def double(x):\n    raise NotImplementedError"))
    (student / "tests" / "test_public.py").write_text(textwrap.dedent(PUBLIC))
    (reference / "tests" / "test_hidden.py").write_text(textwrap.dedent(HIDDEN))
    (reference / "solution.py").write_text(SOLUTION)
    return root


def notebook(kind: str, salt: str = "") -> str:
    """A submission of the given kind; ``salt`` makes its bytes (and sha256) unique."""
    return build_notebook(*SOURCES[kind], f"# {salt}")


EXPECTED = {"full": (4.0, "graded"), "half": (2.0, "graded"), "zero": (0.0, "graded"), "crash": (0.0, "graded")}


def as_from_a_terminal(cmd: list[str]) -> list[str]:
    """``cmd`` started with SIGINT's default action, as a terminal starts it, so that a Ctrl-C
    (SIGINT) reaches Python's handler: a test run started with SIGINT ignored (a background job
    of a non-interactive shell, as a CI launcher may start it) passes that on to its children,
    and Python then installs no handler.  Through exec, not ``preexec_fn``: no fork of a
    threaded test process."""
    reset = "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])"
    return [sys.executable, "-c", reset, *cmd]


def procs_with(tag: str) -> list[int]:
    """Pids of the processes whose environment contains ``tag`` (children inherit it)."""
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if tag.encode() in (d / "environ").read_bytes():
                    found.append(int(d.name))
            except OSError:
                pass
    return found


def signal_inside_a_gc_callback(entry: str, when: str, name: str = "SIGTERM") -> str:
    """A ``python -c`` script that runs ``entry`` (``module:function``, called with the command
    line's arguments; its result is the exit status) after registering a garbage collector
    callback that, once ``when`` (an expression; ``target`` is the module) is true in the main
    thread, sends the process the signal ``name`` and lets its handler run there, inside the
    callback (as in JAX's own callback)."""
    module, function = entry.split(":")
    return (
        "import gc, os, signal, sys, threading\n"
        f"import {module} as target\n"
        "sent = []\n"
        "def callback(phase, info):\n"
        "    if sent or phase != 'start' or threading.current_thread() is not threading.main_thread():\n"
        "        return\n"
        f"    if {when}:\n"
        "        sent.append(1)\n"
        f"        os.kill(os.getpid(), signal.{name})\n"
        "        for _ in range(100):  # the handler runs here, in the callback\n"
        "            pass\n"
        "gc.callbacks.append(callback)\n"
        f"sys.exit(target.{function}(sys.argv[1:]))\n"
    )
