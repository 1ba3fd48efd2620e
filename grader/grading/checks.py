"""The check library that hidden and public tests call: closeness, jit, vectorization, purity.

Every check raises :class:`CheckFailure` (an ``AssertionError``) with a message that says what
differs and, where it helps, a hint that teaches the fix.  Values from the sandbox are plain,
validated data (see :mod:`grader.wire.protocol`); references may be JAX arrays.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from grader.errors import (
    STUDENT_TEXT_SHOWN,
    CheckFailure,
    StudentRaised,
    SubmissionError,
    error_cause,
    showing_student_text,
)
from grader.grading.hints import taught
from grader.host.session import ExportResult
from grader.intake.notebook import fresh_jit_in_body, fresh_jit_in_loop, mentions
from grader.wire import PRNGKeyData


@dataclass(frozen=True)
class Tolerance:
    rtol: float = 1e-5
    atol: float = 1e-6


#: The assignment's tolerance while one of its tests runs: the grading plugin sets it around
#: each test (``using_tolerance``), so nothing outlives a run or leaks into another course's.
TOLERANCE: contextvars.ContextVar[Tolerance] = contextvars.ContextVar(
    "jaxgrade_tolerance",
    default=Tolerance(),  # noqa: B039 - a frozen dataclass
)


@contextlib.contextmanager
def using_tolerance(tol: Tolerance) -> Iterator[None]:
    """``assert_close``'s default tolerance inside the block."""
    token = TOLERANCE.set(tol)
    try:
        yield
    finally:
        TOLERANCE.reset(token)


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


def quoting_actual_values(allowed: bool) -> contextlib.AbstractContextManager[None]:
    """Within the block, messages quote returned values and the sandbox's text only if ``allowed``
    (the grading plugin turns it off while a hidden test runs)."""
    return showing_student_text(allowed)


def quoted(text: str, instead: str = "…") -> str:
    """``text`` (built from what the student's code returned) where it may be shown, else ``instead``."""
    return text if STUDENT_TEXT_SHOWN.get() else instead


def _got(value: Any) -> str:
    """``got <value>`` where returned values may be quoted; else nothing."""
    return f"got {value!r}, " if STUDENT_TEXT_SHOWN.get() else ""


def _expected(value: Any) -> str:
    """``: <got >expected <value>`` where values may be quoted; else nothing.  On hidden inputs
    the reference's value can carry the inputs as well as the student's can (a ReLU returns
    them): a hidden test names the index, not the values."""
    return f": {_got(value[0])}expected {value[1]!r}" if STUDENT_TEXT_SHOWN.get() else ""


def _kind(x: Any) -> str:
    """A value's type with its article: ``an int``, ``a float``, ``a uint8``, ``an ndarray``."""
    kind = type(x).__name__
    vowel = kind[:1].lower() in "aeio" or kind.startswith("nd")  # "u" sounds "you": a uint8
    return f"{'an' if vowel else 'a'} {kind}"


def _describe(x: Any) -> str:
    if isinstance(x, np.ndarray):
        return f"an array of shape {x.shape} and dtype {x.dtype}"
    if isinstance(x, (list, tuple)):
        return f"a {type(x).__name__} of length {len(x)}"
    if isinstance(x, dict):
        return f"a dict with keys {sorted(map(str, x))}" if STUDENT_TEXT_SHOWN.get() else f"a dict with {len(x)} keys"
    return f"{type(x).__name__} {x!r}"[:200] if STUDENT_TEXT_SHOWN.get() else _kind(x)


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
            if not STUDENT_TEXT_SHOWN.get():
                extra = [f"{len(extra)} other key(s)"] if extra else []
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
            want = repr(expected) if STUDENT_TEXT_SHOWN.get() or expected is None else "another string"
            raise CheckFailure(f"{path}: expected {want}, got {_describe(actual)}")
        return
    if isinstance(expected, PRNGKeyData):
        if not isinstance(actual, PRNGKeyData) or not np.array_equal(actual.data, expected.data):
            want = f"the PRNG key {expected.data.tolist()}" if STUDENT_TEXT_SHOWN.get() else "another PRNG key"
            raise CheckFailure(f"{path}: expected {want}, got {_describe(actual)}")
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
            f"{path}: shape {_shape_text(act.shape)} differs from the expected shape {exp.shape}",
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
                f"{path}: {int(bad.sum())} of {bad.size} entries differ; first at index {idx}"
                + _expected((act[idx], exp[idx]))
            )
        return
    tol = TOLERANCE.get()
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
        blown = int(np.sum(bad & ~np.isfinite(act64) & np.isfinite(exp64)))
        # the scaled atol carries the largest expected value: a hidden test gives the rule, not the number
        atol_text = (
            f"{a:.3g}" if atol is not None or STUDENT_TEXT_SHOWN.get() else f"{tol.atol:g}*max(1, max|expected|)"
        )
        raise CheckFailure(
            f"{path}: {int(bad.sum())} of {bad.size} values differ (rtol={r:g}, atol={atol_text}); "
            + (f"{blown} of them NaN or infinite where finite values are expected; " if blown else "")
            + (
                f"largest error {float(np.real(err_for_max[idx])):.4g} at index {idx}"
                if STUDENT_TEXT_SHOWN.get()
                else f"at index {idx}"
            )
            + _expected((act[idx], exp[idx])),
            _NOT_FINITE_HINT if blown else "",
        )


