"""The layout is the trust boundary: only ``grader/sandboxed`` and ``grader/wire`` run in the sandbox.

The static test parses every module of those two packages and fails, naming file:line, when one
imports a grader module outside them (at any depth, relative imports, ``__import__`` and
``importlib.import_module`` with a literal name, and code in string literals that the worker
runs in the kernel).  The real test grades a notebook in a bubblewrap sandbox that tries to
import trusted modules, lists the mounted package and writes into it; ``double`` is right only
when one of them worked, so a 0 proves the boundary, and the same notebook graded without bubblewrap (where the
whole package is importable) scores 4, which proves that the notebook itself works.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from grader.course.config import load_course
from grader.grading.grade import grade_notebook
from grader.host import sandbox
from grader.host.sandbox import choose_isolation
from tests.conftest import build_notebook
from tests.minicourse import make_minicourse

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "grader"
SANDBOX_SIDE = ("grader.sandboxed", "grader.wire")


# ----------------------------------------------------------------------------- static


def _allowed(module: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in SANDBOX_SIDE)


def _grader_module(module: str) -> bool:
    return module == "grader" or module.startswith("grader.")


def _package_of(path: Path) -> str:
    """The package a relative import in ``path`` starts from (``grader.sandboxed`` for both
    ``grader/sandboxed/worker.py`` and ``grader/sandboxed/__init__.py``)."""
    return ".".join(path.relative_to(PACKAGE.parent).parent.parts)


def _resolve(node: ast.ImportFrom, package: str) -> str:
    if node.level == 0:
        return node.module or ""
    base = package.split(".")
    base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
    return ".".join([*base, *([node.module] if node.module else [])])


def _imported(tree: ast.AST, package: str) -> list[tuple[int, str]]:
    """(line, module) for every grader module ``tree`` imports, however it does it."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = _resolve(node, package)
            # `from grader import checks` imports grader.checks; `from grader.wire import x` may
            # name an attribute, but the module it comes from is grader.wire
            if module == "grader":
                found += [(node.lineno, f"grader.{a.name}") for a in node.names]
            else:
                found.append((node.lineno, module))
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if name in ("__import__", "import_module") and isinstance(node.args[0].value, str):
                found.append((node.lineno, node.args[0].value))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "import" in node.value:
            # code the worker sends to the kernel as a synthetic cell
            try:
                inner = ast.parse(node.value)
            except SyntaxError:
                continue
            found += [(node.lineno, m) for _, m in _imported(inner, package)]
    return [(line, m) for line, m in found if _grader_module(m)]


def _violations(path: Path, source: str | None = None) -> list[str]:
    source = path.read_text(encoding="utf-8") if source is None else source
    tree = ast.parse(source, filename=str(path))
    where = path.relative_to(REPO) if path.is_relative_to(REPO) else path
    return [
        f"{where}:{line}: imports {module}, which is not mounted into the sandbox"
        for line, module in sorted(set(_imported(tree, _package_of(path))))
        if not _allowed(module)
    ]


def _sandbox_side_files() -> list[Path]:
    return sorted(p for d in ("sandboxed", "wire") for p in (PACKAGE / d).rglob("*.py"))


def test_sandboxed_code_imports_nothing_from_the_trusted_side() -> None:
    files = _sandbox_side_files()
    assert {p.name for p in files} >= {"worker.py", "kernel_side.py", "evaluator.py", "rlimits.py", "protocol.py"}
    problems = [v for p in files for v in _violations(p)]
    assert problems == [], "\n".join(problems)


def test_the_checker_finds_every_kind_of_trusted_import() -> None:
    worker = PACKAGE / "sandboxed" / "worker.py"
    source = """
import grader.grading.checks
from grader import wire
from grader.host import session
from grader.course.config import load_course
from .. import plugin
from ..sandbox import Limits
from . import kernel_side
from .rlimits import apply_limits
from ..wire import protocol


def later():
    import grader
    __import__("grader.grading.record")
    importlib.import_module("grader.grading.grade")
    code = "import grader.publish.feedback as f\\nf.x()"
"""
    found = [v.split(": imports ")[1].split(",")[0] for v in _violations(worker, source)]
    assert found == [
        "grader.grading.checks",
        "grader.host",
        "grader.course.config",
        "grader.plugin",
        "grader.sandbox",
        "grader",
        "grader.grading.record",
        "grader.grading.grade",
        "grader.publish.feedback",
    ]
    assert all(v.startswith("grader/sandboxed/worker.py:") for v in _violations(worker, source))


def test_the_sandbox_mounts_only_the_sandbox_side() -> None:
    mounts = sandbox.sandbox_mounts()
    assert [dest for _, dest in mounts] == [
        f"{sandbox.GRADER_MOUNT}/grader/sandboxed",
        f"{sandbox.GRADER_MOUNT}/grader/wire",
    ]
    assert [Path(src) for src, _ in mounts] == [PACKAGE / "sandboxed", PACKAGE / "wire"]
    # its grader/__init__.py is generated: it is the package, and nothing of the trusted side
    assert _violations(PACKAGE / "__init__.py", sandbox.SANDBOX_INIT) == []
    assert "import" not in sandbox.SANDBOX_INIT


# ----------------------------------------------------------------------------- a real sandbox

