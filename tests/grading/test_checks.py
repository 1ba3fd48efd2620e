"""Unit tests for grader.grading.checks against a fake submission (no sandbox)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from grader.grading.checks import (
    PER_EXAMPLE_MAX,
    CheckFailure,
    _argument,
    assert_close,
    check_compile_count,
    check_is_jitted,
    check_jit,
    check_no_vmap,
    check_parallel,
    check_pure,
    check_recompiles,
    check_vectorized,
    quoting_actual_values,
)
from grader.grading.hints import taught
from grader.host.session import CallResult, ExportResult, Location, MissingName, StudentRaised, error_cause


class FakeSubmission:
    """Answers like the real proxy, from plain Python functions."""

    def __init__(
        self,
        funcs: dict[str, Any],
        *,
        export_error: StudentRaised | None = None,
        vmap_used: bool = False,
        mutate: bool = False,
        jitted: bool = True,
        compiled: Any = None,
        sources: dict[str, list[str]] | None = None,
        analysis: dict[str, Any] | None = None,
        per_example: dict[str, Any] | None = None,
    ) -> None:
        self.funcs = funcs
        # what the evaluator counts at the largest batch (grader.sandboxed.evaluator.per_example_ops)
        self.per_example = {"per_example_ops": 0} if per_example is None else per_example
        self.batch_axes: list[tuple[Any, list[tuple[int, ...]]]] = []
        self.export_error = export_error
        self.vmap_used = vmap_used
        self.mutate = mutate
        self.jitted = jitted
        self.compiled = compiled
        self._sources = sources or {}
        self.calls = 0
        # what the evaluator reads from the module (grader.sandboxed.evaluator.analyze_module)
        self.analysis = {
            "nr_devices": 1,
            "custom_calls": [],
            "loops": 0,
            "batch_loops": 0,
            "whole_call": jitted,
            "collectives": [],
            "per_device": False,
            "vmapped": vmap_used,
            "outside_ops": 0,
            "outside_op": "",
            "whole_inputs": [],
            "rows_kept": True,
            **(analysis or {}),
        }

    def call(self, name: str, *args: Any, repeat: int = 1, readonly: bool = False, **kw: Any) -> CallResult:
        if name not in self.funcs:
            raise MissingName(name)
        vals = []
        for _ in range(repeat):
            self.calls += 1
            vals.append(np.asarray(self.funcs[name](*args, **kw)))
        return CallResult(vals, (0,) if self.mutate else (), ())

    def export(
        self, name: str, specs: Any = None, static: Any = None, *, example: Any = None, vjp_order: int = 0
    ) -> ExportResult:
        if name not in self.funcs:
            raise MissingName(name)
        if self.export_error is not None:
            raise self.export_error
        return ExportResult(b"module")

    def evaluate(
        self, name: str, module: bytes, *args: Any, batch_axes: tuple[tuple[int, ...], ...] = ()
    ) -> tuple[Any, dict[str, Any]]:
        f = self.compiled or self.funcs[name]
        info: dict[str, Any] = {"analysis": dict(self.analysis)}
        if batch_axes:
            self.batch_axes.append((batch_axes, [np.shape(a) for a in args]))
            info.update(self.per_example)
        return np.asarray(f(*args)), info

    def probe(self, name: str) -> dict[str, Any]:
        if name not in self.funcs:
            return {"exists": False}
        return {"exists": True, "type": "builtins.function"}

    def sources(self, name: str) -> list[str]:
        return self._sources.get(name, [])

    def reachable_sources(self, name: str) -> list[str]:
        return self.sources(name)

    def writes_into_arguments(self, name: str) -> str:
        return ""


def test_assert_close_accepts_float32_noise() -> None:
    x = np.linspace(-3, 3, 50, dtype=np.float32)
    assert_close(x * (1 + 1e-7), x.astype(np.float64))


def test_assert_close_names_largest_error_and_index() -> None:
    exp = np.zeros((2, 3), np.float32)
    act = exp.copy()
    act[1, 2] = 0.5
    with pytest.raises(CheckFailure) as e:
        assert_close(act, exp, name="out")
    assert e.value.message == (
        "out: 1 of 6 values differ (rtol=1e-05, atol=1e-06); largest error 0.5 at index (1, 2): "
        "got np.float32(0.5), expected np.float32(0.0)"
    )


def test_assert_close_shape_message_and_axis_hint() -> None:
    with pytest.raises(CheckFailure) as e:
        assert_close(np.zeros((7, 3)), np.zeros((3, 7)), name="batched_convolve_axis1")
    assert e.value.message == "batched_convolve_axis1: shape (7, 3) differs from the expected shape (3, 7)"
    assert "in_axes" in e.value.hint


def test_assert_close_dtype_kind() -> None:
    with pytest.raises(CheckFailure, match="dtype int32 differs from the expected dtype float32"):
        assert_close(np.zeros(3, np.int32), np.zeros(3, np.float32))


def test_assert_close_structure() -> None:
    with pytest.raises(CheckFailure, match=r"result: expected a tuple of length 2, got a list of length 2"):
        assert_close([np.zeros(1), np.zeros(1)], (np.zeros(1), np.zeros(1)))
    with pytest.raises(CheckFailure, match=r"missing \['b'\], unexpected \['c'\]"):
        assert_close({"a": 1.0, "c": 2.0}, {"a": 1.0, "b": 2.0})
    with pytest.raises(CheckFailure, match=r"result\['a'\]\[1\]: shape"):
        assert_close({"a": [np.zeros(2), np.zeros(3)]}, {"a": [np.zeros(2), np.zeros(4)]})


def test_assert_close_nan_must_match() -> None:
    assert_close(np.array([np.nan, 1.0]), np.array([np.nan, 1.0]))
    with pytest.raises(CheckFailure):
        assert_close(np.array([np.nan, 1.0]), np.array([0.0, 1.0]))
    with pytest.raises(CheckFailure):
        assert_close(np.array([0.0, 1.0]), np.array([np.nan, 1.0]))
    with pytest.raises(CheckFailure):
        assert_close(np.array([np.inf]), np.array([-np.inf]))


def test_assert_close_rejects_non_arrays_for_arrays() -> None:
    with pytest.raises(CheckFailure, match="got str"):
        assert_close("anything", np.zeros(3))
    with pytest.raises(CheckFailure, match="got NoneType"):
        assert_close(None, np.zeros(3))


def test_assert_close_jax_reference() -> None:
    jnp = pytest.importorskip("jax.numpy")
    assert_close(np.arange(3.0, dtype=np.float32), jnp.arange(3.0))


def _conv(xs: np.ndarray, ws: np.ndarray) -> np.ndarray:
    return xs[:, :-2] * ws[:, :1] + xs[:, 1:-1] * ws[:, 1:2] + xs[:, 2:] * ws[:, 2:]


ARGS = (np.ones((2, 5), np.float32), np.ones((2, 3), np.float32))


def test_check_jit_passes_and_reports_tracing_error_with_hint() -> None:
    check_jit(FakeSubmission({"f": _conv}), "f", ARGS, reference=_conv)
    err = StudentRaised("f", "TracerBoolConversionError", "Attempted boolean conversion", Location(2, 3, "if x > 0:"))
    with pytest.raises(CheckFailure) as e:
        check_jit(FakeSubmission({"f": _conv}, export_error=err), "f", ARGS, reference=_conv)
    assert e.value.message == (
        "`f` does not work under jax.jit: TracerBoolConversionError at cell 3, line 3: `if x > 0:`: "
        "Attempted boolean conversion"
    )
    assert "jnp.where" in e.value.hint and "static_argnames" in e.value.hint


def test_check_jit_compiled_disagrees_with_eager() -> None:
    sub = FakeSubmission({"f": _conv}, compiled=lambda a, b: _conv(a, b) + 1)
    with pytest.raises(CheckFailure, match="compiled function disagrees with the eager one, which is right"):
        check_jit(sub, "f", ARGS, reference=_conv)


def test_check_jit_never_compares_the_module_with_the_students_own_result() -> None:
    """The "compared with itself" forgery: a zeros module and zeros for the eager call that
    follows it agree with each other, and still fail, because only the reference counts."""
    zeros = lambda a, b: np.zeros((a.shape[0], a.shape[1] - 2), np.float32)  # noqa: E731
    with pytest.raises(CheckFailure, match="gives wrong numbers, and so does the eager one"):
        check_jit(FakeSubmission({"f": zeros}), "f", ARGS, reference=_conv)
    with pytest.raises(CheckFailure):
        check_vectorized(
            FakeSubmission({"f": zeros}), "f", [("B, 5", "float32"), ("B, 3", "float32")], [ARGS], reference=_conv
        )


def test_check_jit_accept_judges_a_module_without_a_reference() -> None:
    def only_zeros(got: Any, a: Any, b: Any) -> None:
        if np.any(got):
            raise CheckFailure("not zeros")

    check_jit(FakeSubmission({"f": lambda a, b: a * 0}), "f", ARGS, accept=only_zeros)
    with pytest.raises(CheckFailure, match="not zeros"):
        check_jit(FakeSubmission({"f": _conv}), "f", ARGS, accept=only_zeros)


def test_values_that_blew_up_are_named_with_a_hint() -> None:
    """A diverging fit returns NaN or inf: the message counts them and the hint says where they
    come from; NaN where NaN is expected is no error, and a plain wrong value gets no such hint."""
    exp = np.array([2.0, -0.5, np.nan, 1.0], np.float32)
    with pytest.raises(CheckFailure) as e:
        assert_close(np.array([np.nan, np.inf, np.nan, 1.0], np.float32), exp)
    assert "2 of 4 values differ" in e.value.message and "2 of them NaN or infinite" in e.value.message
    assert "diverged" in e.value.hint and "0/0" in e.value.hint
    with pytest.raises(CheckFailure) as e:
        assert_close(np.array([2.5, -0.5, np.nan, 1.0], np.float32), exp)
    assert "NaN" not in e.value.message and e.value.hint == ""
    assert_close(np.array([2.0, -0.5, np.nan, 1.0], np.float32), exp)


def test_check_vectorized() -> None:
    cases = [ARGS, (np.ones((5, 5), np.float32), np.ones((5, 3), np.float32))]
    check_vectorized(
        FakeSubmission({"f": _conv}), "f", [("B, 5", "float32"), ("B, 3", "float32")], cases, reference=_conv
    )


@pytest.mark.parametrize(
    ("ename", "evalue", "line"),
    [
        ("TypeError", "'_DimExpr' object cannot be interpreted as an integer", "for b in range(xs.shape[0]):"),
        # JAX 0.11 and later (Python 3.12+) raise this one for `for x, y in zip(xs, ys)` over the batch
        ("AttributeError", "'NoneType' object has no attribute 'process_primitive'", "for x, y in zip(xs, ys):"),
    ],
)
def test_check_vectorized_names_a_loop_over_the_batch(ename: str, evalue: str, line: str) -> None:
    cases = [ARGS, (np.ones((5, 5), np.float32), np.ones((5, 3), np.float32))]
    err = StudentRaised("f", ename, evalue, Location(1, 4, line))
    with pytest.raises(CheckFailure) as e:
        check_vectorized(FakeSubmission({"f": _conv}, export_error=err), "f", [("B, 5", "float32")], cases)
    assert e.value.message.startswith("`f` is not vectorized over the batch")
    assert f"line 4: `{line}`" in e.value.message
    assert "jax.vmap" in e.value.hint


@pytest.mark.parametrize(
    ("ename", "evalue", "words", "hint_words"),
    [
        (
            "ValueError",
            "vmap got inconsistent sizes for array axes to be mapped:\n  * one axis had size 7: axis 0 of "
            "argument xs of type float32[7,11];\n  * one axis had size 3: axis 0 of argument w of type float32[3]",
            ["could not be traced for a symbolic batch size", "one axis had size 7", "one axis had size 3"],
            ["in_axes"],
        ),
        (
            "TracerArrayConversionError",
            "The numpy.ndarray conversion method __array__() was called on traced array with shape float32[B,9]",
            ["TracerArrayConversionError", "__array__"],
            ["jax.numpy"],
        ),
    ],
)
def test_check_vectorized_picks_the_hint_by_the_error(
    ename: str, evalue: str, words: list[str], hint_words: list[str]
) -> None:
    """A trace that fails for another reason than a loop over the batch is named as it is."""
    err = StudentRaised("f", ename, evalue, Location(1, 2, "return jax.vmap(convolve)(xs, w)"))
    with pytest.raises(CheckFailure) as e:
        check_vectorized(FakeSubmission({"f": _conv}, export_error=err), "f", [("B, 5", "float32")], [ARGS])
    for word in words:
        assert word in e.value.message
    for word in hint_words:
        assert word in e.value.hint
    assert "Do not loop in Python" not in e.value.hint


def test_error_cause_keeps_the_lines_after_a_colon() -> None:
    text = (
        "vmap got inconsistent sizes for array axes to be mapped:\n  * one axis had size 7\n\n"
        "--------------------\nFor simplicity, JAX has removed its internal frames from the traceback."
    )
    assert error_cause(text) == "vmap got inconsistent sizes for array axes to be mapped: * one axis had size 7"
    assert error_cause("x" * 900).endswith("…") and len(error_cause("x" * 900)) == 501


def test_check_vectorized_fails_a_loop_over_the_batch() -> None:
    """lax.map over the batch traces with a symbolic batch and gives the right numbers; the
    module's loop whose length is the batch size fails it."""
    cases = [ARGS, (np.ones((5, 5), np.float32), np.ones((5, 3), np.float32))]
    specs = [("B, 5", "float32"), ("B, 3", "float32")]
    with pytest.raises(CheckFailure) as e:
        check_vectorized(FakeSubmission({"f": _conv}, analysis={"loops": 1, "batch_loops": 1}), "f", specs, cases)
    assert "loops over the batch" in e.value.message and "lax.map" in e.value.message
    assert "jax.vmap" in e.value.hint and "array operations" in e.value.hint
    # a loop of fixed length (over the window) is fine; a module that was not analysed is not
    check_vectorized(FakeSubmission({"f": _conv}, analysis={"loops": 2}), "f", specs, cases)
    sub = FakeSubmission({"f": _conv})
    del sub.analysis["batch_loops"]
    with pytest.raises(CheckFailure, match="could not be analysed"):
        check_vectorized(sub, "f", specs, cases)