_NOT_FINITE_HINT = (
    "NaN or inf where numbers are expected: a computation overflowed or divided by zero. In a loop "
    "of updates (gradient descent) the iterates usually diverged: check the update's sign "
    "(`theta - lr * grad`), that the loss is a mean where the task says so, and the step size; "
    "elsewhere look for a log of 0, a square root of a negative number, or 0/0."
)


def _shape_text(shape: tuple[int, ...]) -> str:
    """A returned array's shape, for a message: a zero-size array can have any shape, so in a
    hidden test a shape with a huge dimension is not spelled out (it could carry data)."""
    if STUDENT_TEXT_SHOWN.get() or (len(shape) <= 8 and all(d <= 4096 for d in shape)):
        return str(shape)
    return f"(a shape of {len(shape)} dimensions)"


def _shape_hint(got: tuple[int, ...], want: tuple[int, ...]) -> str:
    if sorted(got) == sorted(want) and got != want:
        return "The axes are in the wrong order: check `in_axes`/`out_axes` (or transpose the result)."
    if len(got) == len(want):
        diffs = [g - w for g, w in zip(got, want)]
        if sum(1 for d in diffs if d) == 1:
            return "One dimension is off: check the window and the range of your loop or slices."
    return ""


# --------------------------------------------------------------------------- transformations


def _compare(
    got: Any,
    args: tuple[Any, ...],
    *,
    expected: Any,
    reference: Any,
    accept: Callable[..., None] | None,
    static: dict[str, Any] | None,
    label: str,
) -> None:
    """``got`` (a module's output, evaluated away from student code) against a trusted value:
    ``expected``, else ``reference(*args)``, else the trusted property check ``accept(got, *args)``.
    Never against the student's own eager result: the kernel decides what that is."""
    if expected is not None:
        assert_close(got, expected, name=label)
    elif reference is not None:
        assert_close(got, reference(*args, **(static or {})), name=label)
    elif accept is not None:
        accept(got, *args)


def _wrong_numbers(
    submission: Any,
    name: str,
    args: tuple[Any, ...],
    static: dict[str, Any] | None,
    exc: CheckFailure,
    how: str,
    trusted: Callable[[Any], None],
) -> CheckFailure:
    """The failure for a module whose numbers are wrong.  The verdict is already decided by a
    trusted comparison; the student's eager result only chooses which explanation to give."""
    try:
        trusted(submission.call(name, *args, **(static or {})).value)
        eager_right = True
    except Exception:  # only the explanation depends on it: any failure means "not right"
        eager_right = False
    if eager_right:
        return CheckFailure(
            f"{exc.message} — {how} disagrees with the eager one, which is right",
            "A function that reads or changes global state, or uses Python randomness, gives "
            "different answers once compiled: keep it pure.",
        )
    return CheckFailure(
        f"{exc.message} — {how} gives wrong numbers, and so does the eager one: this test counts only "
        "for a function that works, so fix the numbers first (the numerics tests show where they go wrong)",
        exc.hint,
    )


