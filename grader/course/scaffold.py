"""``jaxgrade new``: a new assignment's files, written from templates, and its entry in ``grading.yaml``.

The scaffold is a complete assignment that ``jaxgrade list`` shows and ``jaxgrade validate``
runs on; what is left for the author is marked ``TODO(jaxgrade)`` (or is a reference function
that still raises ``NotImplementedError``, or a mutant identical to the reference), and
:func:`todos` finds exactly those places, so that validate can list them.
"""

from __future__ import annotations

import ast
import json
import keyword
import shutil
from dataclasses import dataclass
from pathlib import Path

import jinja2
import nbformat
import yaml

from grader.course.config import ASSIGNMENT_FILE, COURSE_FILE, Assignment, ConfigError, Course, course_from_data
from grader.publish.output import write_atomic

TODO_MARK = "TODO(jaxgrade)"  # what the author must write; the starter's student TODOs are plain "TODO:"
STARTER_IMPORTS = ("jax", "jnp", "np")  # names the starter notebook binds; a function may not shadow them
RESERVED_NAMES = {  # names a function may not take, and what it would hide
    **{name: f"the starter notebook's `{name}` import" for name in STARTER_IMPORTS},
    "jc": "the self-check `jc` that the released notebook's first cell defines",
}
WHAT = {  # what each written file is, by its name, for the command's listing
    ASSIGNMENT_FILE: "name, title, notebook, functions, seed",
    ".ipynb": "the starter: metadata, an introduction, a stub per function",
    "test_public.py": "a public test per function (fixed input, expected value by hand)",
    "wrong_numbers.py": "one mutant: a copy of the reference with one bug (fails=numerics)",
    "solution.py": "the reference solution: a stub per function",
    "test_hidden.py": "hidden tests per function: reference numbers on random inputs, under jit",
    COURSE_FILE: "the new entry at the end of assignments:",
}


class ScaffoldError(Exception):
    """``jaxgrade new`` cannot write this assignment; ``tip`` says what to do instead."""

    def __init__(self, message: str, tip: str = "") -> None:
        super().__init__(message)
        self.message, self.tip = message, tip


@dataclass(frozen=True)
class Spec:
    """What ``jaxgrade new`` writes: the assignment's name, title and functions."""

    name: str
    title: str
    functions: tuple[str, ...]


# --------------------------------------------------------------------------- checking the request


def parse_functions(text: str | None, name: str) -> tuple[str, ...]:
    """``--functions f,g`` as a tuple of names; by default one function named like the assignment.

    A name must be an ASCII Python identifier (the notebook, the tests and the reference must
    spell it alike; Python folds other letters by NFKC) and must not hide a name the notebook
    binds itself (:data:`RESERVED_NAMES`)."""
    if text is None:  # the assignment's name, which check_name checks as a name
        if name in RESERVED_NAMES:
            raise ScaffoldError(
                f"the default function name (the assignment's): {name!r} would hide {RESERVED_NAMES[name]}",
                "Choose another assignment name, or name its functions with --functions, e.g. --functions my_fn.",
            )
        return (name,)
    names = tuple(part.strip() for part in text.split(","))
    for f in names:
        if not f.isidentifier() or not f.isascii() or keyword.iskeyword(f):
            raise ScaffoldError(
                f"--functions: {f!r} is not a Python function name "
                "(expected ASCII letters, digits and '_', not starting with a digit)",
                "Pass names separated by commas, e.g. --functions batched_convolve,fast_convolve.",
            )
        if f in RESERVED_NAMES:
            raise ScaffoldError(
                f"--functions: {f!r} would hide {RESERVED_NAMES[f]}", "Choose another name for the function."
            )
    twice = sorted({f for f in names if names.count(f) > 1})
    if twice:
        raise ScaffoldError(f"--functions: {', '.join(twice)} given more than once", "Name each function once.")
    return names


def check_name(root: Path, name: str, listed: set[str]) -> None:
    """``name`` is a Python identifier and no assignment of the course uses it yet."""
    if not name.isidentifier() or keyword.iskeyword(name) or not name.isascii():
        raise ScaffoldError(
            f"{name!r} is not a valid assignment name (expected a Python identifier: letters, digits and '_', "
            "not starting with a digit)",
            "Use a name like vmap_convolve; it names the directories and the notebook.",
        )
    if name in listed:
        raise ScaffoldError(
            f"{COURSE_FILE}: assignments.{name}: the course already has an assignment {name!r}",
            "Choose another name, or edit the existing assignment.",
        )
    for folder in (root / "assignments" / name, root / "reference" / name):
        if folder.exists():
            raise ScaffoldError(
                f"{folder}: already exists",
                f"Choose another name, or remove {folder} if it is left over from an earlier attempt.",
            )


def default_title(name: str) -> str:
    return name.replace("_", " ").strip().capitalize() or name


# --------------------------------------------------------------------------- rendering


def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("grader.course", "templates/new"),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        autoescape=False,  # Python, YAML and Markdown, never HTML
    )
    env.filters["yaml_str"] = lambda text: json.dumps(text, ensure_ascii=False)  # a JSON string is YAML too
    return env


