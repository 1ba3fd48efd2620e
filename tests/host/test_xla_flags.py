"""grader/host/xla_flags.py: the sandboxes' XLA flags, and the probe that keeps a flag this
jaxlib does not know out of them (XLA would end every sandbox that names it)."""

from __future__ import annotations

import pytest

from grader.host import xla_flags
from grader.host.sandbox import sandbox_env

PROBE = xla_flags.accepted  # the cached probe (a test may put a stand-in in its place)


def _has_older_emitters() -> bool:
    """Whether the installed jaxlib still has XLA:CPU's older fusion emitters, by its version
    (measured: 0.6.2 and 0.10.2 have them; 0.11.2 and 0.12.0.1, which Python 3.12+ installs, do
    not), so that a test knows what the probe must say without asking the probe."""
    from importlib import metadata

    from packaging.version import Version

    return Version(metadata.version("jaxlib")) < Version("0.11")


EMITTERS = "--xla_cpu_use_fusion_emitters=false"
#: The flags a sandbox gets beside BASE_FLAGS with this jaxlib (measured: 0.12.0.1 accepts every
#: fast-compile flag but the older emitters).
FAST = tuple(f for f in xla_flags.FAST_COMPILE_FLAGS if f != EMITTERS or _has_older_emitters())


@pytest.fixture(autouse=True)
def _fresh_probe(monkeypatch):
    PROBE.cache_clear()
    xla_flags._usable.cache_clear()  # what the probes said, kept per process (and per stand-in here)
    monkeypatch.setattr(xla_flags, "_GIVEN", [])  # what this process was given: recorded afresh
    yield
    PROBE.cache_clear()
    xla_flags._usable.cache_clear()


def test_the_probe_accepts_what_this_jaxlib_knows_and_refuses_what_it_does_not():
    assert xla_flags.accepted(xla_flags.BASE_FLAGS)
    assert xla_flags.accepted(xla_flags.FAST_COMPILE_FLAGS) == _has_older_emitters()
    assert xla_flags.accepted((EMITTERS,)) == _has_older_emitters()
    for flag in set(xla_flags.FAST_COMPILE_FLAGS) - {EMITTERS}:
        assert xla_flags.accepted((flag,)), flag
    assert not xla_flags.accepted(("--xla_no_such_flag_in_any_jaxlib=1",))


def test_every_word_is_a_flag():
    """XLA stops reading XLA_FLAGS at the first word that is not a flag: every flag after it
    (the fast compile, a device count) would be silently lost."""
    for devices in (1, 4):
        words = xla_flags.sandbox_xla_flags(devices).split()
        assert words and all(w.startswith("--xla_") and "=" in w for w in words), words


def test_sandboxes_compile_fast_where_jaxlib_accepts_it(monkeypatch):
    monkeypatch.delenv(xla_flags.SWITCH, raising=False)
    flags = xla_flags.sandbox_xla_flags().split()
    assert flags == [*xla_flags.BASE_FLAGS, *FAST]
    assert sandbox_env("bwrap", "/sandbox")["XLA_FLAGS"] == " ".join(flags)
    four = xla_flags.sandbox_xla_flags(4).split()
    assert four[0] == "--xla_force_host_platform_device_count=4" and four[1:] == flags


def test_a_jaxlib_without_the_flag_grades_without_it(monkeypatch):
    seen = []

    def refuses(flags):
        seen.append(flags)
        return False

    monkeypatch.delenv(xla_flags.SWITCH, raising=False)
    monkeypatch.setattr(xla_flags, "accepted", refuses)
    assert xla_flags.sandbox_xla_flags().split() == list(xla_flags.BASE_FLAGS)
    assert seen[0] == xla_flags.FAST_COMPILE_FLAGS  # together first, then each (side by side: in any order)
    assert sorted(seen[1:]) == sorted((flag,) for flag in xla_flags.FAST_COMPILE_FLAGS)