def _raised(exc: StudentRaised, what: str) -> tuple[str, str]:
    """(message, hint) for a function that raised where ``what`` needed it to work: the error's
    class, the student's line, the lines of the error that carry its cause, and the hint chosen
    by that error."""
    loc = exc.location.describe() if exc.location else ""
    cause = error_cause(exc.evalue)
    return (
        f"{what}: {exc.ename}{' at ' + loc if loc else ''}" + (f": {cause}" if cause else ""),
        taught(exc),
    )


#: Errors a Python loop (or ``range``/``int``/``len``) over a symbolic batch size raises.
_LOOP_OVER_BATCH = (
    "'_DimExpr' object cannot be interpreted as an integer",
    "InconclusiveDimensionOperation",
    "symbolic dimension",
    "cannot be interpreted as an integer",
    # JAX 0.11 and later (Python 3.12+), iterating over an array of symbolic length
    # (`for x, y in zip(xs, ys)`): "AttributeError: 'NoneType' object has no attribute 'process_primitive'"
    "object has no attribute 'process_primitive'",
)


def _batch_trace_failure(name: str, exc: StudentRaised) -> CheckFailure:
    """Why ``name`` could not be traced for a symbolic batch size, with the hint its error calls
    for: a loop over the batch is a vectorization failure; any other error is named as it is."""
    if exc.ename == "InconclusiveDimensionOperation" or any(exc.says(m) for m in _LOOP_OVER_BATCH):
        loc = exc.location.describe() if exc.location else ""
        return CheckFailure(
            f"`{name}` is not vectorized over the batch: it cannot be traced for a symbolic batch size "
            f"({exc.ename}{' at ' + loc if loc else ''}: it counts or loops over the batch in Python)",
            "Do not loop in Python over the batch: use `jax.vmap`, or array operations on the whole "
            "batch at once (slicing, broadcasting, `jnp.einsum`).",
        )
    message, hint = _raised(exc, f"`{name}` could not be traced for a symbolic batch size")
    return CheckFailure(message, hint)


