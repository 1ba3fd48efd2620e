"""Shared fixtures for the harness's own tests (keep this small)."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = Path(__file__).resolve().parent / "notebooks"

if str(REPO) not in sys.path:  # the package is importable without `pip install -e .`
    sys.path.insert(0, str(REPO))

# `jaxgrade check` leaves no background checker behind in the suite (grader/grading/check_server.py);
# tests/grading/test_check_server.py turns it on for the commands it runs
os.environ["JAXGRADE_CHECK_SERVER"] = "0"
# The trusted compilation cache (grader/host/xla_cache.py) of this run only: a cache warmed by another
# version of the code must not decide a test.  Subprocesses (the CLI) inherit it.
if not os.environ.get("JAXGRADE_CACHE_DIR"):
    os.environ["JAXGRADE_CACHE_DIR"] = tempfile.mkdtemp(prefix="jaxgrade-test-cache-")
    atexit.register(shutil.rmtree, os.environ["JAXGRADE_CACHE_DIR"], True)  # made here: removed here


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto` (pyproject's addopts): one worker per core, at most 8, and at most one per 3 GiB
    of available memory (a worker grading a corpus runs two sandboxes at a time, about 2 GiB)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            available = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError, IndexError):
        available = 6 << 30
    return max(1, min(len(os.sched_getaffinity(0)), 8, available // (3 << 30)))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The modules that grade a whole corpus (the longest, minutes each) go first, so that the
    workers (pytest-xdist, one module each at a time) end on short modules, not on a corpus."""
    items.sort(key=lambda item: item.get_closest_marker("corpus") is None)  # stable: the order within stays


def build_notebook(*sources: str) -> str:
    """The JSON text of a notebook with one code cell per source string."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(src) for src in sources]
    return nbformat.writes(nb)


@pytest.fixture(scope="session")
def make_notebook():
    """``make_notebook("x = 1", "def f(): ...")`` -> notebook JSON text."""
    return build_notebook


@pytest.fixture(scope="session")
def notebook_text():
    """``notebook_text("probes.ipynb")`` -> the text of a committed test notebook."""

    def read(name: str) -> str:
        return (NOTEBOOKS / name).read_text(encoding="utf-8")

    return read


@pytest.fixture(scope="session")
def isolation() -> str:
    """The strongest isolation this machine offers ("bwrap", else "process")."""
    from grader.host.sandbox import choose_isolation

    return choose_isolation("auto")
