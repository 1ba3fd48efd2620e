"""What a TA should read before trusting a grade: code in a notebook that can change what the
grader observes in the student's kernel.

Points that come from the kernel (its calls, the modules it exports, its key-reuse checker)
are judged on the trusted side, but the kernel chooses what it hands over: a cell that reaches
into the grader's kernel side (``grader.sandboxed.kernel_side``), or patches the libraries it
uses, can hand over a module that is not its function's (SECURITY.md, "A kernel that rewrites
what it exports").  No honest notebook needs to, and a TA who reads such a cell sees it; this
module points the TA at it.  It reads the notebook's source on the trusted side (nothing the
kernel reports) and lists, cell by cell, the constructs that such code needs:

- ``grader``: importing the grader (beyond the in-notebook self-check's API), or naming its
  kernel side;
- ``patch``: assigning or deleting an attribute of a module the grader's kernel side uses (JAX,
  NumPy, the standard library, IPython, the grader), of something reached from one, of a type
  (``type(x).f = ...``), or of a name the kernel side itself uses (``jit``, ``export``,
  ``array_equal``, ``_lookup`` ...) on any object but ``self``; ``setattr``/``delattr`` likewise;
  ``unittest.mock``;
- ``reflection``: reaching objects the code was not given (``sys.modules``, frames, ``gc``'s
  referrers, ``importlib``, ``__import__``, writes into ``globals()``, ``__globals__``,
  ``__dict__``, an attribute named at run time, IPython's namespace and input transformers,
  ``jax._src``, ``jax.monitoring``, a built-in such as ``exec`` or ``setattr`` handed around
  as a value), or switching off JAX's key-reuse checker;
- ``dynamic``: running code built at run time (``exec``, ``eval``, ``compile``, unpickling
  bytes, ``types.FunctionType``, IPython's ``run_cell``/``ex``, ``%run``, ``runpy``, a magic
  whose code is not written in the cell).  Strings that are Python code (``%%writefile``,
  ``timeit`` statements, ...) are read as code too;
- ``tracer``: telling a traced call from an eager one (``jax.core.Tracer``), so that the module
  exported for a check differs from the function called for the numbers.

A finding decides no points and changes no grade: the record lists it (``review``), and
``jaxgrade grade`` and the class report name the notebooks to read.  It is a pointer, not a
proof: code written to avoid every construct above is not seen (SECURITY.md says which ways
are known to remain).
"""

from __future__ import annotations

import ast
import re
import time
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from grader.intake.notebook import _called_name, python_source

#: What the in-notebook self-check exports (``from grader import selfcheck as jc``): a notebook
#: released by ``jaxgrade release`` uses these and nothing else of the grader.
SELFCHECK_API = frozenset(
    {"Checker", "Result", "SelfCheckError", "check", "decode_payload", "encode_payload", "run", "setup"}
)

#: Text that names the grader's kernel side (in a name, an attribute or a string).
GRADER_WORDS = ("kernel_side", "jaxgrade_ks", "grader.sandboxed", "grader.wire", "grader/sandboxed", "grader/wire")

#: The packages whose attributes the kernel side (and the kernel it runs in) relies on: an
#: attribute set on one of them, or on anything reached from one, is a patch.
GRADER_STACK = frozenset(
    {
        "jax",
        "jaxlib",
        "numpy",
        "ml_dtypes",
        "grader",
        "IPython",
        "ipykernel",
        "jupyter_client",
        "zmq",
        "sys",
        "builtins",
        "os",
        "time",
        "traceback",
        "linecache",
        "json",
        "mmap",
        "fcntl",
        "types",
        "functools",
        "operator",
        "inspect",
        "gc",
        "importlib",
        "contextlib",
        "packaging",
        "dataclasses",
        "threading",
        "signal",
    }
)

#: Attributes the kernel side reads from JAX, NumPy and the standard library (beside its own
#: top-level names, :func:`kernel_side_names`): set on any object but ``self``, they are a patch.
KERNEL_SIDE_ATTRS = frozenset(
    {
        "jit",
        "export",
        "serialize",
        "block_until_ready",
        "array_equal",
        "ascontiguousarray",
        "frombuffer",
        "debug_key_reuse",
        "clear_caches",
        "eval_shape",
        "wrap_key_data",
        "key_data",
        "symbolic_shape",
        "SymbolicScope",
        "ShapeDtypeStruct",
        "canonicalize_dtype",
        "tree_map",
        "register_event_duration_secs_listener",
        "walk_tb",
        "getline",
        "memfd_create",
        "perf_counter",
        "monotonic",
        "pack_values",
        "unpack_values",
        "read_frame",
        "write_frame",
        "decode_request",
    }
)

