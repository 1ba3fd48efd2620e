"""The check library that hidden and public tests call: closeness, jit, vectorization, purity.

Every check raises :class:`CheckFailure` (an ``AssertionError``) with a message that says what
differs and, where it helps, a hint that teaches the fix.  Values from the sandbox are plain,
validated data (see :mod:`grader.protocol`); references may be JAX arrays.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from grader.hints import hint_for
from grader.notebook import mentions
from grader.protocol import PRNGKeyData
from grader.session import StudentRaised, SubmissionError


class CheckFailure(AssertionError):
    """A check failed; ``message`` says what differs, ``hint`` how to fix it."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.message, self.hint))


@dataclass(frozen=True)
class Tolerance:
    rtol: float = 1e-5
    atol: float = 1e-6


#: Set by the grading plugin from the assignment's configuration.
DEFAULT_TOLERANCE = Tolerance()


def set_default_tolerance(tol: Tolerance) -> None:
    global DEFAULT_TOLERANCE
    DEFAULT_TOLERANCE = tol


# --------------------------------------------------------------------------- closeness


def _plain(x: Any) -> Any:
    """Reference values (possibly JAX) as plain numpy/python data."""
    if isinstance(x, (np.ndarray, np.generic, PRNGKeyData)) or x is None or isinstance(x, (bool, int, float, str)):
        return x
    if isinstance(x, (list, tuple)):
        return type(x)(_plain(v) for v in x) if type(x) in (list, tuple) else tuple(_plain(v) for v in x)
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    mod = type(x).__module__ or ""
    if mod.startswith("jax"):
        return np.asarray(x)
    return x


def _kind(x: Any) -> str:
    if isinstance(x, (np.ndarray, np.generic)):
        return "array"
    if isinstance(x, bool):
        return "bool"
    if isinstance(x, (int, float, complex)):
        return "number"
    return type(x).__name__


def _describe(x: Any) -> str:
    if isinstance(x, np.ndarray):
        return f"an array of shape {x.shape} and dtype {x.dtype}"
    if isinstance(x, (list, tuple)):
        return f"a {type(x).__name__} of length {len(x)}"
    if isinstance(x, dict):
        return f"a dict with keys {sorted(map(str, x))}"
    return f"{type(x).__name__} {x!r}"[:200]


def assert_close(
    actual: Any,
    expected: Any,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    name: str = "result",
    exact: bool = False,
) -> None:
    """Pytree-aware closeness: structure exactly, shapes exactly, dtypes of the same kind, values
    within ``rtol`` and ``atol`` (default ``atol * max(1, max|expected|)``), NaNs where expected."""
    _close(actual, _plain(expected), name, rtol, atol, exact)


