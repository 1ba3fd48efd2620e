"""Reading submissions: validation and normalization with nbformat, and source inspection."""

from __future__ import annotations

import ast
import copy
import functools
import hashlib
import io
import json
import re
import threading
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat
import nbformat.validator

MAX_NOTEBOOK_BYTES = 64 * 1024 * 1024


class NotebookError(Exception):
    """The file is not a usable notebook; the message names the file and the problem."""


@dataclass(frozen=True)
class LoadedNotebook:
    path: Path
    node: Any  # nbformat.NotebookNode
    sha256: str

    def to_json(self) -> str:
        return nbformat.writes(self.node)

    @property
    def assignment(self) -> str | None:
        return named_assignment(self.node)

    def code_cells(self) -> list[str]:
        return [c.source for c in self.node.cells if c.cell_type == "code"]


def named_assignment(notebook: Any) -> str | None:
    """The assignment a notebook's metadata names (``metadata.jaxgrade.assignment``, set in the
    starter), or None; any shape of metadata is taken, as it is the student's to write."""
    meta = notebook.get("metadata", {}) if isinstance(notebook, dict) else {}
    meta = meta.get("jaxgrade", {}) if isinstance(meta, dict) else {}
    name = meta.get("assignment") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else None


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


#: JSON objects a notebook may hold.  Each becomes a NotebookNode of about 1 KB in the trusted
#: process (and more as it is written out again for the sandbox): 20 MiB of ``{},`` made 7
#: million, past 6.5 GiB.  A notebook's cells and outputs hold thousands.
MAX_JSON_OBJECTS = 1_000_000


class _TooManyObjects(Exception):
    pass