#: Attributes that reach frames, the interpreter's tables or IPython's namespace.
REFLECTIVE_ATTRS = frozenset(
    {
        "_getframe",
        "_current_frames",
        "settrace",
        "setprofile",
        "meta_path",
        "path_hooks",
        "path_importer_cache",
        "addaudithook",
        "get_objects",
        "get_referrers",
        "get_referents",
        "currentframe",
        "getouterframes",
        "getinnerframes",
        "walk_stack",
        "walk_tb",
        "f_back",
        "f_globals",
        "f_locals",
        "f_builtins",
        "f_code",
        "tb_frame",
        "tb_next",
        "gi_frame",
        "cr_frame",
        "ag_frame",
        "user_ns",
        "user_global_ns",
        "user_ns_hidden",
        "input_transformers_post",
        "input_transformers_cleanup",
        "input_transformer_manager",
        "ast_transformers",
        "shell_handlers",
        "control_handlers",
        "register_magic_function",
        "resolve_name",
        "import_module",
        "_src",
    }
)
#: ``inspect.stack()`` and the like: reflective only on those modules.
REFLECTIVE_ON = {"inspect": frozenset({"stack", "trace", "getmodule"}), "jax": frozenset({"monitoring"})}

#: Dunder attributes that reach a function's, class's or module's internals (``self.__dict__``
#: and ``x.__class__.__name__`` are not findings).
REFLECTIVE_DUNDERS = frozenset(
    {
        "__dict__",
        "__globals__",
        "__code__",
        "__closure__",
        "__defaults__",
        "__kwdefaults__",
        "__subclasses__",
        "__bases__",
        "__base__",
        "__mro__",
        "__builtins__",
        "__traceback__",
        "__setattr__",
        "__delattr__",
        "__getattribute__",
        "__wrapped__",
        "__func__",
        "__self__",
        "__loader__",
        "__spec__",
        "__import__",
    }
)

#: Modules whose import is itself the finding (``importlib.metadata`` is not).
REFLECTIVE_MODULES = frozenset(
    {"importlib", "imp", "ctypes", "_ctypes", "cffi", "builtins", "__builtin__", "runpy", "code", "pdb", "pkgutil"}
)
DYNAMIC_MODULES = frozenset({"marshal"})
PATCH_MODULES = frozenset({"unittest.mock", "mock"})
HARMLESS_SUBMODULES = frozenset({"importlib.metadata", "importlib.resources", "importlib.util"})
UNPICKLERS = frozenset({"pickle", "_pickle", "cPickle", "dill", "cloudpickle", "marshal", "shelve", "joblib"})

#: Built-ins that run code, or reach anything, when called or handed around.
DYNAMIC_CALLS = frozenset({"exec", "eval", "compile"})
RUNNERS = DYNAMIC_CALLS | frozenset(
    {"__import__", "setattr", "delattr", "getattr", "get_ipython", "globals", "vars", "locals", "breakpoint"}
)
NAMESPACE_CALLS = frozenset({"globals", "locals", "vars"})
NAMESPACE_WRITES = frozenset({"update", "setdefault", "pop", "popitem", "clear", "__setitem__", "__delitem__"})
#: Functions that take an attribute's name.
NAMED_ATTRIBUTE_CALLS = frozenset({"getattr", "setattr", "delattr", "hasattr", "attrgetter", "methodcaller"})
#: Libraries whose attributes honest code looks up by a computed name (``getattr(jax.nn, act)``,
#: ``getattr(jnp, op)``; not ``jax`` itself, whose ``_src`` and ``monitoring`` reach its internals).
NAME_LOOKUP_OK = frozenset({"jax", "numpy", "optax", "flax", "haiku", "equinox", "math", "scipy", "jraph", "chex"})
DYNAMIC_ATTRS = frozenset(
    {
        "FunctionType",
        "CodeType",
        "LambdaType",
        "run_cell",
        "run_code",
        "safe_execfile",
        "safe_run_module",
        "ex",
        "ev",
        "exec",
        "runsource",
        "runcode",
        "run_path",
        "run_module",
        "runctx",
        "runeval",
        "runcall",
    }
)
#: What IPython's input transformer writes for magics and shell lines: not findings.
IPYTHON_PLAIN = frozenset({"run_line_magic", "run_cell_magic", "system", "getoutput", "set_next_input"})
#: Line magics that run a file or a string as code.
RUNNING_MAGICS = frozenset({"run"})
SELF = frozenset({"self", "cls"})

WHY = {
    "grader": "reaches into the grader",
    "patch": "changes a library's code",
    "reflection": "reaches objects by reflection",
    "dynamic": "runs code built at run time",
    "tracer": "tells traced calls from eager ones",
}

