"""Reading submissions: validation and normalization with nbformat, and source inspection."""

from __future__ import annotations

import ast
import hashlib
import json
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat

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
        meta = self.node.get("metadata", {}).get("jaxgrade", {})
        name = meta.get("assignment") if isinstance(meta, dict) else None
        return name if isinstance(name, str) else None

    def code_cells(self) -> list[str]:
        return [c.source for c in self.node.cells if c.cell_type == "code"]


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


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
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise NotebookError(
            f"{path}: is not a notebook: invalid JSON at line {exc.lineno}, column {exc.colno} ({exc.msg})"
        ) from None
    if not isinstance(data, dict) or ("cells" not in data and "worksheets" not in data):
        raise NotebookError(f"{path}: is not a notebook: JSON without a 'cells' list")
    major = data.get("nbformat")
    if major not in (3, 4):
        raise NotebookError(f"{path}: unsupported nbformat version {major!r} (expected 4)")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # missing ids and old minors are normalized below
            node = nbformat.reads(text, as_version=4)
        if node.get("nbformat_minor", 0) < nbformat.v4.nbformat_minor:
            node.nbformat_minor = nbformat.v4.nbformat_minor
        for i, cell in enumerate(node.get("cells", [])):
            if isinstance(cell, dict) and not cell.get("id"):
                cell["id"] = f"jaxgrade-{i}"
        nbformat.validate(node)
    except nbformat.ValidationError as exc:
        raise NotebookError(f"{path}: is not a valid notebook: {exc.message}") from None
    except Exception as exc:
        raise NotebookError(f"{path}: is not a valid notebook: {exc}") from None
    return LoadedNotebook(path, node, digest)


def _python_source(cell: str) -> str:
    """Cell source with IPython syntax (magics, !shell) turned into plain Python."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        return TransformerManager().transform_cell(cell)
    except Exception:
        return cell


def definition_sources(cells: list[str], name: str) -> list[str]:
    """Source text of every top-level definition or assignment of ``name`` in the cells."""
    found: list[str] = []
    for cell in cells:
        src = _python_source(cell)
        try:
            tree = ast.parse(src)
        except SyntaxError:
            continue
        for node in tree.body:
            targets: list[str] = []
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                targets = [node.name]
            elif isinstance(node, ast.Assign):
                targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                targets = [node.target.id]
            if name in targets:
                seg = ast.get_source_segment(src, node)
                if seg:
                    found.append(seg)
    return found


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
            todo.extend(n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id not in seen)
    return found


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
    defined in the same body, written inside a ``for``/``while`` loop of the sources (each loop
    iteration makes a new function, so a new compilation); "" when there is none.  Read from the
    notebook on the trusted side: it cannot be forged from the kernel, only written differently."""
    for src in sources:
        try:
            tree = ast.parse(src)
        except SyntaxError:
            continue
        for func in ast.walk(tree):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            local = {n.name for n in ast.walk(func) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))} - {
                func.name
            }
            for loop in ast.walk(func):
                if not isinstance(loop, (ast.For, ast.While)):
                    continue
                for call in ast.walk(loop):
                    if isinstance(call, ast.Call) and _is_jit(call.func) and call.args:
                        target = call.args[0]
                        fresh = isinstance(target, ast.Lambda) or (
                            isinstance(target, ast.Call) and _called_name(target.func) == "partial"
                        )
                        if fresh or (isinstance(target, ast.Name) and target.id in local):
                            return ast.get_source_segment(src, call) or "jax.jit(...)"
    return ""


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
