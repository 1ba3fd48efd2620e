"""grader/host/xla_cache.py: a compilation cache that only trusted code writes and sandboxes only read.

The real tests grade notebooks in bubblewrap sandboxes against the ``double`` course.  A cell
counts JAX's persistent-cache hits, and ``double`` is right only when there was one, so the
score says whether the sandbox read the cache.  The attack notebook lists, writes, replaces and
chmods the mounted cache; ``double`` is right only when one of them worked, so a 0 means
"blocked"."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import stat
from pathlib import Path

import pytest

from grader.course.config import Assignment, load_course
from grader.grading.grade import (
    _ready_cache,
    answers_dir,
    cache_plan,
    cache_status,
    grade_many,
    grade_notebook,
    trusted_cache_dir,
    warm_cache,
    warm_notebooks,
)
from grader.host import xla_cache
from grader.host.sandbox import choose_isolation
from grader.host.xla_cache import XlaCache
from tests.conftest import build_notebook
from tests.minicourse import make_minicourse, notebook

# ----------------------------------------------------------------------------- unit


def test_publish_keeps_regular_well_named_files_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAXGRADE_CACHE_DIR", str(tmp_path / "c"))
    staged = xla_cache.staging()
    assert stat.S_IMODE(staged.stat().st_mode) == 0o777 and stat.S_IMODE(staged.parent.stat().st_mode) == 0o700
    (staged / "jit_sin-abc123-cache").write_bytes(b"executable")
    (staged / "bad name!").write_bytes(b"x")
    (staged / "sub").mkdir()
    (tmp_path / "secret").write_text("host file")
    (staged / "link-cache").symlink_to(tmp_path / "secret")
    (staged / "huge-cache").write_bytes(b"x" * (xla_cache.MAX_ENTRY_BYTES + 1))
    final = xla_cache.cache_root() / "double-0"
    assert xla_cache.publish(staged, final) == 1
    assert sorted(os.listdir(final)) == ["jit_sin-abc123-cache"]
    assert stat.S_IMODE(final.stat().st_mode) == 0o711
    assert stat.S_IMODE((final / "jit_sin-abc123-cache").stat().st_mode) == 0o644
    assert not staged.parent.exists()  # the staging folder is gone
    assert xla_cache.ready(final) == XlaCache(final)


def test_publish_never_reads_a_fifo_or_follows_a_link(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A FIFO with no writer (opened for reading without O_NONBLOCK, it would hang the trusted
    side for ever) and links to a host file and to a device are judged by the opened file."""
    monkeypatch.setenv("JAXGRADE_CACHE_DIR", str(tmp_path / "c"))
    staged = xla_cache.staging()
    (staged / "good-cache").write_bytes(b"executable")
    os.mkfifo(staged / "fifo-cache")
    (tmp_path / "secret").write_text("host file")
    (staged / "link-cache").symlink_to(tmp_path / "secret")
    (staged / "zero-cache").symlink_to("/dev/zero")
    assert xla_cache.read_entry(str(staged / "fifo-cache")) is None
    assert xla_cache.read_entry(str(staged / "link-cache")) is None
    assert xla_cache.read_entry("/dev/zero") is None  # a device: endless, never read
    assert xla_cache.read_entry(str(staged / "good-cache")) == b"executable"
    final = xla_cache.cache_root() / "double-0"
    assert xla_cache.publish(staged, final) == 1
    assert os.listdir(final) == ["good-cache"]


def test_a_second_publisher_keeps_the_first_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAXGRADE_CACHE_DIR", str(tmp_path / "c"))
    final = xla_cache.cache_root() / "double-0"
    for content in (b"first", b"second"):
        staged = xla_cache.staging()
        (staged / "e-cache").write_bytes(content)
        xla_cache.publish(staged, final)
    assert (final / "e-cache").read_bytes() == b"first"
    assert [p.name for p in final.parent.iterdir()] == ["double-0"]  # no staging or half-made folder left