MAX_CODE = 160  # characters of the line a finding quotes
MAX_FINDINGS = 50  # per notebook (a record stays small)
MAX_STRING = 20_000  # characters of a string literal read as code
MAX_CELLS_TOTAL = 300_000  # characters of code cells read per notebook (honest ones have tens of thousands)
MAX_STRINGS_TOTAL = 200_000  # characters of strings read as code per notebook (reading is the grader's time)
MAX_DEPTH = 3  # strings within strings read as code
#: Seconds the review of one notebook may take (honest ones take milliseconds): code built to make
#: the reading slow (attribute chains thousands long, aliases of aliases) is read up to there, and
#: a finding says where the grader stopped.  It runs on the trusted side, in the grading process.
REVIEW_SECONDS = 10.0


@dataclass(frozen=True)
class Finding:
    """One construct to read: where (the notebook's cell index, as the record's cells count them,
    and the line in that cell), the line itself, and which kind of construct it is."""

    cell: int
    line: int
    code: str
    kind: str  # a key of WHY
    what: str  # the construct, e.g. "sys.modules", "setattr(jax, ...)"

    @property
    def why(self) -> str:
        return WHY[self.kind]

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "why": self.why}

    def describe(self) -> str:
        return f"cell {self.cell}, line {self.line}: {self.why} ({self.what}): {self.code}"


@lru_cache(maxsize=1)
def kernel_side_names() -> frozenset[str]:
    """The kernel side's own top-level names (``_lookup``, ``_OPS``, ``answer``, ``serve`` ...),
    read from its source: an attribute of that name set anywhere is a patch of it."""
    path = Path(__file__).resolve().parents[1] / "sandboxed" / "kernel_side.py"
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return frozenset(names)


class _OutOfTime(Exception):
    """The review went past :data:`REVIEW_SECONDS`."""