def test_check_vectorized_fails_examples_taken_out_of_the_batch_one_at_a_time() -> None:
    """The evaluator counts, at the largest batch of the cases only, the operations on examples
    taken out of the batch; past PER_EXAMPLE_MAX the check fails, and a count that is missing
    (an analysis that failed) fails it too.  The batch axes come from the specs' symbols."""
    cases = [
        (np.ones((1, 5), np.float32), np.ones((1, 3), np.float32)),
        (np.ones((6, 5), np.float32), np.ones((6, 3), np.float32)),
        ARGS,
    ]
    specs = [("B, 5", "float32"), ("B, 3", "float32")]
    sub = FakeSubmission({"f": _conv}, per_example={"per_example_ops": PER_EXAMPLE_MAX})
    check_vectorized(sub, "f", specs, cases)
    assert sub.batch_axes == [(((0,), (0,)), [(6, 5), (6, 3)])]
    sub = FakeSubmission({"f": _conv}, per_example={"per_example_ops": PER_EXAMPLE_MAX + 1})
    with pytest.raises(CheckFailure) as e:
        check_vectorized(sub, "f", specs, cases)
    assert e.value.message.startswith("`f` works on the examples one at a time: for a batch of 6,")
    assert f"{PER_EXAMPLE_MAX + 1} times" in e.value.message and "jax.vmap" in e.value.hint
    sub = FakeSubmission({"f": _conv}, per_example={"per_example_error": "ValueError: refused"})
    with pytest.raises(CheckFailure, match=r"could not be analysed \(ValueError: refused\)"):
        check_vectorized(sub, "f", specs, cases)
    # axes from the specs: a batch on axis 1, an argument without one; no case of 2 examples or more: no count
    sub = FakeSubmission({"f": lambda a, w: a})
    specs = [("5, B", "float32"), ("3", "float32")]
    check_vectorized(sub, "f", specs, [(np.ones((5, 1)), np.ones(3))], reference=lambda a, w: a)
    assert sub.batch_axes == []
    check_vectorized(sub, "f", specs, [(np.ones((5, 4)), np.ones(3))], reference=lambda a, w: a)
    assert sub.batch_axes == [(((1,), ()), [(5, 4), (3,)])]


