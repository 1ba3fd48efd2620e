"""The evaluator: runs serialized ``jax.export`` modules on hidden inputs, never student code.

Runs sandboxed like the worker but with an empty scratch and no notebook: it only
deserializes StableHLO sent by the trusted side (which got it from the worker) and calls it.
Started as ``python -m grader.sandboxed.evaluator --scratch DIR [limits]``.
"""

from __future__ import annotations

import math
import os
import re
import sys
import time
from dataclasses import dataclass, replace
from typing import Any

from grader.sandboxed import rlimits
from grader.sandboxed.rlimits import apply_limits
from grader.wire import messages, protocol

_ANALYSES: dict[str, dict[str, Any]] = {}


def _load(values: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The deserialized module and its analysis (computed once per module)."""
    import hashlib

    from jax import export

    blob = values["module"].tobytes()
    exp = export.deserialize(bytearray(blob))
    digest = hashlib.sha256(blob).hexdigest()
    if digest not in _ANALYSES:
        if len(_ANALYSES) > 64:
            _ANALYSES.clear()
        try:
            _ANALYSES[digest] = analyze_module(exp)
        except Exception as exc:  # an analysis that fails decides nothing: the checks fail closed
            _ANALYSES[digest] = {
                "nr_devices": int(exp.nr_devices),
                "analysis_error": f"{type(exc).__name__}: {exc}"[:500],
            }
    return exp, _ANALYSES[digest]


def _placed(exp: Any, args: Any) -> Any:
    import jax

    if exp.nr_devices > 1:
        # a module exported for several devices (pmap, sharding) runs with its inputs replicated
        import numpy as np
        from jax.sharding import Mesh, NamedSharding, PartitionSpec

        mesh = Mesh(np.array(jax.devices()[: exp.nr_devices]), ("_jaxgrade",))
        replicated = NamedSharding(mesh, PartitionSpec())
        return jax.tree_util.tree_map(lambda a: jax.device_put(a, replicated), list(args))
    return list(args)


#: The requests the evaluator answers (it stops when the trusted side closes its pipe, or is killed).
REQUESTS = (messages.Eval, messages.Grad, messages.Analyze)


def _evaluate(header: dict[str, Any], payload: bytes) -> tuple[messages.Evaluated, dict[str, Any]]:
    """One request (:data:`REQUESTS`): :class:`~messages.Eval` (call the module on ``args``),
    :class:`~messages.Grad` (the gradient of its scalar result with respect to
    ``args[argnum]``; the module must be serialized with ``vjp_order >= 1``) or
    :class:`~messages.Analyze` (the analysis alone).  Every answer carries the module's analysis;
    an ``Eval`` with ``batch_axes`` also counts :func:`per_example_ops` at the arguments' shapes."""
    import jax

    request = messages.decode_request(header, *REQUESTS)
    values = protocol.unpack_values(header, payload)
    exp, analysis = _load(values)
    calls = analysis.get("custom_calls")
    head = messages.Evaluated(
        nr_devices=int(exp.nr_devices),
        analysis=analysis,
        custom_calls=tuple(calls) if isinstance(calls, list) else None,
    )
    if isinstance(request, messages.Analyze):
        return head, {}
    args = _placed(exp, values.get("args", ()))
    t0 = time.perf_counter()
    if isinstance(request, messages.Grad):
        argnum = request.argnum
        if type(argnum) is not int or not 0 <= argnum < len(args):
            raise ValueError(f"argnum {argnum!r} does not name one of the {len(args)} arguments")

        def scalar(a: Any) -> Any:
            return exp.call(*args[:argnum], a, *args[argnum + 1 :])

        out = jax.block_until_ready(jax.grad(scalar)(args[argnum]))
    else:
        out = jax.block_until_ready(exp.call(*args))
    head = replace(head, elapsed=time.perf_counter() - t0)
    if isinstance(request, messages.Eval) and request.batch_axes:
        try:
            head = replace(head, per_example_ops=per_example_ops(exp, args, [list(a) for a in request.batch_axes]))
        except Exception as exc:  # decides nothing: the check fails closed
            head = replace(head, per_example_error=f"{type(exc).__name__}: {exc}"[:500])
    return head, {"result": out}


# --------------------------------------------------------------------------- module analysis
#
# What the checks decide points from is read here, from the StableHLO of the deserialized
# module: the student's kernel produced the module, but to forge a property of it the student
# has to hand over a module that has the property, that is, write code that has it.

#: StableHLO collective operations, by the name reported in ``collectives``.
COLLECTIVES = {
    "stablehlo.all_reduce": "all_reduce",
    "stablehlo.all_gather": "all_gather",
    "stablehlo.reduce_scatter": "reduce_scatter",
    "stablehlo.collective_permute": "collective_permute",
    "stablehlo.all_to_all": "all_to_all",
    "stablehlo.collective_broadcast": "collective_broadcast",
}
#: Custom calls that annotate a value (a sharding, a shape's check) and compute nothing.
_ANNOTATIONS = frozenset({"shape_assertion", "Sharding"})
#: Custom calls that are bookkeeping, not computation (their results are not data).
_BOOKKEEPING_CALLS = _ANNOTATIONS | {"SPMDFullToShardShape", "SPMDShardToFullShape"}
_WRAPPER = "_wrapped_jax_export_main"  # jax.export's wrapper for symbolic shapes


def _sym(op: Any, attr: str) -> str:
    from jax._src.lib.mlir import ir

    try:
        a = op.attributes[attr]
    except (KeyError, IndexError):
        return ""
    try:
        return ir.FlatSymbolRefAttr(a).value
    except (TypeError, ValueError):
        try:
            return ir.StringAttr(a).value
        except (TypeError, ValueError):
            return str(a).strip('"@')


def _functions(module: Any) -> dict[str, Any]:
    """The module's functions by name (``func.func`` ops at its top level)."""
    out = {}
    for op in module.body.operations:
        op = op.operation
        if op.name == "func.func":
            out[_sym(op, "sym_name")] = op
    return out


def _public(funcs: dict[str, Any]) -> Any:
    """The module's public function (the exported one)."""
    main = next((f for f in funcs.values() if _sym(f, "sym_visibility") != "private"), None)
    if main is None or not len(main.regions[0].blocks):
        raise ValueError("the module has no public function")
    return main


def _walk(op: Any) -> list[Any]:
    """Every operation nested in ``op`` (not ``op`` itself), in textual order."""
    out: list[Any] = []
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                out.append(inner.operation)
                out.extend(_walk(inner.operation))
    return out


def _last_op(block: Any) -> Any:
    ops = list(block.operations)
    return ops[-1].operation if ops else None


def _terminator(region: Any) -> Any:
    return _last_op(region.blocks[0]) if len(region.blocks) else None


class _Taint:
    """Which SSA values depend on the inputs: the public function's arguments (data, and for
    symbolic shapes the dimension sizes the wrapper passes on as ``jax.global_constant``) or
    the result of a custom call.  Values built from constants alone are untainted; so is a
    ``while`` loop's carry that starts from a constant and is updated from untainted values
    (a loop counter).  A forward fixpoint over the whole module, across private functions."""

    def __init__(self, module: Any) -> None:
        self.funcs = _functions(module)
        self.tainted: set[Any] = set()
        self.ops = [op for f in self.funcs.values() for op in _walk(f)]
        for f in self.funcs.values():
            if _sym(f, "sym_visibility") != "private" and len(f.regions[0].blocks):
                self.tainted.update(f.regions[0].blocks[0].arguments)
        changed = True
        while changed:
            changed = False
            for op in self.ops:
                changed |= self._step(op)

    def has(self, v: Any) -> bool:
        return v in self.tainted

    def _add(self, values: Any) -> bool:
        new = [v for v in values if v not in self.tainted]
        self.tainted.update(new)
        return bool(new)

    def _step(self, op: Any) -> bool:
        name = op.name
        operands = list(op.operands)
        any_in = any(v in self.tainted for v in operands)
        if name == "func.call":
            callee = self.funcs.get(_sym(op, "callee"))
            if callee is None or not len(callee.regions[0].blocks):
                return self._add(op.results)
            changed = False
            args = callee.regions[0].blocks[0].arguments
            changed |= self._add(a for a, v in zip(args, operands) if v in self.tainted)
            ret = _terminator(callee.regions[0])
            if ret is not None:
                changed |= self._add(r for r, v in zip(op.results, ret.operands) if v in self.tainted)
            return changed
        if name == "stablehlo.while":
            cond, body = op.regions[0], op.regions[1]
            yielded = list(_terminator(body).operands)
            bad = [i for i, v in enumerate(operands) if v in self.tainted or yielded[i] in self.tainted]
            changed = False
            for region in (cond, body):
                args = region.blocks[0].arguments
                changed |= self._add(args[i] for i in bad)
            changed |= self._add(op.results[i] for i in bad)
            return changed
        if name == "stablehlo.custom_call":
            return self._add(op.results) if _sym(op, "call_target_name") not in _BOOKKEEPING_CALLS or any_in else False
        if name == "sdy.manual_computation":
            region = op.regions[0]
            changed = self._add(a for a, v in zip(region.blocks[0].arguments, operands) if v in self.tainted)
            ret = _terminator(region)
            if ret is not None:
                changed |= self._add(r for r, v in zip(op.results, ret.operands) if v in self.tainted)
            return changed
        if len(op.regions):
            # case/if/reduce/sort/scatter/all_reduce...: block arguments stand for elements of
            # the operands; results depend on the operands and on what the regions return
            changed = False
            if any_in:
                for region in op.regions:
                    for block in region.blocks:
                        changed |= self._add(block.arguments)
            returned = any(
                v in self.tainted for region in op.regions if len(region.blocks) for v in _terminator(region).operands
            )
            if any_in or returned:
                changed |= self._add(op.results)
            return changed
        return self._add(op.results) if any_in else False


def _whole_call(taint: _Taint) -> bool:
    """The public function's body is one call to a private function whose results it returns,
    as a jitted callable lowers under our own ``jax.jit`` (a nested pjit); before the call
    there may be values built from constants alone (a ``partial``'s bound numbers).  For
    symbolic shapes, the body of jax.export's wrapper is looked at instead."""
    funcs = taint.funcs
    main = next((f for f in funcs.values() if _sym(f, "sym_visibility") != "private"), None)
    for _ in range(3):
        if main is None or not len(main.regions[0].blocks):
            return False
        ops = [op.operation for op in main.regions[0].blocks[0].operations]
        ret = ops[-1] if ops and ops[-1].name == "func.return" else None
        calls = [op for op in ops if op.name == "func.call"]
        if ret is None or len(calls) != 1:
            return False
        call = calls[0]
        callee = _sym(call, "callee")
        if list(ret.operands) != list(call.results) or callee not in funcs:
            return False
        rest = [op for op in ops if op is not call and op is not ret]
        if callee == _WRAPPER:
            # the symbolic-shape prologue: dimension sizes and their assertions, then the call
            allowed = {
                "stablehlo.constant",
                "stablehlo.get_dimension_size",
                "stablehlo.compare",
                "stablehlo.custom_call",
            }
            if any(op.name not in allowed for op in rest):
                return False
            main = funcs[callee]
            continue
        return all(not any(taint.has(v) for v in op.results) and not len(op.regions) for op in rest)
    return False


def analyze_module(exp: Any) -> dict[str, Any]:
    """What the trusted side may decide points from, read from an ``Exported``'s StableHLO:

    - ``nr_devices``: devices the module was exported for;
    - ``custom_calls``: custom-call targets (host callbacks show up here);
    - ``loops``: ``stablehlo.while`` loops; ``batch_loops``: those whose trip count is not a
      compile-time constant (it depends on a dimension variable or on the inputs): ``lax.map``,
      ``lax.scan`` or ``fori_loop(0, xs.shape[0])`` over a symbolic batch count,
      ``fori_loop(0, 3)`` or a fixed-length scan do not;
    - ``whole_call``: the body is one call of a private function whose results are returned
      (the function exported was itself jitted);
    - ``collectives``: collective operations present (``all_reduce``...);
    - ``per_device``: the computation is split into per-device programs (``sdy.manual_computation``,
      or the GSPMD ``SPMDFullToShardShape`` custom call: ``pmap``/``shard_map``);
    - ``vmapped``: some operation was traced under ``jax.vmap`` (JAX's name stack, kept in the
      module's locations, says ``vmap(...)``);
    - ``outside_ops``, ``outside_op``, ``whole_inputs``, ``rows_kept``: where a module for several
      devices does its work (:func:`outside_per_device`)."""
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir

    text = exp.mlir_module()
    with mlir.make_ir_context():
        module = ir.Module.parse(text)
        taint = _Taint(module)
        loops = batch = 0
        collectives: set[str] = set()
        calls: set[str] = set()
        per_device = False
        for op in taint.ops:
            if op.name == "stablehlo.while":
                loops += 1
                cond = _terminator(op.regions[0])
                if cond is not None and any(taint.has(v) for v in cond.operands):
                    batch += 1
            elif op.name in COLLECTIVES:
                collectives.add(COLLECTIVES[op.name])
            elif op.name == "sdy.manual_computation":
                per_device = True
            elif op.name == "stablehlo.custom_call":
                target = _sym(op, "call_target_name")
                calls.add(target)
                per_device |= target == "SPMDFullToShardShape"
        whole = _whole_call(taint)
        outside = outside_per_device(module, int(exp.nr_devices))
    return {
        "nr_devices": int(exp.nr_devices),
        "custom_calls": sorted(calls)[:50],
        "loops": loops,
        "batch_loops": batch,
        "whole_call": whole,
        "collectives": sorted(collectives),
        "per_device": per_device,
        "vmapped": _VMAP_IN_NAME_STACK.search(text) is not None,
        **outside,
    }


#: A location whose name stack passes through ``jax.vmap``: ``loc("jit(f)/vmap(conv)/dot_general"``.
_VMAP_IN_NAME_STACK = re.compile(r'loc\("[^"]*\bvmap\(')


# --------------------------------------------------------------------------- work outside the devices
#
# ``per_device`` says the module has per-device programs (a ``pmap``/``shard_map``), not that its
# work is done in them: ``jax.pmap(lambda row: row)(jax.vmap(convolve)(xs, ws))`` has one that
# does nothing, and a pmap that averages a closed-over array hands every device all of it.  So the
# module is followed from its arguments, in two ways.
#
# - **Work outside the per-device programs** (``outside_ops``): what the module computes with the
#   inputs there.  Moving entries (a reshape, a slice, a sharding annotation) computes nothing, and
#   an elementwise function of a single value (dividing the pmap's result by the number of
#   devices) combines nothing; any other operation on the inputs there (a reduction, a
#   contraction, two different values combined, a loop, a bitcast that packs several entries into
#   one) is work that one program did for every device.
# - **One row per device** (``whole_inputs``): an argument with one row per device (a leading
#   axis of ``nr_devices``) must reach the per-device programs split along its rows, device ``d``
#   getting row ``d`` only.  Which axis of a value holds the argument's rows (slice ``d`` of it
#   depending on row ``d`` alone) is followed through the moves and elementwise operations; a
#   per-device program's input that depends on the argument must be split along that axis, one
#   row per device.  The array closed over or passed with ``in_axes=None`` (replicated), its rows
#   broadcast to every device before the split, one row copied to every device in a Python loop:
#   each reaches a device other than one row at a time.  A per-device program's result keeps the
#   rows where each device computed it from its own rows alone (no collective in between), so
#   laundering the rows through a pmap and then handing them to every device is seen too.
#
# Two lowerings are read: shardy's ``sdy.manual_computation`` region, and GSPMD's
# ``SPMDFullToShardShape`` / ``SPMDShardToFullShape`` custom calls around a private function
# (``jax_use_shardy_partitioner`` off), where the values between the two are a device's own.

#: Operations that move, copy or annotate entries and compute nothing.
_MOVES = frozenset(
    "stablehlo." + n for n in "reshape transpose broadcast_in_dim slice concatenate pad reverse copy".split()
) | {"sdy.sharding_constraint", "sdy.reshard", "func.return"}
#: Moves whose first operands are the entries and the rest say which: they compute with the
#: inputs when those say which (a data-dependent index).
_INDEXED = {"stablehlo.gather": 1, "stablehlo.dynamic_slice": 1, "stablehlo.dynamic_update_slice": 2}
#: Elementwise operations: they combine entries only when two different values meet.  (A
#: ``bitcast_convert`` that changes the rank packs or unpacks entries: it is not one of them.)
_ELEMENTWISE = frozenset(
    "stablehlo." + n
    for n in (
        "abs add and atan2 cbrt ceil clamp compare complex convert bitcast_convert cosine "
        "count_leading_zeros divide exponential exponential_minus_one floor imag is_finite log "
        "log_plus_one logistic maximum minimum multiply negate not or popcnt power real "
        "reduce_precision remainder round_nearest_afz round_nearest_even rsqrt select shift_left "
        "shift_right_arithmetic shift_right_logical sign sine sqrt subtract tan tanh xor"
    ).split()
)
_MAX_VISITS = 200_000  # operations visited, calls inlined: past this the analysis gives up (fails closed)


@dataclass(frozen=True)
class _Held:
    """What a value derived from the inputs is: the arguments it depends on; whether it is a
    device's own (inside a per-device program); its root, the value it is an elementwise function
    of (itself, for anything else); ``rows``: for each argument with one row per device, the axis
    of this value whose slice ``d`` depends on that argument's row ``d`` alone (outside the
    per-device programs), or, inside one, that the value depends on the argument through the
    device's own row alone (the axis is then 0, unused)."""

    args: frozenset[int]
    manual: bool
    root: Any
    rows: tuple[tuple[int, int], ...] = ()

    def axis(self, i: int) -> int | None:
        return dict(self.rows).get(i)


def _axis_through(op: Any, n: int, k: int) -> int | None:
    """The axis of ``op``'s result that holds axis ``k`` of its operand ``n`` entry for entry (each
    slice along it from the same slice of the operand), or None."""
    name = op.name
    src, dst = _dims(op.operands[n]), _dims(op.results[0])
    if src is None or dst is None or k >= len(src):
        return None
    if name in _ELEMENTWISE or name in (
        "stablehlo.custom_call",
        "sdy.sharding_constraint",
        "sdy.reshard",
        "stablehlo.copy",
    ):
        return k if src == dst else None  # an annotation, or entry for entry
    if name == "stablehlo.reshape":  # the same span of the flattened entries, by the sizes before it
        before = math.prod(src[:k])
        for j in range(len(dst)):
            if math.prod(dst[:j]) == before and dst[j] == src[k]:
                return j
        return None
    if name == "stablehlo.transpose":
        perm = _ints(op, "permutation")
        return perm.index(k) if k in perm else None
    if name == "stablehlo.broadcast_in_dim":
        j = _ints(op, "broadcast_dimensions")[k]
        return j if dst[j] == src[k] else None
    if name == "stablehlo.slice":
        start, limit, step = _ints(op, "start_indices"), _ints(op, "limit_indices"), _ints(op, "strides")
        return k if (start[k], limit[k], step[k]) == (0, src[k], 1) else None
    if name == "stablehlo.concatenate":
        return k if _int_attr(op, "dimension") != k else None
    if name == "stablehlo.pad":
        pads = [_ints(op, a)[k] for a in ("edge_padding_low", "edge_padding_high", "interior_padding")]
        return k if n == 0 and pads == [0, 0, 0] else None
    if name == "stablehlo.reverse":
        return k if k not in _ints(op, "dimensions") else None
    return None


def _split_axis(outer: Any, inner: Any, devices: int) -> int | None:
    """The axis along which a per-device program's value ``inner`` is ``outer`` split one part
    per device (the other axes whole), or None (replicated, or split otherwise)."""
    a, b = _dims(outer), _dims(inner)
    if a is None or b is None or len(a) != len(b):
        return None
    split = [k for k in range(len(a)) if a[k] != b[k]]
    return split[0] if len(split) == 1 and b[split[0]] * devices == a[split[0]] else None


class _Outside:
    """Counts the operations that compute with the inputs outside the per-device programs (the
    first one's name kept for the message), and finds the arguments with one row per device that
    reach a per-device program other than one row per device.  Calls are followed into their
    callees, and per-device programs into their regions (where nothing is counted)."""

    def __init__(self, module: Any, devices: int) -> None:
        self.funcs = _functions(module)
        self.devices = devices
        self.ops = 0
        self.first = ""
        self.whole: set[int] = set()
        self.visits = 0
        block = _public(self.funcs).regions[0].blocks[0]
        #: the arguments with one row per device
        self.rowed = frozenset(i for i, a in enumerate(block.arguments) if (_dims(a) or (0,))[0] == devices)
        start = {
            a: _Held(frozenset({i}), False, a, ((i, 0),) if i in self.rowed else ())
            for i, a in enumerate(block.arguments)
        }
        returned = self._block(block, start, 0)
        #: each result holds the rows of every argument with one row per device it depends on
        self.kept = all(h.axis(i) is not None for h in returned if h is not None for i in h.args & self.rowed)

    def _count(self, op: Any) -> None:
        self.ops += 1
        if not self.first:
            self.first = _sym(op, "call_target_name") if op.name == "stablehlo.custom_call" else op.name.split(".")[-1]

    def _enter(self, held: _Held | None, outer: Any, inner: Any) -> _Held | None:
        """A per-device program's input ``inner`` (``outer`` outside): each argument with one row
        per device that it depends on must come split along its rows, one row per device."""
        if held is None:
            return None
        if held.manual:
            return _Held(held.args, True, inner, held.rows)
        split = _split_axis(outer, inner, self.devices)
        own = tuple((i, 0) for i in sorted(held.args & self.rowed) if split is not None and held.axis(i) == split)
        self.whole |= (held.args & self.rowed) - {i for i, _ in own}
        return _Held(held.args, True, inner, own)

    def _leave(self, held: _Held | None, outer: Any, inner: Any) -> _Held | None:
        """A per-device program's result ``outer`` (``inner`` inside): split along one axis, it
        holds the rows of the arguments each device computed it from its own row of."""
        if held is None:
            return None
        split = _split_axis(outer, inner, self.devices)
        rows = () if split is None else tuple((i, split) for i, _ in held.rows)
        return _Held(held.args, False, outer, rows)

    def _block(self, block: Any, env: dict[Any, _Held], depth: int) -> list[_Held | None]:
        if depth > 64:
            raise RuntimeError("calls nested more than 64 deep")
        for op in block.operations:
            self.visits += 1
            if self.visits > _MAX_VISITS:
                raise RuntimeError(f"more than {_MAX_VISITS} operations to follow")
            self._op(op.operation, env, depth)
        last = _last_op(block)
        return [env.get(v) for v in last.operands] if last is not None else []

    def _op(self, op: Any, env: dict[Any, _Held], depth: int) -> None:
        name = op.name
        given = [env.get(v) for v in op.operands]
        held = [h for h in given if h is not None]
        if op.regions and name not in ("func.call", "sdy.manual_computation"):
            # values from outside used in a nested region (stablehlo's loops and branches may):
            # ``env`` holds only values defined outside it
            held += [env[v] for x in _walk(op) for v in x.operands if v in env]
        if not held:
            return
        args = frozenset().union(*(h.args for h in held))
        manual = all(h.manual for h in held)

        if name == "func.call":
            callee = self.funcs.get(_sym(op, "callee"))
            if callee is None or not len(callee.regions[0].blocks):
                raise RuntimeError(f"a call of {_sym(op, 'callee')!r} that cannot be followed")
            block = callee.regions[0].blocks[0]
            inner = {a: h for a, h in zip(block.arguments, given) if h is not None}
            for r, h in zip(op.results, self._block(block, inner, depth + 1)):
                if h is not None:
                    env[r] = h
            return
        if name == "sdy.manual_computation":  # a per-device program
            block = op.regions[0].blocks[0]
            inner = {}
            for v, h, a in zip(op.operands, given, block.arguments):
                entered = self._enter(h, v, a)
                if entered is not None:
                    inner[a] = entered
            ret = _last_op(block)
            for r, h, v in zip(op.results, self._block(block, inner, depth + 1), ret.operands):
                left = self._leave(h, r, v)
                if left is not None:
                    env[r] = left
            return
        target = _sym(op, "call_target_name") if name == "stablehlo.custom_call" else ""
        if target:
            if target == "SPMDFullToShardShape" and len(op.operands) == len(op.results) == 1:
                # GSPMD: a device's own part from here on
                entered = self._enter(given[0], op.operands[0], op.results[0])
                if entered is not None:
                    env[op.results[0]] = entered
                return
            if target == "SPMDShardToFullShape" and len(op.operands) == len(op.results) == 1:
                left = self._leave(given[0], op.results[0], op.operands[0])
                if left is not None:
                    env[op.results[0]] = left
                return
        if manual:  # inside a per-device program: nothing is counted
            own = (
                ()
                if self._exchanges(op)
                else tuple(
                    (i, 0) for i in sorted(args & self.rowed) if all(h.axis(i) is not None for h in held if i in h.args)
                )
            )
            for r in op.results:
                env[r] = _Held(args, True, r, own)
            return
        repacked = name == "stablehlo.bitcast_convert" and _dims(op.operands[0]) != _dims(op.results[0])
        moves = (
            target in _ANNOTATIONS
            or name in _MOVES
            or (name in _INDEXED and all(h is None for h in given[_INDEXED[name] :]))
        )
        one_root = name in _ELEMENTWISE and not repacked and len({h.root for h in held}) == 1
        if not (moves or one_root):
            self._count(op)
        for r in op.results:
            env[r] = _Held(args, False, held[0].root if one_root else r, self._rows_through(op, given))

    def _exchanges(self, op: Any, seen: set[str] | None = None) -> bool:
        """Whether ``op`` (inside a per-device program) may bring other devices' rows: a collective,
        anywhere in its regions or in a function it calls (a loop's body, a branch, a jitted helper,
        a composite's decomposition), or a custom call (native code: not followed)."""
        seen = set() if seen is None else seen
        for x in [op, *_walk(op)]:
            if x.name in COLLECTIVES:  # a device's value after one depends on other devices' rows
                return True
            if x.name == "stablehlo.custom_call" and _sym(x, "call_target_name") not in _BOOKKEEPING_CALLS:
                return True
            callee = {"func.call": "callee", "stablehlo.composite": "decomposition"}.get(x.name)
            name = _sym(x, callee) if callee else ""
            if name and name not in seen:
                seen.add(name)
                f = self.funcs.get(name)
                if f is None or self._exchanges(f, seen):
                    return True
        return False

    def _rows_through(self, op: Any, given: list[_Held | None]) -> tuple[tuple[int, int], ...]:
        """Where the result of a move or elementwise operation outside holds each argument's rows:
        every operand that depends on the argument must hold them on an axis that lands on the
        same axis of the result."""
        if len(op.results) != 1:
            return ()
        rows = []
        for i in sorted(frozenset().union(*(h.args for h in given if h is not None)) & self.rowed):
            lands = set()
            for n, h in enumerate(given):
                if h is not None and i in h.args:
                    k = h.axis(i)
                    lands.add(None if k is None else _axis_through(op, n, k))
            if len(lands) == 1 and None not in lands:
                rows.append((i, lands.pop()))
        return tuple(rows)


def outside_per_device(module: Any, nr_devices: int) -> dict[str, Any]:
    """``outside_ops``: operations that compute with the inputs outside the per-device programs;
    ``outside_op``: the first one's name; ``whole_inputs``: the arguments with one row per device
    (a leading axis of ``nr_devices``) that reach a per-device program other than one row per
    device, as strings; ``rows_kept``: row ``d`` of each result was computed from row ``d`` of
    those arguments alone, on device ``d`` (a parallel map: no collective in between).  A module
    for one device has no per-device programs: nothing is counted, and no row is kept.  An
    analysis that fails gives ``outside_ops = -1`` and the reason in ``outside_op`` (the check
    fails closed)."""
    if nr_devices <= 1:
        return {"outside_ops": 0, "outside_op": "", "whole_inputs": [], "rows_kept": False}
    try:
        found = _Outside(module, nr_devices)
    except Exception as exc:  # decides nothing: check_parallel fails closed
        reason = f"{type(exc).__name__}: {exc}"[:200]
        return {"outside_ops": -1, "outside_op": reason, "whole_inputs": [], "rows_kept": False}
    return {
        "outside_ops": found.ops,
        "outside_op": found.first,
        "whole_inputs": [str(i) for i in sorted(found.whole)],
        "rows_kept": found.kept,
    }


# --------------------------------------------------------------------------- examples one at a time
#
# A function that works on one example at a time (a Python loop of a fixed length over the
# examples, clamped to the batch; a scan over a fixed range; a jitted helper called per example)
# traces with a symbolic batch size and has no loop whose length is the batch, so ``batch_loops``
# misses it.  It cannot hide this at a concrete batch size: the module is lowered for the shapes
# of a hidden case (``refine_polymorphic_shapes`` makes every shape static and inlines the private
# functions), and the axes that may hold two or more of the batch's examples are followed from
# the arguments through every operation.  The marks err towards holding examples (an operation
# that may move them to another axis marks that axis), so the batch cannot be laundered into an
# unmarked copy.  An operation that takes a marked axis away has taken examples out of the batch
# (a slice, a gather, a one-hot contraction) or reduced over them (a mean over the batch).  A
# vectorized function has a few of these (0 to 5 in the corpora and the red team's honest forms);
# one that handles the 64 examples of a hidden batch one at a time has at least one for each
# example.  Each counts as often as it runs (loop trip counts).

#: Operations whose regions compute on elements of their operands (a reduction's body, a sort's
#: comparison): they are not entered.
_ELEMENT_REGIONS = {
    "stablehlo.reduce",
    "stablehlo.reduce_window",
    "stablehlo.scatter",
    "stablehlo.select_and_scatter",
    "stablehlo.sort",
    "stablehlo.map",
    "stablehlo.all_reduce",
    "stablehlo.reduce_scatter",
}
#: The trip count assumed for a ``while`` loop whose count cannot be read from the module: the
#: largest batch a hidden test uses.
UNREAD_TRIPS = 64
#: How deeply calls may nest before the module is refused (a module is not recursive).
_MAX_CALL_DEPTH = 32


def _ints(op: Any, attr: str) -> list[int]:
    from jax._src.lib.mlir import ir

    return list(ir.DenseI64ArrayAttr(op.attributes[attr]))


def _int_attr(op: Any, attr: str) -> int:
    from jax._src.lib.mlir import ir

    return int(ir.IntegerAttr(op.attributes[attr]).value)


def _dims(v: Any) -> tuple[int, ...] | None:
    """The static shape of a ranked tensor value; None for anything else (a token)."""
    from jax._src.lib.mlir import ir

    try:
        return tuple(ir.RankedTensorType(v.type).shape)
    except (TypeError, ValueError):
        return None


def _defining(v: Any) -> Any:
    """The operation that defines ``v``; None for a block argument (whose owner is a block: JAX
    0.6's bindings give a plain value, not a ``BlockArgument``, for one)."""
    owner = v.owner
    op = getattr(owner, "operation", owner)
    return op if hasattr(op, "name") and hasattr(op, "operands") else None


def _constant(v: Any) -> int | None:
    """The value of an integer scalar constant, None for anything else."""
    from jax._src.lib.mlir import ir

    op = _defining(v)
    if op is None or op.name != "stablehlo.constant":
        return None
    try:
        attr = ir.DenseIntElementsAttr(op.attributes["value"])
    except (TypeError, ValueError):
        return None
    if attr.is_splat:
        return int(ir.IntegerAttr(attr.get_splat_value()).value)
    return int(attr[0]) if len(attr) == 1 else None


def _returned(block: Any) -> list[Any]:
    """What a block returns: its terminator's operands."""
    last = _last_op(block)
    return list(last.operands) if last is not None else []


def _reshaped(src: tuple[int, ...], dst: tuple[int, ...], axes: frozenset[int]) -> set[int]:
    """The axes of ``dst`` that hold part of an axis in ``axes`` of ``src`` (a reshape keeps
    the row-major order of elements: an axis covers the strides from its own to the next)."""

    def spans(shape: tuple[int, ...]) -> list[tuple[int, int]]:
        out, stride = [], 1
        for n in reversed(shape):
            out.append((stride, stride * n))
            stride *= n
        return out[::-1]

    have, want = spans(src), spans(dst)
    return {j for j, (lo, hi) in enumerate(want) for i in axes if max(lo, have[i][0]) < min(hi, have[i][1])}


class _Examples:
    """The axes of each value of a module with static shapes that may hold two or more of the
    batch's examples, followed from the public function's arguments (``batch_axes``); and
    ``count``, the operations that take examples out of such an axis, each as often as it runs."""

    def __init__(self, module: Any, batch_axes: list[list[int]]) -> None:
        self.axes: dict[Any, frozenset[int]] = {}
        self.tuples: dict[Any, list[frozenset[int]]] = {}  # what each element of a tuple holds
        self.count = 0
        self.funcs = _functions(module)
        block = _public(self.funcs).regions[0].blocks[0]
        if len(block.arguments) != len(batch_axes):
            raise ValueError(f"the module takes {len(block.arguments)} arrays, not {len(batch_axes)}")
        for arg, axes in zip(block.arguments, batch_axes):
            self._set(arg, axes)
        self._block(block, 1, 0)

    def _get(self, v: Any) -> frozenset[int]:
        return self.axes.get(v, frozenset())

    def _set(self, v: Any, axes: Any) -> None:
        shape = _dims(v)
        keep = frozenset(i for i in axes if shape is not None and 0 <= i < len(shape) and shape[i] >= 2)
        if keep:
            self.axes[v] = keep | self._get(v)

    def _block(self, block: Any, weight: int, depth: int) -> None:
        for op in block.operations:
            self._op(op.operation, weight, depth)

    def _call(self, callee: Any, op: Any, weight: int, depth: int) -> None:
        if depth >= _MAX_CALL_DEPTH:
            raise ValueError("calls nest too deeply")
        block = callee.regions[0].blocks[0]
        for arg, v in zip(block.arguments, op.operands):
            self._set(arg, self._get(v))
        self._block(block, weight, depth + 1)
        for r, v in zip(op.results, _returned(block)):
            self._set(r, self._get(v))

    def _op(self, op: Any, weight: int, depth: int) -> None:
        name = op.name
        if name in ("func.return", "stablehlo.return"):
            return
        if name == "stablehlo.while":
            self._while(op, weight, depth)
            return
        if name in ("func.call", "stablehlo.composite"):
            callee = self.funcs.get(_sym(op, "callee" if name == "func.call" else "decomposition"))
            if callee is not None:
                self._call(callee, op, weight, depth)
                return
        if len(op.regions) and name not in _ELEMENT_REGIONS:
            # case/if, a shard_map's body...: their blocks run the computation on the operands
            for region in op.regions:
                for block in region.blocks:
                    for arg, v in zip(block.arguments, op.operands):
                        self._set(arg, self._get(v))
                    self._block(block, weight, depth)
                    for r, v in zip(op.results, _returned(block)):
                        self._set(r, self._get(v))
            return
        if name == "stablehlo.get_tuple_element" and op.operands[0] in self.tuples:
            held = self.tuples[op.operands[0]]
            index = _int_attr(op, "index")
            self._set(op.results[0], held[index] if 0 <= index < len(held) else range(8))
            return
        given = [self._get(v) for v in op.operands]
        if any(given) and self._propagate(op, name, given):
            self.count += weight

    def _while(self, op: Any, weight: int, depth: int) -> None:
        cond, body = op.regions[0].blocks[0], op.regions[1].blocks[0]
        trips = _trips(op)
        # what the body yields goes round again: until the carry's axes settle (they only grow)
        while True:
            before = dict(self.axes)
            for block in (cond, body):
                for arg, v in zip(block.arguments, op.operands):
                    self._set(arg, self._get(v))
                for arg, v in zip(block.arguments, _returned(body)):
                    self._set(arg, self._get(v))
            count = self.count
            self._block(body, weight * trips, depth)
            if self.axes == before:
                break
            self.count = count
        for r, arg in zip(op.results, body.arguments):
            self._set(r, self._get(arg))

    def _propagate(self, op: Any, name: str, given: list[frozenset[int]]) -> bool:
        """Mark the axes of ``op``'s results that may hold two examples or more, from those of its
        operands; True when it takes examples out of such an axis (a reduction or contraction
        over it, a slice that cuts it short, a gather of fewer indices than its rows).  Where
        examples may move to another axis (a contraction over the batch moves them along the
        other side's free axes: ``P @ xs`` with a permutation ``P``), that axis is marked too; an
        operation not known here that changes the rank marks every axis and counts."""
        from jax._src.lib.mlir.dialects import hlo

        operands, results = list(op.operands), list(op.results)
        shapes = [_dims(v) or () for v in operands]
        out = _dims(results[0]) if results else None
        # these move or copy every entry (a reshape keeps them all, two marked axes merged
        # included): the marks follow, and nothing is taken out
        if name in ("stablehlo.broadcast_in_dim", "stablehlo.dynamic_broadcast_in_dim"):
            dims = _ints(op, "broadcast_dimensions")
            self._set(results[0], {dims[i] for i in given[0]})
            return False
        if name == "stablehlo.transpose":
            self._set(results[0], {j for j, i in enumerate(_ints(op, "permutation")) if i in given[0]})
            return False
        if name in ("stablehlo.reshape", "stablehlo.dynamic_reshape"):
            self._set(results[0], _reshaped(shapes[0], out or (), given[0]))
            return False
        if name == "stablehlo.concatenate":
            self._set(results[0], frozenset().union(*given))
            return False
        if name == "stablehlo.reduce":
            gone = set(_ints(op, "dimensions"))
            kept = [i for i in range(len(shapes[0])) if i not in gone]
            axes = frozenset().union(*given[: len(results)])
            for r in results:
                self._set(r, {j for j, i in enumerate(kept) if i in axes})
            return bool(axes & gone)
        if name == "stablehlo.dot_general":
            dn = hlo.DotDimensionNumbers(op.attributes["dot_dimension_numbers"])
            lb, rb = list(dn.lhs_batching_dimensions), list(dn.rhs_batching_dimensions)
            lc, rc = list(dn.lhs_contracting_dimensions), list(dn.rhs_contracting_dimensions)
            lfree = [i for i in range(len(shapes[0])) if i not in lb and i not in lc]
            rfree = [i for i in range(len(shapes[1])) if i not in rb and i not in rc]
            # examples summed over on one side may come out along the other side's free axes
            into_lhs = any(i in given[1] for i in rc)
            into_rhs = any(i in given[0] for i in lc)
            axes = {j for j, (a, b) in enumerate(zip(lb, rb)) if a in given[0] or b in given[1]}
            axes |= {len(lb) + j for j, i in enumerate(lfree) if i in given[0] or into_lhs}
            axes |= {len(lb) + len(lfree) + j for j, i in enumerate(rfree) if i in given[1] or into_rhs}
            self._set(results[0], axes)
            return into_lhs or into_rhs
        if name == "stablehlo.gather":
            axes, consumed = _gathered(op, given)
            self._set(results[0], axes)
            return consumed
        if name == "stablehlo.convolution":
            dn = hlo.ConvDimensionNumbers(op.attributes["dimension_numbers"])
            axes, summed = set(), False
            spatial = zip(dn.input_spatial_dimensions, dn.output_spatial_dimensions, dn.kernel_spatial_dimensions)
            for i, o, k in spatial:
                if i in given[0]:  # a window of two or more along the batch sums over examples
                    summed |= shapes[1][k] >= 2 or (out or ())[o] < shapes[0][i]
                    axes.add(o)
            if dn.input_batch_dimension in given[0]:
                axes.add(dn.output_batch_dimension)
            if dn.input_feature_dimension in given[0] or dn.kernel_output_feature_dimension in given[1]:
                axes.add(dn.output_feature_dimension)
            summed |= dn.input_feature_dimension in given[0] or dn.kernel_input_feature_dimension in given[1]
            summed |= any(i in given[1] for i in dn.kernel_spatial_dimensions)
            # batch groups move the examples of the input's batch axis onto the output's features
            summed |= dn.input_batch_dimension in given[0] and _int_attr(op, "batch_group_count") > 1
            if summed:
                axes |= set(range(len(out or ())))  # a sum over examples: they may come out anywhere
            self._set(results[0], axes)
            return summed
        if name == "stablehlo.optimization_barrier":
            for r, axes in zip(results, given):
                self._set(r, axes)
            return False
        if name == "stablehlo.scatter":
            # the operands' axes stay; updates or indices that hold examples may put them
            # anywhere, and where no axis of the result is as long as theirs, examples were
            # summed or written over (a scatter-add of the batch into one row)
            n = len(results)
            axes = set().union(*given[:n])
            marked = [shapes[k][i] for k in range(n, len(operands)) for i in given[k]]
            if marked:
                axes |= set(range(len(out or ())))
            for r in results:
                self._set(r, axes)
            return bool(marked) and not any(size >= min(marked) for size in out or ())
        if name == "stablehlo.tuple":
            self.tuples[results[0]] = given
            return False
        if name == "stablehlo.custom_call":  # native code (linear algebra...): assume the worst
            for r in results:
                self._set(r, range(len(_dims(r) or ())))
            return True
        # element-wise operations, select, sort, slices, pads, cumulative sums...: axis i of a
        # result holds what axis i of an operand of the same rank holds; a batch axis that comes
        # out shorter (a slice of it, even of several examples' entries) counts
        consumed = False
        for r in results:
            shape = _dims(r)
            if shape is None:  # a value that is no tensor (a token): not followed, so it counts
                consumed = True
                continue
            for other, axes in zip(shapes, given):
                if len(other) == len(shape):
                    self._set(r, axes)
                    consumed |= any(shape[i] < other[i] for i in axes)
                elif axes:  # an operation not known here that changes the rank: assume the worst
                    self._set(r, range(len(shape)))
                    consumed = True
        return consumed


def _gathered(op: Any, given: list[frozenset[int]]) -> tuple[set[int], bool]:
    """The axes of a gather's result that may hold examples, and whether it takes examples out of
    the batch: a batch axis of the operand cut short, and picked by fewer indices than it has
    rows.  Picking along a batch axis moves its examples to the indices' axes (``xs[perm]``,
    ``xs[[b, b]]``); indices that hold examples, or a batch axis vmap made an operand batching
    dimension, mark theirs too."""
    from jax._src.lib.mlir.dialects import hlo

    dn = hlo.GatherDimensionNumbers(op.attributes["dimension_numbers"])
    offset, collapsed = sorted(dn.offset_dims), set(dn.collapsed_slice_dims)
    obatch, ibatch = list(dn.operand_batching_dims), list(dn.start_indices_batching_dims)
    sizes = _ints(op, "slice_sizes")
    operand, indices, result = (_dims(v) or () for v in (op.operands[0], op.operands[1], op.results[0]))
    kept = [i for i in range(len(operand)) if i not in collapsed and i not in obatch]
    out = {j for j, i in zip(offset, kept) if i in given[0] and sizes[i] >= 2}
    picked = any(i in given[0] and sizes[i] < 2 for i in dn.start_index_map)
    index_axes = [i for i in range(len(indices)) if i != dn.index_vector_dim]
    rest = [j for j in range(len(result)) if j not in offset]
    for j, i in zip(rest, index_axes):
        if picked or i in given[1] or (i in ibatch and obatch[ibatch.index(i)] in given[0]):
            out.add(j)
    out = {j for j in out if result[j] >= 2}
    # a batch axis of the operand is cut short (fewer rows than it has), unless its rows are
    # picked by as many indices as it has (a permutation): the examples came out of the batch
    picks = math.prod(indices[i] for i in index_axes)
    cut = [i for i in given[0] if i not in obatch and sizes[i] < operand[i]]
    return out, any(i not in dn.start_index_map or picks < operand[i] for i in cut)


def _trips(op: Any) -> int:
    """How often a ``while`` loop runs, read from JAX's counted loops: a signed integer counter
    from a constant, stepped by a constant each time round, compared with a constant (or a carry
    that starts as one and never changes), or several such tests joined by ``and`` (the fewest
    trips); :data:`UNREAD_TRIPS` for any other loop, or one whose counter would wrap around."""
    test = _returned(op.regions[0].blocks[0])
    if len(test) != 1:
        return UNREAD_TRIPS
    counts = [n for n in (_compare_trips(op, v) for v in _conjuncts(test[0], 0)) if n is not None]
    return min(counts) if counts else UNREAD_TRIPS


def _unwrapped(v: Any) -> Any:
    """``v`` without the plumbing JAX puts around values and tests: a ``convert`` to its own
    type, ``p != false`` for a predicate ``p``."""
    for _ in range(8):
        op = _defining(v)
        if op is not None and op.name == "stablehlo.convert" and op.operands[0].type == v.type:
            v = op.operands[0]
        elif (
            op is not None
            and op.name == "stablehlo.compare"
            and _attr_word(op, "comparison_direction") == "NE"
            and _constant(op.operands[1]) == 0
            and op.operands[0].type == v.type
        ):
            v = op.operands[0]
        else:
            break
    return v


def _conjuncts(v: Any, depth: int) -> list[Any]:
    """The tests ``v`` joins with ``and``."""
    v = _unwrapped(v)
    op = _defining(v)
    if op is not None and op.name == "stablehlo.and" and depth < 8:
        return [c for x in op.operands for c in _conjuncts(x, depth + 1)]
    return [v]


def _attr_word(op: Any, attr: str) -> str:
    """``LT`` from ``#stablehlo<comparison_direction LT>``."""
    try:
        return str(op.attributes[attr]).rsplit(" ", 1)[-1].strip(">").upper()
    except (KeyError, IndexError):
        return ""


def _compare_trips(loop: Any, v: Any) -> int | None:
    """The trips after which the test ``v`` of ``loop`` fails, if it is a counter's comparison."""
    from jax._src.lib.mlir import ir

    cond, body = loop.regions[0].blocks[0], loop.regions[1].blocks[0]
    cmp = _defining(v)
    if cmp is None or cmp.name != "stablehlo.compare" or _attr_word(cmp, "compare_type") != "SIGNED":
        return None
    direction = _attr_word(cmp, "comparison_direction")
    lhs, rhs = (_unwrapped(x) for x in cmp.operands)
    args, yielded = list(cond.arguments), _returned(body)

    def fixed(x: Any) -> int | None:  # a constant, or a carry that starts as one and never changes
        if x in args:
            m = args.index(x)
            return _constant(loop.operands[m]) if yielded[m] == body.arguments[m] else None
        return _constant(x)

    def stepped(x: Any) -> tuple[int, int] | None:  # the carry's index and its change each trip
        if x not in args:
            return None
        m = args.index(x)
        nxt, counter = _defining(yielded[m]), body.arguments[m]
        if nxt is None or nxt.name not in ("stablehlo.add", "stablehlo.subtract"):
            return None
        a, b = nxt.operands
        step = _constant(b) if a == counter else _constant(a) if b == counter and nxt.name == "stablehlo.add" else None
        return None if not step else (m, -step if nxt.name == "stablehlo.subtract" else step)

    if stepped(lhs) is None and stepped(rhs) is not None:  # n > i is i < n
        lhs, rhs = rhs, lhs
        direction = {"GT": "LT", "GE": "LE", "LT": "GT", "LE": "GE"}.get(direction, direction)
    counted = stepped(lhs)
    if counted is None:
        return None
    k, step = counted
    n, start = fixed(rhs), _constant(loop.operands[k])
    if n is None or start is None:
        return None
    up = direction in ("LT", "LE", "NE")
    span = {"LT": n - start, "LE": n + 1 - start, "NE": n - start, "GT": start - n, "GE": start - n + 1}.get(direction)
    if span is None or (step > 0) != up:
        return None
    if span <= 0:
        return 0 if direction != "NE" or span == 0 else None  # NE past its bound only stops by wrapping
    if direction == "NE" and span % step:
        return None
    trips = -(-span // abs(step))
    try:
        width = ir.IntegerType(ir.RankedTensorType(lhs.type).element_type).width
    except (TypeError, ValueError):
        return None
    if not -(2 ** (width - 1)) <= start + trips * step < 2 ** (width - 1):  # the counter would wrap
        return None
    return trips


def per_example_ops(exp: Any, args: list[Any], batch_axes: list[list[int]]) -> int:
    """How many operations work on examples taken out of the batch (see above), for ``exp``
    called on arrays of the shapes of ``args``, whose axes ``batch_axes`` hold the batch."""
    import jax
    from jax._src.interpreters import mlir

    lowered = jax.jit(exp.call).lower(*args).compiler_ir("stablehlo")
    refined = mlir.refine_polymorphic_shapes(lowered)
    with refined.context:
        return _Examples(refined, batch_axes).count


def main(argv: list[str] | None = None) -> int:
    args = rlimits.parser("grader.sandboxed.evaluator").parse_args(argv)
    apply_limits(args)
    proto_in, proto_out = os.dup(0), os.dup(1)
    import jax  # noqa: F401 - import before the first request so it is not timed

    protocol.write_frame(proto_out, messages.Ready().encode())
    while True:
        try:
            header, payload = protocol.read_frame(proto_in)
        except protocol.ChannelClosed:
            return 0
        reply, blob = answer(header, payload)
        protocol.write_frame(proto_out, reply, blob)


def answer(header: dict[str, Any], payload: bytes) -> tuple[dict[str, Any], bytes]:
    """The reply frame (header, payload) to one request; a failure is a :class:`messages.Raised`
    reply.  ``main`` answers the trusted side's frames with it, and the in-notebook self-check
    (``grader.selfcheck``) calls it directly."""
    resp: messages.Reply
    try:
        resp, values = _evaluate(header, payload)
    except Exception as exc:
        resp, values = messages.Raised(ename=type(exc).__name__, evalue=str(exc)[:4000]), {}
    frag, blob = protocol.pack_values(values)
    rid = header.get("id") if type(header.get("id")) is int else None
    return {**replace(resp, id=rid).encode(), **frag}, blob


if __name__ == "__main__":
    rlimits.drop_start_folder()  # started as a program: not when main() is called in a process of ours
    sys.exit(main())