class _Clock:
    def __init__(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds
        self.cell = 0  # the cell being read
        self.scanning = False  # the cells (after the names)

    def check(self) -> None:
        if time.monotonic() > self.deadline:
            raise _OutOfTime


def review_cells(cells: list[tuple[int, str]]) -> list[Finding]:
    """The findings in the code cells ``(index, source)``, in notebook order (cell, then line),
    one per kind of construct and line, at most :data:`MAX_FINDINGS`; within
    :data:`REVIEW_SECONDS`, after which a finding says where the reading stopped."""
    clock = _Clock(REVIEW_SECONDS)
    findings: list[Finding] = []
    try:
        _review(cells, clock, findings)
    except _OutOfTime:
        what = (
            f"the review stopped after {REVIEW_SECONDS:g} s in this cell: this cell and the ones after it were "
            "not reviewed"
            if clock.scanning
            else f"the review stopped after {REVIEW_SECONDS:g} s, reading the notebook's names: no cell was reviewed"
        )
        findings.append(Finding(clock.cell, 1, "", "dynamic", what))
    return findings[:MAX_FINDINGS]


def _review(cells: list[tuple[int, str]], clock: _Clock, findings: list[Finding]) -> None:
    read, over = 0, None
    for position, (index, source) in enumerate(cells):
        read += len(source)
        if read > MAX_CELLS_TOTAL:  # a notebook of megabytes of code: what is past that is not read
            over, cells = index, cells[:position]
            break
    sources = [(index, python_source(source), source) for index, source in cells]
    clock.cell = cells[0][0] if cells else 0  # the names are read from every cell first
    names = _Names.of([src for _, src, _ in sources if src is not None], clock)
    budget = [MAX_STRINGS_TOTAL]
    clock.scanning = True
    for index, source, raw in sources:
        clock.cell = index
        seen: set[tuple[int, str]] = set()
        found: list[Finding] = []
        lines = raw.splitlines()
        if source is None:  # IPython syntax on lines too long to transform: the kernel may run it
            longest = max(range(len(lines)), key=lambda i: len(lines[i]))
            what = "IPython syntax on lines too long for the grader to read"
            findings.append(Finding(index, longest + 1, _clip(lines[longest].strip()), "dynamic", what))
            continue
        for line, kind, what, text in _Scan(names, budget, clock).cell(source):
            line = _raw_line(lines, line, text)
            if (line, kind) in seen:  # one finding per line and kind: the first construct names it
                continue
            seen.add((line, kind))
            shown = lines[line - 1].strip() if 0 < line <= len(lines) else text
            found.append(Finding(index, line, _clip(shown), kind, what))
        findings += sorted(found, key=lambda f: f.line)
        if len(findings) >= MAX_FINDINGS:
            return
    if over is not None:
        findings.append(Finding(over, 1, "", "dynamic", f"more than {MAX_CELLS_TOTAL:,} characters of code: not read"))


def review_notebook(node: Any) -> list[Finding]:
    """:func:`review_cells` of a notebook (an ``nbformat`` node): its code cells, by their index
    among all its cells."""
    return review_cells([(i, c.source) for i, c in enumerate(node.cells) if c.cell_type == "code"])


# --------------------------------------------------------------------------- what names stand for


class _Names:
    """What the notebook's names are bound to, over all its cells (scopes are not told apart: a
    name bound to a module anywhere counts as one everywhere, which errs towards a finding)."""

    def __init__(self) -> None:
        self.origin: dict[str, str] = {}  # name -> the module path it stands for (``s`` -> ``sys``)
        self.chains: set[str] = set()  # ``h.m`` of ``h.m = jax.export``
        self.selfcheck: set[str] = set()  # ``jc`` of ``from grader import selfcheck as jc``
        self.ipython: set[str] = set()  # ``ip`` of ``ip = get_ipython()``
        self.defined: set[str] = set()  # names the notebook binds itself (``def eval``)
        self.functions: dict[str, ast.AST] = {}  # the notebook's functions, for their parameters
        self.classes: set[str] = set()  # the notebook's classes (a method called through one)

    @classmethod
    def of(cls, sources: list[str], clock: _Clock | None = None) -> _Names:
        names = cls()
        trees = [t for t in (_parse(s) for s in sources) if isinstance(t, ast.Module)]
        nodes = [n for t in trees for n in ast.walk(t)]
        check = clock.check if clock is not None else (lambda: None)
        for node in nodes:
            if isinstance(node, ast.Import):
                for a in node.names:
                    bound = a.asname or a.name.split(".")[0]
                    names.origin[bound] = a.name if a.asname else bound
                    if a.name == "grader.selfcheck" and a.asname:
                        names.selfcheck.add(a.asname)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                for a in node.names:
                    bound = a.asname or a.name
                    names.origin[bound] = f"{node.module}.{a.name}"
                    if node.module == "grader" and a.name == "selfcheck":
                        names.selfcheck.add(bound)
            elif isinstance(node, ast.arg):
                names.defined.add(node.arg)  # `def f(eval=True)`: its own `eval`
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names.defined.add(node.name)
                names.functions[node.name] = node
            elif isinstance(node, ast.ClassDef):
                names.defined.add(node.name)
                names.classes.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.defined.add(node.id)
        changed = True
        while changed:  # aliases of aliases, to a fixed point
            before = (len(names.origin), len(names.chains), len(names.selfcheck), len(names.ipython))
            for node in nodes:
                check()
                names._bind(node)
            changed = before != (len(names.origin), len(names.chains), len(names.selfcheck), len(names.ipython))
        return names

    def module_of(self, node: ast.AST) -> str:
        """The module path an expression stands for (``jax.export`` for ``e.export`` after
        ``e = jax``; ``sys`` for ``getattr(os, "sys")``), "" when it is not reached from one."""
        parts: list[str] = []
        while True:
            if isinstance(node, ast.Attribute):
                parts.append(node.attr)
                node = node.value
            elif isinstance(node, ast.NamedExpr):
                node = node.value
            elif isinstance(node, ast.Call) and _called_name(node.func) == "getattr" and len(node.args) >= 2:
                name = _literal(node.args[1])
                parts.append(name if name is not None else "?")
                node = node.args[0]
            elif isinstance(node, ast.Name):
                dotted = ".".join([node.id, *reversed(parts)])
                for i in range(len(parts), -1, -1):  # the longest prefix that is a known chain
                    prefix = ".".join([node.id, *reversed(parts)][: i + 1])
                    if prefix in self.chains:
                        return "chain:" + dotted
                if node.id in self.origin:
                    return ".".join([self.origin[node.id], *reversed(parts)])
                if node.id in self.selfcheck:
                    return ".".join(["grader.selfcheck", *reversed(parts)])
                return ""
            else:
                return ""

    def _rooted(self, value: ast.AST, *, calls: bool = False) -> str:
        """The module path ``value`` stands for, also as an element of a tuple or list, or (with
        ``calls``: a ``with`` item) as the argument of a context manager such as
        ``contextlib.nullcontext(jax)``."""
        found = self.module_of(value)
        if found:
            return found
        if isinstance(value, (ast.Tuple, ast.List, ast.Set)):
            for elt in value.elts:
                found = self._rooted(elt)
                if found:
                    return found
        if calls and isinstance(value, ast.Call):
            for arg in [*value.args, *(k.value for k in value.keywords)]:
                found = self.module_of(arg)
                if found:
                    return found
        return ""

    def _store(self, target: ast.AST, value: ast.AST, *, calls: bool = False) -> None:
        if isinstance(value, ast.Call) and _called_name(value.func) == "get_ipython":
            for n in _stored_names(target):
                self.ipython.add(n)
            return
        if isinstance(value, ast.Name) and value.id == "get_ipython":
            return  # a runner handed around: found by the scan
        path = self._rooted(value, calls=calls)
        if not path:
            return
        if isinstance(value, ast.Name) and value.id in self.selfcheck:
            self.selfcheck.update(_stored_names(target))
        for n in _stored_names(target):
            self.origin.setdefault(n, path)
        for t in ast.walk(target):
            if isinstance(t, ast.Attribute) and isinstance(t.ctx, ast.Store):
                self.chains.add(_dotted(t))

    def _bind(self, node: ast.AST) -> None:
        if isinstance(node, ast.Assign):
            for t in node.targets:
                self._store(t, node.value)
        elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
            self._store(node.target, node.value)
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            self._store(node.target, node.iter)
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            self._store(node.optional_vars, node.context_expr, calls=True)
        elif isinstance(node, ast.Match):
            for case in node.cases:
                for p in ast.walk(case.pattern):
                    if isinstance(p, (ast.MatchAs, ast.MatchStar)) and p.name:
                        self._store(ast.Name(p.name, ast.Store()), node.subject)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            args = node.args
            positional = [*args.posonlyargs, *args.args]
            for arg, default in zip(positional[len(positional) - len(args.defaults) :], args.defaults):
                self._store(ast.Name(arg.arg, ast.Store()), default)
            for arg, default in zip(args.kwonlyargs, args.kw_defaults):
                if default is not None:
                    self._store(ast.Name(arg.arg, ast.Store()), default)
        elif isinstance(node, ast.Call):
            # a module handed to a function of the notebook (or a lambda called at once): its
            # parameters stand for the module
            func = node.func if isinstance(node.func, ast.Lambda) else self.functions.get(_called_name(node.func))
            through_class = (  # K.get(sys, ...): its `self` is sys (not obj.use(jnp): a bound method)
                isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id in self.classes
            )
            if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and (
                isinstance(node.func, (ast.Name, ast.Lambda)) or through_class
            ):
                passed = [*node.args, *(k.value for k in node.keywords)]
                path = next((p for p in (self.module_of(a) for a in passed) if p), "")
                if path:
                    a = func.args
                    for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs]:
                        self.origin.setdefault(arg.arg, path)