def _close(actual: Any, expected: Any, path: str, rtol: float | None, atol: float | None, exact: bool) -> None:
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            raise CheckFailure(
                f"{path}: expected a dict with keys {sorted(map(str, expected))}, got {_describe(actual)}"
            )
        if set(actual) != set(expected):
            missing, extra = sorted(set(expected) - set(actual)), sorted(set(actual) - set(expected))
            raise CheckFailure(f"{path}: dict keys differ (missing {missing}, unexpected {extra})")
        for k in expected:
            _close(actual[k], expected[k], f"{path}[{k!r}]", rtol, atol, exact)
        return
    if isinstance(expected, (list, tuple)):
        if type(actual) is not type(expected):
            raise CheckFailure(
                f"{path}: expected a {type(expected).__name__} of length {len(expected)}, got {_describe(actual)}"
            )
        if len(actual) != len(expected):
            raise CheckFailure(f"{path}: expected length {len(expected)}, got length {len(actual)}")
        for i, (a, e) in enumerate(zip(actual, expected)):
            _close(a, e, f"{path}[{i}]", rtol, atol, exact)
        return
    if expected is None or isinstance(expected, str):
        if actual != expected or type(actual) is not type(expected):
            raise CheckFailure(f"{path}: expected {expected!r}, got {_describe(actual)}")
        return
    if isinstance(expected, PRNGKeyData):
        if not isinstance(actual, PRNGKeyData) or not np.array_equal(actual.data, expected.data):
            raise CheckFailure(f"{path}: expected the PRNG key {expected.data.tolist()}, got {_describe(actual)}")
        return
    # numbers and arrays
    if isinstance(actual, (dict, list, tuple, str)) or actual is None or isinstance(actual, PRNGKeyData):
        raise CheckFailure(f"{path}: expected {_describe(np.asarray(expected))}, got {_describe(actual)}")
    exp = np.asarray(expected)
    act = np.asarray(actual)
    if type(act) is not np.ndarray:  # pragma: no cover - decoded values are plain already
        raise CheckFailure(f"{path}: not an array")
    if act.shape != exp.shape:
        raise CheckFailure(
            f"{path}: shape {act.shape} differs from the expected shape {exp.shape}",
            _shape_hint(act.shape, exp.shape),
        )
    ek, ak = exp.dtype.kind, act.dtype.kind
    compatible = ek == ak or {ek, ak} <= {"i", "u"} or (ek == "f" and ak == "c") or (ek == "c" and ak == "f")
    if not compatible:
        raise CheckFailure(f"{path}: dtype {act.dtype} differs from the expected dtype {exp.dtype}")
    if ek == "b" or exact:
        bad = ~((act == exp) | (np.isnan(act) & np.isnan(exp) if ek in "fc" else False))
        if np.any(bad):
            idx = tuple(int(i) for i in np.argwhere(bad)[0])
            raise CheckFailure(
                f"{path}: {int(bad.sum())} of {bad.size} entries differ; first at index {idx}: "
                f"got {act[idx]!r}, expected {exp[idx]!r}"
            )
        return
    tol = DEFAULT_TOLERANCE
    r = tol.rtol if rtol is None else rtol
    finite = np.isfinite(exp)
    scale = float(np.max(np.abs(exp[finite]))) if np.any(finite) else 1.0
    a = tol.atol * max(1.0, scale) if atol is None else atol
    act64 = act.astype(np.complex128 if "c" in (ek, ak) else np.float64)
    exp64 = exp.astype(act64.dtype)
    nan_exp, nan_act = np.isnan(exp64), np.isnan(act64)
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(act64 - exp64)
        finite_exp = np.isfinite(exp64)
        ok = np.where(finite_exp, err <= a + r * np.abs(np.where(finite_exp, exp64, 0)), act64 == exp64)
        ok |= nan_exp & nan_act
    ok &= ~(nan_act & ~nan_exp)
    if not np.all(ok):
        bad = ~ok
        err_for_max = np.where(bad, np.nan_to_num(err, nan=np.inf), -1.0)
        idx = tuple(int(i) for i in np.unravel_index(int(np.argmax(err_for_max)), act.shape)) if act.shape else ()
        raise CheckFailure(
            f"{path}: {int(bad.sum())} of {bad.size} values differ (rtol={r:g}, atol={a:.3g}); "
            f"largest error {float(np.real(err_for_max[idx])):.4g} at index {idx}: got {act[idx]!r}, expected {exp[idx]!r}"
        )


def _shape_hint(got: tuple[int, ...], want: tuple[int, ...]) -> str:
    if sorted(got) == sorted(want) and got != want:
        return "The axes are in the wrong order: check `in_axes`/`out_axes` (or transpose the result)."
    if len(got) == len(want):
        diffs = [g - w for g, w in zip(got, want)]
        if sum(1 for d in diffs if d) == 1:
            return "One dimension is off: check the window and the range of your loop or slices."
    return ""


# --------------------------------------------------------------------------- transformations


def _agrees(
    submission: Any,
    name: str,
    got: Any,
    args: tuple[Any, ...],
    expected: Any,
    reference: Any,
    label: str,
    static: dict[str, Any] | None = None,
) -> None:
    """``got`` equals ``expected`` when given; else the reference's result, or failing that the
    student's own eager result on the same inputs."""
    if expected is not None:
        assert_close(got, expected, name=label)
        return
    if reference is not None:
        try:
            assert_close(got, reference(*args, **(static or {})), name=label)
            return
        except CheckFailure:
            pass  # maybe wrong numbers, consistently: compare with the eager result
    assert_close(got, submission.call(name, *args, **(static or {})).value, name=label)


def check_jit(
    submission: Any,
    name: str,
    args: tuple[Any, ...] | list[Any],
    *,
    static: dict[str, Any] | None = None,
    expected: Any = None,
    reference: Any = None,
) -> None:
    """``name`` traces under ``jax.jit`` for the shapes of ``args`` (arrays, numbers or pytrees of
    them), and the compiled function
    (run in the evaluator, away from student code) agrees with ``expected``, or else with
    ``reference(*args)`` or the student's own eager result (so wrong numbers are not counted
    twice: they belong to the numerics tests)."""
    args = tuple(args)
    try:
        exp = submission.export(name, static=static, example=args)
    except StudentRaised as exc:
        raise CheckFailure(
            f"`{name}` does not work under jax.jit: {exc.ename}"
            + (f" at {exc.location.describe()}" if exc.location and exc.location.describe() else "")
            + f": {_first(exc.evalue)}",
            exc.hint or hint_for(exc.ename, exc.evalue, exc.location),
        ) from None
    got, _ = submission.evaluate(name, exp.module, *args)
    try:
        _agrees(submission, name, got, args, expected, reference, f"jax.jit({name})", static)
    except CheckFailure as exc:
        raise CheckFailure(
            exc.message + " — the compiled function disagrees with the eager one",
            "A function that reads or changes global state, or uses Python randomness, gives "
            "different answers once compiled: keep it pure.",
        ) from None