def test_the_key_follows_the_assignment_version_the_xla_flags_and_how_the_warming_writes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    base = xla_cache.cache_key("v1", {"XLA_FLAGS": "--a"})
    assert base == xla_cache.cache_key("v1", {"XLA_FLAGS": "--a"})
    assert base != xla_cache.cache_key("v2", {"XLA_FLAGS": "--a"})
    assert base != xla_cache.cache_key("v1", {"XLA_FLAGS": "--xla_force_host_platform_device_count=4"})
    # a cache warmed the old way (names in its entries on JAX 0.6) is never read again
    monkeypatch.setattr(xla_cache, "WARMING_FORMAT", xla_cache.WARMING_FORMAT - 1)
    assert base != xla_cache.cache_key("v1", {"XLA_FLAGS": "--a"})


def test_a_reading_sandbox_never_writes_and_a_warming_one_does() -> None:
    reading, warming = XlaCache(Path("/c")).env(), XlaCache(Path("/c"), writable=True).env()
    assert float(reading["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"]) >= 1e9
    assert warming["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] == "0"
    assert XlaCache(Path("/c")).bind_args() == ["--ro-bind", "/c", xla_cache.MOUNT]
    assert XlaCache(Path("/c"), writable=True).bind_args()[0] == "--bind"


def test_the_cache_lives_where_the_user_says(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("JAXGRADE_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert xla_cache.cache_root() == tmp_path / "jaxgrade" / "xla"
    monkeypatch.setenv("JAXGRADE_CACHE_DIR", str(tmp_path / "mine"))
    assert xla_cache.cache_root() == tmp_path / "mine" / "xla"


# ----------------------------------------------------------------------------- real sandboxes

COUNT_HITS = """
import jax, jax.numpy as jnp
from jax import monitoring
HITS = []
monitoring.register_event_listener(lambda name, **kw: HITS.append(name) if name.endswith("cache_hits") else None)
jnp.sin(jnp.arange(7.0) * 3.0).block_until_ready()
"""
RIGHT_IF_HIT = "def double(x):\n    return 2 * x if HITS else 3 * x"


def _corpus_attack() -> str:
    """h_poison_compile_cache's cell, from the hostile corpus's generator (one attack, two tests)."""
    path = Path(__file__).resolve().parents[1] / "corpus" / "hostile" / "make_corpus.py"
    spec = importlib.util.spec_from_file_location("hostile_make_corpus", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.POISON_CACHE


# the corpus's attack, plus whether the cache was mounted at all (here it must be)
ATTACK_CACHE = _corpus_attack() + "\nMOUNTED = os.path.isdir(d)\n"
RIGHT_IF_FOUND = "def double(x):\n    return 2 * x if FOUND or not MOUNTED else 3 * x"


@pytest.fixture
def bwrap_course(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    if choose_isolation("auto") != "bwrap":
        if os.environ.get("JAXGRADE_REQUIRE_BWRAP", "") not in ("", "0"):
            pytest.fail("bubblewrap is required (JAXGRADE_REQUIRE_BWRAP is set) but does not work here")
        pytest.skip("the cache is mounted only into bubblewrap sandboxes; bubblewrap does not work here")
    monkeypatch.setenv("JAXGRADE_CACHE_DIR", str(tmp_path / "cache"))
    return make_minicourse(tmp_path / "course", "{cell_timeout: 60, call_timeout: 20, wall_timeout: 300}")


@pytest.mark.slow
def test_a_sandbox_reads_what_trusted_code_compiled_and_cannot_change_it(bwrap_course: Path, tmp_path: Path) -> None:
    a = load_course(bwrap_course).assignment("double", staff=True)
    counting = tmp_path / "counting.ipynb"
    counting.write_text(build_notebook(COUNT_HITS, RIGHT_IF_HIT))
    attack = tmp_path / "attack.ipynb"
    attack.write_text(build_notebook(ATTACK_CACHE, RIGHT_IF_FOUND))

    # without a cache: no hit, so the counting notebook's double is wrong
    assert grade_notebook(a, counting).score == 0
    # trusted code (here the same cell, as the reference's run would) warms it
    staged = xla_cache.staging()
    grade_notebook(a, counting, xla_cache=XlaCache(staged, writable=True))
    final = xla_cache.cache_root() / "double-test"
    assert xla_cache.publish(staged, final) >= 1
    before = {p.name: p.read_bytes() for p in final.iterdir()}
    cache = xla_cache.ready(final)
    assert cache is not None

    assert grade_notebook(a, counting, xla_cache=cache).score == 4  # a hit: the sandbox read it
    rec = grade_notebook(a, attack, xla_cache=cache)
    assert (rec.status, rec.score) == ("graded", 0), rec  # mounted, and every attack failed
    assert {p.name: p.read_bytes() for p in final.iterdir()} == before
    assert stat.S_IMODE(final.stat().st_mode) == 0o711


@pytest.mark.slow
def test_a_batch_warms_the_cache_from_the_reference_once(bwrap_course: Path, tmp_path: Path) -> None:
    a = load_course(bwrap_course).assignment("double", staff=True)
    final = trusted_cache_dir(a)
    assert xla_cache.ready(final) is None
    folder = tmp_path / "class"
    folder.mkdir()
    paths = []
    for kind in ("full", "half", "zero"):
        paths.append(folder / f"{kind}.ipynb")
        paths[-1].write_text(notebook(kind))
    records = grade_many(a, paths, jobs=2)
    assert {p.stem: r.score for p, r in records.items()} == {"full": 4.0, "half": 2.0, "zero": 0.0}
    assert xla_cache.ready(final) is not None  # published by the warming task
    assert [p.name for p in final.parent.iterdir()] == [final.name]  # nothing staged is left
    mtime = final.stat().st_mtime_ns
    grade_many(a, paths[:1], jobs=2)
    assert final.stat().st_mtime_ns == mtime  # warmed once: the next batch only reads it


@pytest.mark.slow
def test_a_large_batch_warms_the_wider_cache_and_later_batches_read_it(
    bwrap_course: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch of ALTERNATIVES_MIN or more (2 here) warms the cache with the alternative solutions
    too, through the pool's warming task; a later batch of one reads it and warms nothing."""
    from grader.grading import grade

    _starter_and_alternative(bwrap_course)
    monkeypatch.setattr(grade, "ALTERNATIVES_MIN", 2)
    a = load_course(bwrap_course).assignment("double", staff=True)
    base, wide = trusted_cache_dir(a), trusted_cache_dir(a, alternatives=True)
    folder = tmp_path / "class"
    folder.mkdir()
    paths = []
    for kind in ("full", "half"):
        paths.append(folder / f"{kind}.ipynb")
        paths[-1].write_text(notebook(kind))
    records = grade_many(a, paths, jobs=2)
    assert {p.stem: r.score for p, r in records.items()} == {"full": 4.0, "half": 2.0}
    assert xla_cache.ready(wide) is not None and xla_cache.ready(base) is None
    counting = folder / "counting.ipynb"
    counting.write_text(build_notebook(COUNT_BOTH, RIGHT_IF_BOTH))
    assert cache_plan(a, 1) == (wide, False, True)
    records = grade_many(a, [counting], jobs=2)
    assert records[counting].score == 4  # it read the wider cache: the alternative's computation was a hit
    assert xla_cache.ready(base) is None  # and nothing else was warmed


def test_the_cache_is_new_when_what_warms_it_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The starter and the alternative solutions decide no grade (not in the assignment's
    version), but they decide what the cache holds: a changed one is warmed into a new cache."""
    monkeypatch.setenv("JAXGRADE_CACHE_DIR", str(tmp_path / "cache"))
    course = make_minicourse(tmp_path / "course")
    version = load_course(course).assignment("double").version()
    answers = answers_dir(load_course(course).assignment("double"))

    def folder(alternatives: bool = True) -> Path:
        return trusted_cache_dir(load_course(course).assignment("double", staff=True), alternatives=alternatives)

    first = folder()
    assert folder() == first == folder(alternatives=False)  # no alternatives: one cache
    assert cache_plan(load_course(course).assignment("double", staff=True), 10_000) == (first, True, False)
    alternatives = course / "reference" / "double" / "alternatives"
    alternatives.mkdir()
    (alternatives / "plus.py").write_text("def double(x):\n    return x + x\n")
    second = folder()
    assert folder(alternatives=False) == first  # the reference's own cache does not change
    starter = course / "assignments" / "double" / "double.ipynb"
    starter.write_text(build_notebook("# TODO: double(x)"))
    third = folder()
    assert len({first, second, third, folder(alternatives=False)}) == 4
    text_only = json.loads(starter.read_text())
    text_only["cells"].insert(0, {"cell_type": "markdown", "metadata": {}, "source": "# Doubling, revised"})
    starter.write_text(json.dumps(text_only))
    assert folder() == third  # only code cells run: a changed text is the same cache
    # no grade changes: the same version, and the evaluator's kept answers stay where they were
    assert load_course(course).assignment("double").version() == version
    assert answers_dir(load_course(course).assignment("double")) == answers


@pytest.fixture
def with_alternative(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Assignment:
    """The ``double`` assignment with one alternative solution, its caches under ``tmp_path``."""
    monkeypatch.setenv("JAXGRADE_CACHE_DIR", str(tmp_path / "cache"))
    course = make_minicourse(tmp_path / "course")
    (course / "reference" / "double" / "alternatives").mkdir()
    (course / "reference" / "double" / "alternatives" / "plus.py").write_text("def double(x):\n    return x + x\n")
    return load_course(course).assignment("double", staff=True)


def test_only_a_large_batch_warms_with_the_alternatives(with_alternative: Assignment) -> None:
    """Grading the alternatives takes the warming task longer: a batch too small to win that back
    warms (or reads) the reference's cache; the wider cache is read whenever it is there."""
    from grader.grading.grade import ALTERNATIVES_MIN

    a = with_alternative
    base, wide = trusted_cache_dir(a), trusted_cache_dir(a, alternatives=True)
    assert base != wide
    assert cache_plan(a, ALTERNATIVES_MIN - 1) == (base, True, False)
    assert cache_plan(a, ALTERNATIVES_MIN) == (wide, True, True)
    base.mkdir(parents=True)
    assert cache_plan(a, 1) == (base, False, False)
    assert cache_plan(a, ALTERNATIVES_MIN) == (wide, True, True)
    if choose_isolation("auto") == "bwrap":
        assert cache_status(a, "bwrap", jobs=2, n=ALTERNATIVES_MIN) == (
            f"compilation cache: warming {wide} by grading the starter with the reference in it, and with each of "
            "1 alternative solution(s) once, beside the first submissions"
        )
    wide.mkdir(parents=True)
    assert cache_plan(a, 1) == (wide, False, True)


def test_a_batch_warming_the_wider_cache_reads_the_reference_s_meanwhile(with_alternative: Assignment) -> None:
    a = with_alternative
    base, wide = trusted_cache_dir(a), trusted_cache_dir(a, alternatives=True)
    assert _ready_cache(a, str(wide)) is None and _ready_cache(a, None) is None
    base.mkdir(parents=True)
    assert _ready_cache(a, str(wide)) == XlaCache(base)
    assert _ready_cache(a, None) is None  # no cache asked for: none
    wide.mkdir(parents=True)
    assert _ready_cache(a, str(wide)) == XlaCache(wide)


STARTER_CELL = "import jax.numpy as jnp\njnp.cos(jnp.arange(13.0)).block_until_ready()  # the tutorial's"
ALTERNATIVE = "import jax.numpy as jnp\n# %%\njnp.sin(jnp.arange(11.0)).block_until_ready()\n# %%\ndef double(x):\n    return x + x\n"
COUNT_BOTH = """
import jax.numpy as jnp
from jax import monitoring
HITS = []
monitoring.register_event_listener(lambda name, **kw: HITS.append(name) if name.endswith("cache_hits") else None)
jnp.cos(jnp.arange(13.0)).block_until_ready()
FROM_STARTER = len(HITS)
jnp.sin(jnp.arange(11.0)).block_until_ready()
FROM_ALTERNATIVE = len(HITS) - FROM_STARTER
"""
RIGHT_IF_BOTH = "def double(x):\n    return 2 * x if FROM_STARTER and FROM_ALTERNATIVE else 3 * x"


def _starter_and_alternative(course: Path) -> None:
    """A starter with a tutorial cell of its own (STARTER_CELL) and one alternative (ALTERNATIVE)."""
    student = course / "assignments" / "double"
    (student / "double.ipynb").write_text(build_notebook(STARTER_CELL, "def double(x):\n    raise NotImplementedError"))
    (course / "reference" / "double" / "alternatives").mkdir()
    (course / "reference" / "double" / "alternatives" / "plus.py").write_text(ALTERNATIVE)


RIGHT_IF_STARTER_ONLY = "def double(x):\n    return 2 * x if FROM_STARTER and not FROM_ALTERNATIVE else 3 * x"


@pytest.mark.slow
def test_the_cache_holds_what_the_starter_and_the_alternatives_compiled(
    bwrap_course: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Warming runs the starter's own cells (in every student's notebook) with the reference in
    place of the stubs, and each alternative solution the same way: a student whose notebook runs
    the same computations reads them from the cache."""
    _starter_and_alternative(bwrap_course)
    a = load_course(bwrap_course).assignment("double", staff=True)
    counting = tmp_path / "counting.ipynb"
    counting.write_text(build_notebook(COUNT_BOTH, RIGHT_IF_BOTH))
    assert [label for label, *_ in warm_notebooks(a, tmp_path, alternatives=False)] == ["the reference"]
    final = trusted_cache_dir(a, alternatives=True)
    with caplog.at_level(logging.WARNING, logger="grader.grading.grade"):
        assert warm_cache(a, "bwrap", final, alternatives=True) >= 2
    warned = [r for r in caplog.records if r.name == "grader.grading.grade" and "warming" in r.getMessage()]
    assert not warned, caplog.text  # each earned full marks, every cell ran (no stub stayed in force)
    cache = xla_cache.ready(final)
    assert cache is not None
    assert grade_notebook(a, counting, xla_cache=cache).score == 4  # both were hits
    assert grade_notebook(a, counting).score == 0  # and without the cache, neither
    # the reference's own cache: the starter's cells, not the alternative's
    base = trusted_cache_dir(a)
    assert warm_cache(a, "bwrap", base) >= 1
    only_starter = tmp_path / "only_starter.ipynb"
    only_starter.write_text(build_notebook(COUNT_BOTH, RIGHT_IF_STARTER_ONLY))
    assert grade_notebook(a, only_starter, xla_cache=xla_cache.ready(base)).score == 4


def test_a_ctrl_c_while_warming_leaves_no_staged_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from grader.grading import grade as grading

    monkeypatch.setenv("JAXGRADE_CACHE_DIR", str(tmp_path / "cache"))
    course = make_minicourse(tmp_path / "course")
    a = load_course(course).assignment("double", staff=True)

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(grading, "grade_notebook", interrupted)
    with pytest.raises(KeyboardInterrupt):
        warm_cache(a, "bwrap", tmp_path / "cache" / "xla" / "x")
    assert [p.name for p in (tmp_path / "cache" / "xla").iterdir()] == []


def test_warming_failure_costs_nothing_but_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAXGRADE_CACHE_DIR", str(tmp_path / "cache"))
    course = make_minicourse(tmp_path / "course")
    a = load_course(course).assignment("double", staff=True)
    (course / "reference" / "double" / "solution.py").unlink()
    assert warm_cache(a, "process", tmp_path / "cache" / "xla" / "x") == 0
    assert not (tmp_path / "cache" / "xla" / "x").exists()
    assert [p.name for p in (tmp_path / "cache" / "xla").iterdir()] == []


def test_the_ta_is_told_which_cache_a_batch_uses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAXGRADE_CACHE_DIR", str(tmp_path / "cache"))
    a = load_course(make_minicourse(tmp_path / "course")).assignment("double", staff=True)
    assert cache_status(a, "process") == "compilation cache: off (only bubblewrap sandboxes can mount it read-only)"
    assert cache_status(a, "auto", cache=False) == "compilation cache: off (--no-cache)"
    if choose_isolation("auto") != "bwrap":
        return
    assert cache_status(a, "bwrap", jobs=1, n=1) == (
        "compilation cache: none yet for this assignment version (a batch of 3 or more warms it)"
    )
    final = trusted_cache_dir(a)
    assert cache_status(a, "bwrap", jobs=2, n=1) == (
        f"compilation cache: warming {final} by grading the starter with the reference in it once, beside the first submissions"
    )
    assert cache_status(a, "bwrap", jobs=1, n=3) == (
        f"compilation cache: warming {final} by grading the starter with the reference in it once, before the first submission"
    )
    final.mkdir(parents=True)
    assert cache_status(a, "bwrap") == f"compilation cache: {final}"


SECRET_HELPER = """
import jax, jax.numpy as jnp

def _secret_trick_helper(v):
    return jnp.cumsum(v * 2.0)

def f(v):  # the jitted function's own name is in its module name, and so in the entry's key
    return _secret_trick_helper(v)

jax.jit(f)(jnp.arange(6.0)).block_until_ready()
"""


@pytest.mark.slow
def test_published_entries_carry_no_names_of_the_warming_code(bwrap_course: Path, tmp_path: Path) -> None:
    """Red team: the entries kept the warming run's function names and cell file names in their
    debug locations, readable by a sandbox that names the entry."""
    import zlib

    a = load_course(bwrap_course).assignment("double", staff=True)
    nb = tmp_path / "secret.ipynb"
    nb.write_text(build_notebook(SECRET_HELPER, "def double(x):\n    return 2 * x"))
    staged = xla_cache.staging()
    grade_notebook(a, nb, xla_cache=XlaCache(staged, writable=True))
    final = xla_cache.cache_root() / "double-secret"
    assert xla_cache.publish(staged, final) >= 1
    for entry in final.iterdir():
        data = entry.read_bytes()
        texts = [data]
        for wbits in (zlib.MAX_WBITS, -zlib.MAX_WBITS, zlib.MAX_WBITS | 16):
            with contextlib.suppress(zlib.error):
                texts.append(zlib.decompress(data, wbits))
        with contextlib.suppress(Exception):
            import zstandard

            texts.append(zstandard.ZstdDecompressor().decompress(data, max_output_size=1 << 28))
        for text in texts:
            assert b"_secret_trick_helper" not in text and b"ipykernel" not in text, entry.name


# --------------------------------------------------------------------------- the grading processes' own cache

_TRUSTED_RUN = """
import json, os, sys
os.umask(0o002)  # a user-private-group umask: the folders must still be private
import jax
from grader.host import xla_cache
hits = []
jax.monitoring.register_event_listener(lambda name, **kw: hits.append(name) if name.endswith("cache_hits") else None)
if sys.argv[1:] == ["late"]:  # JAX started before: its settings are fixed, nothing is kept
    jax.numpy.zeros(3).block_until_ready()
folder = xla_cache.use_trusted_cache()
import jax.numpy as jnp
jax.jit(lambda x: jnp.sin(x) * 3 + 1)(jnp.arange(7.0)).block_until_ready()
print(json.dumps({"folder": str(folder), "hits": len(hits)}))
"""


def _trusted_run(cache_root: Path, *args: str) -> dict:
    import subprocess
    import sys

    env = {**os.environ, "JAXGRADE_CACHE_DIR": str(cache_root), "JAX_PLATFORMS": "cpu"}
    done = subprocess.run(
        [sys.executable, "-c", _TRUSTED_RUN, *args], env=env, capture_output=True, text=True, timeout=120, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_grading_process_reads_what_an_earlier_one_compiled(tmp_path):
    """use_trusted_cache: the first process writes its compilations into <root>/trusted/<kind
    of machine> (each folder 0700 whatever the umask, never mounted in a sandbox), the next
    process's same computation is a hit; a process whose JAX started first keeps nothing."""
    root = tmp_path / "cache"
    first = _trusted_run(root)
    folder = root / "trusted" / xla_cache._host_key()
    assert first == {"folder": str(folder), "hits": 0}
    for d in (root, root / "trusted", folder):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    entries = sorted(p.name for p in folder.iterdir() if p.name.endswith("-cache"))
    assert entries
    second = _trusted_run(root)
    assert second["hits"] >= 1
    assert sorted(p.name for p in folder.iterdir() if p.name.endswith("-cache")) == entries
    assert _trusted_run(tmp_path / "late", "late") == {"folder": "None", "hits": 0}
    assert not (tmp_path / "late" / "trusted").exists()


def test_half_written_entries_are_dropped(tmp_path):
    """An entry without its access-time file (JAX writes that after the entry: a worker killed
    while writing) is removed, since with it there JAX's eviction fails on every write."""
    (tmp_path / "aa-cache").write_bytes(b"an entry")
    (tmp_path / "aa-atime").write_bytes(b"12345678")
    (tmp_path / "bb-cache").write_bytes(b"half an entr")
    xla_cache._drop_unfinished(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == ["aa-atime", "aa-cache"]


def test_a_run_without_bubblewrap_forgets_the_kept_compilations(tmp_path, monkeypatch):
    """Its kernels ran as this user and could have planted executables there."""
    from grader.grading.grade import _hidden_from_sandbox, grade_many

    monkeypatch.setenv("JAXGRADE_CACHE_DIR", str(tmp_path / "cache"))
    kept = xla_cache.trusted_folder()
    kept.mkdir(parents=True)
    (kept / "aa-cache").write_bytes(b"planted?")
    assignment = load_course(make_minicourse(tmp_path / "course")).assignment("double")
    nb = tmp_path / "s.ipynb"
    nb.write_text(notebook("full"), encoding="utf-8")
    assert xla_cache.trusted_root() in _hidden_from_sandbox(assignment, nb)  # never mounted
    rec = grade_many(assignment, [nb], isolation="process")[nb]
    assert rec.status == "graded"
    assert not xla_cache.trusted_root().exists()


def test_a_folder_others_can_write_is_not_used(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("JAXGRADE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(xla_cache, "jax_started", lambda: False)  # as in a fresh worker
    folder = tmp_path / "trusted"
    folder.mkdir()
    folder.chmod(0o777)
    with caplog.at_level(logging.WARNING, logger="grader.host.xla_cache"):
        assert xla_cache.use_trusted_cache() is None
    assert "not a private folder" in caplog.text
    folder.chmod(0o700)
    folder.rmdir()
    folder.symlink_to(tmp_path)  # a link in its place is refused too
    assert xla_cache.use_trusted_cache() is None


def _compile_in_worker() -> list:
    import jax
    import jax.numpy as jnp

    jax.jit(lambda x: x * 5 - 1)(jnp.arange(3.0)).block_until_ready()
    return [jax.config.jax_compilation_cache_dir, os.environ.get("XLA_FLAGS", "")]


@pytest.mark.parametrize("keep", [True, False])
def test_pool_workers_keep_their_compilations_only_when_told(tmp_path, monkeypatch, keep):
    """grade_many's workers (``_init_worker``): with the cache on and bubblewrap sandboxes they
    keep what they compile in <root>/trusted; otherwise (``--no-cache``, no bubblewrap) nothing.
    Either way they compile with the sandboxes' flags."""
    from grader.batch.pool import TrustedPool
    from grader.grading.grade import _init_worker
    from grader.host.xla_flags import fast_compile_flags

    monkeypatch.setenv("JAXGRADE_CACHE_DIR", str(tmp_path))
    with TrustedPool(1, initializer=_init_worker, initargs=(1, None, keep)) as pool:  # None: the pool's
        [(_, (folder, flags))] = list(pool.run(_compile_in_worker, [("k", ())]))
    trusted = tmp_path / "trusted"
    if keep:
        kept = trusted / xla_cache._host_key()
        assert folder == str(kept) and any(p.name.endswith("-cache") for p in kept.iterdir())
    else:
        assert folder is None and not trusted.exists()
    assert all(flag in flags.split() for flag in fast_compile_flags())