# --------------------------------------------------------------------------- the scan


class _Scan:
    def __init__(self, names: _Names, budget: list[int], clock: _Clock) -> None:
        self.names = names
        self.budget = budget  # characters of strings still to read as code, shared by the notebook
        self.clock = clock
        self.kernel_side = kernel_side_names()

    def cell(self, source: str, depth: int = 0) -> list[tuple[int, str, str, str]]:
        """(line, kind, construct, line's text) for every finding in one cell's Python source."""
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError):
            return []  # the kernel cannot run it either
        except (MemoryError, RecursionError):
            return [(1, "dynamic", "code too deeply nested for the grader to read", source[:MAX_CODE])]
        self.lines = source.splitlines()
        self.out: list[tuple[int, str, str, str]] = []
        self.seen: set[tuple[int, str]] = set()
        parents: dict[ast.AST, ast.AST] = {}
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                parents[child] = node
        self.parents = parents
        for node in ast.walk(tree):
            self.clock.check()
            self._node(node, depth)
        return self.out

    def add(self, node: ast.AST, kind: str, what: str) -> None:
        """One finding per line and kind (the first construct names it): a line of 60,000
        ``exec`` would otherwise hold 60,000 copies of itself."""
        line = getattr(node, "lineno", 1)
        if (line, kind) in self.seen:
            return
        self.seen.add((line, kind))
        text = self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""
        self.out.append((line, kind, what, text))

    def _inner(
        self, node: ast.AST, code: str, depth: int, first_line: int, *, one_line: bool = False, cell: bool = False
    ) -> None:
        """Findings in ``code`` (a magic's code, a string that is Python), at their lines (all
        at ``first_line`` for code written on one line of the cell: ``"a\\nb"``).  ``cell``: a
        magic's code written in the cell, read whatever its length (the cells' own cap counts it),
        where a string is read up to :data:`MAX_STRING` and the notebook's strings budget."""
        if depth >= MAX_DEPTH:
            return
        if not cell:
            if len(code) > MAX_STRING:
                return
            if self.budget[0] < len(code):
                if self.budget[0] >= 0:  # said once
                    self.add(node, "dynamic", "more code in strings than the grader reads")
                    self.budget[0] = -1
                return
            self.budget[0] -= len(code)
        source = python_source(code)
        if source is None:
            self.add(node, "dynamic", "IPython syntax on lines too long for the grader to read")
            return
        inner = _Scan(self.names, self.budget, self.clock)
        for line, kind, what, text in inner.cell(source, depth + 1):
            self.out.append((first_line if one_line else first_line + line - 1, kind, what, text))

    def _node(self, node: ast.AST, depth: int) -> None:
        if isinstance(node, ast.Call):
            self._magic(node, depth)
            self._call(node)
        if isinstance(node, ast.Import):
            for a in node.names:
                self._import(node, a.name, None)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            for a in node.names:
                self._import(node, node.module or "", a.name)
        elif isinstance(node, ast.Name):
            self._name(node)
        elif isinstance(node, ast.Attribute):
            self._attribute(node)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
            if any(w in text for w in GRADER_WORDS):
                self.add(node, "grader", repr(text)[:60])
            elif text in ("__builtins__", "__import__", "builtins"):
                self.add(node, "reflection", repr(text))
            elif _looks_like_code(text) and not _is_magic_argument(node, self.parents):
                line = getattr(node, "lineno", 1)
                self._inner(node, text, depth, line, one_line=getattr(node, "end_lineno", line) == line)
        elif isinstance(node, ast.keyword) and node.arg and _names_grader(node.arg):
            self.add(node, "grader", node.arg)
        # a store anywhere: an assignment, `for np.x in ...`, `with ... as jax.jit`, a comprehension
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, (ast.Store, ast.Del)) and _namespace(node.value):
            self.add(node, "reflection", f"{_dotted(node.value)}[...] = ...")
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
            if self._patches(node.value, node.attr, node):
                self.add(
                    node, "patch", f"del {_dotted(node)}" if isinstance(node.ctx, ast.Del) else f"{_dotted(node)} = ..."
                )

    # -- the parts

    def _import(self, node: ast.AST, module: str, name: str | None) -> None:
        full = f"{module}.{name}" if name else module
        top = module.split(".")[0]
        if top == "grader":
            allowed = (module == "grader" and name == "selfcheck") or (
                module == "grader.selfcheck" and (name is None or name in SELFCHECK_API)
            )
            if not allowed:
                self.add(node, "grader", f"import {full}")
            return
        if module in PATCH_MODULES or full in PATCH_MODULES:
            self.add(node, "patch", f"import {full}")
        elif top in DYNAMIC_MODULES:
            self.add(node, "dynamic", f"import {full}")
        elif top in REFLECTIVE_MODULES and not any(full == h or full.startswith(h + ".") for h in HARMLESS_SUBMODULES):
            self.add(node, "reflection", f"import {full}")
        elif any(_reflective(top, part) for part in full.split(".")[1:]):  # jax._src.x, jax.monitoring, os.sys
            self.add(node, "reflection", f"import {full}")
        elif name is not None and name in DYNAMIC_ATTRS and top == "types":
            self.add(node, "dynamic", f"from {module} import {name}")
        elif name is not None and name.endswith("Tracer") and top == "jax":
            self.add(node, "tracer", f"from {module} import {name}")
        if name is not None and _names_grader(name):
            self.add(node, "grader", f"from {module} import {name}")

    def _name(self, node: ast.Name) -> None:
        names = self.names
        if _names_grader(node.id):
            self.add(node, "grader", node.id)
        elif node.id in ("__builtins__", "__import__", "__loader__", "__spec__"):
            self.add(node, "reflection", node.id)
        elif node.id.endswith("Tracer") and names.origin.get(node.id, "").startswith("jax"):
            self.add(node, "tracer", node.id)
        elif (
            isinstance(node.ctx, ast.Load)
            and node.id in RUNNERS
            and node.id not in names.defined
            and not (isinstance(self.parents.get(node), ast.Call) and self.parents[node].func is node)
        ):  # `E = exec`, `map(exec, ...)`, `reduce(getattr, ...)`: a built-in handed around
            self.add(node, "dynamic" if node.id in DYNAMIC_CALLS else "reflection", f"{node.id} (as a value)")

    def _attribute(self, node: ast.Attribute) -> None:
        names, attr, base = self.names, node.attr, node.value
        module = names.module_of(base)
        parent = self.parents.get(node)
        if _names_grader(attr):
            self.add(node, "grader", _dotted(node))
        elif _beyond_selfcheck(module, attr):
            self.add(node, "grader", _dotted(node))
        elif attr in REFLECTIVE_DUNDERS and not (attr == "__dict__" and self._own_self(base, node)):
            self.add(node, "reflection", _dotted(node))
        elif attr in REFLECTIVE_ATTRS or attr in REFLECTIVE_ON.get(module.split(".")[0], ()):
            self.add(node, "reflection", _dotted(node))  # (`.modules` and `.sys` below: only where they are sys)
        elif attr == "modules" and not (
            (isinstance(parent, ast.Call) and parent.func is node)  # model.modules()
            or (isinstance(parent, ast.Compare) and node in parent.comparators)  # "google.colab" in sys.modules
        ):
            self.add(node, "reflection", _dotted(node))
        elif attr == "sys" and module:  # os.sys: the sys module under another name
            self.add(node, "reflection", _dotted(node))
        elif attr in DYNAMIC_ATTRS:
            self.add(node, "dynamic", _dotted(node))
        elif attr == "loads" and module.split(".")[0] in UNPICKLERS:
            self.add(node, "dynamic", _dotted(node))
        elif attr.endswith("Tracer") and (module.startswith("jax") or not module):
            self.add(node, "tracer", _dotted(node))
        elif _on_ipython(base, names) and attr not in IPYTHON_PLAIN:
            self.add(node, "reflection", f"get_ipython().{attr}")

    def _call(self, node: ast.Call) -> None:
        names = self.names
        func = node.func
        name = _called_name(node.func)
        own = name in names.defined and isinstance(func, ast.Name)
        if isinstance(func, ast.Name) and name in DYNAMIC_CALLS and not own:
            self.add(node, "dynamic", f"{name}(...)")
        elif name == "__import__":
            self.add(node, "reflection", "__import__(...)")
        elif name == "vars" and node.args and names.module_of(node.args[0]):
            self.add(node, "reflection", f"vars({_dotted(node.args[0])})")
        elif name in NAMESPACE_WRITES and isinstance(func, ast.Attribute) and _namespace(func.value):
            self.add(node, "reflection", f"{_dotted(func.value)}.{name}(...)")
        elif name.startswith(("register_event", "record_event")):
            self.add(node, "reflection", _dotted(func))
        if name in NAMED_ATTRIBUTE_CALLS and not own:
            at = 0 if name in ("attrgetter", "methodcaller") else 1
            target = node.args[0] if node.args and at == 1 else None
            attr_node = node.args[at] if len(node.args) > at else None
            attr = _literal(attr_node) if attr_node is not None else None
            if attr_node is not None and attr is None:
                base = names.module_of(target) if target is not None else ""
                if not (
                    (target is not None and self._own_self(target, node))
                    or (
                        base.split(".")[0] in NAME_LOOKUP_OK
                        and base != "jax"
                        and name in ("getattr", "hasattr")
                        and _base_name(target) not in names.defined  # `np` only ever imported, never rebound
                    )
                ):
                    self.add(node, "reflection", f"{name}(..., <a name computed at run time>)")
            elif attr is not None:
                base = names.module_of(target) if target is not None else ""
                if _names_grader(attr) or _beyond_selfcheck(base, attr):
                    self.add(node, "grader", f"{name}(..., {attr!r})")
                elif attr in REFLECTIVE_ATTRS or attr in REFLECTIVE_DUNDERS or attr in ("modules", "sys"):
                    self.add(node, "reflection", f"{name}(..., {attr!r})")
                elif name in ("setattr", "delattr") and target is not None and self._patches(target, attr, node):
                    self.add(node, "patch", f"{name}({_dotted(target)}, {attr!r}, ...)")
        if name == "debug_key_reuse" and node.args and _literal_value(node.args[0]) is not True:
            self.add(node, "reflection", "jax.debug_key_reuse(...) not switched on")
        if name == "update" and isinstance(func, ast.Attribute) and node.args:
            option = _literal(node.args[0])
            value = _literal_value(node.args[1]) if len(node.args) > 1 else None
            configured = names.module_of(func.value).startswith("jax")
            if configured and (option is None or ("debug_key_reuse" in option and value is not True)):
                self.add(node, "reflection", "jax.config.update(...) of the key-reuse checker")

    def _magic(self, node: ast.Call, depth: int) -> None:
        """IPython's ``run_line_magic``/``run_cell_magic`` (what ``%x``/``%%x`` become): their
        code is read as code; one whose code is not written in the cell, or ``%run``, is dynamic."""
        if not (isinstance(node.func, ast.Attribute) and node.func.attr in ("run_cell_magic", "run_line_magic")):
            return
        if not node.args or not all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in node.args):
            self.add(node, "dynamic", f"{node.func.attr}(<code built at run time>)")
            return
        magic, code = node.args[0].value, node.args[-1].value
        if magic in RUNNING_MAGICS:
            self.add(node, "dynamic", f"%{magic}")
        line = getattr(node, "lineno", 1)
        cell = depth == 0  # written in the cell itself (not in a string read as code)
        if node.func.attr == "run_cell_magic":
            self._inner(node, code, depth, line + 1, cell=cell)  # the cell's code starts below `%%magic`
        else:
            self._inner(node, _without_options(code), depth, line, cell=cell)

    def _own_self(self, target: ast.AST, at: ast.AST) -> bool:
        """Whether ``target`` (``self``, ``self.x``, ``cls``) is, where ``at`` stands, the object a
        method was called on: its first parameter in a function written in a class body (or a
        closure inside one), and never handed a module (``K.get(sys, ...)``).  A plain function's
        parameter called ``self`` can be anything: ``def _attr(self, n): return getattr(self, n)``
        called as ``_attr(sys, "mod" + "ules")`` (session 24's red team)."""
        name = _base_name(target)
        if name not in SELF or name in self.names.origin:
            return False
        node = self.parents.get(at)
        while node is not None:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                a = node.args
                params = [x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs]]
                if a.vararg is not None:
                    params.append(a.vararg.arg)
                if a.kwarg is not None:
                    params.append(a.kwarg.arg)
                if name in params:  # the function that binds it: a method's first parameter?
                    first = [*a.posonlyargs, *a.args][:1]
                    return (
                        not isinstance(node, ast.Lambda)
                        and bool(first)
                        and first[0].arg == name
                        and isinstance(self.parents.get(node), ast.ClassDef)
                        and not any(_called_name(d) == "staticmethod" for d in node.decorator_list)
                    )
            elif isinstance(node, ast.ClassDef):
                return False
            node = self.parents.get(node)
        return False

    def _patches(self, target: ast.AST, attr: str, at: ast.AST) -> bool:
        """Whether setting ``attr`` on ``target`` (at ``at``) changes code the grader relies on."""
        if self._own_self(target, at):
            return False
        if attr in KERNEL_SIDE_ATTRS or attr in self.kernel_side:
            return True
        module = self.names.module_of(target)
        if module.startswith("chain:") or module.split(".")[0] in GRADER_STACK:
            return True
        node = target
        while True:  # a type: `type(x).f = ...`, `x.__class__.f = ...`
            if isinstance(node, ast.Attribute):
                if node.attr == "__class__":
                    return True
                node = node.value
            elif isinstance(node, (ast.Subscript, ast.NamedExpr)):
                node = node.value
            elif isinstance(node, ast.Call):
                return _called_name(node.func) == "type"
            else:
                return False


