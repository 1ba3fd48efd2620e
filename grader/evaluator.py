"""The evaluator: runs serialized ``jax.export`` modules on hidden inputs, never student code.

Runs sandboxed like the worker but with an empty scratch and no notebook: it only
deserializes StableHLO sent by the trusted side (which got it from the worker) and calls it.
Started as ``python -m grader.evaluator --scratch DIR [limits]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from grader import protocol
from grader.worker import apply_limits


def _evaluate(header: dict[str, Any], payload: bytes) -> tuple[dict[str, Any], dict[str, Any]]:
    import jax
    from jax import export

    values = protocol.unpack_values(header, payload)
    blob = values["module"]
    exp = export.deserialize(bytearray(blob.tobytes()))
    args = values.get("args", ())
    if exp.nr_devices > 1:
        # a module exported for several devices (pmap, sharding) runs with its inputs replicated
        import numpy as np
        from jax.sharding import Mesh, NamedSharding, PartitionSpec

        mesh = Mesh(np.array(jax.devices()[: exp.nr_devices]), ("_jaxgrade",))
        replicated = NamedSharding(mesh, PartitionSpec())
        args = jax.tree_util.tree_map(lambda a: jax.device_put(a, replicated), list(args))
    t0 = time.perf_counter()
    out = jax.block_until_ready(exp.call(*args))
    elapsed = time.perf_counter() - t0
    text = exp.mlir_module() if header.get("want_text") else None
    head: dict[str, Any] = {"ok": True, "elapsed": elapsed, "nr_devices": exp.nr_devices}
    if text is not None:
        head["custom_calls"] = sorted(set(_custom_calls(text)))[:50]
    return head, {"result": out}


def _custom_calls(text: str) -> list[str]:
    import re

    return re.findall(r"stablehlo\.custom_call\s+@([\w.]+)", text)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="grader.evaluator")
    p.add_argument("--scratch", required=True)
    p.add_argument("--as-bytes", type=int)
    p.add_argument("--fsize", type=int)
    p.add_argument("--cpu", type=int)
    p.add_argument("--nproc", type=int)
    p.add_argument("--nofile", type=int)
    p.add_argument("--pid-namespace", action="store_true")
    args = p.parse_args(argv)
    apply_limits(args)
    proto_in, proto_out = os.dup(0), os.dup(1)
    import jax  # noqa: F401 - import before the first request so it is not timed

    protocol.write_frame(proto_out, {"op": "ready", "ok": True})
    while True:
        try:
            header, payload = protocol.read_frame(proto_in)
        except protocol.ChannelClosed:
            return 0
        if header.get("op") == "shutdown":
            return 0
        try:
            resp, values = _evaluate(header, payload)
        except Exception as exc:
            resp, values = {"ok": False, "error": {"ename": type(exc).__name__, "evalue": str(exc)[:4000]}}, {}
        frag, blob = protocol.pack_values(values)
        resp.update(frag)
        resp["id"] = header.get("id")
        protocol.write_frame(proto_out, resp, blob)


if __name__ == "__main__":
    sys.exit(main())
