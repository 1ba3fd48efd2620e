"""The evaluator's kept answers (grader/host/eval_cache.py): keys, storage, and real sessions
that share them: a second submission exporting the same module gets the same answer without
an evaluator, whatever cell or line the function was written in."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import numpy as np
import pytest

from grader.host import eval_cache, xla_cache
from grader.host.eval_cache import EvalCache, beside
from grader.host.sandbox import Limits
from grader.host.session import EvaluatorUnavailable, Session, SubmissionError
from grader.wire import messages, protocol
from tests.conftest import build_notebook

FN = "import jax, jax.numpy as jnp\n\ndef f(x, w):\n    return jnp.tanh(x @ w).sum(axis=-1)"


def _packed(module: bytes, *args: np.ndarray) -> tuple[dict, bytes]:
    return protocol.pack_values({"module": np.frombuffer(module, dtype=np.uint8), "args": list(args)})


def test_the_key_is_the_request_and_its_values_never_the_id() -> None:
    x = np.arange(6.0).reshape(2, 3)
    frag, payload = _packed(b"module-bytes", x)
    key = EvalCache.key(messages.Eval(1).encode(), frag, payload)
    assert key == EvalCache.key(messages.Eval(99).encode(), frag, payload)
    assert len(key) == 64
    others = [
        EvalCache.key(messages.Analyze(1).encode(), frag, payload),
        EvalCache.key(messages.Grad(1, 0).encode(), frag, payload),
        EvalCache.key(messages.Eval(1).encode(), *_packed(b"module-byteS", x)),
        EvalCache.key(messages.Eval(1).encode(), *_packed(b"module-bytes", x + 1e-9)),
        EvalCache.key(messages.Eval(1).encode(), *_packed(b"module-bytes", x.astype(np.float32))),
    ]
    assert len({key, *others}) == 6


def test_entries_round_trip_private_and_atomic(tmp_path: Path) -> None:
    folder = beside(tmp_path / "xla" / "vmap-0123")
    assert folder.parent == tmp_path / "evals"
    cache = EvalCache(folder)
    key = "ab" + "1" * 62
    assert cache.get(key) is None and cache.misses == 1
    assert cache.put(key, {"id": 7, "kind": "evaluated", "values": {}}, b"\x01\x02")
    assert cache.get(key) == ({"kind": "evaluated", "values": {}}, b"\x01\x02") and cache.hits == 1
    for path in [folder.parent, folder, folder / "ab"]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o700, path
    (entry,) = (folder / "ab").iterdir()
    assert entry.name == key and stat.S_IMODE(entry.stat().st_mode) == 0o600


def test_damaged_oversized_and_overflowing_entries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = EvalCache(tmp_path / "evals" / "a")
    key = "cd" + "2" * 62
    assert cache.put(key, {"kind": "evaluated"}, b"x" * 100)
    path = tmp_path / "evals" / "a" / "cd" / key
    path.write_bytes(path.read_bytes()[:12])  # cut short: its header no longer parses
    assert cache.get(key) is None
    path.unlink()
    os.symlink("/etc/passwd", path)
    assert cache.get(key) is None  # never followed
    assert not cache.put("ef" + "3" * 62, {}, b"x" * (eval_cache.MAX_ENTRY_BYTES + 1))
    monkeypatch.setattr(eval_cache, "MAX_CACHE_BYTES", 1000)
    full = EvalCache(tmp_path / "evals" / "b")
    assert full.put("01" + "4" * 62, {}, b"x" * 600)
    assert not full.put("02" + "5" * 62, {}, b"x" * 600)  # past the cap: not written
    assert not (tmp_path / "evals" / "b" / "02").exists()


# --------------------------------------------------------------------------- real sessions


@pytest.fixture()
def limits() -> Limits:
    return Limits(cell_timeout=60, call_timeout=60)


def _session(source: list[str], limits: Limits, isolation: str, cache: EvalCache | None) -> Session:
    s = Session(build_notebook(*source), limits=limits, isolation=isolation, eval_cache=cache)
    s.start()
    assert s.execute().ok
    return s


@pytest.mark.skipif(
    xla_cache.keeps_a_frame_at_limit_zero(),
    reason="JAX before 0.7 keeps one traceback frame (the function's name, file and line) in an exported "
    "module even with JAX_TRACEBACK_IN_LOCATIONS_LIMIT=0: two layouts of one function export different "
    "bytes there, and the evaluator's answers are kept for each",
)
def test_a_second_submission_with_the_same_module_needs_no_evaluator(
    tmp_path: Path, limits: Limits, isolation: str
) -> None:
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((4, 5)).astype(np.float32), rng.standard_normal((5, 3)).astype(np.float32)
    specs = [("B, 5", "float32"), ("5, 3", "float32")]
    cache = EvalCache(tmp_path / "evals" / "t")
    first = _session([FN], limits, isolation, cache)
    try:
        module = first.export("f", specs).module
        want, _ = first.evaluate("f", module, x, w)
        analysis = first.analyze("f", module)
        assert first.evaluator is not None and cache.misses == 2 and cache.hits == 0
    finally:
        first.close()
    # another student: the same function two cells and some lines further down, another docstring-free layout
    second = _session(["import numpy as np\nprint('hello')", "# my answer\n\n\n" + FN], limits, isolation, cache)
    try:
        again = second.export("f", specs).module
        assert again == module  # no file or line in the module: only JAX's name stack
        got, info = second.evaluate("f", again, x, w)
        assert second.analyze("f", again) == analysis
        assert cache.hits == 2
        assert second.evaluator is None  # never started: the answers were kept
        np.testing.assert_array_equal(got, want)
        assert got.dtype == want.dtype and info["analysis"] == analysis
        # other inputs are another question: the evaluator starts for it
        other, _ = second.evaluate("f", again, x + 1, w)
        assert second.evaluator is not None and cache.misses == 3
        np.testing.assert_allclose(other, np.tanh((x + 1) @ w).sum(axis=-1), rtol=1e-5)
    finally:
        second.close()


def test_a_module_that_failed_is_asked_again(tmp_path: Path, limits: Limits, isolation: str) -> None:
    cache = EvalCache(tmp_path / "evals" / "t")
    bad = np.ones((4, 6), np.float32), np.ones((5, 3), np.float32)  # wrong inner dimension
    good = np.ones((4, 5), np.float32), np.ones((5, 3), np.float32)
    for _ in range(2):
        s = _session([FN], limits, isolation, cache)
        try:
            module = s.export("f", [("B, 5", "float32"), ("5, 3", "float32")]).module
            with pytest.raises(SubmissionError):
                s.evaluate("f", module, *bad)
            assert s.evaluator is not None
            # after a module that failed, nothing this evaluator answers is kept
            np.testing.assert_allclose(s.evaluate("f", module, *good)[0], np.tanh(5.0) * 3, rtol=1e-5)
        finally:
            s.close()
    assert cache.hits == 0 and not any(p.is_file() for p in cache.path.rglob("*"))


def test_an_entry_that_fails_a_replys_checks_is_asked_again_and_replaced(
    tmp_path: Path, limits: Limits, isolation: str
) -> None:
    cache = EvalCache(tmp_path / "evals" / "t")
    x, w = np.ones((2, 5), np.float32), np.ones((5, 3), np.float32)
    s = _session([FN], limits, isolation, cache)
    try:
        module = s.export("f", [("B, 5", "float32"), ("5, 3", "float32")]).module
        want, _ = s.evaluate("f", module, x, w)
        (entry,) = [p for p in cache.path.rglob("*") if p.is_file()]
        cache.put(entry.name, {"kind": "evaluated", "values": {"result": 1}, "arrays": [5]}, b"short")
        cache.hits = cache.misses = 0
        got, _ = s.evaluate("f", module, x, w)  # the same question: the damaged entry is a miss
        np.testing.assert_array_equal(got, want)
        assert (cache.hits, cache.misses) == (0, 1)
        s.evaluate("f", module, x, w)
        assert cache.hits == 1  # rewritten by the live answer
    finally:
        s.close()


def test_an_evaluator_that_cannot_start_is_the_graders_failure_not_a_verdict(
    tmp_path: Path, limits: Limits, isolation: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = _session([FN], limits, isolation, EvalCache(tmp_path / "evals" / "t"))
    try:
        module = s.export("f", [("B, 5", "float32"), ("5, 3", "float32")]).module

        def broken(self: Session) -> None:
            raise OSError("no room for another sandbox")

        monkeypatch.setattr(Session, "_spawn_evaluator", broken)
        with pytest.raises(EvaluatorUnavailable) as info:
            s.evaluate("f", module, np.ones((2, 5), np.float32), np.ones((5, 3), np.float32))
        assert not isinstance(info.value, SubmissionError)  # never a failed test of the student's
        assert isinstance(s.failure, OSError)  # grade_notebook raises it: a grader_error record
    finally:
        s.close()


def test_only_plain_answers_are_kept() -> None:
    plain = messages.Evaluated(nr_devices=1, analysis={"loops": 0}, custom_calls=("shape_assertion",))
    assert eval_cache.eval_plain(plain)
    assert not eval_cache.eval_plain(messages.Evaluated(nr_devices=1, analysis={}, custom_calls=("lapack_sgetrf_ffi",)))
    assert not eval_cache.eval_plain(
        messages.Evaluated(nr_devices=1, analysis={"analysis_error": "MemoryError: "}, custom_calls=())
    )
    assert not eval_cache.eval_plain(messages.Evaluated(nr_devices=1, analysis={}, custom_calls=None))


def test_the_folder_names_the_evaluators_code(tmp_path: Path) -> None:
    folder = beside(tmp_path / "xla" / "vmap-0123")
    assert folder.name == f"vmap-0123-{eval_cache.code_digest()}" and len(eval_cache.code_digest()) == 12


def test_a_folder_that_is_not_ours_and_private_turns_the_cache_off(tmp_path: Path) -> None:
    evals = tmp_path / "evals"
    evals.mkdir(mode=0o700)
    os.chmod(evals, 0o777)  # anyone could have planted answers under it
    cache = EvalCache(evals / "a")
    assert not cache.put("ab" + "1" * 62, {}, b"x")
    assert cache.get("ab" + "1" * 62) is None and not (evals / "a").exists()
    os.chmod(evals, 0o700)
    assert EvalCache(evals / "a").put("ab" + "1" * 62, {}, b"x")