def test_a_jaxlib_that_knows_some_of_the_flags_grades_with_those(monkeypatch):
    """JAX 0.12 has no older emitters but still compiles faster without LLVM's passes: one flag
    it does not know must not cost the others (as it would in one XLA_FLAGS)."""
    seen = []

    def knows_all_but_the_emitters(flags):
        seen.append(flags)
        return EMITTERS not in flags

    monkeypatch.delenv(xla_flags.SWITCH, raising=False)
    monkeypatch.setattr(xla_flags, "accepted", knows_all_but_the_emitters)
    rest = [f for f in xla_flags.FAST_COMPILE_FLAGS if f != EMITTERS]
    assert rest and xla_flags.sandbox_xla_flags().split() == [*xla_flags.BASE_FLAGS, *rest]
    assert seen[0] == xla_flags.FAST_COMPILE_FLAGS  # all together first: one probe where all are known


@pytest.mark.parametrize("off", ["0", "false", "No", " off "])
def test_staff_can_turn_it_off(monkeypatch, off):
    monkeypatch.setenv(xla_flags.SWITCH, off)
    monkeypatch.setattr(xla_flags, "accepted", lambda flags: pytest.fail("no probe when it is off"))
    assert xla_flags.sandbox_xla_flags().split() == list(xla_flags.BASE_FLAGS)
    assert xla_flags.sandbox_xla_flags(2).split()[1:] == list(xla_flags.BASE_FLAGS)


def test_a_probe_that_cannot_run_leaves_the_flag_out(monkeypatch):
    monkeypatch.setattr(xla_flags.sys, "executable", "/nonexistent/python")
    assert not xla_flags.accepted(xla_flags.FAST_COMPILE_FLAGS)


def test_grading_processes_compile_like_their_sandboxes(monkeypatch):
    """A trusted grading process computes the references with the sandboxes' emitters (the same
    last bits as the student's code) and compiles them faster; the user's own flags stay, and the
    student's kernel (the in-notebook self-check) is never given them."""
    from grader.grading.grade import _set_trusted_devices
    from grader.host import xla_cache

    monkeypatch.delenv(xla_flags.SWITCH, raising=False)
    monkeypatch.setattr(xla_cache, "jax_started", lambda: False)  # as in a fresh worker
    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/tmp/x")
    _set_trusted_devices(1)
    assert xla_flags.os.environ["XLA_FLAGS"] == "--xla_dump_to=/tmp/x"
    _set_trusted_devices(4, fast_compile=True)
    words = xla_flags.os.environ["XLA_FLAGS"].split()
    assert words == ["--xla_dump_to=/tmp/x", "--xla_force_host_platform_device_count=4", *FAST]
    _set_trusted_devices(4, fast_compile=True)  # twice changes nothing
    assert xla_flags.os.environ["XLA_FLAGS"].split() == words
    monkeypatch.setenv(xla_flags.SWITCH, "0")
    monkeypatch.delenv("XLA_FLAGS")
    _set_trusted_devices(1, fast_compile=True)
    assert "XLA_FLAGS" not in xla_flags.os.environ
    # a flag of the same name in the user's own XLA_FLAGS is theirs to keep in this process
    monkeypatch.delenv(xla_flags.SWITCH)
    monkeypatch.setattr(xla_flags, "_GIVEN", [])
    monkeypatch.setenv("XLA_FLAGS", "--xla_backend_optimization_level=3")
    _set_trusted_devices(1, fast_compile=True)
    words = xla_flags.os.environ["XLA_FLAGS"].split()
    assert words == ["--xla_backend_optimization_level=3", *(f for f in FAST if "optimization_level" not in f)]


def test_what_grading_adds_to_its_own_flags_is_not_the_users_environment(monkeypatch):
    """The check server's key and the server's environment are the user's: a check that graded
    in its own process (and so added flags for its own JAX) must name the same server as the
    next check, which has not graded yet."""
    from grader.grading import check_server
    from grader.grading.grade import _set_trusted_devices
    from grader.host import xla_cache

    monkeypatch.delenv(xla_flags.SWITCH, raising=False)
    monkeypatch.setattr(xla_cache, "jax_started", lambda: False)
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    before = check_server.server_key()
    _set_trusted_devices(4, fast_compile=True)
    assert "--xla_force_host_platform_device_count=4" in xla_flags.os.environ["XLA_FLAGS"]
    assert "XLA_FLAGS" not in xla_flags.given_environ()
    assert check_server.server_key() == before
    monkeypatch.setattr(xla_flags, "_GIVEN", [])
    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/tmp/x")
    _set_trusted_devices(1, fast_compile=True)
    assert xla_flags.given_environ()["XLA_FLAGS"] == "--xla_dump_to=/tmp/x"