def test_check_pure_detects_mutation_and_state() -> None:
    check_pure(FakeSubmission({"f": _conv}), "f", ARGS, reference=_conv)
    with pytest.raises(CheckFailure, match="modified its input argument #1 in place"):
        check_pure(FakeSubmission({"f": _conv}, mutate=True), "f", ARGS)
    counter = iter(range(100))
    with pytest.raises(CheckFailure, match="different result when called again"):
        check_pure(FakeSubmission({"f": lambda a, b: _conv(a, b) + next(counter)}), "f", ARGS)
    counter = iter(range(100))
    with pytest.raises(CheckFailure, match="the first call was right, the second, with the same inputs, is not"):
        check_pure(FakeSubmission({"f": lambda a, b: _conv(a, b) + next(counter)}), "f", ARGS, reference=_conv)
    cb = StudentRaised("f", "NotImplementedError", "serialization of host_callbacks is not yet implemented", None)
    with pytest.raises(CheckFailure, match="calls back into Python"):
        check_pure(FakeSubmission({"f": _conv}, export_error=cb), "f", ARGS)


def test_hidden_tests_do_not_quote_returned_values() -> None:
    """A returned value can carry hidden inputs: while a hidden test runs, messages do not quote it."""
    exp, act = np.zeros(3, np.float32), np.array([0.0, 0.0, 0.123456], np.float32)
    with pytest.raises(CheckFailure) as shown:
        assert_close(act, exp)
    with quoting_actual_values(False), pytest.raises(CheckFailure) as hidden:
        assert_close(act, exp)
    assert "0.123456" in shown.value.message and "0.123456" not in hidden.value.message
    # nor the reference's value there: it can carry the hidden inputs too (a ReLU returns them)
    assert hidden.value.message.endswith(
        "1 of 3 values differ (rtol=1e-05, atol=1e-06*max(1, max|expected|)); at index (2,)"
    )
    assert shown.value.message.endswith("at index (2,): got np.float32(0.123456), expected np.float32(0.0)")
    with quoting_actual_values(False), pytest.raises(CheckFailure) as exact:
        assert_close(act, exp, exact=True)
    assert exact.value.message.endswith("1 of 3 entries differ; first at index (2,)")
    with quoting_actual_values(False), pytest.raises(CheckFailure) as keys:
        assert_close({"a": 1.0, "secret_0.123456": 2.0}, {"a": 1.0, "b": 2.0})
    assert "secret" not in keys.value.message and "1 other key(s)" in keys.value.message