def check_vectorized(
    submission: Any,
    name: str,
    specs: list[tuple[str, str]],
    cases: list[tuple[Any, ...]],
    *,
    expected: list[Any] | None = None,
    reference: Any = None,
) -> None:
    """``name`` traces with a symbolic batch size (so no Python loop runs over the batch), and
    the one compiled module gives, for every batch size in ``cases``, the expected result (or
    the reference's, or the student's own eager result: see :func:`check_jit`).  The module must
    also have no loop whose length is the batch size (``batch_loops`` of the evaluator's
    analysis): ``lax.map``/``lax.scan``/``fori_loop`` over the batch trace with a symbolic batch
    but run one example after another."""
    try:
        exp = submission.export(name, specs)
    except StudentRaised as exc:
        loc = exc.location.describe() if exc.location else ""
        raise CheckFailure(
            f"`{name}` is not vectorized over the batch: it cannot be traced for a symbolic batch size "
            f"({exc.ename}{' at ' + loc if loc else ''}: {_first(exc.evalue)})",
            "Do not loop in Python over the batch: use `jax.vmap`, or array operations on the whole "
            "batch at once (slicing, broadcasting, `jnp.einsum`).",
        ) from None
    analysis: dict[str, Any] = {}
    for i, case in enumerate(cases):
        got, info = submission.evaluate(name, exp.module, *case)
        analysis = analysis or info.get("analysis", {})
        shapes = ", ".join(str(np.shape(a)) for a in case)
        want = expected[i] if expected is not None else None
        _agrees(submission, name, got, tuple(case), want, reference, f"{name}({shapes}) traced with a symbolic batch")
    _no_batch_loops(name, analysis)


def _module_fact(name: str, analysis: dict[str, Any], key: str) -> Any:
    """One field of the evaluator's analysis of ``name``'s module; a module that could not be
    analysed earns nothing (fail closed)."""
    if key not in analysis:
        raise CheckFailure(
            f"the compiled `{name}` could not be analysed ({analysis.get('analysis_error', 'no analysis')})",
        )
    return analysis[key]


def _no_batch_loops(name: str, analysis: dict[str, Any]) -> None:
    """The module has no ``while`` loop whose trip count is the batch size (or any value known
    only at run time): ``lax.map``/``lax.scan``/``fori_loop`` over the batch trace fine with a
    symbolic batch, but run one example after another."""
    loops = _module_fact(name, analysis, "batch_loops")
    if loops:
        raise CheckFailure(
            f"`{name}` loops over the batch: its compiled code has {loops} loop{'s' if loops > 1 else ''} "
            "whose length is the batch size (lax.map/lax.scan/fori_loop over the batch is sequential)",
            "Compute every example at once: `jax.vmap` the per-example function, or use array "
            "operations on the whole batch (slicing, broadcasting, `jnp.einsum`).",
        )


def check_pure(submission: Any, name: str, args: tuple[Any, ...] | list[Any], *, readonly: bool = False) -> None:
    """Repeated calls agree exactly, NumPy inputs are not modified, and the compiled function
    has no host callbacks (``jax.debug.print``/``callback``)."""
    args = tuple(args)
    res = submission.call(name, *args, repeat=2, readonly=readonly)
    if res.mutated:
        which = ", ".join(f"#{i + 1}" for i in res.mutated)
        raise CheckFailure(
            f"`{name}` modified its input argument {which} in place",
            "JAX functions must be pure: build a new array (`x.at[i].set(v)`, `jnp.where`) instead of "
            "assigning into the input.",
        )
    try:
        assert_close(res.values[1], res.values[0], name=f"second call of {name}", exact=True)
    except CheckFailure as exc:
        raise CheckFailure(
            f"`{name}` gave a different result when called again with the same inputs ({exc.message})",
            "The function depends on hidden state (a global counter, a list it appends to, "
            "Python/NumPy randomness): make the output depend only on the arguments.",
        ) from None
    try:
        submission.export(name, example=args)
    except StudentRaised as exc:
        if "host_callback" in exc.evalue or "callback" in exc.ename.lower():
            raise CheckFailure(
                f"`{name}` calls back into Python from compiled code ({exc.ename})",
                hint_for(exc.ename, exc.evalue, exc.location),
            ) from None
    except SubmissionError:
        pass  # tracing problems belong to the jit category


