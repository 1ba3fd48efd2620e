"""Hints that teach: what a JAX error means, where it happened, and the one change that fixes it.

Each entry names the error class a student meets while their function is traced, explains the
cause in one sentence, and gives the fix.  :func:`hint_for` picks the entry for an error and
prefixes the student's line when it is known.
"""

from __future__ import annotations

from dataclasses import dataclass

from grader.errors import Location, StudentRaised


@dataclass(frozen=True)
class Hint:
    ename: str
    cause: str
    fix: str
    match: str = ""  # substring of the message that must appear (for generic classes)


HINTS: tuple[Hint, ...] = (
    Hint(
        "TracerBoolConversionError",
        "Python `if`/`while`/`and`/`or` needs a concrete True or False, but under jit, vmap or grad "
        "the value is a tracer (an abstract array).",
        "Compute both branches with `jnp.where(cond, a, b)` (or `lax.select`), branch with "
        "`lax.cond`, loop with `lax.fori_loop`/`lax.while_loop`, or mark the argument static with "
        "`jax.jit(f, static_argnames=...)` if it is a Python setting.",
    ),
    Hint(
        "TracerIntegerConversionError",
        "A traced value was used where Python needs an int (`range(n)`, a list index, `int(x)`).",
        "Use `lax.fori_loop(0, n, body, init)` for loops of traced length, index arrays with "
        "`x[i]` / `lax.dynamic_slice`, or make `n` static with `static_argnames`.",
    ),
    Hint(
        "ConcretizationTypeError",
        "The code asked for the concrete value of a traced array (`float(x)`, `x.item()`, "
        "`jnp.arange(n)` or a shape built from a traced `n`).",
        "Keep values as arrays (`x * 2.0`, not `float(x) * 2`), or make the argument static with "
        "`static_argnames` when it really is a Python setting such as a size.",
    ),
    Hint(
        "TracerArrayConversionError",
        "`np.asarray`/`np.array` (or another NumPy function) was called on a traced value; NumPy "
        "cannot see inside a tracer.",
        "Use `jax.numpy` (`jnp`) instead of `numpy` (`np`) inside functions you jit, vmap or grad.",
    ),
    Hint(
        "NonConcreteBooleanIndexError",
        "Boolean-mask indexing (`x[x < 0]`) gives an array whose size depends on the values, which jit cannot compile.",
        "Use `jnp.where(mask, new, x)` or `x.at[...]` with fixed-size indices, which keep the shape fixed.",
    ),
    Hint(
        "UnexpectedTracerError",
        "A tracer escaped from a transformed function, usually through a global variable or a list kept between calls.",
        "Return values instead of storing them in globals; pass state in and out explicitly.",
    ),
    Hint(
        "TypeError",
        "A shape was built from a traced value (shapes must be known when the function is compiled).",
        "Pass sizes as static arguments (`static_argnames`) or derive them from `x.shape`.",
        match="Shapes must be 1D sequences of concrete values",
    ),
    Hint(
        "ValueError",
        "A static argument must be hashable, and this one is not (a list, dict or array).",
        "Do not mark an array argument static: leave it traced and branch with `jnp.where` or "
        "`lax.cond`; a small constant list can be passed as a tuple instead.",
        match="Non-hashable static arguments",
    ),
    Hint(
        "AttributeError",
        "`.at[...]` exists only on JAX arrays, and this is a NumPy array (the tests call your "
        "function with NumPy arrays, as a caller may).",
        "Convert it first: `x = jnp.asarray(x)`, then `x.at[i].set(v)`.",
        match="'numpy.ndarray' object has no attribute 'at'",
    ),
    Hint(
        "TypeError",
        "`jax.grad` differentiates only with respect to floating-point inputs, and this one holds integers.",
        "Make it a float array: `jnp.array([1.0, 1.0])`, or `x.astype(jnp.float32)`.",
        match="grad requires real- or complex-valued inputs",
    ),
    Hint(
        "AttributeError",
        "Under a symbolic batch size a Python loop cannot go over the batch: the function loops in "
        "Python over the batch dimension (`for x in xs`, `zip(xs, ys)`).",
        "Replace the loop over the batch with `jax.vmap`, or with array operations over the whole batch.",
        match="object has no attribute 'process_primitive'",
    ),
    Hint(
        "TypeError",
        "Under a symbolic batch size a Python loop cannot count the batch: the function loops in "
        "Python over the batch dimension.",
        "Replace the loop over the batch with `jax.vmap`, or with array operations over the whole batch.",
        match="'_DimExpr' object cannot be interpreted as an integer",
    ),
    Hint(
        "ValueError",
        "`jax.vmap` maps arguments whose mapped axes have different sizes: `in_axes` says which "
        "axis of each argument is the batch, and every mapped axis must have the batch's size.",
        "Check `in_axes`: `None` for an argument every row shares (`in_axes=(0, None)`), and the "
        "batch's axis for the others (`in_axes=(1, 1)` for a batch along axis 1).",
        match="vmap got inconsistent sizes",
    ),
    Hint(
        "NotImplementedError",
        "The function calls back into Python from compiled code (`jax.debug.print`, "
        "`jax.debug.callback`, `pure_callback`), which a pure function does not need.",
        "Remove the callback (print outside the function), so the function is pure.",
        match="host_callbacks",
    ),
    Hint(
        "ValueError",
        "Python `if`/`while`/`and`/`or` was applied to an array with more than one element: an "
        "array has no single truth value.",
        "Select elementwise with `jnp.where(x > 0, a, b)` (or `lax.select`) instead of branching in Python.",
        match="truth value of an array with more than one element is ambiguous",
    ),
    Hint(
        "TypeError",
        "`float(x)`/`int(x)` (or `.item()`) was applied to an array with more than one element.",
        "Keep working with arrays (`x * 2.0`, `jnp.asarray(x, jnp.float32)`); Python numbers hold a single value.",
        match="Only scalar arrays can be converted to Python scalars",
    ),
    Hint(
        "KeyReuseError",
        "A PRNG key was used twice: the two draws are not independent.",
        "Split the key (`key, sub = jax.random.split(key)`) and use each key exactly once.",
    ),
    Hint(
        "IndexError",
        "An index is out of range for the array's shape.",
        "Check the slice bounds against the expected output shape.",
    ),
    Hint(
        "NameError",
        "A collective (`lax.psum`, `lax.pmean`, ...) names an axis that no enclosing `jax.pmap` (or `jax.vmap`) binds.",
        "Give the `pmap` that runs the function the same name: `jax.pmap(f, axis_name='i')` with "
        "`lax.psum(x, axis_name='i')` inside `f`.",
        match="unbound axis name",
    ),
    Hint(
        "NameError",
        "A name used inside the function is not defined when it runs.",
        "Define (and run the cell defining) every helper before the function that uses it.",
    ),
)


def find_hint(ename: str, evalue: str = "") -> Hint | None:
    """The most specific hint for an error class and message, if any."""
    best = None
    for h in HINTS:
        if h.ename != ename:
            continue
        if h.match:
            if h.match in evalue:
                return h
        elif best is None:
            best = h
    return best


def hint_for(ename: str, evalue: str = "", location: Location | None = None, *, name: str = "") -> str:
    """A student-facing hint: the error, the student's line, why, and the fix."""
    h = find_hint(ename, evalue)
    where = location.describe() if location is not None else ""
    parts = []
    if where:
        parts.append(f"{ename} at {where}.")
    if h is not None:
        parts.append(h.cause)
        parts.append("Fix: " + h.fix)
    return " ".join(parts)


def taught(exc: StudentRaised) -> str:
    """The hint a student error carries, else the grader's hint for its class and message (the
    message chooses the words even when a hidden test may not show it)."""
    return exc.hint or hint_for(exc.ename, exc.unshown_message, exc.location, name=exc.name)