def test_check_is_jitted_and_missing() -> None:
    """Decided by the module (``whole_call``), not by the kernel's probe."""
    check_is_jitted(FakeSubmission({"f": _conv}), "f", ARGS, reference=_conv)
    with pytest.raises(CheckFailure, match=r"not a jax\.jit-compiled function"):
        check_is_jitted(FakeSubmission({"f": _conv}, jitted=False), "f", ARGS)
    with pytest.raises(MissingName, match="`g` is not defined in the notebook"):
        check_is_jitted(FakeSubmission({"f": _conv}), "g", ARGS)
    # wrong numbers: the property is not earned (see the rule in the README)
    with pytest.raises(CheckFailure, match="values differ"):
        check_is_jitted(FakeSubmission({"f": _conv}), "f", ARGS, reference=lambda a, b: _conv(a, b) + 1)


PMAP = {"nr_devices": 4, "per_device": True}


def test_check_parallel_judges_the_module() -> None:
    xs = (np.ones((4, 5), np.float32), np.ones((4, 3), np.float32))
    check_parallel(FakeSubmission({"f": _conv}, analysis=PMAP), "f", xs, devices=4, reference=_conv)
    with pytest.raises(CheckFailure) as e:  # vmap or a Python loop: one device
        check_parallel(FakeSubmission({"f": _conv}), "f", xs, devices=4)
    assert "1 device" in e.value.message and "4 devices" in e.value.message and "jax.pmap" in e.value.hint
    with pytest.raises(CheckFailure, match="as one program, then placed"):  # vmap, then device_put
        check_parallel(FakeSubmission({"f": _conv}, analysis={"nr_devices": 4}), "f", xs, devices=4)
    with pytest.raises(CheckFailure, match="never combine"):
        check_parallel(FakeSubmission({"f": _conv}, analysis=PMAP), "f", xs, devices=4, collective=True)
    check_parallel(
        FakeSubmission({"f": _conv}, analysis=dict(PMAP, collectives=["all_reduce"])),
        "f",
        xs,
        devices=4,
        collective=True,
    )
    with pytest.raises(CheckFailure, match="values differ"):
        check_parallel(
            FakeSubmission({"f": _conv}, analysis=PMAP), "f", xs, devices=4, reference=lambda a, b: 0 * _conv(a, b)
        )