def check_is_jitted(
    submission: Any,
    name: str,
    args: tuple[Any, ...] | list[Any],
    *,
    static: dict[str, Any] | None = None,
    expected: Any = None,
    reference: Any = None,
) -> None:
    """``name`` is itself a ``jax.jit``-compiled callable, judged from the module exported for
    the shapes of ``args`` (under our own ``jax.jit``): its body must be a single call of a
    jitted function whose results it returns (``whole_call``), which a plain function, or an
    object that only looks jitted (``lower``/``trace`` attributes), cannot produce.  The module
    must also run and give ``expected`` (or ``reference(*args)``) on ``args``."""
    args = tuple(args)
    try:
        exp = submission.export(name, static=static, example=args)
    except StudentRaised as exc:
        raise CheckFailure(
            f"`{name}` does not work under jax.jit: {exc.ename}"
            + (f" at {exc.location.describe()}" if exc.location and exc.location.describe() else "")
            + f": {_first(exc.evalue)}",
            exc.hint or hint_for(exc.ename, exc.evalue, exc.location),
        ) from None
    got, info = submission.evaluate(name, exp.module, *args)
    want = expected if expected is not None else (reference(*args, **(static or {})) if reference else None)
    if want is not None:
        assert_close(got, want, name=f"{name}{_describe_call(args, static or {})}")
    if not _module_fact(name, info.get("analysis", {}), "whole_call"):
        raise CheckFailure(
            f"`{name}` is not a jax.jit-compiled function: its compiled code is not one call of a "
            "jitted function (a plain Python function, or an object that only looks like one)",
            f"Wrap it: `{name} = jax.jit(...)`, or decorate the function with `@jax.jit`.",
        )


def check_no_vmap(submission: Any, name: str, args: tuple[Any, ...] | list[Any]) -> None:
    """``name`` neither calls ``jax.vmap`` when run nor mentions ``vmap`` in its source."""
    res = submission.call(name, *tuple(args))
    if res.vmap_used or mentions(submission.sources(name), "vmap"):
        raise CheckFailure(
            f"`{name}` uses jax.vmap; this one must be vectorized by hand",
            "Write it with array operations over the batch axis: slice all rows at once "
            "(`xs[:, i:i+k]`), broadcast, or use `jnp.einsum`.",
        )


def _first(text: str) -> str:
    lines = [ln for ln in str(text).splitlines() if ln.strip()]
    return (lines[0] if lines else "")[:300]


# --------------------------------------------------------------------------- retracing and compiles


def _calls(calls: list[Any]) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    out = []
    for c in calls:
        if isinstance(c, tuple) and len(c) == 2 and isinstance(c[1], dict) and isinstance(c[0], tuple):
            out.append(c)
        else:
            out.append((tuple(c) if isinstance(c, (tuple, list)) else (c,), {}))
    return out


