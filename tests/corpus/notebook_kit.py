"""What every ``tests/corpus/<assignment>/make_corpus.py`` shares: notebook metadata, cell
constructors, deterministic cell ids, and writing only the files whose content changed.

A generator imports it with ``sys.path`` pointing at ``tests/corpus/`` (it is run as a script)::

    build = functools.partial(kit.build, ASSIGNMENT)
    nbs["correct.ipynb"] = build("correct", [kit.md("# Homework"), kit.code("def f(x): ...")])
    kit.write_corpus(HERE, corpus())
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping
from pathlib import Path

import nbformat
from nbformat import v4

KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
LANGUAGE_INFO = {
    "codemirror_mode": {"name": "ipython", "version": 3},
    "file_extension": ".py",
    "mimetype": "text/x-python",
    "name": "python",
    "nbconvert_exporter": "python",
    "pygments_lexer": "ipython3",
    "version": "3.11.7",
}


def md(text: str) -> tuple[str, str]:
    return ("markdown", text)


def code(text: str) -> tuple[str, str]:
    return ("code", text)


def build(assignment: str, name: str, cells: list[tuple[str, str]], *, tagged: bool = True) -> nbformat.NotebookNode:
    """A valid notebook; cell ids derive from ``name`` and position, so output is deterministic.
    ``tagged`` adds the ``jaxgrade`` metadata that names the assignment."""
    nb = v4.new_notebook()
    nb.metadata = {"kernelspec": dict(KERNELSPEC), "language_info": copy.deepcopy(LANGUAGE_INFO)}
    if tagged:
        nb.metadata["jaxgrade"] = {"assignment": assignment}
    for i, (kind, source) in enumerate(cells):
        cell = v4.new_markdown_cell(source) if kind == "markdown" else v4.new_code_cell(source)
        cell.id = hashlib.sha1(f"{name}:{i}".encode()).hexdigest()[:8]
        nb.cells.append(cell)
    nbformat.validate(nb)
    return nb


def render(content: nbformat.NotebookNode | str) -> str:
    if isinstance(content, str):
        return content
    return nbformat.writes(content) + "\n"


def write_if_changed(path: Path, text: str) -> bool:
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return True


def write_corpus(here: Path, corpus: Mapping[str, nbformat.NotebookNode | str]) -> dict[str, str]:
    """Write the corpus into ``here``; report what changed and notebooks no longer generated."""
    texts = {name: render(content) for name, content in corpus.items()}
    changed = [name for name, text in texts.items() if write_if_changed(here / name, text)]
    stale = sorted(p.name for p in here.glob("*.ipynb") if p.name not in texts)
    print(f"{len(texts)} corpus notebooks; changed: {', '.join(changed) or 'none'}")
    if stale:
        print(f"not written by this script (delete them?): {', '.join(stale)}")
    return texts


def fill_starter(
    assignment: str, name: str, fills: Mapping[str, str], *, who: str = "", extra: tuple[str, ...] = ()
) -> nbformat.NotebookNode:
    """The assignment's starter notebook with the code cells whose ids are in ``fills`` replaced
    (``{"todo1": "def f(x): ..."}``), a name line after the title, and ``extra`` code cells at
    the end; the added cells' ids derive from ``name``, so output is deterministic."""
    starter = Path(__file__).resolve().parents[2] / "assignments" / assignment / f"{assignment}.ipynb"
    nb = nbformat.read(starter, as_version=4)
    ids = {cell.get("id") for cell in nb.cells}
    missing = set(fills) - ids
    if missing:
        raise KeyError(f"{assignment} starter has no cells {sorted(missing)}")
    for cell in nb.cells:
        if cell.get("id") in fills:
            cell.source = fills[cell.id]
    if who:
        cell = v4.new_markdown_cell(f"Submitted by: {who}")
        cell.id = hashlib.sha1(f"{name}:who".encode()).hexdigest()[:8]
        nb.cells.insert(1, cell)
    for i, src in enumerate(extra, start=1):
        cell = v4.new_code_cell(src)
        cell.id = hashlib.sha1(f"{name}:extra{i}".encode()).hexdigest()[:8]
        nb.cells.append(cell)
    nbformat.validate(nb)
    return nb