def test_check_parallel_fails_work_outside_the_per_device_programs_and_rows_handed_whole() -> None:
    """Where the work is done (the evaluator's ``outside_ops`` and ``whole_inputs``): per-device
    programs somewhere in the module are not enough (session 32's forgeries)."""
    xs = (np.ones((4, 5), np.float32), np.ones((4, 3), np.float32))

    def judged(**analysis: Any) -> None:
        sub = FakeSubmission({"f": _conv}, analysis=dict(PMAP, collectives=["all_reduce"], **analysis))
        check_parallel(sub, "f", xs, devices=4, collective=True, reference=_conv)

    judged()
    with pytest.raises(CheckFailure) as e:  # vmap, then an identity pmap
        judged(outside_ops=6, outside_op="dot_general")
    assert "outside the per-device programs" in e.value.message and "6 operations, the first a `dot_general`" in (
        e.value.message
    )
    assert "inside the function you give `jax.pmap`" in e.value.hint
    with pytest.raises(CheckFailure, match=r"\(1 operation, the first a `reduce`\)"):
        judged(outside_ops=1, outside_op="reduce")
    with pytest.raises(CheckFailure, match=r"could not be analysed \(RuntimeError: x\)"):  # fails closed
        judged(outside_ops=-1, outside_op="RuntimeError: x")
    with pytest.raises(CheckFailure) as e:  # a closed-over array, in_axes=None
        judged(whole_inputs=["1"])
    assert "its own row of argument 2 (shape (4, 3))" in e.value.message and "in_axes=None" in e.value.hint
    with pytest.raises(CheckFailure, match=r"its own row of input 'x'"):  # an evaluator's odd index is named, not fatal
        judged(whole_inputs=["x"])
    with pytest.raises(CheckFailure, match=r"its own row of input 9:"):  # past the arguments' inputs
        judged(whole_inputs=["8"])
    judged(rows_kept=False)  # with a collective: its rows are combined, as the contract asks
    with pytest.raises(CheckFailure) as e:  # a parallel map whose devices gathered every row
        check_parallel(FakeSubmission({"f": _conv}, analysis=dict(PMAP, rows_kept=False)), "f", xs, devices=4)
    assert "from that row alone" in e.value.message and "needs no collective" in e.value.hint
    sub = FakeSubmission({"f": _conv}, analysis=PMAP)
    del sub.analysis["whole_inputs"]  # an evaluator that did not say: nothing is earned
    with pytest.raises(CheckFailure, match="could not be analysed"):
        check_parallel(sub, "f", xs, devices=4, reference=_conv)


