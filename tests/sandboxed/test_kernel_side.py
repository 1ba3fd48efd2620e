"""grader/sandboxed/kernel_side.py: what the kernel does for a request, in this process."""

from __future__ import annotations

import itertools

import jax
import pytest
from jax import random
from packaging.version import Version

from grader.sandboxed import kernel_side


def _init(widths, key):  # the prng corpus's one_key_every_layer: one key for every layer
    return [random.normal(key, (a, b)) for a, b in itertools.pairwise(widths)]


@pytest.mark.parametrize("version", ["0.6.2", jax.__version__], ids=["jax-0.6.2", "installed"])
def test_the_key_reuse_checker_sees_a_reuse_in_a_function_the_notebook_already_ran(
    monkeypatch: pytest.MonkeyPatch, version: str
) -> None:
    """The notebook ran the function with the checker off (it compiled then); a call with the
    checker on still raises KeyReuseError. JAX before 0.9.1 would reuse the compilations made
    with the checker off, so there the kernel drops them first (and here, told it is 0.6.2)."""
    cleared: list[bool] = []
    real = jax.clear_caches
    monkeypatch.setattr(jax, "clear_caches", lambda: (cleared.append(True), real())[1])
    monkeypatch.setattr(jax, "__version__", version)
    widths = [6, 32, 32, 3]
    _init(widths, random.key(0))  # the notebook's own run
    with pytest.raises(jax.errors.KeyReuseError), kernel_side._key_reuse(True):
        _init(widths, random.key(1))
    assert cleared == ([True] if Version(version) < Version(kernel_side.KEY_REUSE_RECOMPILES) else [])
    with kernel_side._key_reuse(False):  # off: nothing dropped, nothing checked
        assert len(_init(widths, random.key(2))) == 3
    assert cleared == ([True] if Version(version) < Version(kernel_side.KEY_REUSE_RECOMPILES) else [])


def test_an_error_in_transforming_a_cell_is_collected_as_the_next_execution_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ipykernel transforms a cell once more itself, and an error there lives in a reference
    cycle until its reply is sent (Python 3.12's tokenizer left 4 GiB of tokens in one): the
    callback after such a cell asks for one garbage collection as the next execution starts;
    after an error in running the cell, or none, nothing is asked."""
    import gc
    from types import SimpleNamespace

    collected: list[bool] = []
    monkeypatch.setattr(gc, "collect", lambda *a: collected.append(True) or 0)
    monkeypatch.setattr(kernel_side, "_COLLECT", [False])

    def result(before: BaseException | None = None, during: BaseException | None = None) -> SimpleNamespace:
        return SimpleNamespace(
            success=before is None and during is None, error_before_exec=before, error_in_exec=during
        )

    for cell in (result(), result(during=ValueError("in the cell"))):
        kernel_side._forget_error(cell)
        kernel_side._collect_if_asked()
    assert collected == []
    kernel_side._forget_error(result(before=MemoryError()))
    assert collected == []  # not while ipykernel still holds the error
    kernel_side._collect_if_asked()
    kernel_side._collect_if_asked()
    assert collected == [True]