# --------------------------------------------------------------------------- helpers


def _reflective(top: str, part: str) -> bool:
    """Whether ``part`` of a path from the module ``top`` reaches the interpreter's internals."""
    return part in REFLECTIVE_ATTRS or part in REFLECTIVE_ON.get(top, ()) or part in ("sys", "modules")


def _beyond_selfcheck(module: str, attr: str) -> bool:
    """``jc.live`` of ``from grader import selfcheck as jc``: the grader past the self-check's API."""
    return module == "grader.selfcheck" and attr not in SELFCHECK_API


def _literal(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _literal_value(node: ast.AST) -> Any:
    return node.value if isinstance(node, ast.Constant) else ...


def _stored_names(target: ast.AST) -> list[str]:
    return [n.id for n in ast.walk(target) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]


def _base_name(node: ast.AST) -> str:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else ""


def _namespace(node: ast.AST) -> bool:
    """``globals()``, ``locals()``, ``vars(...)``: a namespace as a dict."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in NAMESPACE_CALLS


def _on_ipython(node: ast.AST, names: _Names) -> bool:
    """``get_ipython()``, or a name bound to it (``ip = get_ipython()``)."""
    return (isinstance(node, ast.Call) and _called_name(node.func) == "get_ipython") or (
        isinstance(node, ast.Name) and node.id in names.ipython
    )


def _names_grader(text: str) -> bool:
    return any(w in text for w in ("kernel_side", "jaxgrade_ks"))


_CODE_HINT = re.compile(r"[=;\n(]|\bimport\b")


def _looks_like_code(text: str) -> bool:
    """A string worth reading as Python: statements or a call, not a word or a sentence."""
    return len(text) <= MAX_STRING and bool(_CODE_HINT.search(text))


def _is_magic_argument(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    parent = parents.get(node)
    return (
        isinstance(parent, ast.Call)
        and isinstance(parent.func, ast.Attribute)
        and parent.func.attr in ("run_cell_magic", "run_line_magic")
    )


def _without_options(code: str) -> str:
    """A line magic's code without its leading options: ``-n1 -r 3 f(x)`` -> ``f(x)``."""
    words = code.split(" ")
    while words and (words[0].startswith("-") or words[0] == ""):
        option = words.pop(0)
        if option in ("-n", "-r", "-p", "-o", "-l", "-s", "-T", "-D") and words and words[0][:1].isdigit():
            words.pop(0)
    return " ".join(words)


def _raw_line(lines: list[str], line: int, text: str) -> int:
    """The line of the notebook's own cell that holds ``text`` (IPython drops leading blank
    lines and joins ``!`` continuations, so its line numbers can be a few short)."""
    wanted = text.strip()
    if not wanted or (0 < line <= len(lines) and wanted in lines[line - 1]):
        return line
    for candidate in range(max(1, line), min(len(lines), line + 50) + 1):
        if wanted in lines[candidate - 1]:
            return candidate
    return line


def _dotted(node: ast.AST) -> str:
    try:
        text = ast.unparse(node)
    except Exception:
        text = type(node).__name__
    return text if len(text) <= 60 else text[:59] + "…"


def _parse(source: str) -> ast.AST | None:
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None


def _clip(text: str) -> str:
    return text if len(text) <= MAX_CODE else text[: MAX_CODE - 1] + "…"