def test_inputs_are_named_by_the_argument_that_holds_them() -> None:
    """The evaluator names a module input by its index among the flattened arguments; a list or
    dict argument holds several (JAX's order: dicts by sorted key, ``None`` holds none)."""
    xs, w = np.ones((4, 5), np.float32), np.ones((4, 3), np.float32)
    assert _argument((xs, w), "1") == "argument 2 (shape (4, 3))"
    assert _argument((xs, 2.0), "1") == _argument((xs, np.float32(2)), "1") == "argument 2 (a scalar)"
    params = {"w": w, "b": np.ones(4, np.float32)}  # leaves b, then w
    assert _argument((params, xs), "0") == "argument 1 (shape (4,), its input 1)"
    assert _argument((params, xs), "1") == "argument 1 (shape (4, 3), its input 2)"
    assert _argument((params, xs), "2") == "argument 2 (shape (4, 5))"
    assert _argument(([xs, None, (w, 3)], xs), "2") == "argument 1 (a scalar, its input 3)"
    assert _argument(([xs, None, (w, 3)], xs), "3") == "argument 2 (shape (4, 5))"
    assert _argument((xs,), "5") == "input 6"
    assert _argument(({1: xs, "a": w}, xs), "1") == "input 2"  # keys that do not sort


def test_check_no_vmap_from_the_module_and_the_notebook_source() -> None:
    """Decided on the trusted side: the module's name stack (a kernel that hides its vmap from
    a watch still exports `vmap(...)` locations), and the source of every notebook definition the
    function reaches (a vmap defined in another cell counts)."""
    check_no_vmap(
        FakeSubmission({"f": _conv}, sources={"f": ["def f(xs, ws):\n    return xs  # no vmap here"]}), "f", ARGS
    )
    with pytest.raises(CheckFailure, match=r"uses jax\.vmap"):
        check_no_vmap(FakeSubmission({"f": _conv}, vmap_used=True), "f", ARGS)
    with pytest.raises(CheckFailure, match=r"uses jax\.vmap"):
        check_no_vmap(FakeSubmission({"f": _conv}, sources={"f": ["f = jax.vmap(convolve)"]}), "f", ARGS)

    class Reaching(FakeSubmission):
        def reachable_sources(self, name: str) -> list[str]:
            return [*self.sources(name), "_rows = jax.vmap(convolve)"]

    sub = Reaching({"f": _conv}, sources={"f": ["def f(xs, ws):\n    return _rows(xs, ws)"]})
    with pytest.raises(CheckFailure, match=r"uses jax\.vmap"):
        check_no_vmap(sub, "f", ARGS)