def render_files(spec: Spec) -> dict[str, str]:
    """Every file of the scaffold but the notebook, by path relative to the course root."""
    env = _env()
    values = {"name": spec.name, "title": spec.title, "functions": spec.functions}
    student, reference = f"assignments/{spec.name}", f"reference/{spec.name}"
    return {
        f"{student}/{ASSIGNMENT_FILE}": env.get_template("assignment.yaml.j2").render(values),
        f"{student}/tests/test_public.py": env.get_template("test_public.py.j2").render(values),
        f"{reference}/solution.py": env.get_template("solution.py.j2").render(values),
        f"{reference}/tests/test_hidden.py": env.get_template("test_hidden.py.j2").render(values),
        f"{reference}/mutants/wrong_numbers.py": env.get_template("mutant.py.j2").render(values),
    }


def render_starter(spec: Spec) -> str:
    """The starter notebook: an introduction, the imports, and per function a description and a stub."""
    env = _env()
    nb = nbformat.v4.new_notebook()
    nb.metadata["jaxgrade"] = {"assignment": spec.name}
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    cells = [
        nbformat.v4.new_markdown_cell(env.get_template("intro.md.j2").render(name=spec.name, title=spec.title)),
        nbformat.v4.new_code_cell("import jax\nimport jax.numpy as jnp\nimport numpy as np"),
    ]
    for f in spec.functions:
        cells.append(nbformat.v4.new_markdown_cell(env.get_template("function.md.j2").render(f=f).strip()))
        cells.append(nbformat.v4.new_code_cell(env.get_template("function.py.j2").render(f=f).strip()))
    for i, cell in enumerate(cells):
        cell["id"] = f"{spec.name}-{i}"  # stable ids: the same command writes the same notebook
        cell["source"] = cell["source"].strip()
    nb.cells = cells
    return nbformat.writes(nb)


# --------------------------------------------------------------------------- grading.yaml


def add_entry(text: str, name: str) -> str:
    """``grading.yaml``'s text with an entry for ``name`` appended to its ``assignments:`` mapping.

    The file is edited as text, so that its comments and layout stay; the result is checked by
    :func:`write_course_entry`."""
    try:
        root = yaml.compose(text)
    except yaml.YAMLError as exc:
        raise ScaffoldError(f"{COURSE_FILE}: invalid YAML: {exc}", f"Fix {COURSE_FILE} first.") from None
    pair = _assignments_pair(root)
    key, value = pair
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    if isinstance(value, yaml.ScalarNode) and value.tag.endswith(":null"):  # `assignments:` with nothing yet
        at, indent = key.start_mark.line + 1, key.start_mark.column + 2
    elif isinstance(value, yaml.MappingNode) and not value.flow_style and value.value:
        indent = value.value[0][0].start_mark.column
        at = _after_last_entry(lines, value, key.start_mark.column)
    else:
        raise ScaffoldError(
            f"{COURSE_FILE}: assignments: written on one line ({{...}}), which jaxgrade new does not edit",
            f"Write assignments: as one entry per line (see the README), or add `{name}: {{}}` to it yourself.",
        )
    entry = _env().get_template("grading_entry.yaml.j2").render(name=name, indent=" " * indent)
    return "".join(lines[:at]) + entry + "".join(lines[at:])


def _assignments_pair(root: yaml.Node | None) -> tuple[yaml.Node, yaml.Node]:
    if isinstance(root, yaml.MappingNode):
        for key, value in root.value:
            if isinstance(key, yaml.ScalarNode) and key.value == "assignments":
                return key, value
    raise ScaffoldError(
        f"{COURSE_FILE}: no assignments: mapping at the top level", f"Add `assignments:` to {COURSE_FILE}."
    )


def _after_last_entry(lines: list[str], mapping: yaml.MappingNode, key_column: int) -> int:
    """The line index just after the mapping's last entry and the indented comments that follow it."""
    end = _last_leaf(mapping).end_mark
    i = end.line + 1
    last = i
    while i < len(lines):
        stripped = lines[i].strip()
        if stripped and len(lines[i]) - len(lines[i].lstrip(" ")) <= key_column:
            break  # the next top-level key, or a comment at its level
        i += 1
        if stripped:
            last = i
    return last


def _last_leaf(node: yaml.Node) -> yaml.Node:
    """The last scalar (or one-line collection) inside ``node``: a block collection's own end mark
    lies at the next key, after any comments in between."""
    while not getattr(node, "flow_style", True) and node.value:
        node = node.value[-1][1] if isinstance(node, yaml.MappingNode) else node.value[-1]
    return node