def test_a_process_whose_jax_started_adds_no_compile_flag(monkeypatch):
    """Its backend compiles with the flags it started with; naming others in XLA_FLAGS would
    only file its compilations under a key (JAX's hashes XLA_FLAGS) for flags it does not use."""
    from grader.grading.grade import _set_trusted_devices
    from grader.host import xla_cache

    monkeypatch.delenv(xla_flags.SWITCH, raising=False)
    monkeypatch.setattr(xla_cache, "jax_started", lambda: True)
    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/tmp/x")
    _set_trusted_devices(1, fast_compile=True)
    assert xla_flags.os.environ["XLA_FLAGS"] == "--xla_dump_to=/tmp/x"


@pytest.mark.parametrize(
    ("value", "kept"),
    [
        ("xla_cpu_use_fusion_emitters", ["--xla_cpu_use_fusion_emitters=false"]),
        (
            "--xla_backend_optimization_level=0, xla_cpu_parallel_codegen_split_count",
            ["--xla_backend_optimization_level=0", "--xla_cpu_parallel_codegen_split_count=1"],
        ),
        (" XLA_CPU_PARALLEL_CODEGEN_SPLIT_COUNT ", ["--xla_cpu_parallel_codegen_split_count=1"]),
        ("--xla_cpu_parallel_codegen_split_count=1", ["--xla_cpu_parallel_codegen_split_count=1"]),
    ],
)
def test_staff_can_keep_some_of_them_by_name(monkeypatch, value, kept):
    """A course whose notebooks run long element-wise computations keeps LLVM's passes and the
    older emitters; the flags keep their own order and values, whatever the names say."""
    monkeypatch.setenv(xla_flags.SWITCH, value)
    monkeypatch.setattr(xla_flags, "accepted", lambda flags: True)
    assert xla_flags.sandbox_xla_flags().split() == [*xla_flags.BASE_FLAGS, *kept]


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("xla_cpu_use_fusion_emitters,xla_cpu_enable_fast_math", "names xla_cpu_enable_fast_math"),
        # a switch, not a way to pass XLA another value: =true would mean the newer emitters
        ("xla_cpu_use_fusion_emitters=true", "names xla_cpu_use_fusion_emitters=true"),
        ("--xla_backend_optimization_level=3", "names --xla_backend_optimization_level=3"),
        ("1,xla_cpu_use_fusion_emitters", "names 1"),
        (" , ", "names no flag"),
        ("--", "names --"),
    ],
)
def test_a_word_that_is_none_of_them_is_refused_with_what_the_setting_takes(monkeypatch, value, said):
    monkeypatch.setenv(xla_flags.SWITCH, value)
    monkeypatch.setattr(xla_flags, "accepted", lambda flags: pytest.fail("nothing is probed"))
    with pytest.raises(ValueError) as caught:
        xla_flags.sandbox_xla_flags()
    message = str(caught.value)
    assert message.startswith(f"{xla_flags.SWITCH}={value!r} {said}: it takes 0 (or false, no, off"), message
    assert all(xla_flags.flag_name(f) in message for f in xla_flags.FAST_COMPILE_FLAGS)


def test_a_flag_named_by_hand_that_this_jaxlib_refuses_is_warned_about_once(monkeypatch, caplog):
    """By default a refused flag is only left out (JAX 0.12 has no older emitters); a TA who
    named it should hear that it is not used."""
    monkeypatch.setattr(xla_flags, "accepted", lambda flags: EMITTERS not in flags)
    monkeypatch.setenv(xla_flags.SWITCH, f"{xla_flags.flag_name(EMITTERS)},xla_backend_optimization_level")
    with caplog.at_level("WARNING", logger=xla_flags.__name__):
        for _ in range(2):
            assert xla_flags.sandbox_xla_flags().split()[-1] == "--xla_backend_optimization_level=0"
    warned = [r.getMessage() for r in caplog.records]
    assert warned == [
        f"{xla_flags.SWITCH} names {EMITTERS}, which this jaxlib does not accept: sandboxes compile without it"
    ]
    caplog.clear()
    monkeypatch.delenv(xla_flags.SWITCH)
    with caplog.at_level("WARNING", logger=xla_flags.__name__):
        xla_flags.sandbox_xla_flags()
    assert caplog.records == []