def test_check_pure_reads_writes_into_arguments_from_the_notebook() -> None:
    """A write into an argument found in the notebook's source fails purity, whatever the
    sandbox reports (a kernel can switch off the read-only inputs and the mutation flag)."""

    class Writing(FakeSubmission):
        def writes_into_arguments(self, name: str) -> str:
            return "x[0] = v"

    with pytest.raises(CheckFailure, match=r"writes into its input argument: `x\[0\] = v`"):
        check_pure(Writing({"f": _conv}), "f", ARGS, reference=_conv)


def test_recompiles_and_is_jitted_refuse_a_jit_made_on_every_call() -> None:
    src = {"g": ["def g(x, n):\n    return jax.jit(lambda x: x + n)(x)"]}
    sub = FakeSubmission({"g": lambda x, n=1: x + n}, sources=src)
    with pytest.raises(CheckFailure, match="makes a new jitted function every time it is called"):
        check_recompiles(sub, "g", [((ARGS[0],), {"n": 1}), ((ARGS[0] * 2,), {"n": 1})], [None, False])
    with pytest.raises(CheckFailure, match="makes a new jitted function every time it is called"):
        check_is_jitted(sub, "g", (ARGS[0],))


def test_a_failure_read_from_the_source_says_when_the_name_is_defined_more_than_once() -> None:
    """An earlier attempt left in the notebook counts too (the kernel's word for which definition
    it kept cannot be taken): the hint says so, and what to do; one definition, no such word."""
    once = "def g(x, n):\n    return jax.jit(lambda x: x + n)(x)"
    twice = FakeSubmission({"g": lambda x, n=1: x + n}, sources={"g": [once, "g = jax.jit(_g)"]})
    calls = [((ARGS[0],), {"n": 1}), ((ARGS[0] * 2,), {"n": 1})]
    with pytest.raises(CheckFailure) as e:
        check_recompiles(twice, "g", calls, [None, False])
    assert "defines `g` 2 times" in e.value.hint and "delete the earlier attempts" in e.value.hint
    with pytest.raises(CheckFailure) as e:
        check_is_jitted(twice, "g", (ARGS[0],))
    assert "defines `g` 2 times" in e.value.hint
    loop = "def g(x, n):\n    for _ in range(n):\n        x = jax.jit(lambda v: v + 1)(x)\n    return x"
    looping = FakeSubmission({"g": lambda x, n=1: x + n}, sources={"g": [loop, "def g(x, n):\n    return x + n"]})
    with pytest.raises(CheckFailure) as e:
        check_compile_count(looping, "g", calls, at_most=1)
    assert "defines `g` 2 times" in e.value.hint

    class Writing(FakeSubmission):
        def writes_into_arguments(self, name: str) -> str:
            return "x[0] = v"

    with pytest.raises(CheckFailure) as e:
        check_pure(Writing({"f": _conv}, sources={"f": ["def f(x): ...", "f = g", "def f(x): ..."]}), "f", ARGS)
    assert "defines `f` 3 times" in e.value.hint
    with pytest.raises(CheckFailure) as e:
        check_pure(Writing({"f": _conv}, sources={"f": ["def f(x): ..."]}), "f", ARGS)
    assert "defines" not in e.value.hint
    with pytest.raises(CheckFailure) as e:
        check_recompiles(FakeSubmission({"g": lambda x, n=1: x + n}, sources={"g": [once]}), "g", calls, [None, False])
    assert "defines" not in e.value.hint