def check_jit(
    submission: Any,
    name: str,
    args: tuple[Any, ...] | list[Any],
    *,
    static: dict[str, Any] | None = None,
    expected: Any = None,
    reference: Any = None,
    accept: Callable[..., None] | None = None,
) -> ExportResult:
    """``name`` traces under ``jax.jit`` from the shapes and dtypes of ``args`` (arrays, numbers
    or pytrees of them; no value reaches the sandbox), and the compiled module, run in the
    evaluator on ``args``, gives ``expected``, else ``reference(*args)``, else passes
    ``accept(result, *args)``.  Like every property test, it counts only for a function that
    works: wrong numbers fail it too (see "Crashes and wrong numbers" in the README).  Returns the
    exported module, for a test that runs it on more inputs."""
    args = tuple(args)
    try:
        exp = submission.export(name, static=static, example=args)
    except StudentRaised as exc:
        message, hint = _raised(exc, f"`{name}` does not work under jax.jit")
        raise CheckFailure(message, hint) from None
    got, _ = submission.evaluate(name, exp.module, *args)

    def trusted(value: Any) -> None:
        _compare(
            value, args, expected=expected, reference=reference, accept=accept, static=static, label=f"jax.jit({name})"
        )

    try:
        trusted(got)
    except CheckFailure as exc:
        raise _wrong_numbers(submission, name, args, static, exc, "the compiled function", trusted) from None
    return exp


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
    the reference's).  Wrong numbers fail it too, as in :func:`check_jit`.  The module must
    also have no loop whose length is the batch size (``batch_loops`` of the evaluator's
    analysis): ``lax.map``/``lax.scan``/``fori_loop`` over the batch trace with a symbolic batch
    but run one example after another.  Nor may it take the examples out of the batch one at a
    time (a loop of a fixed length over them, unrolled or a scan): at the largest batch of
    ``cases``, the evaluator counts the operations that take examples out of the batch axes (a
    reduction, contraction, slice or gather over them, each as often as it runs:
    ``per_example_ops``), and more than :data:`PER_EXAMPLE_MAX` fail.
    The batch axes are those of ``specs`` that are not a number (``"B, 5"``: axis 0)."""
    try:
        exp = submission.export(name, specs)
    except StudentRaised as exc:
        raise _batch_trace_failure(name, exc) from None
    batch_axes = tuple(
        tuple(i for i, dim in enumerate(shape.split(",")) if shape.strip() and not dim.strip().isdigit())
        for shape, _ in specs
    )
    sizes = [max((np.shape(a)[i] for a, axes in zip(case, batch_axes) for i in axes), default=0) for case in cases]
    largest = max(range(len(cases)), key=lambda i: sizes[i], default=-1)
    analysis: dict[str, Any] = {}
    per_example: dict[str, Any] = {}
    for i, case in enumerate(cases):
        if i == largest and sizes[i] >= 2:
            got, info = submission.evaluate(name, exp.module, *case, batch_axes=batch_axes)
            per_example = {**info, "batch": sizes[i]}
        else:
            got, info = submission.evaluate(name, exp.module, *case)
        analysis = analysis or info.get("analysis", {})
        shapes = ", ".join(str(np.shape(a)) for a in case)
        want = expected[i] if expected is not None else None
        label = f"{name}({shapes}) traced with a symbolic batch"

        def trusted(value: Any, case: tuple[Any, ...] = tuple(case), want: Any = want, label: str = label) -> None:
            _compare(value, case, expected=want, reference=reference, accept=None, static=None, label=label)

        try:
            trusted(got)
        except CheckFailure as exc:
            raise _wrong_numbers(submission, name, tuple(case), None, exc, "the traced function", trusted) from None
    _no_batch_loops(name, analysis)
    if per_example:
        _not_one_at_a_time(name, per_example)


def _module_fact(name: str, analysis: dict[str, Any], key: str) -> Any:
    """One field of the evaluator's analysis of ``name``'s module; a module that could not be
    analysed earns nothing (fail closed)."""
    if key not in analysis:
        raise CheckFailure(
            f"the compiled `{name}` could not be analysed ({analysis.get('analysis_error', 'no analysis')})",
        )
    return analysis[key]


_VECTORIZE_HINT = (
    "Compute every example at once: `jax.vmap` the per-example function, or use array "
    "operations on the whole batch (slicing, broadcasting, `jnp.einsum`)."
)


def _no_batch_loops(name: str, analysis: dict[str, Any]) -> None:
    """The module has no ``while`` loop whose trip count is the batch size (or any value known
    only at run time): ``lax.map``/``lax.scan``/``fori_loop`` over the batch trace fine with a
    symbolic batch, but run one example after another."""
    loops = _module_fact(name, analysis, "batch_loops")
    if loops:
        raise CheckFailure(
            f"`{name}` loops over the batch: its compiled code has {loops} loop{'s' if loops > 1 else ''} "
            "whose length depends on the batch size or on the inputs (lax.map/lax.scan/fori_loop over the "
            "batch run one example after another)",
            _VECTORIZE_HINT,
        )


#: Operations on examples taken out of the batch that a vectorized function may have (the
#: evaluator's ``per_example_ops``): a mean over the batch is one; the corpora count 0 to 2 and
#: the red teams' honest forms at most 5 (a Python loop over the features with a mean each),
#: but 12 and 36 for means of every feature and of every pair of 4 features written out one by
#: one (session 31).  A function that handles each of the 64 examples of the largest hidden
#: batch on its own takes each out of the batch at least once: 64 to 1025 in the forgeries we know.
PER_EXAMPLE_MAX = 48


def _not_one_at_a_time(name: str, info: dict[str, Any]) -> None:
    """The module, at the largest batch it was checked at, does not take the examples out of the
    batch one at a time (:data:`PER_EXAMPLE_MAX`); one that could not be analysed fails."""
    count = info.get("per_example_ops")
    if type(count) is not int:
        raise CheckFailure(
            f"the compiled `{name}` could not be analysed "
            f"({info.get('per_example_error') or 'the evaluator did not count its operations'})",
        )
    if count > PER_EXAMPLE_MAX:
        raise CheckFailure(
            f"`{name}` works on the examples one at a time: for a batch of {info['batch']}, its compiled code "
            f"takes examples out of the batch {count} times (a slice, gather, reduction or contraction over "
            "the batch, counted each time it runs; a vectorized function does it a few times at most, for a "
            "mean over the batch, while a loop over the examples, even of a fixed length and unrolled, or a "
            "scan, does it for every example)",
            _VECTORIZE_HINT,
        )


def check_pure(
    submission: Any,
    name: str,
    args: tuple[Any, ...] | list[Any],
    *,
    readonly: bool = True,
    reference: Any = None,
) -> None:
    """Repeated calls agree exactly (and, given a ``reference``, each equals its result, which a
    function with hidden state cannot fake without being right every time), NumPy inputs are not
    modified, and the compiled function has no host callbacks (``jax.debug.print``/``callback``).
    The function's source, read on the trusted side, must not assign into an argument either.

    With ``readonly`` (the default) the sandbox hands the function NumPy arrays that the operating
    system maps read-only: a write into them raises, and no flag makes them writable again. With
    ``readonly=False`` the arrays are writable, and whether they changed is what the sandbox
    reports (see SECURITY.md: that observation is the student's kernel's)."""
    args = tuple(args)
    written = submission.writes_into_arguments(name)
    if written:
        raise CheckFailure(
            f"`{name}` writes into its input argument: `{written[:120]}`",
            _PURE_INPUTS_HINT + _redefined(submission, name),
        )
    try:
        res = submission.call(name, *args, repeat=2, readonly=readonly)
    except StudentRaised as exc:
        if readonly and (exc.says("read-only") or exc.says("WRITEABLE")):
            message, _ = _raised(exc, f"`{name}` writes into its input arguments (they were read-only)")
            raise CheckFailure(message, _PURE_INPUTS_HINT) from None
        raise
    if reference is not None:
        want = reference(*args)
        for i, value in enumerate(res.values):
            try:
                assert_close(value, want, name=f"call {i + 1} of {name}")
            except CheckFailure as exc:
                raise CheckFailure(
                    f"{exc.message} — purity counts only for a function that works: "
                    + (
                        "the first call is already wrong (see the numerics tests)"
                        if i == 0
                        else "the first call was right, the second, with the same inputs, is not"
                    ),
                    "The function depends on hidden state (a global counter, a list it appends to, "
                    "Python/NumPy randomness): make the output depend only on the arguments."
                    if i
                    else exc.hint,
                ) from None
    if res.mutated:
        which = ", ".join(f"#{i + 1}" for i in res.mutated)
        raise CheckFailure(f"`{name}` modified its input argument {which} in place", _PURE_INPUTS_HINT)
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
        if exc.says("host_callback") or "callback" in exc.ename.lower():
            raise CheckFailure(
                f"`{name}` calls back into Python from compiled code ({exc.ename})",
                taught(exc),
            ) from None
    except SubmissionError:
        pass  # tracing problems belong to the jit category


_PURE_INPUTS_HINT = (
    "JAX functions must be pure: build a new array (`x.at[i].set(v)`, `jnp.where`) instead of assigning into the input."
)


def _redefined(submission: Any, name: str) -> str:
    """For the hint of a failure read from the notebook's source: a word that every top-level
    definition of ``name`` counts, where there are several (an earlier attempt left in a cell).
    Which one the kernel ends up with is the kernel's to say, so the grader reads them all."""
    count = len(submission.sources(name))
    if count < 2:
        return ""
    return (
        f" Your notebook defines `{name}` {count} times, and every definition counts (the grader cannot tell "
        "from your code which one your kernel keeps): delete the earlier attempts."
    )


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
    must also run and give ``expected`` (or ``reference(*args)``) on ``args``.  A function that
    makes a new ``jax.jit(lambda ...)`` on every call (its notebook source, read on the trusted
    side) is not one: it compiles on every call."""
    args = tuple(args)
    reachable = submission.reachable_sources(name)
    fresh = fresh_jit_in_body(reachable)
    if fresh:
        raise CheckFailure(
            f"`{name}` makes a new jitted function every time it is called (`{fresh[:120]}`): it compiles on "
            "every call, so it is not a jax.jit-compiled function",
            f"Jit once, outside: `{name} = jax.jit(...)`, or decorate the function with `@jax.jit`."
            + _redefined(submission, name),
        )
    try:
        exp = submission.export(name, static=static, example=args)
    except StudentRaised as exc:
        message, hint = _raised(exc, f"`{name}` does not work under jax.jit")
        raise CheckFailure(message, hint) from None
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


def check_no_vmap(submission: Any, name: str, args: tuple[Any, ...] | list[Any], *, reference: Any = None) -> None:
    """``name`` is vectorized without ``jax.vmap``, judged on the trusted side: the module
    exported for the shapes of ``args`` has no operation traced under ``vmap`` (JAX's name stack
    in its locations), and neither its source nor any notebook definition it names mentions
    ``vmap``.  A function that cannot be traced (NumPy) is judged from its source alone.  Like
    every property test it counts only for a function that works: given a ``reference``, the
    module's (or, untraceable, the eager) result on ``args`` must match it."""
    args = tuple(args)
    reachable = submission.reachable_sources(name)
    vmapped = mentions(reachable, "vmap")
    if not vmapped:
        try:
            exp = submission.export(name, example=args)
        except StudentRaised:
            exp = None  # not traceable (NumPy): no jax.vmap ran, and the source does not name it
        if exp is not None:
            got, info = submission.evaluate(name, exp.module, *args)
            vmapped = _module_fact(name, info.get("analysis", {}), "vmapped")
        else:
            got = submission.call(name, *args).value
        if reference is not None and not vmapped:
            try:
                assert_close(got, reference(*args), name=f"{name}{_describe_call(args, {})}")
            except CheckFailure as exc:
                raise CheckFailure(
                    f"{exc.message} — this test counts only for a function that works: fix the numbers first "
                    "(the numerics tests show where they go wrong)",
                    exc.hint,
                ) from None
    if vmapped:
        raise CheckFailure(
            f"`{name}` uses jax.vmap; this one must be vectorized by hand",
            "Write it with array operations over the batch axis: slice all rows at once "
            "(`xs[:, i:i+k]`), broadcast, or use `jnp.einsum`.",
        )


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
    """A call's arguments for a message: arrays by shape; other values (a scalar, a static
    setting) as they are, except in a hidden test, where they are hidden inputs too and only
    their kind is named (``f(a float, array(2, 5), n=an int)``)."""
    shown = STUDENT_TEXT_SHOWN.get()

    def value(v: Any) -> str:
        v = v.item() if isinstance(v, np.generic) else v
        return repr(v) if shown or v is None else _kind(v)

    parts = [f"array{tuple(np.shape(a))}" if isinstance(a, np.ndarray) and a.ndim else value(a) for a in args]
    parts += [f"{k}={value(v)}" for k, v in kwargs.items()]
    return "(" + ", ".join(parts) + ")"


