"""The evaluator: runs serialized ``jax.export`` modules on hidden inputs, never student code.

Runs sandboxed like the worker but with an empty scratch and no notebook: it only
deserializes StableHLO sent by the trusted side (which got it from the worker) and calls it.
Started as ``python -m grader.sandboxed.evaluator --scratch DIR [limits]``.
"""

from __future__ import annotations

import os
import re
import sys
import time
from dataclasses import replace
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
    :class:`~messages.Analyze` (the analysis alone).  Every answer carries the module's analysis."""
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
    return replace(head, elapsed=time.perf_counter() - t0), {"result": out}


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
#: Custom calls that are bookkeeping, not computation (their results are not data).
_BOOKKEEPING_CALLS = {"shape_assertion", "Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape"}
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


def _walk(op: Any) -> list[Any]:
    """Every operation nested in ``op`` (not ``op`` itself), in textual order."""
    out: list[Any] = []
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                out.append(inner.operation)
                out.extend(_walk(inner.operation))
    return out


def _terminator(region: Any) -> Any:
    ops = list(region.blocks[0].operations) if len(region.blocks) else []
    return ops[-1].operation if ops else None


class _Taint:
    """Which SSA values depend on the inputs: the public function's arguments (data, and for
    symbolic shapes the dimension sizes the wrapper passes on as ``jax.global_constant``) or
    the result of a custom call.  Values built from constants alone are untainted; so is a
    ``while`` loop's carry that starts from a constant and is updated from untainted values
    (a loop counter).  A forward fixpoint over the whole module, across private functions."""

    def __init__(self, module: Any) -> None:
        self.funcs: dict[str, Any] = {}
        for op in module.body.operations:
            op = op.operation
            if op.name == "func.func":
                self.funcs[_sym(op, "sym_name")] = op
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
      module's locations, says ``vmap(...)``)."""
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
    return {
        "nr_devices": int(exp.nr_devices),
        "custom_calls": sorted(calls)[:50],
        "loops": loops,
        "batch_loops": batch,
        "whole_call": whole,
        "collectives": sorted(collectives),
        "per_device": per_device,
        "vmapped": _VMAP_IN_NAME_STACK.search(text) is not None,
    }


#: A location whose name stack passes through ``jax.vmap``: ``loc("jit(f)/vmap(conv)/dot_general"``.
_VMAP_IN_NAME_STACK = re.compile(r'loc\("[^"]*\bvmap\(')


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