def write_course_entry(root: Path, name: str) -> None:
    """Add ``name`` to ``root/grading.yaml``, atomically, after checking that the new file loads
    and changes nothing but the new entry."""
    path = root / COURSE_FILE
    old_text = path.read_text(encoding="utf-8")
    new_text = add_entry(old_text, name)
    old, new = yaml.safe_load(old_text) or {}, yaml.safe_load(new_text) or {}
    new_entries = dict(new.get("assignments") or {})
    added = new_entries.pop(name, "absent")
    unchanged = {k: v for k, v in new.items() if k != "assignments"} == {
        k: v for k, v in old.items() if k != "assignments"
    } and new_entries == (old.get("assignments") or {})
    if added is not None or not unchanged:
        raise ScaffoldError(
            f"{COURSE_FILE}: adding {name!r} under assignments: would change more than that entry",
            f"Add `{name}:` under assignments: in {COURSE_FILE} yourself; the other files are written.",
        )
    try:
        course_from_data(new, root)
    except ConfigError as exc:
        raise ScaffoldError(f"{COURSE_FILE} would not load after adding {name!r}: {exc}", "") from None
    write_atomic(path, new_text, follow_links=True)  # a linked grading.yaml stays a link, its mode stays


# --------------------------------------------------------------------------- the command


def create(course: Course, name: str, *, functions: tuple[str, ...], title: str | None = None) -> list[Path]:
    """Write the scaffold of ``name`` into ``course`` and list it in its ``grading.yaml``.

    Nothing is left behind when a step fails: the new directories are removed again."""
    root = course.root
    check_name(root, name, set(course.assignments))
    spec = Spec(name, title or default_title(name), functions)
    add_entry((root / COURSE_FILE).read_text(encoding="utf-8"), name)  # refuse early, before writing anything
    files = {root / rel: text for rel, text in render_files(spec).items()}
    files[root / "assignments" / name / f"{name}.ipynb"] = render_starter(spec)
    try:
        for path, text in sorted(files.items()):
            write_atomic(path, text)
        write_course_entry(root, name)
    except BaseException:
        for folder in (root / "assignments" / name, root / "reference" / name):
            shutil.rmtree(folder, ignore_errors=True)
        raise
    return [*sorted(files), root / COURSE_FILE]


def describe(path: Path) -> str:
    """What the scaffold's file ``path`` holds (see :data:`WHAT`)."""
    return next((text for end, text in WHAT.items() if path.name.endswith(end)), "")


# --------------------------------------------------------------------------- what is left (for validate)


def todos(assignment: Assignment) -> list[str]:
    """What is left to write in ``assignment``, one line each: ``TODO(jaxgrade)`` marks, reference
    functions that are still stubs, mutants that are stubs or copies of the reference."""
    root = assignment.course.root
    found = _marks(assignment.student_dir / ASSIGNMENT_FILE, root)
    found += _notebook_marks(assignment.starter, root)
    for folder in (assignment.public_tests, assignment.hidden_tests):
        for path in sorted(folder.rglob("*.py")) if folder.is_dir() else []:
            found += _marks(path, root)
    reference = _parse(assignment.solution)
    shown = _rel(assignment.solution, root)
    for f in assignment.functions:
        if reference is not None and _is_stub(reference, f):
            found.append(f"{shown}: the reference still raises NotImplementedError in {f}; write {f} there")
    mutants = sorted(assignment.mutants_dir.glob("*.py")) if assignment.mutants_dir.is_dir() else []
    for path in mutants:
        found += _marks(path, root)
        found += _mutant_todos(path, reference, assignment.functions, root)
    return found


def _mutant_todos(path: Path, reference: ast.Module | None, functions: tuple[str, ...], root: Path) -> list[str]:
    mutant = _parse(path)
    if mutant is None:
        return []
    shown = _rel(path, root)
    if reference is not None and ast.dump(mutant) == ast.dump(reference):
        return [
            f"{shown}: the mutant is identical to the reference; put one bug in it and name the bug on its second line"
        ]
    stubs = [f for f in functions if _is_stub(mutant, f)]
    if stubs:
        return [
            f"{shown}: the mutant still raises NotImplementedError in {', '.join(stubs)}; "
            "copy the reference there and put one bug in it"
        ]
    return []


def _marks(path: Path, root: Path) -> list[str]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return []
    return [f"{_rel(path, root)}:{n}: {_after_mark(line)}" for n, line in enumerate(lines, 1) if TODO_MARK in line]


def _notebook_marks(path: Path, root: Path) -> list[str]:
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception:  # an unreadable starter is reported by grading it
        return []
    found = []
    for i, cell in enumerate(nb.cells, 1):
        for line in str(cell.get("source", "")).splitlines():
            if TODO_MARK in line:
                found.append(f"{_rel(path, root)}: cell {i}: {_after_mark(line)}")
    return found


def _after_mark(line: str) -> str:
    return line.split(TODO_MARK, 1)[1].lstrip(":").strip() or "to write"


def _parse(path: Path) -> ast.Module | None:
    try:
        return ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return None  # grading reports it, with the line


def _is_stub(module: ast.Module, name: str) -> bool:
    """Whether the top-level function ``name`` does nothing but raise NotImplementedError."""
    for node in module.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            body = node.body[1:] if _is_docstring(node.body[0]) else node.body
            return len(body) == 1 and isinstance(body[0], ast.Raise) and _names_not_implemented(body[0].exc)
    return False


def _is_docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


def _names_not_implemented(exc: ast.expr | None) -> bool:
    target = exc.func if isinstance(exc, ast.Call) else exc
    return isinstance(target, ast.Name) and target.id == "NotImplementedError"


def _rel(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)
