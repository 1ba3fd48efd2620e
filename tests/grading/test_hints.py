"""Every JAX error a student meets while tracing gets its own hint; the errors here are raised
by JAX itself, so a JAX upgrade that renames or rewords them fails this test."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from grader.grading.hints import find_hint, hint_for
from grader.host.session import Location

F32 = jnp.array(3.0)
I32 = jnp.array(3)

CASES: list[tuple[str, Callable[[Any], Any], Any, str, str]] = [
    ("if on a traced value", lambda x: x if x > 0 else 2 * x, F32, "TracerBoolConversionError", "jnp.where"),
    ("range(traced)", lambda n: sum(i for i in range(n)), I32, "TracerIntegerConversionError", "lax.fori_loop"),
    ("float(x)", lambda x: float(x) * 2, F32, "ConcretizationTypeError", "float(x)"),
    ("x.item()", lambda x: x.item() * 2, F32, "ConcretizationTypeError", "static_argnames"),
    ("jnp.arange(n)", lambda n: jnp.arange(n), I32, "ConcretizationTypeError", "static_argnames"),
    ("np.asarray(tracer)", lambda x: np.asarray(x) * 2, F32, "TracerArrayConversionError", "jax.numpy"),
    ("boolean mask", lambda x: x[x < 0], jnp.arange(4.0), "NonConcreteBooleanIndexError", "jnp.where"),
    ("shape from a traced n", lambda n: jnp.zeros((n, 2)), I32, "TypeError", "static"),
]


def _raise(fn: Callable[[Any], Any], arg: Any) -> BaseException:
    with pytest.raises(Exception) as info:
        jax.jit(fn)(arg)
    return info.value


@pytest.mark.parametrize(("label", "fn", "arg", "ename", "fix"), CASES, ids=[c[0] for c in CASES])
def test_real_jax_error_gets_its_hint(label: str, fn: Callable[[Any], Any], arg: Any, ename: str, fix: str) -> None:
    exc = _raise(fn, arg)
    assert type(exc).__name__ == ename
    hint = find_hint(ename, str(exc))
    assert hint is not None, f"no hint for {ename}: {exc}"
    assert fix in hint.fix


def test_unhashable_static_argument() -> None:
    with pytest.raises(ValueError) as info:
        jax.jit(lambda x, s: x, static_argnums=1)(1.0, [1, 2])
    hint = find_hint("ValueError", str(info.value))
    assert hint is not None and "tuple" in hint.fix


def test_plain_errors_without_a_match_get_no_jax_hint() -> None:
    assert find_hint("TypeError", "unsupported operand type(s) for +: 'int' and 'str'") is None
    assert find_hint("ValueError", "math domain error") is None


def test_hint_names_the_students_line() -> None:
    text = hint_for("TracerBoolConversionError", "Attempted boolean conversion", Location(2, 5, "if x > 0:"))
    assert text.startswith("TracerBoolConversionError at cell 3, line 5: `if x > 0:`.")
    assert "Fix: " in text


@pytest.mark.parametrize(
    ("fn", "ename", "fix"),
    [
        (lambda x: x if x > 0 else 2 * x, "ValueError", "jnp.where"),  # `if` on a whole array, even eagerly
        (lambda x: float(x), "TypeError", "Keep working with arrays"),
    ],
)
def test_array_errors_outside_tracing_get_hints(fn: Callable[[Any], Any], ename: str, fix: str) -> None:
    with pytest.raises(Exception) as info:
        fn(jnp.ones(3))
    assert type(info.value).__name__ == ename
    hint = find_hint(ename, str(info.value))
    assert hint is not None and fix in hint.fix


def test_errors_a_students_walkthrough_met_get_their_own_hint() -> None:
    """Three errors got the generic "check each shape" fallback, or a fix for another case."""
    with pytest.raises(TypeError) as ints:
        jax.grad(lambda t: (t * t).sum())(jnp.array([1, 1]))
    hint = find_hint("TypeError", str(ints.value))
    assert hint is not None and "float" in hint.fix
    with pytest.raises(AttributeError) as at:
        np.zeros(3).at[0].set(1.0)  # type: ignore[attr-defined]
    hint = find_hint("AttributeError", str(at.value))
    assert hint is not None and "jnp.asarray(x)" in hint.fix
    with pytest.raises(ValueError) as static:
        jax.jit(lambda x: x, static_argnums=0)(np.ones(3))
    hint = find_hint("ValueError", str(static.value))
    assert hint is not None and "jnp.where" in hint.fix
    # JAX 0.11 and later, a loop over an array of symbolic length
    hint = find_hint("AttributeError", "'NoneType' object has no attribute 'process_primitive'")
    assert hint is not None and "jax.vmap" in hint.fix
    assert find_hint("AttributeError", "'list' object has no attribute 'shape'") is None


def test_the_kernels_files_for_cells_are_named_as_cells() -> None:
    """JAX names where it traced a function by the file the kernel compiled the cell as, and a
    SyntaxError by its number: files no student has seen (a student's walkthrough)."""
    from grader.errors import error_cause, first_line

    jax_text = (
        "The error occurred while tracing the function g at /sandbox/.jaxgrade/tmp/ipykernel_3/3870454633.py:1 for jit."
    )
    assert error_cause(jax_text).endswith("while tracing the function g at a notebook cell, line 1 for jit.")
    assert first_line("incomplete input (257267586.py, line 2)") == "incomplete input (line 2 of the cell)"
    assert first_line("x (file.py, line 2) /home/u/ipykernel.py:3") == "x (file.py, line 2) /home/u/ipykernel.py:3"