def test_readme_documents_every_hint() -> None:
    """The README's hint table lists every error class that has a hint."""
    from pathlib import Path

    from grader.grading.hints import HINTS

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    for h in HINTS:
        assert f"| `{h.ename}`" in readme, f"README lacks a row for {h.ename}"
        assert h.fix.replace("|", "\\|") in readme, f"README's fix for {h.ename} is out of date"


def test_a_hidden_tests_student_raised_carries_none_of_the_sandboxs_text() -> None:
    """In a hidden test the error's text and an unknown class name are left out (short lines
    would slip through any scrubbing); the text still picks the grader's hint."""
    from grader.host.session import showing_student_text

    evalue = "vmap got inconsistent sizes for array axes to be mapped:\n0.123\n4.567"
    with showing_student_text(False):
        err = StudentRaised("f", "S1234", evalue, Location(1, 2, "return g(x)"))
        known = StudentRaised("f", "ValueError", evalue, Location(1, 2, "return g(x)"))
    assert err.message == "`f` raised an error at cell 2, line 2: `return g(x)`" and err.evalue == ""
    assert known.message == "`f` raised ValueError at cell 2, line 2: `return g(x)`"
    assert known.says("inconsistent sizes") and "in_axes" in taught(known)
    assert "0.123" in StudentRaised("f", "ValueError", evalue, None).message  # public tests keep it


def test_hidden_tests_name_arguments_strings_and_keys_by_kind_only() -> None:
    """A hidden test's scalar arguments, static settings, expected strings and PRNG keys are hidden
    inputs (or carry them): its messages name their kind, where a public test's quote them (a
    review found `f_jittable(3.28...)` in a hidden test's message)."""
    from grader.grading.checks import PRNGKeyData, _describe_call, _kind

    args, kwargs = (np.float32(3.25), np.zeros((2, 5), np.float32), None), {"n": 7}
    assert _describe_call(args, kwargs) == "(3.25, array(2, 5), None, n=7)"
    with quoting_actual_values(False):
        assert _describe_call(args, kwargs) == "(a float, array(2, 5), None, n=an int)"
        with pytest.raises(CheckFailure) as kind:
            assert_close(7, {"w": np.zeros(2)})
        assert kind.value.message.endswith("got an int")
        assert _describe_call((np.uint8(3), np.float32(1)), {}) == "(an int, a float)"
        assert _kind(np.uint8(3)) == "a uint8" and _kind(np.zeros(2)) == "an ndarray" and _kind(1.0) == "a float"
        # the scaled atol would carry the largest expected value: the rule is given, not the number
        with pytest.raises(CheckFailure) as scaled:
            assert_close(np.array([1.0, 1234.5], np.float32), np.array([1.0, 1234.0], np.float32))
        assert "1.23e-03" not in scaled.value.message and "0.00123" not in scaled.value.message
        assert "atol=1e-06*max(1, max|expected|)" in scaled.value.message
        with pytest.raises(CheckFailure) as text:
            assert_close("mine", "the secret")
        with pytest.raises(CheckFailure) as key:
            assert_close(
                PRNGKeyData("threefry", np.array([1, 2], np.uint32)),
                PRNGKeyData("threefry", np.array([0, 42], np.uint32)),
            )
    assert "secret" not in text.value.message and "expected another string" in text.value.message
    assert "42" not in key.value.message and "expected another PRNG key" in key.value.message
    with pytest.raises(CheckFailure) as shown_atol:
        assert_close(np.array([1.0, 1234.5], np.float32), np.array([1.0, 1234.0], np.float32))
    assert "atol=0.00123" in shown_atol.value.message  # a public test's inputs are the student's to see
    with pytest.raises(CheckFailure) as shown:
        assert_close("mine", "the secret")
    assert "expected 'the secret'" in shown.value.message
