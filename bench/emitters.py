#!/usr/bin/env python3
"""What a jaxlib without XLA:CPU's older fusion emitters costs a sandbox: compile seconds, side by side.

Compiles, in a fresh process per run, pinned to one core (a sandbox beside another job has one),
the program the sample class's carol hands in: ``jax.jit`` of a Python loop over a batch of
``--batch`` rows, each a Python loop of ``jnp.dot``s (thousands of small operations).  Each
Python given with ``--python`` (default: this one) runs it with the sandboxes' flags, with the
older emitters where its jaxlib accepts ``--xla_cpu_use_fusion_emitters=false`` and without them,
alternating, ``--rounds`` times.  The first row is the baseline.  Also prints a runtime figure (a
jitted chain of element-wise operations over 4M floats), since the emitters decide the code too.
Figures only, never asserted.

    python bench/emitters.py --python .venv/bin/python --python /path/to/py313/.venv/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

CAROL = Path(__file__).resolve().parents[1] / "examples" / "class" / "carol.ipynb"


def carols_functions() -> str:
    """The cells of carol's notebook that define ``convolve`` and ``batched_convolve``, as she wrote them."""
    cells = json.loads(CAROL.read_text(encoding="utf-8"))["cells"]
    sources = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    return "\n\n".join(src for src in sources if src.startswith(("def convolve", "def batched_convolve")))


PROGRAM = (
    r"""
import os, time
import numpy as np
import jax, jax.numpy as jnp

"""
    + carols_functions()
    + r"""

B, N = int(os.environ["B"]), int(os.environ["N"])
rng = np.random.default_rng(0)
xs, ws = rng.random((B, N), np.float32), rng.random((B, 3), np.float32)
lowered = jax.jit(batched_convolve).lower(xs, ws)
t = time.process_time()
lowered.compile()
compile_s = time.process_time() - t
f = jax.jit(lambda a: jnp.tanh(jnp.sin(a) * 2 + jnp.cos(a) ** 2).sum())
a = rng.random(4_000_000, np.float32)
f(a).block_until_ready()
t = time.perf_counter()
for _ in range(10):
    f(a).block_until_ready()
print(jax.__version__, compile_s, (time.perf_counter() - t) / 10)
"""
)

OLD = "--xla_cpu_use_fusion_emitters=false"
BASE = "--xla_cpu_multi_thread_eigen=false"


def run(python: str, flags: str, batch: int, width: int) -> tuple[str, float, float] | None:
    env = {**os.environ, "XLA_FLAGS": flags, "JAX_PLATFORMS": "cpu", "B": str(batch), "N": str(width)}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    out = subprocess.run(["taskset", "-c", "0", python, "-c", PROGRAM], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        return None  # this jaxlib refuses the flag (XLA ends the process)
    version, compile_s, run_s = out.stdout.split()
    return version, float(compile_s), float(run_s)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", action="append", help="a Python with jax installed (repeatable; default: this one)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--width", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    rows: dict[tuple[str, str], list[tuple[str, float, float]]] = {}
    for _ in range(args.rounds):
        for python in args.python or [sys.executable]:
            for label, flags in (("older emitters", f"{BASE} {OLD}"), ("newer emitters", BASE)):
                got = run(python, flags, args.batch, args.width)
                if got is not None:
                    rows.setdefault((python, label), []).append(got)
                else:
                    rows.setdefault((python, label + " (refused by this jaxlib)"), [])
    print(f"carol's jitted loop, {args.batch} rows of {args.width - 2} dots; one core; {args.rounds} round(s)")
    print(f"{'python':40} {'jax':>9} {'emitters':28} {'compile s':>10} {'vs first':>9} {'4M elementwise ms':>18}")
    first = None
    for (python, label), runs in rows.items():
        if not runs:
            print(f"{python[-40:]:40} {'':>9} {label:28}")
            continue
        c = statistics.median(r[1] for r in runs)
        first = first or c
        ms = statistics.median(r[2] for r in runs) * 1000
        print(f"{python[-40:]:40} {runs[0][0]:>9} {label:28} {c:10.2f} {c / first:8.2f}x {ms:18.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
