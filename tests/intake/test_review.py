"""What a TA should read (grader/intake/review.py): constructs that can change what the grader
observes in the kernel, found in the notebook's source on the trusted side.

Each rule has code that must be named and honest code that must not be. Over every notebook the
repository holds (the corpora, the hostile and forgery corpora, the sample class, the starters,
a notebook from the wild, and each reference and alternative solution filled into its starter),
exactly the notebooks that tamper are named, with the kinds of construct they use; no honest
notebook, right or wrong, is. Reading source only: nothing here grades a notebook.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.course.config import load_course
from grader.course.release import setup_cell_source
from grader.grading.grade import filled_solutions
from grader.intake.notebook import NotebookError, load_notebook
from grader.intake.review import WHY, review_cells, review_notebook
from tests.conftest import REPO

HONEST = {
    "jit and vmap": "import jax\nimport jax.numpy as jnp\nfast = jax.jit(jax.vmap(f))\n@jax.jit\ndef g(x):\n    return x + 1",
    "the starters' own checks read globals()": (
        "for name, (call, want) in checks.items():\n"
        "    if name not in globals():\n"
        "        continue\n"
        "    got = call(globals()[name])"
    ),
    "the environment": 'import os\nos.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"',
    "the self-check's API": 'from grader import selfcheck as jc\njc.setup("vmap_convolve", "payload")\njc.check()\nr = jc.run()\nr.ok',
    "the release's setup cell": setup_cell_source("vmap_convolve", "jaxgrade", "cGF5bG9hZA=="),
    "a timed cell": "%%time\ny = jnp.sin(x)",
    "shell and line magics": "!pip install -q optax\n%matplotlib inline\n%time y = f(x)",
    "JAX's configuration": 'jax.config.update("jax_enable_x64", True)\nwith jax.debug_key_reuse(True):\n    f(key)',
    "a class of one's own": "class State:\n    def __init__(self):\n        self.count = 0\ns = State()\ns.count += 1",
    "compiling ahead of time": "lowered = jax.jit(f).lower(x)\ncompiled = lowered.compile()\nimport re\npat = re.compile('a+')",
    "getattr with a constant": 'total = getattr(jnp, "sum")(x)',
    "garbage collection and signatures": "import gc\ngc.collect()\nimport inspect\ninspect.signature(f)",
    "functional updates": "x = x.at[0].set(1.0)\nimport matplotlib.pyplot as plt\nplt.rcParams['figure.figsize'] = (4, 3)",
    "isinstance and clone": "isinstance(x, jnp.ndarray)\nkey2 = jax.random.clone(key)",
    "a syntax error": "def f(:\n    pass",
    # a red-team pass over this module found these flagged; each is honest code of a kind students write
    "Colab's check": 'import sys\nIN_COLAB = "google.colab" in sys.modules\nif IN_COLAB:\n    !pip install -q optax',
    "class names": "print(x.__class__.__name__, type(x).__name__, jax.__version__)\nclass P:\n    def __repr__(self):\n        return f'{self.__class__.__name__}()'",
    "a model's eval mode": "from flax import nnx\nmodel.train()\nmodel.eval()\nfor m in model.modules():\n    pass",
    "the key-reuse checker switched on": 'import jax\njax.config.update("jax_debug_key_reuse", True)',
    "an activation by name": (
        "import jax\nimport jax.numpy as jnp\nact = getattr(jax.nn, config['activation'])\nop = getattr(jnp, name)\n"
        "class Config:\n    def __init__(self, **kwargs):\n        for k, v in kwargs.items():\n            setattr(self, k, v)\n"
        "        self.__dict__.update(kwargs)\nprint(vars(args))"
    ),
    "display options": 'import pandas as pd\npd.options.display.float_format = "{:.3f}".format\nfrom tqdm import tqdm\ntqdm.monitor_interval = 0',
    "a function called eval": "def eval(params, x, y):\n    return jnp.mean((model(params, x) - y) ** 2)\nprint(eval(params, xs, ys))\ndef f(exec=False):\n    return exec",
    "a class called ...Tracer": "class LossTracer:\n    pass\ntracker = LossTracer()",
    "a config holding a JAX function": "import jax\ncfg = Config(act=jax.nn.relu, opt=optax.adam)\ncfg.lr = 0.1",
    "checkpoints": 'import pickle\nwith open("params.pkl", "rb") as f:\n    params = pickle.load(f)',
    "an object's own attributes by name, in its methods": (
        "class K:\n    def get(self, n):\n        def inner():\n            return getattr(self, n)\n        return inner()\n"
        "    @classmethod\n    def make(cls, name):\n        return getattr(cls, name)\n"
        "    def names(self):\n        return list(self.__dict__)\n"
        "class Layer:\n    def __init__(self, n):\n        self.n = n\n    def use(self, xp):\n        self.xp = xp\n"
        "        return self\nlayer = Layer(3).use(jnp)\nlayer.use(jnp)"
    ),
    "code in strings that is honest": 'import timeit\ntimeit.timeit("f(x)", globals=globals(), number=3)\nprint("loss = %.3f" % loss)',
}

COMPUTED = "getattr(..., <a name computed at run time>)"

# (code, kind, what the finding names, line)
FLAGGED = [
    ("import grader.sandboxed.kernel_side as ks", "grader", "import grader.sandboxed.kernel_side", 1),
    ("from grader.wire import messages", "grader", "import grader.wire.messages", 1),
    ("from grader.selfcheck import live", "grader", "import grader.selfcheck.live", 1),
    ("from grader import selfcheck as jc\nks = jc.live", "grader", "jc.live", 2),
    ("x = globals()['__jaxgrade_ks__']", "grader", "'__jaxgrade_ks__'", 1),
    ("import jax\njax.jit = lambda f, **k: f", "patch", "jax.jit = ...", 2),
    ("from jax import export\nexport.export = None", "patch", "export.export = ...", 2),
    ("import jax\ne = jax.export\ne.export = None", "patch", "e.export = ...", 3),
    ("import numpy as np\nsetattr(np, 'allclose', None)", "patch", "setattr(np, 'allclose', ...)", 2),
    ("import numpy as np\ndel np.allclose", "patch", "del np.allclose", 2),
    ("type(x).f = g", "patch", "type(x).f = ...", 1),
    ("import sys\nm = sys.modules", "reflection", "sys.modules", 2),
    ("import sys as s\nm = s.modules", "reflection", "s.modules", 2),
    ("import sys\ng = sys._getframe(1).f_globals", "reflection", "sys._getframe(1).f_globals", 2),
    ("import gc\nrefs = gc.get_referrers(f)", "reflection", "gc.get_referrers", 2),
    ("import importlib", "reflection", "import importlib", 1),
    ("os = __import__('os')", "reflection", "__import__(...)", 1),
    ("globals()['f'] = g", "reflection", "globals()[...] = ...", 1),
    ("globals().update(f=g)", "reflection", "globals().update(...)", 1),
    ("import numpy as np\nd = vars(np)", "reflection", "vars(np)", 2),
    ("value = getattr(obj, name)", "reflection", "getattr(..., <a name computed at run time>)", 1),
    ("f.__globals__['np'] = jnp", "reflection", "f.__globals__", 1),
    ("ns = get_ipython().user_ns", "reflection", "get_ipython().user_ns", 1),
    ("get_ipython().input_transformers_post.append(t)", "reflection", "get_ipython().input_transformers_post", 1),
    ("ip = get_ipython()\nip.ex('x = 1')", "dynamic", "ip.ex", 2),
    ("with jax.debug_key_reuse(False):\n    f(key)", "reflection", "jax.debug_key_reuse(...) not switched on", 1),
    (
        "import jax\njax.config.update('jax_debug_key_reuse', False)",
        "reflection",
        "jax.config.update(...) of the key-reuse checker",
        2,
    ),
    ("from jax._src import monitoring", "reflection", "import jax._src.monitoring", 1),
    (
        "import jax\njax.monitoring.record_event_duration_secs('x', 1.0)",
        "reflection",
        "jax.monitoring.record_event_duration_secs",
        2,
    ),
    ("exec('x = 1')", "dynamic", "exec(...)", 1),
    ("import pickle\nf = pickle.loads(blob)", "dynamic", "pickle.loads", 2),
    ("import types\nf = types.FunctionType(code, {})", "dynamic", "types.FunctionType", 2),
    ("b = globals()['__builtins__']\nb.exec(s)", "dynamic", "b.exec", 2),
    ("import jax\nok = isinstance(x, jax.core.Tracer)", "tracer", "jax.core.Tracer", 2),
    ("%%time\nimport grader.sandboxed.kernel_side", "grader", "import grader.sandboxed.kernel_side", 2),
    ("x = 1\n%time import importlib", "reflection", "import importlib", 2),
    ("%%writefile helper.py\nimport sys\nm = sys.modules", "reflection", "sys.modules", 3),
    # the red team's evasions of a first version: each is named now
    ("import os\nks = os.sys.modules['grader.sand' + 'boxed.kernel' + '_side']", "reflection", "os.sys.modules", 2),
    ("from os import sys as s\nks = s.modules[name]", "reflection", "import os.sys", 1),
    ("import sys\nS = sys\nm = S.modules", "reflection", "S.modules", 3),
    ("import sys\nm = getattr(sys, 'modules')", "reflection", "getattr(..., 'modules')", 2),
    ("import jax\nS = setattr\nS(jax, 'jit', fake)", "reflection", "setattr (as a value)", 2),
    ("import functools, jax\nfunctools.partial(setattr, jax, 'jit', fake)()", "reflection", "setattr (as a value)", 2),
    ("from unittest import mock\nmock.patch.object(jax, 'jit', fake).start()", "patch", "import unittest.mock", 1),
    ("import jax\n(lambda m: setattr(m, 'jit', fake))(jax)", "patch", "setattr(m, 'jit', ...)", 2),
    ("import jax\ndef p(m=jax):\n    m.jit = fake", "patch", "m.jit = ...", 3),
    ("import numpy as np\nfor m in (np,):\n    m.array_equal = fake", "patch", "m.array_equal = ...", 3),
    ("import jax\nk, = [jax]\nk.jit = fake", "patch", "k.jit = ...", 3),
    ("import jax\nwith contextlib.nullcontext(jax) as w:\n    w.jit = fake", "patch", "w.jit = ...", 3),
    ("import jax\nh = H()\nh.m = jax.export\nh.m.export = fake", "patch", "h.m.export = ...", 4),
    ("def patch(obj, fake):\n    obj._lookup = fake", "patch", "obj._lookup = ...", 2),
    ("%timeit -n1 -r1 import importlib", "reflection", "import importlib", 1),
    ("import timeit\ntimeit.timeit('import importlib', number=1)", "reflection", "import importlib", 2),
    (
        "src = 'x = 1'\nget_ipython().run_cell_magic('capture', '', src)",
        "dynamic",
        "run_cell_magic(<code built at run time>)",
        2,
    ),
    ("g = get_ipython\nip = g()", "reflection", "get_ipython (as a value)", 1),
    ("ip2 = globals()['get_ipython']()\nip2.ex('x = 1')", "dynamic", "ip2.ex", 2),
    ("open('helper.py', 'w').write('import sys\\nm = sys.modules\\n')", "reflection", "sys.modules", 1),
    ("import pkgutil\nks = pkgutil.resolve_name(name)", "reflection", "pkgutil.resolve_name", 2),
    ("import runpy\nrunpy.run_path('helper.py')", "dynamic", "runpy.run_path", 2),
    (
        "import functools\nks = functools.reduce(getattr, ['live', 'kernel'], jc)",
        "reflection",
        "getattr (as a value)",
        2,
    ),
    ("from grader import selfcheck as jc\nlive = getattr(jc, 'live')", "grader", "getattr(..., 'live')", 2),
    ("%run helper.py", "dynamic", "%run", 1),
    ("E = exec\nE('x = 1')", "dynamic", "exec (as a value)", 1),
    ("list(map(exec, ['x = 1']))", "dynamic", "exec (as a value)", 1),
    ("b = getattr(print, '__self__')", "reflection", "getattr(..., '__self__')", 1),
    (
        "off = False\nwith jax.debug_key_reuse(off):\n    f(key)",
        "reflection",
        "jax.debug_key_reuse(...) not switched on",
        2,
    ),
    (
        "import jax\njax.config.update('jax_debug_key_' + 'reuse', False)",
        "reflection",
        "jax.config.update(...) of the key-reuse checker",
        2,
    ),
    ("import jax\nvm = getattr(jax, 'v' + 'map')", "reflection", "getattr(..., <a name computed at run time>)", 2),
    # session 24's red team: `self`/`cls` parameters of plain functions, and a module's name rebound
    (
        "import sys\ndef _attr(self, n):\n    return getattr(self, n)\nm = _attr(sys, 'mod' + 'ules')",
        "reflection",
        COMPUTED,
        3,
    ),
    (
        "import sys\nm = (lambda self, n: getattr(self, n))(sys, 'mod' + 'ules')",
        "reflection",
        COMPUTED,
        2,
    ),
    ("def put(cls, n, v):\n    setattr(cls, n, v)", "reflection", "setattr(..., <a name computed at run time>)", 2),
    ("def patch(self, fake):\n    self._lookup = fake", "patch", "self._lookup = ...", 2),
    ("def contents(self):\n    return self.__dict__", "reflection", "self.__dict__", 2),
    (
        "import numpy as np\ndef _attr(np, name):\n    return getattr(np, name)",
        "reflection",
        COMPUTED,
        3,
    ),
    (
        "import numpy as np\nimport sys\nnp = sys\nm = getattr(np, 'mod' + 'ules')",
        "reflection",
        COMPUTED,
        4,
    ),
    (
        "class K:\n    def get(self, n):\n        return getattr(self, n)\nimport sys\nm = K.get(sys, 'mod' + 'ules')",
        "reflection",
        COMPUTED,
        3,
    ),
]


@pytest.mark.parametrize("name", sorted(HONEST))
def test_honest_code_is_not_named(name: str) -> None:
    assert review_cells([(0, HONEST[name])]) == []


@pytest.mark.parametrize(("code", "kind", "what", "line"), FLAGGED, ids=[c.splitlines()[-1][:50] for c, *_ in FLAGGED])
def test_each_construct_is_named_with_its_cell_and_line(code: str, kind: str, what: str, line: int) -> None:
    found = review_cells([(3, code)])
    assert [(f.kind, f.what, f.cell, f.line) for f in found if f.kind == kind and f.what == what] == [
        (kind, what, 3, line)
    ], found
    first = next(f for f in found if f.what == what)
    assert first.code == code.splitlines()[line - 1].strip()
    assert first.why == WHY[kind] and first.describe().startswith(f"cell 3, line {line}: {WHY[kind]}")


def test_an_import_in_one_cell_roots_a_patch_in_another() -> None:
    found = review_cells([(0, "import numpy as np"), (2, "x = 1"), (5, "np.allclose = lambda *a, **k: True")])
    assert [(f.cell, f.line, f.kind) for f in found] == [(5, 1, "patch")]


def test_line_numbers_are_the_cells_own() -> None:
    """IPython drops a cell's leading blank lines and joins ``!`` continuations: the finding still
    names the line the notebook shows, and findings come in line order."""
    found = review_cells([(0, "\n\n%%time\nimport importlib"), (1, "!pip install \\\n  optax\nimport importlib")])
    assert [(f.cell, f.line, f.code) for f in found] == [(0, 4, "import importlib"), (1, 3, "import importlib")]
    found = review_cells([(0, "def f():\n    return sys.modules\nm = sys.modules\nimport sys")])
    assert [f.line for f in found] == [2, 3]


def test_code_too_deep_to_read_is_a_finding_not_a_crash() -> None:
    found = review_cells([(0, "x = " + "-" * 200_000 + "1")])
    assert [(f.kind, f.line, f.what) for f in found] == [
        ("dynamic", 1, "code too deeply nested for the grader to read")
    ]


def test_ipython_syntax_on_lines_too_long_to_transform_is_a_finding_not_a_memory_blowup(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """IPython's transformer tokenizes a cell, and Python 3.12.1's tokenizer copies a line into
    each of its tokens: the test above took a trusted pytest process past 24 GB there (killed by
    the kernel's OOM killer, Python 3.12 only).  Plain Python is not transformed at all; where
    the tokenizer copies lines, a cell with IPython syntax whose lines cost too much is not
    transformed either, and is a finding, also in a string read as code; elsewhere it is read."""
    from IPython.core.inputtransformer2 import TransformerManager

    from grader.intake import notebook
    from grader.intake.notebook import TRANSFORM_MAX_COST, python_source

    long_line = "x = " + "-" * 200_000 + "1"
    assert sum(len(line) ** 2 for line in long_line.splitlines()) > TRANSFORM_MAX_COST
    magic = "%time " + long_line
    assert python_source(magic) not in (None, magic) or notebook._tokens_copy_their_line()

    def refuse(self: object, cell: str) -> str:
        raise AssertionError("transformed")

    monkeypatch.setattr(notebook, "_tokens_copy_their_line", lambda: True)  # as on Python 3.12.1
    monkeypatch.setattr(TransformerManager, "transform_cell", refuse)
    assert python_source("import jax\nx = 1\n") == "import jax\nx = 1\n"  # plain Python, as it is
    assert python_source(long_line) == long_line  # too deep to parse: as it is, the reader says why
    assert python_source(magic) is None
    found = review_cells([(0, "import jax"), (2, "y = 2\n" + magic)])
    assert [(f.cell, f.line, f.kind, f.what) for f in found] == [
        (2, 2, "dynamic", "IPython syntax on lines too long for the grader to read")
    ]
    long_magic = "%time x = " + "-" * 15_000 + "1"
    found = review_cells([(0, f"get_ipython().run_line_magic('time', {long_magic!r})")])
    assert [(f.kind, f.what) for f in found] == [("dynamic", "IPython syntax on lines too long for the grader to read")]


def test_a_magics_code_is_read_whatever_its_length() -> None:
    """A `%%time` cell's code is the cell's own: it is read like any cell's, past the length up
    to which strings are read as code (an `exec` after 30,000 characters of it was not seen)."""
    from grader.intake.review import MAX_STRING

    body = "y = 2\n" * (MAX_STRING // 6 + 1000)
    found = review_cells([(0, "%%time\n" + body + "exec(code)")])
    assert [(f.line, f.kind, f.what) for f in found] == [(body.count("\n") + 2, "dynamic", "exec(...)")]


def test_reading_strings_as_code_has_a_budget() -> None:
    """Strings are read as code up to a budget per notebook (it is the grader's time): past it,
    one finding says so."""
    cells = [(i, "s = " + repr("y = 1; " * 2800)) for i in range(13)]  # 13 strings of 16,800 characters
    found = review_cells(cells)
    assert [(f.kind, f.what) for f in found] == [("dynamic", "more code in strings than the grader reads")]


def test_code_past_the_reading_budget_is_a_finding() -> None:
    cells = [(0, "import jax"), (2, "x = 1\n" * 30_000), (3, "x = 2\n" * 30_000), (5, "import importlib")]
    found = review_cells(cells)
    assert [(f.cell, f.kind, f.what) for f in found] == [
        (3, "dynamic", "more than 300,000 characters of code: not read")
    ]


def test_the_kernel_sides_own_names_are_read_from_its_source() -> None:
    from grader.intake.review import kernel_side_names

    assert {"_lookup", "_OPS", "answer", "serve", "_op_export"} <= kernel_side_names()


def test_findings_are_capped_and_each_is_plain_data() -> None:
    found = review_cells([(i, "exec('x')\n" * 3) for i in range(40)])
    assert len(found) == 50
    assert set(found[0].as_dict()) == {"cell", "line", "code", "kind", "what", "why"}


# --------------------------------------------------------------------------- every notebook we have

#: The notebooks that tamper with what the grader observes, and the kinds of construct each must
#: be named for (at least). Every other notebook of the repository must be named for nothing.
TAMPERING = {
    "forgery/autodiff/forge_export_rebound.ipynb": {"grader", "patch", "reflection", "dynamic"},
    "forgery/autodiff/forge_export_rebound_laundered.ipynb": {"reflection"},
    "forgery/jit_control_flow/forge_counter_reset_fresh_jit_in_a_helper.ipynb": {"reflection"},
    "forgery/functional_updates/forge_write_through_a_view_laundered.ipynb": {"reflection"},
    "forgery/per_example_grads/forge_export_jitted.ipynb": {"grader", "patch", "reflection"},
    "forgery/stop_gradient/forge_export_custom_vjp.ipynb": {"grader", "patch", "reflection"},
    "forgery/functional_updates/forge_array_equal_replaced.ipynb": {"patch"},
    "forgery/functional_updates/forge_mutated_patched.ipynb": {"grader"},
    "forgery/functional_updates/forge_read_only_switched_off.ipynb": {"grader"},
    "forgery/functional_updates/forge_write_behind_a_cycle.ipynb": {"grader"},
    "forgery/functional_updates/forge_snapshots_edited.ipynb": {"reflection"},
    "forgery/jit_control_flow/forge_compile_counter_reset.ipynb": {"grader"},
    "forgery/jit_control_flow/forge_constants_from_frames.ipynb": {"reflection", "tracer"},
    "forgery/jit_control_flow/forge_fake_compile_events.ipynb": {"reflection"},
    "forgery/jit_control_flow/forge_monitoring_unhooked.ipynb": {"reflection"},
    "forgery/jit_control_flow/forge_numpy_forged_ops.ipynb": {"grader"},
    "forgery/pmap/forge_devices_patched.ipynb": {"grader", "patch"},
    "forgery/prng_keys/forge_key_reuse_checker_off.ipynb": {"reflection"},
    "forgery/pytrees/forge_count_reported.ipynb": {"grader"},
    "forgery/pytrees/forge_export_rebound.ipynb": {"grader", "reflection"},
    "forgery/vmap_convolve/forge_batchtrace_swapped_back.ipynb": {"reflection"},
    "forgery/vmap_convolve/forge_compared_with_itself.ipynb": {"grader"},
    "forgery/vmap_convolve/forge_leak_hidden_inputs.ipynb": {"grader"},
    "forgery/vmap_convolve/forge_leak_in_error_names.ipynb": {"grader", "reflection"},
    "forgery/vmap_convolve/forge_numpy_forged_ops.ipynb": {"grader"},
    "forgery/vmap_convolve/forge_vmap_name_hidden_under_jit.ipynb": {"reflection"},
    "forgery/vmap_convolve/forge_vmap_watch_disarmed.ipynb": {"grader"},
    "hostile/h_nested_user_namespace.ipynb": {"reflection"},
    "hostile/h_patch_grader_modules.ipynb": {"grader", "reflection"},
    "hostile/h_review_tokenizer_bomb.ipynb": {"dynamic"},
    "hostile/h_patch_jax.ipynb": {"patch"},
    "hostile/h_patch_numpy.ipynb": {"patch"},
    "hostile/h_patch_pytest.ipynb": {"reflection"},
    "hostile/h_search_disk_for_tests.ipynb": {"reflection"},
    "hostile/h_search_proc.ipynb": {"reflection"},
    "hostile/h_segfault_ctypes.ipynb": {"reflection"},
    "hostile/h_steal_worker_pipe.ipynb": {"reflection"},
    "hostile/h_write_outside_scratch.ipynb": {"reflection"},
    "prng_keys/parent_key_reused_debug_off.ipynb": {"reflection"},
    "vmap_convolve/monkeypatches_grader.ipynb": {"patch"},
}


def _every_notebook() -> list[tuple[str, Path]]:
    corpus = REPO / "tests" / "corpus"
    out = [(p.relative_to(corpus).as_posix(), p) for p in sorted(corpus.rglob("*.ipynb"))]
    for folder in (REPO / "examples", REPO / "assignments", REPO / "tests" / "notebooks"):
        out += [(p.relative_to(REPO).as_posix(), p) for p in sorted(folder.rglob("*.ipynb"))]
    return out


def test_exactly_the_tampering_notebooks_are_named() -> None:
    named: dict[str, set[str]] = {}
    read = 0
    for label, path in _every_notebook():
        try:
            nb = load_notebook(path).node  # as grading reads it
        except NotebookError:  # the corpora's deliberately broken notebooks
            continue
        read += 1
        found = review_notebook(nb)
        if found:
            named[label] = {f.kind for f in found}
    assert read > 200
    assert sorted(named) == sorted(TAMPERING), (
        f"named but honest: {sorted(set(named) - set(TAMPERING))}; tampering but not named: "
        f"{sorted(set(TAMPERING) - set(named))}"
    )
    short = {label: sorted(kinds - named[label]) for label, kinds in TAMPERING.items() if not kinds <= named[label]}
    assert not short, f"named, but not for what they do: {short}"


@pytest.mark.parametrize("assignment", sorted(load_course(REPO).assignments))
def test_the_staffs_solutions_are_named_for_nothing(assignment: str) -> None:
    """The reference and every alternative solution, filled into the starter as a student would
    hand it in (what the compilation cache is warmed with)."""
    solutions = filled_solutions(load_course(REPO).assignment(assignment, staff=True))
    assert solutions
    for script, nb, why in solutions:
        assert nb is not None, why
        assert review_notebook(nb) == [], script


def test_a_line_of_many_findings_is_held_once_per_kind() -> None:
    """A line of 50,000 `exec` was held 50,000 times, each with its own copy of the line: memory
    grew with the square of the line (300 KB of code: about 17 GB, a red-team review)."""
    from grader.intake.review import MAX_STRINGS_TOTAL, _Clock, _Names, _Scan

    src = "if 1:\n    " + ",".join(["exec"] * 50_000)
    clock = _Clock(60)
    out = _Scan(_Names.of([src]), [MAX_STRINGS_TOTAL], clock).cell(src)
    assert [(line, kind) for line, kind, _, _ in out] == [(2, "dynamic")]
    assert [(f.line, f.kind, f.what) for f in review_cells([(0, src)])] == [(2, "dynamic", "exec (as a value)")]


def test_code_built_to_read_slowly_is_read_up_to_a_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Attribute chains thousands long and aliases of aliases made the review take minutes to
    hours on the trusted side (a red-team review): past REVIEW_SECONDS it stops, and a finding
    says in which cell."""
    from grader.intake import review

    cells = [(0, "import jax"), (3, "x = a" + ".b" * 50), (5, "y = 1")]
    assert review_cells(cells) == []
    monkeypatch.setattr(review, "REVIEW_SECONDS", -1.0)
    found = review_cells(cells)
    assert [(f.cell, f.kind, f.what) for f in found] == [
        (0, "dynamic", "the review stopped after -1 s, reading the notebook's names: no cell was reviewed")
    ]
    real = review._Scan.cell

    def late(self: review._Scan, source: str, depth: int = 0) -> list:
        if self.clock.cell == 3 and depth == 0:  # time runs out while cell 3 is read
            self.clock.deadline = -1.0
        return real(self, source, depth)

    monkeypatch.setattr(review, "REVIEW_SECONDS", 60.0)
    monkeypatch.setattr(review._Scan, "cell", late)
    found = review_cells([(0, "import jax"), (1, "exec(a)"), (3, "x = a.b"), (5, "eval(b)")])
    assert [(f.cell, f.kind, f.what) for f in found] == [
        (1, "dynamic", "exec(...)"),
        (3, "dynamic", "the review stopped after 60 s in this cell: this cell and the ones after it were not reviewed"),
    ]