def check_traces_once(
    submission: Any, name: str, calls: list[Any], *, static: tuple[str, ...] = (), reference: Any = None
) -> None:
    """One trace serves every call: ``name`` is exported once under ``jax.jit`` from the shapes
    and dtypes of the first call (``static`` keyword arguments fixed), and that one module, run
    in the evaluator, gives the reference's result for every call.  A function whose Python code
    depends on a value cannot be traced abstractly, or bakes one value in and is wrong for the
    others.  ``calls`` are argument tuples (or ``(args, kwargs)`` pairs) of one shape and dtype."""
    plan = _calls(calls)
    args0, kwargs0 = plan[0]
    statics = {k: v for k, v in kwargs0.items() if k in static}
    try:
        exp = submission.export(name, static=statics or None, example=args0)
    except StudentRaised as exc:
        message, hint = _raised(exc, f"under one jax.jit, `{name}` cannot be traced once for every value")
        raise CheckFailure(message, hint or _ONE_TRACE_HINT) from None
    for i, (args, kwargs) in enumerate(plan):
        got, _ = submission.evaluate(name, exp.module, *args)
        if reference is None:
            continue
        try:
            assert_close(got, reference(*args, **kwargs), name=f"call {i + 1}, `{name}{_describe_call(args, kwargs)}`")
        except CheckFailure as exc:
            raise CheckFailure(
                f"traced once and called with another value of the same shape: {exc.message}", _ONE_TRACE_HINT
            ) from None