def _describe_call(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    parts = [
        f"array{tuple(np.shape(a))}"
        if isinstance(a, np.ndarray) and a.ndim
        else repr(a if not isinstance(a, np.generic) else a.item())
        for a in args
    ]
    parts += [f"{k}={v!r}" for k, v in kwargs.items()]
    return "(" + ", ".join(parts) + ")"


def check_traces_once(submission: Any, name: str, calls: list[Any], *, static: tuple[str, ...] = ()) -> None:
    """Under one ``jax.jit``, calls with arguments of one shape and dtype trace ``name`` once.

    ``calls`` are argument tuples (or ``(args, kwargs)`` pairs); the count is measured in the
    sandbox with a counting wrapper and returned as data."""
    res = submission.count(name, _calls(calls), "traces", static)
    total = sum(res.counts)
    if total > 1:
        raise CheckFailure(
            f"under one jax.jit, `{name}` was traced {total} times for {len(calls)} calls whose arguments "
            "differ only in value (same shapes and dtypes); it should be traced once",
            "Each trace means the function's Python code depends on a value, not only on its shape: "
            "a Python `if`/`while` on the value, `float(x)`/`int(x)`, or a value passed as a static "
            "argument. Use `jnp.where`/`lax.cond`/`lax.fori_loop` so one trace serves every value.",
        )


def check_recompiles(
    submission: Any,
    name: str,
    calls: list[Any],
    expect: list[bool | None],
) -> None:
    """Per call, whether ``name`` must compile (True), must not (False) or may (None).

    Compilations are XLA compilations counted in the sandbox from JAX's monitoring events."""
    plan = _calls(calls)
    if len(expect) != len(plan):
        raise ValueError("expect needs one entry per call")
    res = submission.count(name, plan, "compiles")
    for i, (n, want) in enumerate(zip(res.counts, expect, strict=True)):
        args, kwargs = plan[i]
        call = f"{name}{_describe_call(args, kwargs)}"
        if want is True and n == 0:
            raise CheckFailure(
                f"call {i + 1}, `{call}`, did not compile again although its static argument changed",
                "An argument that changes the program (a loop count, a shape) must be static: "
                "`jax.jit(g, static_argnames='n')`, so each new value gets its own compilation.",
            )
        if want is False and n > 0:
            raise CheckFailure(
                f"call {i + 1}, `{call}`, compiled again ({n} compilation{'s' if n > 1 else ''}) although "
                "only the values of traced arguments changed",
                "Mark only the arguments that change the program as static; arrays should be traced, "
                "so new values reuse the compiled code.",
            )


def check_compile_count(submission: Any, name: str, calls: list[Any], *, at_most: int) -> None:
    """All of ``calls`` together cause at most ``at_most`` XLA compilations."""
    plan = _calls(calls)
    res = submission.count(name, plan, "compiles")
    total = sum(res.counts)
    if total > at_most:
        raise CheckFailure(
            f"{len(plan)} calls of `{name}` caused {total} XLA compilations; at most {at_most} expected",
            "Create each jitted function once, outside the loop: `jax.jit(lambda ...)` or "
            "`jax.jit(partial(...))` inside a loop makes a new function, and a new compilation, every time.",
        )


# --------------------------------------------------------------------------- parallelism


def check_parallel(
    submission: Any,
    name: str,
    args: tuple[Any, ...] | list[Any],
    *,
    devices: int,
    collective: bool = False,
    expected: Any = None,
    reference: Any = None,
    tolerance: dict[str, float] | None = None,
) -> None:
    """``name`` is a parallel map over ``devices`` devices, judged from the module exported for
    the shapes of ``args``: exported for ``devices`` devices and split into one program per
    device (``jax.pmap``, or ``shard_map``), not computed on one device and then placed
    (``jax.vmap`` + ``device_put``, a Python loop).  With ``collective=True`` the devices must
    also combine their results with a collective (``lax.psum``/``pmean``/``all_gather``...).
    The module must run and give ``expected`` (or ``reference(*args)``) on ``args``."""
    args = tuple(args)
    try:
        exp = submission.export(name, example=args)
    except StudentRaised as exc:
        raise CheckFailure(
            f"`{name}` could not be compiled for {devices} devices: {exc.ename}"
            + (f" at {exc.location.describe()}" if exc.location and exc.location.describe() else "")
            + f": {_first(exc.evalue)}",
            exc.hint or hint_for(exc.ename, exc.evalue, exc.location),
        ) from None
    got, info = submission.evaluate(name, exp.module, *args)
    want = expected if expected is not None else (reference(*args) if reference else None)
    if want is not None:
        assert_close(got, want, name=f"{name}{_describe_call(args, {})}", **(tolerance or {}))
    analysis = info.get("analysis", {})
    nr = _module_fact(name, analysis, "nr_devices")
    split = _module_fact(name, analysis, "per_device")
    if nr < devices or not split:
        where = (
            f"on {nr} device{'s' if nr != 1 else ''}" if nr < devices else "as one program, then placed on the devices"
        )
        raise CheckFailure(
            f"`{name}` computed its result {where}; expected one program per device on {devices} devices",
            "Use `jax.pmap` so that each device computes one row: `jax.vmap` and Python loops run "
            "everything on a single device, and `jax.device_put` only moves the finished result.",
        )
    if collective and not _module_fact(name, analysis, "collectives"):
        raise CheckFailure(
            f"`{name}` runs on {devices} devices, but the devices never combine their results: "
            "its compiled code has no collective operation",
            "Each device works on its own row; combine the rows' results across devices with "
            "`lax.psum` (or `lax.pmean`) over the pmapped axis: give `jax.pmap` an `axis_name=` "
            "and use the same name in the collective.",
        )
