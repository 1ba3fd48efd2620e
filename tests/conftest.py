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


def _cgroup_limit(*files: str) -> int | None:
    """The first number in these cgroup files (a container's limit), None where there is none."""
    for name in files:
        try:
            text = Path(name).read_text(encoding="ascii").split()
        except OSError:
            continue
        if text and text[0].isdigit():
            return int(text[0])
    return None


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto` (pyproject's addopts): PYTEST_XDIST_AUTO_NUM_WORKERS if set; else one worker per
    core, at most 8, and at most one per 3 GiB of available memory (a worker grading a corpus
    runs two sandboxes at a time, about 2 GiB), a container's cgroup limits included."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return int(os.environ["PYTEST_XDIST_AUTO_NUM_WORKERS"])
    cores = len(os.sched_getaffinity(0))
    quota = Path("/sys/fs/cgroup/cpu.max")  # cgroup v2 "MAX PERIOD"; v1: cpu.cfs_quota_us
    try:
        limit, period = quota.read_text(encoding="ascii").split()[:2]
        if limit != "max":
            cores = min(cores, max(1, int(limit) // int(period)))
    except (OSError, ValueError):
        v1_quota = _cgroup_limit("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")
        v1_period = _cgroup_limit("/sys/fs/cgroup/cpu/cpu.cfs_period_us")
        if v1_quota and v1_period:
            cores = min(cores, max(1, v1_quota // v1_period))
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            memory = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError, IndexError):
        memory = 6 << 30
    limit = _cgroup_limit("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")
    if limit is not None:
        memory = min(memory, limit)
    return max(1, min(cores, 8, memory // (3 << 30)))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The modules that grade a whole corpus (the longest, minutes each) go first, so that the
    workers (pytest-xdist, one module each at a time) end on short modules, not on a corpus."""
    items.sort(key=lambda item: item.get_closest_marker("corpus") is None)  # stable: the order within stays


def needs_requirements_of(assignment: str) -> pytest.MarkDecorator:
    """Skip a test that grades (or exports) what the course's ``assignment`` does where the
    installed packages cannot grade it (its ``requires``: the pmap assignment needs JAX 0.8,
    which Python 3.10 cannot install), as jaxgrade itself refuses to."""
    from grader.course.config import UnmetRequirementError, check_requirements, load_course

    why = ""
    try:
        check_requirements(load_course(REPO).assignment(assignment, staff=False))
    except UnmetRequirementError as exc:
        why = str(exc)
    return pytest.mark.skipif(bool(why), reason=why)


def jax_before(version: str) -> bool:
    """Whether the installed JAX is older than ``version``: for what a test expects only of newer
    JAX (SECURITY.md, "Older JAX sees less")."""
    from importlib import metadata

    from packaging.version import Version

    return Version(metadata.version("jax")) < Version(version)


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