_ONE_TRACE_HINT = (
    "Each trace means the function's Python code depends on a value, not only on its shape: "
    "a Python `if`/`while` on the value, `float(x)`/`int(x)`, or a value passed as a static "
    "argument. Use `jnp.where`/`lax.cond`/`lax.fori_loop` so one trace serves every value."
)


def check_recompiles(
    submission: Any,
    name: str,
    calls: list[Any],
    expect: list[bool | None],
    *,
    reference: Any = None,
) -> None:
    """Per call, whether ``name`` must compile again (True), must not (False) or may (None),
    judged from exported modules on the trusted side: the keyword arguments of each call are the
    static ones.  Calls with the same static values must be served by one module exported from
    abstract shapes (no recompilation for new values of traced arguments); a call that must
    compile again needs ``name`` to be itself a ``jax.jit`` that keeps those arguments static
    (so each new static value is a new program).  Every call's result must equal the reference's."""
    plan = _calls(calls)
    if len(expect) != len(plan):
        raise ValueError("expect needs one entry per call")
    fresh = fresh_jit_in_body(submission.reachable_sources(name)) if False in expect else ""
    if fresh:
        raise CheckFailure(
            f"`{name}` makes a new jitted function every time it is called (`{fresh[:120]}`), so it compiles "
            "again on every call, even when only the values of traced arguments change",
            "Jit the function once, outside: `g_static = jax.jit(g, static_argnames='n')`."
            + _redefined(submission, name),
        )
    modules: dict[str, Any] = {}
    for i, ((args, kwargs), want) in enumerate(zip(plan, expect, strict=True)):
        call = f"{name}{_describe_call(args, kwargs)}"
        key = repr(sorted(kwargs.items()))
        if key not in modules:
            try:
                modules[key] = submission.export(name, static=dict(kwargs) or None, example=args)
            except StudentRaised as exc:
                message, hint = _raised(
                    exc, f"call {i + 1}, `{call}`, cannot be compiled with only {sorted(kwargs)} static"
                )
                raise CheckFailure(
                    message,
                    hint
                    or "Mark only the arguments that change the program as static; arrays should be traced, "
                    "so new values reuse the compiled code.",
                ) from None
        got, info = submission.evaluate(name, modules[key].module, *args)
        if want is True and not _module_fact(name, info.get("analysis", {}), "whole_call"):
            raise CheckFailure(
                f"call {i + 1}, `{call}`: `{name}` is not itself a jax.jit-compiled function, so a new value "
                f"of {', '.join(sorted(kwargs))} does not make a new compiled program",
                "An argument that changes the program (a loop count, a shape) must be static: "
                "`jax.jit(g, static_argnames='n')`, so each new value gets its own compilation.",
            )
        if reference is not None:
            try:
                assert_close(got, reference(*args, **kwargs), name=f"call {i + 1}, `{call}`")
            except CheckFailure as exc:
                raise CheckFailure(
                    f"{exc.message} — compiled with {', '.join(sorted(kwargs)) or 'no argument'} static, "
                    "the function gives wrong numbers",
                    "Mark only the arguments that change the program as static; arrays should be traced, "
                    "so new values reuse the compiled code.",
                ) from None