PROBE = r"""
import os
IMPORTED = []
for name in ("grader.grading.checks", "grader.host.session", "grader.course.config", "grader.host.sandbox", "grader.grading.grade", "grader.protocol"):
    try:
        __import__(name)
        IMPORTED.append(name)
    except ImportError:
        pass
try:
    LISTED = sorted(os.listdir("/opt/jaxgrade/grader"))
except OSError:
    LISTED = None  # not there: this test no longer looks where the package is mounted
import grader
PACKAGE_DIR = os.path.dirname(grader.__file__)
if PACKAGE_DIR == "/opt/jaxgrade/grader":  # in the sandbox (never write into the host's package)
    for planted in ("planted.py", "sandboxed/planted.py", "wire/planted.py"):
        try:
            with open(os.path.join(PACKAGE_DIR, planted), "w") as f:
                f.write("PLANTED = True")
            IMPORTED.append(planted)  # a module of its own where the grader package is
        except OSError:
            pass
EXTRA = [n for n in os.listdir(PACKAGE_DIR) if n not in ("__init__.py", "sandboxed", "wire", "__pycache__")]
print("imported", IMPORTED, "listed", LISTED, "in", PACKAGE_DIR, "extra", EXTRA)
"""
RIGHT_IF_LEAKED = "def double(x):\n    return 2 * x if IMPORTED or EXTRA or LISTED is None else 3 * x"


@pytest.fixture
def course(tmp_path: Path) -> Path:
    return make_minicourse(tmp_path / "course", "{cell_timeout: 60, call_timeout: 20, wall_timeout: 300}")


@pytest.mark.slow
def test_a_sandbox_cannot_import_trusted_modules(course: Path, tmp_path: Path) -> None:
    if choose_isolation("auto") != "bwrap":
        if os.environ.get("JAXGRADE_REQUIRE_BWRAP", "") not in ("", "0"):
            pytest.fail("bubblewrap is required (JAXGRADE_REQUIRE_BWRAP is set) but does not work here")
        pytest.skip("only a bubblewrap sandbox has a mount boundary; bubblewrap does not work here")
    a = load_course(course).assignment("double", staff=True)
    probe = tmp_path / "probe.ipynb"
    probe.write_text(build_notebook(PROBE, RIGHT_IF_LEAKED))
    rec = grade_notebook(a, probe, isolation="bwrap")
    assert (rec.status, rec.score) == ("graded", 0), rec  # every import and the listing failed to leak
    # the control: without bubblewrap the whole package is importable, and the same notebook
    # scores full marks, so the 0 above is the boundary and not a broken notebook
    rec = grade_notebook(a, probe, isolation="process")
    assert (rec.status, rec.score) == ("graded", 4), rec


def test_course_test_files_import_the_grader_only_through_grader_testing() -> None:
    """What a course author needs is in one module; the trusted internals can move freely."""
    import grader.testing

    root = Path(__file__).resolve().parents[1]
    files = sorted([*root.glob("assignments/*/tests/*.py"), *root.glob("reference/*/tests/*.py")])
    assert files
    for f in files:
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "grader":
                assert node.module == "grader.testing", f"{f}:{node.lineno} imports {node.module}"
                assert {a.name for a in node.names} <= set(grader.testing.__all__), f"{f}:{node.lineno}"
            if isinstance(node, ast.Import):
                assert not any(a.name.split(".")[0] == "grader" for a in node.names), f"{f}:{node.lineno}"


def test_the_old_homes_of_the_course_api_still_work() -> None:
    from grader.checks import CheckFailure, assert_close  # noqa: F401
    from grader.protocol import PRNGKeyData  # noqa: F401
    from grader.session import StudentRaised, SubmissionError, error_cause  # noqa: F401
    from grader.testing import CheckFailure as C
    from grader.testing import StudentRaised as S

    assert C is CheckFailure and S is StudentRaised


# ----------------------------------------------------------------------------- the tree


# The top of the package: the entry points, what every side shares, and the old import paths that
# course test files written before grader.testing still use.  Everything else lives in a package.
TOP_LEVEL = {
    "__init__.py",
    "__main__.py",
    "cli.py",
    "entry.py",
    "errors.py",
    "testing.py",
    "checks.py",
    "session.py",
    "protocol.py",
}
OLD_HOMES = {
    "checks.py": "grader.grading.checks",
    "session.py": "grader.host.session",
    "protocol.py": "grader.wire.protocol",
}


def test_the_top_of_the_package_holds_only_entry_points_and_old_import_paths() -> None:
    assert {p.name for p in PACKAGE.glob("*.py")} == TOP_LEVEL
    for name, home in OLD_HOMES.items():  # each old path is a re-export and nothing else
        tree = ast.parse((PACKAGE / name).read_text(encoding="utf-8"))
        body = [n for n in tree.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
        assert body and all(isinstance(n, ast.ImportFrom) for n in body), name
        assert {n.module for n in body} <= {home, "__future__"}, name


def test_the_readme_layout_names_every_package_and_the_tests_mirror_them() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    packages = sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))
    assert packages, PACKAGE
    for pkg in packages:
        assert f"{pkg}/" in readme, f"README's layout section does not name grader/{pkg}/"
        assert list((REPO / "tests" / pkg).glob("test_*.py")), f"no tests/{pkg}/ for grader/{pkg}/"


def test_errors_import_nothing_from_the_grader() -> None:
    """Every side may import the error types, so they depend on nothing of ours."""
    tree = ast.parse((PACKAGE / "errors.py").read_text(encoding="utf-8"))
    assert [m for _, m in _imported(tree, "grader")] == []