class _Counted:
    """``json.loads``'s ``object_pairs_hook``: a dict per object, until :data:`MAX_JSON_OBJECTS`."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        self.n += 1
        if self.n > MAX_JSON_OBJECTS:
            raise _TooManyObjects
        return dict(pairs)


def assignment_named_in(raw: bytes) -> str | None:
    """The assignment a notebook file's bytes name in their metadata (:func:`named_assignment`),
    read with the JSON object cap of :func:`load_notebook` (a file of millions of ``{}`` took the
    reading process to 1.7 GB); None for bytes that are not such JSON."""
    try:
        return named_assignment(json.loads(raw, object_pairs_hook=_Counted()))
    except (_TooManyObjects, ValueError, RecursionError):
        return None


def load_notebook(path: Path) -> LoadedNotebook:
    """Read, upgrade to the current v4 minor, fill missing cell ids, and validate."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise NotebookError(f"{path}: cannot read the file ({exc.strerror})") from None
    if size > MAX_NOTEBOOK_BYTES:
        raise NotebookError(
            f"{path}: the file is {size / 2**20:.0f} MiB, over the {MAX_NOTEBOOK_BYTES >> 20} MiB limit"
        )
    raw = path.read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise NotebookError(f"{path}: is not a notebook: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    try:
        data = json.loads(text, object_pairs_hook=_Counted())
    except _TooManyObjects:
        raise NotebookError(
            f"{path}: is not a notebook the grader reads: it holds more than {MAX_JSON_OBJECTS:,} JSON objects "
            "(a notebook's cells and outputs hold thousands)"
        ) from None
    except json.JSONDecodeError as exc:
        raise NotebookError(
            f"{path}: is not a notebook: invalid JSON at line {exc.lineno}, column {exc.colno} ({exc.msg})"
        ) from None
    except RecursionError:  # JSON nested deeper than Python's parser goes
        raise NotebookError(f"{path}: is not a notebook: JSON nested too deeply to read") from None
    if not isinstance(data, dict) or ("cells" not in data and "worksheets" not in data):
        raise NotebookError(f"{path}: is not a notebook: JSON without a 'cells' list")
    major = data.get("nbformat")
    if major not in (3, 4):
        raise NotebookError(f"{path}: unsupported nbformat version {major!r} (expected 4)")
    if major == 3 and data.get("nbformat_minor", 0) != 0:
        minor = data.get("nbformat_minor")
        raise NotebookError(f"{path}: unsupported nbformat version 3.{minor!r} (expected 4, or 3.0)")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # missing ids and old minors are normalized below
            # the JSON read above, as nbformat.reader.reads makes it (without reading it again), not
            # validated: _raise_schema_error below
            try:
                node = nbformat.versions[major].to_notebook_json(data, minor=nbformat.reader.get_version(data)[1])
            except AttributeError as exc:  # as nbformat.reader.reads words it
                raise nbformat.ValidationError(
                    f"The notebook is invalid and is missing an expected key: {exc}"
                ) from None
            if major == 3:
                node = _upgrade_v3(node)
        if node.get("nbformat_minor", 0) < nbformat.v4.nbformat_minor:
            node.nbformat_minor = nbformat.v4.nbformat_minor
        for i, cell in enumerate(node.get("cells", [])):
            if isinstance(cell, dict) and not cell.get("id"):
                cell["id"] = f"jaxgrade-{i}"
        _raise_schema_error(node, 4, node.nbformat_minor)
        nbformat.validate(node)  # normalizes (duplicate ids); valid by now, so as fast
    except nbformat.ValidationError as exc:
        raise NotebookError(f"{path}: is not a valid notebook: {exc.message}") from None
    except MemoryError:  # the grader's own limit (grade.trusted_limits), not the notebook's fault alone
        raise
    except Exception as exc:
        raise NotebookError(f"{path}: is not a valid notebook: {exc}") from None
    return LoadedNotebook(path, node, digest)


_V3_LOCK = threading.Lock()


def _upgrade_v3(node: Any) -> Any:
    """A v3 notebook as v4, judged as the v4 it becomes (as ``nbformat.reads`` judged it), without
    nbformat's check of both on the way, which words an error with jsonschema over the whole
    notebook (:func:`_raise_schema_error`) and only logs it."""
    import nbformat.v4.convert as v4convert

    with _V3_LOCK:  # a module's function, swapped for this call only
        check = v4convert._warn_if_invalid
        v4convert._warn_if_invalid = lambda nb, version: None
        try:
            return nbformat.convert(node, 4)
        finally:
            v4convert._warn_if_invalid = check


def _raise_schema_error(node: Any, version: int, minor: int) -> None:
    """Raise the notebook's first schema error, found by fastjsonschema and, where it is in a
    cell, worded by jsonschema for that cell alone ("cell 12: Additional properties are not
    allowed ('x' was unexpected)").  ``nbformat.validate`` on an invalid notebook goes on to
    jsonschema over the whole notebook for its best message, at about 1 ms a cell (twice, as
    ``nbformat.reads`` validates too): nine minutes, in a trusted process, for a notebook under
    the size limit with one bad cell at its end.  Where fastjsonschema is missing, nothing is
    raised here and ``nbformat.validate`` decides, slowly."""
    try:
        validator = nbformat.validator.get_validator(version=version, version_minor=minor, name="fastjsonschema")
    except Exception:  # not installed, or no schema for that minor: nbformat.validate decides
        return
    if validator is None or getattr(validator, "name", "") != "fastjsonschema":
        return
    try:
        validator.validate(node)
    except nbformat.ValidationError as fast:
        # fastjsonschema's words are poor ("must be valid exactly by one definition"): where the
        # error is in a cell, jsonschema's best message for that cell alone, at the cost of one cell
        where = list(getattr(fast.__cause__, "path", None) or [])
        if len(where) >= 3 and where[1] == "cells" and str(where[2]).isdigit():
            i = int(where[2])
            # the cell alone in an empty notebook: an error elsewhere is not blamed on it
            cell = copy.deepcopy(node["cells"][i])
            probe = nbformat.from_dict({"cells": [cell], "metadata": {}, "nbformat": version, "nbformat_minor": minor})
            try:
                nbformat.validate(probe)
            except nbformat.ValidationError as best:
                raise nbformat.ValidationError(f"cell {i + 1}: {best.message}") from None
            raise nbformat.ValidationError(f"cell {i + 1}: {fast.message}") from None  # only fastjsonschema's
        raise


#: What IPython's transformer may cost on a cell, as the sum of its lines' squared lengths, where
#: the tokenizer copies a line into each of its tokens (Python 3.12.0 to 3.12.3; 3.12.1 here;
#: CPython issues 119118 and 119654): a line of n tokens then costs n times its length (a
#: 200,000-character line of minus signs took the trusted process past 24 GB).  The bound keeps a
#: cell's tokens near 100 MB there; a 1,000-line ``%%time`` cell of 140-character lines is a
#: fifth of it.  Where tokens share their line, the cost is linear and no bound applies.
TRANSFORM_MAX_COST = 100_000_000


@functools.lru_cache(maxsize=1)
def _tokens_copy_their_line() -> bool:
    import io
    import tokenize

    tokens = list(tokenize.generate_tokens(io.StringIO("a b\n").readline))
    return tokens[0].line is not tokens[1].line


def python_source(cell: str) -> str | None:
    """Cell source with IPython syntax (magics, !shell) turned into plain Python; plain Python
    as it is.  None for a cell with IPython syntax (or none that parses) whose lines are too long
    to transform (:data:`TRANSFORM_MAX_COST`): its code cannot be read."""
    try:
        ast.parse(cell)
        return cell  # plain Python: nothing to transform
    except (RecursionError, MemoryError):
        return cell  # nested too deeply to parse: the reader says so
    except (SyntaxError, ValueError):
        pass
    if _tokens_copy_their_line() and sum(len(line) ** 2 for line in cell.splitlines()) > TRANSFORM_MAX_COST:
        return None
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        return TransformerManager().transform_cell(cell)
    except Exception:
        return cell


def _python_source(cell: str) -> str:
    """:func:`python_source`, or the cell as it is where that cannot be read."""
    source = python_source(cell)
    return cell if source is None else source


#: Characters of code cells that the checks reading a notebook's source (purity, jit, vmap) read
#: on the trusted side; honest notebooks hold tens of thousands.  Past it those checks cannot be
#: judged and fail (:class:`CodeTooLarge`).
MAX_CODE_READ = 2_000_000


class CodeUnreadable(Exception):
    """The grader cannot read the notebook's code to judge a function's source: the message says
    why.  The checks that read source fail then (a cell they skipped could hide what they look
    for: a write into an argument, a fresh ``jax.jit``, a ``vmap``)."""


class CodeTooLarge(CodeUnreadable):
    """The notebook holds more code than :data:`MAX_CODE_READ`."""

    def __init__(self, size: int) -> None:
        super().__init__(
            f"the notebook holds {size:,} characters of code, more than the {MAX_CODE_READ:,} the grader reads "
            "to judge your source"
        )


def definition_sources(cells: list[str], name: str) -> list[str]:
    """Source text of every top-level definition or assignment of ``name`` in the cells."""
    return list(_definitions(tuple(cells)).get(name, ()))


@functools.lru_cache(maxsize=4)
def _definitions(cells: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """Every top-level definition's source text, by name: the cells are transformed and parsed
    once per notebook, not once per name a check asks for (a red-team review: a check that
    follows names re-read every cell for each, minutes for a padded notebook)."""
    size = sum(map(len, cells))
    if size > MAX_CODE_READ:
        raise CodeTooLarge(size)
    found: dict[str, list[str]] = {}
    for number, cell in enumerate(cells, 1):
        _collect_definitions(cell, number, found)
    return {k: tuple(v) for k, v in found.items()}


#: How deep the code of a magic inside a magic is read (``%%time`` over ``%%capture``...).
MAGIC_DEPTH = 8


def _collect_definitions(cell: str, number: int, found: dict[str, list[str]], depth: int = 0) -> None:
    """:func:`_definitions` for one cell (or the code of a magic in it), into ``found``."""
    if depth > MAGIC_DEPTH:
        raise CodeUnreadable(f"code cell {number} nests magics deeper than the grader reads")
    src = python_source(cell)
    if src is None:
        raise CodeUnreadable(f"code cell {number} has IPython syntax on lines too long for the grader to read")
    try:
        tree = ast.parse(src)
    except (SyntaxError, ValueError):
        return  # the kernel cannot run it either
    except (RecursionError, MemoryError):
        raise CodeUnreadable(f"code cell {number} is nested too deeply for the grader to read") from None
    lines = _source_lines(src)  # as ast counts lines: not at \x0c or \u2028
    for node in _module_level(tree.body):
        targets: list[str] = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            targets = [node.name]
        elif isinstance(node, ast.Assign):
            targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            targets = [node.target.id]
        elif isinstance(node, ast.Expr) and (code := _magic_code(node.value)) is not None:
            # `%%time` and other magics run their code in the notebook's namespace (the second
            # red team hid a definition from every source check under `%%time`)
            _collect_definitions(code, number, found, depth + 1)
        if targets:
            seg = _statement_source(src, lines, node)
            if seg:
                for target in dict.fromkeys(targets):
                    found.setdefault(target, []).append(seg)


def _magic_code(node: ast.expr) -> str | None:
    """The code of ``get_ipython().run_cell_magic(name, line, code)`` or ``run_line_magic(name,
    code)`` (what ``%%time``/``%time`` become), None for anything else."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return None
    if node.func.attr not in ("run_cell_magic", "run_line_magic") or not node.args:
        return None
    code = node.args[-1]
    return code.value if isinstance(code, ast.Constant) and isinstance(code.value, str) else None


def _module_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements that run at a cell's top level, in order: those of ``body`` and those in its
    ``if``, ``for``, ``while``, ``with``, ``try`` and ``match`` blocks, which bind module names just
    the same (a definition under ``if True:`` hid from every source check: session 34's red
    team); not the bodies of functions and classes."""
    for node in body:
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for inner in _blocks(node):
            yield from _module_level(inner)


def _blocks(stmt: ast.stmt) -> list[list[ast.stmt]]:
    """The statement lists a compound statement holds, in source order (a ``try``'s handlers
    before its ``else``; a ``match``'s cases)."""
    blocks = [getattr(stmt, "body", None), *(h.body for h in getattr(stmt, "handlers", None) or ())]
    blocks += [getattr(stmt, "orelse", None), getattr(stmt, "finalbody", None)]
    blocks += [c.body for c in getattr(stmt, "cases", None) or ()]
    return [b for b in blocks if isinstance(b, list)]


def _statement_source(src: str, lines: tuple[str, ...], node: ast.stmt) -> str:
    """The source of one statement, its decorators included, dedented if it is in a block."""
    seg = _segment(src, node, padded=True)  # in a block, the first line keeps its indentation
    if not seg:
        return ""
    decorators = getattr(node, "decorator_list", [])
    if decorators:  # the segment starts at `def`: its decorators say what it is too
        seg = "".join(lines[decorators[0].lineno - 1 : node.lineno - 1]) + seg
    if node.col_offset == 0:
        return seg
    # the block's indentation off every line (a line of a string that starts further left keeps
    # what it has: textwrap.dedent would then take nothing off, and the text would not parse)
    depth = node.col_offset
    seg = "".join(
        line[min(depth, len(line) - len(line.lstrip(" \t"))) :] for line in io.StringIO(seg, newline="").readlines()
    )
    try:
        ast.parse(seg)
    except (SyntaxError, ValueError):
        raise CodeUnreadable(f"the grader could not read the definition on line {node.lineno} of a cell") from None
    return seg


@functools.lru_cache(maxsize=64)
def _source_lines(src: str) -> tuple[str, ...]:
    """``src``'s lines as ``ast`` counts them (at ``\\n``, ``\\r\\n`` and ``\\r`` only), split once per
    source: ``ast.get_source_segment`` splits the whole source again for each node it is asked
    for, hours for a notebook of many short statements (the third red team: 40 s for 4,000)."""
    return tuple(io.StringIO(src, newline="").readlines())


def _segment(src: str, node: ast.AST, *, padded: bool = False) -> str | None:
    """``ast.get_source_segment(src, node, padded=padded)``, from :func:`_source_lines`."""
    lineno, end_lineno = getattr(node, "lineno", None), getattr(node, "end_lineno", None)
    col, end_col = getattr(node, "col_offset", None), getattr(node, "end_col_offset", None)
    if lineno is None or end_lineno is None or col is None or end_col is None:
        return None
    lines = _source_lines(src)
    if not 0 < lineno <= end_lineno <= len(lines):
        return None
    first, last = lines[lineno - 1].encode(), lines[end_lineno - 1].encode()  # offsets are in UTF-8 bytes
    if lineno == end_lineno:
        return first[col:end_col].decode(errors="replace")
    pad = "".join(c if c in "\f\t" else " " for c in first[:col].decode(errors="replace")) if padded else ""
    middle = lines[lineno : end_lineno - 1]
    return "".join([pad + first[col:].decode(errors="replace"), *middle, last[:end_col].decode(errors="replace")])


def reachable_sources(cells: list[str], name: str) -> list[str]:
    """The sources of ``name``'s top-level definitions and of every top-level definition they name,
    transitively: what ``name`` can run without reaching outside the notebook's own code."""
    seen: set[str] = set()
    todo = [name]
    found: list[str] = []
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        for src in definition_sources(cells, current):
            found.append(src)
            try:
                tree = ast.parse(src)
            except SyntaxError:
                continue
            todo.extend(n for n in _free_names(tree) if n not in seen)
    return found


def _free_names(tree: ast.AST) -> set[str]:
    """Names a definition reads but does not bind itself (parameters, assignments, loop and
    comprehension targets, imports and nested definitions are its own): only those can refer to
    other definitions of the notebook."""
    loaded: set[str] = set()
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node is not tree:
            bound.add(node.name)
    top = tree.body[0] if isinstance(tree, ast.Module) and tree.body else None
    if isinstance(top, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return loaded - bound
    # a module-level statement (`f = jax.vmap(g)`): what it assigns is the name we came from
    return loaded


def mentions(sources: list[str], word: str) -> bool:
    """Whether any of the sources uses ``word`` as a name or attribute (not in comments/strings)."""
    for src in sources:
        try:
            tree = ast.parse(src)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id == word:
                return True
            if isinstance(node, ast.Attribute) and node.attr == word:
                return True
            if isinstance(node, ast.alias) and (node.name.split(".")[-1] == word or node.asname == word):
                return True
    return False


def fresh_jit_in_loop(sources: list[str]) -> str:
    """The first ``jax.jit(lambda ...)``, ``jax.jit(partial(...))`` or ``jax.jit`` of a function
    defined in the same body, written inside a loop (``for``, ``while``, a comprehension) of the
    sources (each iteration makes a new function, so a new compilation), or a call in such a loop
    of a function of the sources that makes one on every call (``_step(x)``, where ``_step`` runs
    ``jax.jit(lambda ...)``: pass :func:`reachable_sources`); "" when there is none.  Read from
    the notebook on the trusted side: it cannot be forged from the kernel, only written
    differently."""
    trees = _parsed(sources)
    factories = _factories(trees)
    return _fresh_jit(trees, factories, in_loop=True) or _maker_called_in_loop(trees, factories)


def _parsed(sources: list[str]) -> list[tuple[str, ast.Module]]:
    """Each source with its tree (a source that does not parse is left out)."""
    trees = []
    for src in sources:
        try:
            trees.append((src, ast.parse(src)))
        except SyntaxError:
            continue
    return trees


def _top_def(tree: ast.Module) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The function a source defines where its first statement is a ``def``, else None (a source
    of :func:`definition_sources` holds one top-level definition or assignment)."""
    top = tree.body[0] if tree.body else None
    return top if isinstance(top, (ast.FunctionDef, ast.AsyncFunctionDef)) else None


def _maker_called_in_loop(trees: list[tuple[str, ast.Module]], factories: frozenset[str]) -> str:
    """A call, inside a loop of one of the sources' functions, of a function of the sources that
    makes a new jitted function on every call (itself, or through another such function)."""
    functions: dict[str, tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]] = {}
    for src, tree in trees:
        top = _top_def(tree)
        if top is not None:
            functions.setdefault(top.name, (src, top))
    makes: dict[str, str] = {}  # function -> the jit it makes on every call
    for name, (src, func) in functions.items():
        if _cached(func):
            continue  # functools.lru_cache/cache: one jit per argument, not per call
        if any(isinstance(n, (ast.Global, ast.Nonlocal)) for n in ast.walk(func)):
            continue  # a jit kept in a global the first time (`if _step is None: _step = jax.jit(...)`)
        found = _fresh_jit_in(src, func, in_loop=False, factories=factories)
        if found:
            makes[name] = found
    callers: dict[str, list[str]] = {}  # a function that calls one of them on every call makes one too
    for name, (_, func) in functions.items():
        for call in ast.walk(func):
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in functions:
                callers.setdefault(call.func.id, []).append(name)
    todo = list(makes)  # each function once (a fixpoint over all of them was quadratic in a chain)
    while todo:
        maker = todo.pop()
        for caller in callers.get(maker, ()):
            if caller not in makes:
                makes[caller] = makes[maker]
                todo.append(caller)
    for src, func in functions.values():
        for loop in _loops(func):
            for call in ast.walk(loop):
                if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in makes:
                    text = _segment(src, call) or f"{call.func.id}(...)"
                    return f"{text}, which makes {makes[call.func.id]} on every call"
    return ""


def _loops(func: ast.AST) -> list[ast.AST]:
    """The loops in a function: ``for``, ``while`` and comprehensions."""
    kinds = (ast.For, ast.AsyncFor, ast.While, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
    return [n for n in ast.walk(func) if isinstance(n, kinds)]


def fresh_jit_in_body(sources: list[str]) -> str:
    """Like :func:`fresh_jit_in_loop`, anywhere in a function's body: a jitted function made
    anew on every call compiles on every call."""
    trees = _parsed(sources)
    return _fresh_jit(trees, _factories(trees), in_loop=False)


def _fresh_jit(trees: list[tuple[str, ast.Module]], factories: frozenset[str], *, in_loop: bool) -> str:
    for src, tree in trees:
        top = _top_def(tree)
        if top is not None and _cached(top):
            continue  # functools.lru_cache/cache: one jit per argument, not per call
        for func in ast.walk(tree):
            if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                found = _fresh_jit_in(src, func, in_loop=in_loop, factories=factories)
                if found:
                    return found
    return ""


def _factories(trees: list[tuple[str, ast.Module]]) -> frozenset[str]:
    """The sources' top-level functions that return a new function on every call: a lambda, or a
    function defined in them (``def _closing(n): def body(y): ...; return body``), unless a cache
    decorator keeps what they return."""
    found = set()
    for _, tree in trees:
        top = _top_def(tree)
        if top is None or _cached(top):
            continue
        inner = {n.name for n in ast.walk(top) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))} - {top.name}
        for ret in ast.walk(top):
            if isinstance(ret, ast.Return) and (
                isinstance(ret.value, ast.Lambda) or (isinstance(ret.value, ast.Name) and ret.value.id in inner)
            ):
                found.add(top.name)
    return frozenset(found)


def _cached(func: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether a cache decorator (``functools.lru_cache``, ``cache``) keeps what ``func`` returns."""
    return any("cache" in _called_name(d.func if isinstance(d, ast.Call) else d) for d in func.decorator_list)


def _jit_decorator(node: ast.expr) -> bool:
    """``@jax.jit``, ``@jax.jit(...)`` or ``@partial(jax.jit, ...)``."""
    if _is_jit(node):
        return True
    if isinstance(node, ast.Call):
        if _is_jit(node.func):
            return True
        return _called_name(node.func) in ("partial", "Partial") and bool(node.args) and _is_jit(node.args[0])
    return False


def _fresh_jit_in(
    src: str,
    func: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda,
    *,
    in_loop: bool,
    factories: frozenset[str] = frozenset(),
) -> str:
    """:func:`_fresh_jit` for one parsed function or lambda of ``src`` (its nested functions
    included): a ``jax.jit`` in it of a lambda, a ``partial(...)``, a function defined in it, what
    a notebook factory returns (``jax.jit(_closing(n))``), or a name bound in it to one of these
    (session 34's red team: the factory, the name, and a lambda bound at the top level that jits
    a lambda on every call).  A jit of what another call returns (``jax.jit(jax.vmap(f))``) is
    not taken for one: a factory of the notebook that returns it runs once where it is called at
    the top level, which the source does not tell from a call on every call."""
    local = {n.name for n in ast.walk(func) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    local.discard(getattr(func, "name", ""))
    declared = {name for n in ast.walk(func) if isinstance(n, (ast.Global, ast.Nonlocal)) for name in n.names}
    kept: set[int] = set()  # jits kept for the next calls: `_s = jax.jit(...)` (global), `_memo[n] = ...`
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and _new_function(node.value, local, factories):
            local.update(t.id for t in node.targets if isinstance(t, ast.Name))  # `body = lambda y: ...`
        if isinstance(node, ast.Assign) and all(
            isinstance(t, (ast.Subscript, ast.Attribute)) or (isinstance(t, ast.Name) and t.id in declared)
            for t in node.targets
        ):
            kept.add(id(node.value))
    for scope in _loops(func) if in_loop else [func]:
        for node in ast.walk(scope):
            if isinstance(node, ast.Call) and _is_jit(node.func) and id(node) not in kept:
                target = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "fun"), None)
                if target is not None and _new_function(target, local, factories):
                    return _segment(src, node) or "jax.jit(...)"
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node is not func:
                jit = next((d for d in node.decorator_list if _jit_decorator(d)), None)
                if jit is not None:  # a jitted function defined anew each time: `@jax.jit def body(...)`
                    return f"@{_segment(src, jit) or 'jax.jit'} def {node.name}"
    return ""


def _new_function(node: ast.expr, local: set[str], factories: frozenset[str]) -> bool:
    """Whether ``node`` makes a new function each time it runs."""
    if isinstance(node, ast.Lambda):
        return True
    if isinstance(node, ast.Name):
        return node.id in local
    if isinstance(node, ast.Call):
        name = _called_name(node.func)
        return name in ("partial", "Partial") or (isinstance(node.func, ast.Name) and name in factories)
    return False


#: Methods and functions that write into the array they are given (NumPy).
_IN_PLACE_METHODS = frozenset({"fill", "sort", "resize", "setflags", "itemset", "put", "partition", "byteswap"})
_IN_PLACE_FUNCTIONS = frozenset({"copyto", "put", "place", "put_along_axis", "fill_diagonal", "putmask", "at"})
#: Calls that return their argument itself, or a view of it (not a copy), given a NumPy array.
_SAME_ARRAY = frozenset(
    {
        "asarray",
        "asanyarray",
        "ascontiguousarray",
        "asfortranarray",
        "atleast_1d",
        "atleast_2d",
        "atleast_3d",
        "reshape",
        "ravel",
        "view",
        "transpose",
        "swapaxes",
        "moveaxis",
        "rollaxis",
        "squeeze",
        "expand_dims",
        "flip",
        "fliplr",
        "flipud",
        "rot90",
        "diagonal",
        "real",
        "imag",
    }
)
#: Attributes of a NumPy array that are views of it: a write into one writes into the array.
_VIEW_ATTRS = frozenset({"T", "mT", "flat", "real", "imag"})


def writes_into_arguments(cells: list[str], name: str) -> str:
    """The first statement of ``name``'s definition that writes into one of its arguments (or into
    a name that is the same array: ``y = x``, ``y = np.asarray(x)``): ``x[i] = v``, ``x[i] += v``,
    ``x += v``, ``x.fill(v)``, ``np.copyto(x, v)``, ``out=x``, or a call that hands the argument
    to a notebook function that does; "" when there is none.  Read from the notebook on the
    trusted side, so a kernel cannot hide it; it can only be written around."""
    root: _Call = (name, None)
    events: dict[_Call, list[tuple[str, _Call | None]]] = {}  # each function and argument set, read once
    todo = [root]
    while todo:
        key = todo.pop()
        if key in events:
            continue
        events[key] = _write_events(cells, key)
        todo += [callee for _, callee in events[key] if callee is not None and callee not in events]
    # which of them write, directly or through a function they hand the argument to (however
    # deep, cycles included: reachability, each read once; a search that cut cycles by name and
    # depth at 20 missed writes behind them, and read functions once per path, in factorial time)
    callers: dict[_Call, list[_Call]] = {}
    for key, evs in events.items():
        for _, callee in evs:
            if callee is not None:
                callers.setdefault(callee, []).append(key)
    writes = {key for key, evs in events.items() if any(callee is None for _, callee in evs)}
    frontier = list(writes)
    while frontier:
        for caller in callers.get(frontier.pop(), ()):
            if caller not in writes:
                writes.add(caller)
                frontier.append(caller)
    return next((text for text, callee in events[root] if callee is None or callee in writes), "")


#: A function and the positions of the arguments that are the caller's array (None: all of them).
_Call = tuple[str, frozenset[int] | None]


def _write_events(cells: list[str], key: _Call) -> list[tuple[str, _Call | None]]:
    """In source order over ``name``'s definitions, the statements that write into its arguments
    at ``positions`` (callee None) and the calls that hand one of them to a notebook function
    (the callee and the positions it gets)."""
    name, positions = key
    out: list[tuple[str, _Call | None]] = []
    for src in definition_sources(cells, name):
        try:
            tree = ast.parse(src)
        except SyntaxError:
            continue
        except (RecursionError, MemoryError):
            raise CodeUnreadable(f"the definition of `{name}` is nested too deeply for the grader to read") from None
        func = _top_def(tree)
        if func is not None:
            out += _events_in(src, func, positions)
    return out


def _events_in(
    src: str, func: ast.FunctionDef | ast.AsyncFunctionDef, positions: frozenset[int] | None
) -> list[tuple[str, _Call | None]]:
    a = func.args
    params = [arg.arg for arg in [*a.posonlyargs, *a.args]]
    aliases = {p for i, p in enumerate(params) if positions is None or i in positions}
    if positions is None:
        aliases |= {arg.arg for arg in a.kwonlyargs}
    return _events_of(src, func.body, aliases)


def _events_of(src: str, body: list[ast.stmt], aliases: set[str]) -> list[tuple[str, _Call | None]]:
    """:func:`_events_in` for a body in which ``aliases`` name the caller's array: its writes, the
    calls that hand the array on, and those of the functions defined in it (closures)."""
    out: list[tuple[str, _Call | None]] = []
    aliases = set(aliases)
    holders: set[str] = set()  # names of tuples, lists and dicts that hold the array: `args = (x, v)`
    nested: list[tuple[ast.FunctionDef | ast.AsyncFunctionDef, set[str]]] = []  # and what they can see
    variables = _bound_in(body)  # a name bound here is no notebook function handed a callback
    for node in _in_order(body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            nested.append((node, set(aliases)))
            variables.discard(node.name)
            continue
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if _base_name(target) in aliases and not isinstance(target, ast.Name):
                    out.append((_segment(src, node) or "", None))
            for name, value in _bindings(targets, node.value):
                same = value is not None and _same_array(value, aliases)
                held = isinstance(value, _CONTAINERS) and _holds(value, aliases | holders)
                (aliases.add if same else aliases.discard)(name)
                (holders.add if held else holders.discard)(name)
        elif isinstance(node, ast.AugAssign) and _base_name(node.target) in aliases:
            out.append((_segment(src, node) or "", None))
        elif isinstance(node, ast.Call):
            func_name = _called_name(node.func)
            receiver = node.func.value if isinstance(node.func, ast.Attribute) else None
            if (
                (func_name in _IN_PLACE_METHODS and receiver is not None and _base_name(receiver) in aliases)
                or (func_name in _IN_PLACE_FUNCTIONS and node.args and _base_name(node.args[0]) in aliases)
                or any(k.arg == "out" and _base_name(k.value) in aliases for k in node.keywords)
            ) and not _out_of_place(node):
                out.append((_segment(src, node) or "", None))
                continue
            handed = frozenset(i for i, arg in enumerate(node.args) if _base_name(arg) in aliases)
            if handed and isinstance(node.func, ast.Name):
                out.append((_segment(src, node) or "", (node.func.id, handed)))
            for callee, positions in _callbacks(node, aliases | holders, variables):
                out.append((_segment(src, node) or "", (callee, positions)))
        for _, seen in nested:  # a closure sees the names as they are when it runs: from its def on
            seen |= aliases
    for func, seen in nested:  # a closure writes into the array it captures or is handed
        params = [arg.arg for arg in [*func.args.posonlyargs, *func.args.args]]
        own = {*params, *(arg.arg for arg in func.args.kwonlyargs)}
        given: set[str] = set()
        for _, callee in out:
            if callee is not None and callee[0] == func.name:
                given |= own if callee[1] is None else {p for i, p in enumerate(params) if i in callee[1]}
        out += _events_of(src, func.body, (seen - own) | given)
    return out


def _out_of_place(call: ast.Call) -> bool:
    """``inplace=False``: JAX's ``jnp.add.at``/``jnp.put`` return a new array (NumPy's take no
    such argument)."""
    return any(
        k.arg == "inplace" and isinstance(k.value, ast.Constant) and k.value.value is False for k in call.keywords
    )


def _is_lax(func: ast.expr) -> bool:
    """``lax.f`` or ``jax.lax.f`` (not ``jax.tree.map``, which hands its function the leaves)."""
    if not isinstance(func, ast.Attribute):
        return False
    owner = func.value
    if isinstance(owner, ast.Name):
        return owner.id == "lax"
    return (
        isinstance(owner, ast.Attribute)
        and owner.attr == "lax"
        and isinstance(owner.value, ast.Name)
        and owner.value.id == "jax"
    )


#: JAX's control flow: what it hands the functions it is given are tracers, never the arrays.
_TRACING_CALLS = frozenset({"fori_loop", "while_loop", "scan", "cond", "switch", "associative_scan", "map"})


def _callbacks(call: ast.Call, names: set[str], variables: set[str]) -> list[tuple[str, frozenset[int] | None]]:
    """The functions of the notebook that ``call`` is handed beside the array (``names``), and at
    which of their positions the array may reach them: a callback (``threading.Timer(0.3, _write,
    (x, v))``, ``Thread(target=_write, args=[x])``, ``partial(_write, x)``, ``map(_write, xs)``;
    a write from a timer after the call returned: session 34's red team).  The arguments after it
    and the items of a tuple or list among them give the positions; the array held otherwise (a
    name holding a tuple, ``**kwargs``) gives every position."""
    values = [*call.args, *(k.value for k in call.keywords)]
    if not any(_holds(v, names) for v in values):
        return []
    if _called_name(call.func) in _TRACING_CALLS and _is_lax(call.func):
        return []
    found: list[tuple[str, frozenset[int] | None]] = []
    for i, v in enumerate(values):
        if not isinstance(v, ast.Name) or v.id in names or v.id in variables:
            continue
        after = call.args[i + 1 :] if i < len(call.args) else []
        lists = [
            a
            for a in [*after, *(k.value for k in call.keywords if k.arg == "args")]
            if isinstance(a, (ast.Tuple, ast.List))
        ]
        positions = {j for j, a in enumerate(after) if _holds(a, names)}
        positions |= {j for a in lists for j, e in enumerate(a.elts) if _holds(e, names)}
        accounted = set(map(id, after)) | set(map(id, lists))
        whole = any(_holds(w, names) and id(w) not in accounted for j, w in enumerate(values) if j != i)
        found.append((v.id, None if whole or not positions else frozenset(positions)))
    return found


def _bindings(targets: list[ast.expr], value: ast.expr) -> list[tuple[str, ast.expr | None]]:
    """The names an assignment binds, each with the expression it gets where the source says
    (``a, b = x, 0``), else None (``a, b = f(x)``)."""
    out: list[tuple[str, ast.expr | None]] = []
    for target in targets:
        if isinstance(target, ast.Name):
            out.append((target.id, value))
        elif isinstance(target, (ast.Tuple, ast.List)):
            items = value.elts if isinstance(value, (ast.Tuple, ast.List)) else None
            if (
                items is not None
                and len(items) == len(target.elts)
                and not any(isinstance(e, ast.Starred) for e in (*items, *target.elts))
            ):
                out += [b for t, v in zip(target.elts, items, strict=True) for b in _bindings([t], v)]
            else:
                out += [(n.id, None) for n in ast.walk(target) if isinstance(n, ast.Name)]
    return out


def _bound_in(body: list[ast.stmt]) -> set[str]:
    """The names a function body binds itself (assignments, loop and ``with`` targets, imports,
    its own functions), not those of the functions inside it, nor those it declares ``global``
    or ``nonlocal`` (an assignment that never runs would make a notebook function one)."""
    bound: set[str] = set()
    declared: set[str] = set()
    todo: list[ast.AST] = list(body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            declared.update(node.names)
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            bound.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif not isinstance(node, ast.Lambda):
            todo.extend(ast.iter_child_nodes(node))
    return bound - declared


#: Literals that hold what they are built from (a write through them reaches it).
_CONTAINERS = (ast.Tuple, ast.List, ast.Set, ast.Dict)


def _holds(value: ast.AST, names: set[str]) -> bool:
    """Whether ``value`` is one of ``names``, or a tuple, list, set or dict literal (or a starred
    one) with one of them in it, however deep."""
    if isinstance(value, ast.Name):
        return value.id in names
    if isinstance(value, ast.Starred):
        return _holds(value.value, names)
    if isinstance(value, ast.Dict):
        return any(v is not None and _holds(v, names) for v in (*value.keys, *value.values))
    if isinstance(value, _CONTAINERS):
        return any(_holds(e, names) for e in value.elts)
    return False


def _own_parts(stmt: ast.stmt) -> list[ast.AST]:
    """A statement's own expressions, not its blocks (which :func:`_in_order` reads once each: a
    walk of the whole statement listed a call once for every block around it, the third red
    team's 10 s for 60 nested ``if``): an ``except``'s type and a ``case``'s pattern and guard
    included."""
    parts: list[ast.AST] = []
    for field, value in ast.iter_fields(stmt):
        if field in ("body", "orelse", "finalbody"):
            continue
        if field == "handlers":
            parts += [h.type for h in value if h.type is not None]
        elif field == "cases":
            parts += [c.pattern for c in value] + [c.guard for c in value if c.guard is not None]
        elif isinstance(value, list):
            parts += [v for v in value if isinstance(v, ast.AST)]
        elif isinstance(value, ast.AST):
            parts.append(value)
    return parts


def _in_order(body: list[ast.stmt]) -> list[ast.AST]:
    """The statements of a body, the calls in them and the functions defined in it (not what is
    inside those), in source order, nested blocks included."""
    out: list[ast.AST] = []
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.append(stmt)
            continue
        if isinstance(stmt, ast.ClassDef):
            continue
        out.extend(n for part in _own_parts(stmt) for n in ast.walk(part) if isinstance(n, ast.Call))
        out.append(stmt)
        for inner in _blocks(stmt):
            out.extend(_in_order(inner))
    return out


def _base_name(node: ast.AST) -> str:
    """``x`` for ``x``, ``x[i]``, ``x[i][j]``, ``x.T[i]``: the name whose array is written."""
    while isinstance(node, (ast.Subscript, ast.Attribute)):
        if isinstance(node, ast.Attribute) and node.attr not in _VIEW_ATTRS:
            return ""
        node = node.value
    return node.id if isinstance(node, ast.Name) else ""


def _same_array(value: ast.AST, aliases: set[str]) -> bool:
    """Whether ``value`` is (a view of) an array named in ``aliases``."""
    if isinstance(value, ast.Name):
        return value.id in aliases
    if isinstance(value, ast.Subscript):
        return _base_name(value) in aliases
    if isinstance(value, ast.Attribute) and value.attr in _VIEW_ATTRS:
        return _same_array(value.value, aliases)  # y = x.T: a view (session 24's red team)
    if isinstance(value, ast.NamedExpr):
        return _same_array(value.value, aliases)
    if isinstance(value, ast.Call) and _called_name(value.func) in _SAME_ARRAY:
        receiver = value.func.value if isinstance(value.func, ast.Attribute) else None
        if isinstance(receiver, ast.Name) and receiver.id in ("jnp", "jax", "lax"):
            return False  # jax.numpy makes a new (immutable) array
        if receiver is not None and _base_name(receiver) in aliases:
            return True  # x.reshape(...), x.view()
        return bool(value.args) and _base_name(value.args[0]) in aliases and _called_name(value.func) != "view"
    return False


def _is_jit(node: ast.expr) -> bool:
    return _called_name(node) == "jit"


def _called_name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def notebook_from_script(source: str, assignment: str | None = None) -> Any:
    """A notebook whose code cells are the script's ``# %%`` sections (for references and mutants)."""
    cells: list[list[str]] = [[]]
    for line in source.splitlines():
        if line.startswith("# %%"):
            cells.append([])
            continue
        cells[-1].append(line)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("\n".join(c).strip("\n")) for c in cells if "".join(c).strip()]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    if assignment:
        nb.metadata["jaxgrade"] = {"assignment": assignment}
    return nb


def completed_starter(
    starter: Any, source: str, functions: tuple[str, ...] | list[str], assignment: str | None = None
) -> Any:
    """The starter notebook as a student hands it in with ``source`` (a ``# %%`` script) as their
    solution: every code cell of the starter is kept, in order, and the script's cells follow the
    first code cell that names one of ``functions`` (the first TODO).  After a later cell that
    binds one of them again (a stub, an import, an assignment), the script's cells that define
    those names follow once more.  So the solution's definitions are in force from the first TODO
    on, and the cells after it (the checks that call the functions) call them.

    Trusted code only (the staff's starter and solutions): the trusted compilation cache is warmed
    with it, and `jaxgrade validate` grades the reference and the alternatives in this form."""
    solution = notebook_from_script(source, assignment)
    names = set(functions)
    word = re.compile(r"\b(" + "|".join(map(re.escape, sorted(names))) + r")\b") if names else None
    defines = [bound_names(c.source, names) for c in solution.cells]
    cells: list[Any] = []
    placed = False
    for cell in starter.cells:
        if cell.cell_type != "code":
            continue
        src = cell.source if isinstance(cell.source, str) else "".join(cell.source)
        cells.append(nbformat.v4.new_code_cell(src))
        if word is None:
            continue
        if not placed and word.search(src):
            cells += [nbformat.v4.new_code_cell(c.source) for c in solution.cells]
            placed = True
        elif placed and (rebound := bound_names(src, names)):
            again = [c for c, d in zip(solution.cells, defines) if d & rebound] or solution.cells
            cells += [nbformat.v4.new_code_cell(c.source) for c in again]
    if not placed:
        cells += solution.cells
    nb = nbformat.v4.new_notebook()
    nb.cells = cells
    nb.metadata["kernelspec"] = dict(solution.metadata["kernelspec"])
    if assignment:
        nb.metadata["jaxgrade"] = {"assignment": assignment}
    return nb


def bound_names(cell: str, names: set[str]) -> set[str]:
    """Which of ``names`` the cell's own code binds (not a function body or a comprehension): a
    ``def`` or ``class``, an assignment (tuples too), an import, a ``for``, ``with``, ``except``
    or ``match`` target, at any depth of ``if``/``try``/``with``/``for``, also inside a
    ``%%time``-style cell magic or a ``%time`` line magic.  A cell that cannot be parsed binds
    those it names."""
    src = _python_source(cell)
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return {n for n in names if re.search(rf"\b{re.escape(n)}\b", src)}
    found: set[str] = set()
    todo: list[ast.AST] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found |= {node.name} & names
            continue  # what its body binds is its own
        if isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            continue  # their own scope
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found |= {(a.asname or a.name.split(".")[0]) for a in node.names} & names
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            found |= {node.id} & names
        elif isinstance(node, ast.ExceptHandler) and node.name:
            found |= {node.name} & names
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            found |= {node.name} & names
        elif isinstance(node, ast.expr) and (code := _magic_code(node)) is not None:
            found |= bound_names(code, names)  # the magic's code is a string argument: look into it
        todo.extend(ast.iter_child_nodes(node))
    return found