def check_compile_count(submission: Any, name: str, calls: list[Any], *, at_most: int) -> None:
    """All of ``calls`` together cause at most ``at_most`` XLA compilations, and the function's
    source, and that of the notebook functions it calls (read on the trusted side), makes no
    ``jax.jit(lambda ...)``/``jax.jit(partial(...))`` inside a loop, nor calls there a function
    that makes one on every call.  The count is the sandbox's (JAX's compile events in the student's kernel), so
    it can be forged (SECURITY.md); the source check cannot, but can be written around."""
    fresh = fresh_jit_in_loop(submission.reachable_sources(name))
    if fresh:
        raise CheckFailure(
            f"`{name}` makes a new jitted function inside its loop (`{fresh[:160]}`): every iteration compiles again",
            "Create each jitted function once, outside the loop: `jax.jit(lambda ...)` or "
            "`jax.jit(partial(...))` inside a loop makes a new function, and a new compilation, every time."
            + _redefined(submission, name),
        )
    plan = _calls(calls)
    res = submission.count(name, plan, "compiles")
    total = sum(res.counts)
    if total > at_most:
        raise CheckFailure(
            f"{len(plan)} calls of `{name}` caused {total if total <= 1000 else 'more than 1000'} XLA compilations; "
            f"at most {at_most} expected",
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
    The work must be done in the per-device programs: the module computes nothing with the
    inputs outside them (moving entries and elementwise functions of one value, such as dividing
    the result by the number of devices, are not work), and an argument with one row per device
    reaches device ``d`` as its row ``d`` only (not closed over, ``in_axes=None`` or copied to
    every device).  Without ``collective``, row ``d`` of the result must also be computed from
    row ``d`` of the inputs alone (a parallel map: no rows exchanged with ``all_gather``).  The
    module must run and give ``expected`` (or ``reference(*args)``) on ``args``."""
    args = tuple(args)
    try:
        exp = submission.export(name, example=args)
    except StudentRaised as exc:
        message, hint = _raised(exc, f"`{name}` could not be compiled for {devices} devices")
        raise CheckFailure(message, hint) from None
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
    outside = _module_fact(name, analysis, "outside_ops")
    if outside < 0:
        raise CheckFailure(f"the compiled `{name}` could not be analysed ({analysis.get('outside_op', '')})")
    if outside:
        raise CheckFailure(
            f"`{name}` does its work outside the per-device programs: its compiled code computes with the "
            f"inputs in one program for all the devices ({outside} operation{'s' if outside != 1 else ''}, "
            f"the first a `{analysis.get('outside_op', '')}`), before or after the `pmap`",
            "Do the computation inside the function you give `jax.pmap`, so that each device computes with its "
            "own row (`jax.pmap(f)(xs)`). Outside the pmap, only move or rescale its result (dividing it by the "
            "number of devices is fine).",
        )
    whole = _module_fact(name, analysis, "whole_inputs")
    if whole:
        which = ", ".join(_argument(args, i) for i in whole)
        raise CheckFailure(
            f"`{name}` does not hand each device its own row of {which}: a device gets the whole array, or "
            "rows other than its own",
            "Let `jax.pmap` split the array: pass it to the pmapped function as an argument (`in_axes=0`, the "
            "default), not closed over or with `in_axes=None`, and do not copy rows to every device; then "
            "combine the devices' results with a collective (`lax.psum`).",
        )
    if not collective and not _module_fact(name, analysis, "rows_kept"):
        raise CheckFailure(
            f"`{name}` does not compute each row of its result on that row's device from that row alone "
            "(for example, the devices exchange their rows with a collective such as `all_gather` and each "
            "computes from all of them)",
            "A parallel map needs no collective: `jax.pmap(convolve)(xs, ws)` hands device d row d of each "
            "argument, and it computes row d of the result.",
        )


def _argument(args: tuple[Any, ...], index: str) -> str:
    """How a message names the module's input ``index``: the index of a leaf of the flattened
    arguments (a list or dict argument is several inputs, flattened as JAX does it)."""
    if not index.isdigit():
        return f"input {index[:20]!r}"
    i, seen = int(index), 0
    for k, arg in enumerate(args):
        try:
            leaves = _leaves(arg)
        except TypeError:  # dict keys that do not sort: JAX would not take them either
            break
        if i < seen + len(leaves):
            leaf = leaves[i - seen]
            where = "" if len(leaves) == 1 and leaf is arg else f", its input {i - seen + 1}"
            return f"argument {k + 1} ({_shape_of(leaf)}{where})"
        seen += len(leaves)
    return f"input {i + 1}"


def _leaves(tree: Any) -> list[Any]:
    """The leaves of a test's argument in JAX's order: lists and tuples in order, dicts by sorted
    key, ``None`` none (the hidden tests' arguments are these, arrays and scalars)."""
    if tree is None:
        return []
    if isinstance(tree, (list, tuple)):
        return [leaf for item in tree for leaf in _leaves(item)]
    if isinstance(tree, dict):
        return [leaf for key in sorted(tree) for leaf in _leaves(tree[key])]
    return [tree]


def _shape_of(leaf: Any) -> str:
    shape = getattr(leaf, "shape", None)
    return f"shape {shape}" if isinstance(shape, tuple) and shape else "a scalar"
