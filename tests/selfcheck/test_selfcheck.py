"""The self-check inside the notebook: real notebooks executed with nbclient, Colab's way (no
notebook file, no ``__file__``, an empty working directory, ``%pip install`` from the configured
source), and its verdicts compared with `jaxgrade check` on the same code."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import nbformat
import pytest
from IPython.core.inputtransformer2 import TransformerManager
from nbclient import NotebookClient

from grader.cli import HIDDEN_TESTS_NOTE, main
from grader.course.config import ReleaseConfig, load_course
from grader.course.release import SETUP_TAG, build_release
from grader.selfcheck import Checker, SelfCheckError, decode_payload, encode_payload, run
from grader.selfcheck.live import latest_cells, owner

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "corpus" / "vmap_convolve"
INSTALL = "git+https://example.org/jaxgrade.git@v0.1.0"
FUNCTIONS = ("batched_convolve", "batched_convolve_shared_w", "batched_convolve_axis1", "fast_batched_convolve")

# Stands in for Colab's own %pip, which would install from the network: it records the line.
FAKE_PIP = "get_ipython().register_magic_function(lambda line: print('PIP', line), 'line', 'pip')"
WHERE = "import os\nprint('__file__' in globals(), os.listdir('.'))"
DUMP = "import json as _json\nprint(_json.dumps(jc.run().record.to_dict()))"


def code_cells(name: str) -> list[str]:
    nb = nbformat.read(CORPUS / f"{name}.ipynb", as_version=4)
    return [c.source for c in nb.cells if c.cell_type == "code"]


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    course = load_course(ROOT)
    course = course.model_copy(update={"release": ReleaseConfig(install=INSTALL)})
    return build_release(course, "vmap_convolve", tmp_path_factory.mktemp("release"))


@pytest.fixture(scope="module")
def setup_source(bundle: Path) -> str:
    nb = nbformat.read(bundle / "vmap_convolve.ipynb", as_version=4)
    return next(c.source for c in nb.cells if SETUP_TAG in c.metadata.get("tags", []))


@pytest.fixture(scope="module")
def colab(setup_source: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One kernel, Colab's way: the notebook exists only in memory and the working directory is
    empty; a correct solution, then a wrong one (edited and re-run), each checked."""
    cells = {
        "fake_pip": FAKE_PIP,
        "where": WHERE,
        "setup": setup_source,
        "broken": "# a typo, never fixed\nresult = undefined_name_here + 1",
        **{f"right{i}": src for i, src in enumerate(code_cells("correct_vmap"))},
        "check": "jc.check()",
        "dump_right": DUMP,
        **{f"wrong{i}": src for i, src in enumerate(code_cells("python_loop_over_batch"))},
        "dump_wrong": DUMP,
        "check_one": "jc.check('batched_convolve')",
    }
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(src) for src in cells.values()]
    nb.cells[list(cells).index("broken")].metadata["tags"] = ["raises-exception"]  # nbclient goes on after it
    empty = tmp_path_factory.mktemp("colab_cwd")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", str(ROOT))  # the kernel imports this checkout's grader
        mp.delenv("JAXGRADE_SANDBOX", raising=False)
        NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(empty)}}).execute()
    return {key: cell.outputs for key, cell in zip(cells, nb.cells)}


def stream(outputs: list[Any]) -> str:
    return "".join(o["text"] for o in outputs if o["output_type"] == "stream")


def test_payload_round_trip_and_damage() -> None:
    files = {"grading.yaml": "course: x\n", "tests/test_public.py": "def test_x(): pass\n"}
    assert decode_payload(encode_payload(files)) == files
    with pytest.raises(SelfCheckError, match="the first cell's payload is damaged"):
        decode_payload(encode_payload(files)[:-8])


def test_check_before_setup_or_of_an_unknown_function_says_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("grader.selfcheck.live._CHECKER", [])
    with pytest.raises(SelfCheckError) as info:
        run()
    assert str(info.value) == "the self-check is not set up: run the notebook's first cell, then `jc.check()` again"
    checker = Checker(load_course(ROOT).assignment("vmap_convolve", staff=False))
    with pytest.raises(SelfCheckError) as info:
        checker.run("batched_convolution")
    assert str(info.value) == (
        "'batched_convolution' is not a function of vmap_convolve; did you mean 'batched_convolve'? "
        "Its functions: batched_convolve, "
        "batched_convolve_shared_w, batched_convolve_axis1, fast_batched_convolve, manually_vectorized_convolve"
    )


def test_owner_of_a_test() -> None:
    assert owner("test_batched_convolve", FUNCTIONS) == "batched_convolve"
    assert owner("test_batched_convolve_shared_w", FUNCTIONS) == "batched_convolve_shared_w"
    assert owner("test_batched_convolve_is_vectorized", FUNCTIONS) == "batched_convolve"
    assert owner("test_fast_batched_convolve_is_jitted[case1]", FUNCTIONS) == "fast_batched_convolve"
    assert owner("test_something_else", FUNCTIONS) is None


def test_latest_cells_drop_superseded_drafts() -> None:
    history = ["", "import jax", "def f(x):\n    return x", "y = 1", "def f(x):\n    return 2 * x", "f(3)"]
    assert latest_cells(history) == ["", "import jax", "y = 1", "def f(x):\n    return 2 * x", "f(3)"]


def test_colab_first_cell_installs_from_the_configured_source(colab: dict[str, Any]) -> None:
    assert stream(colab["where"]) == "False []\n"  # no __file__, nothing on disk beside the kernel
    assert stream(colab["setup"]) == (
        f"PIP install -q {INSTALL}\n"
        "jaxgrade 0.1.0: self-check ready for vmap_convolve. Run `jc.check()` (or `jc.check('function')`).\n"
    )


def test_check_shows_html_and_text(colab: dict[str, Any]) -> None:
    [shown] = [o for o in colab["check"] if o["output_type"] == "display_data"]
    text, page = shown["data"]["text/plain"], shown["data"]["text/html"]
    assert (
        text.splitlines()[0] == "jaxgrade check: this notebook (live kernel) — assignment vmap_convolve (public tests)"
    )
    assert "  PASS  test_batched_convolve_is_vectorized [vectorization] 1/1" in text
    assert text.splitlines()[-2:] == ["7/7 public tests passed (7/7 points).", HIDDEN_TESTS_NOTE]
    assert page.count(">PASS</td>") == 7 and HIDDEN_TESTS_NOTE in page and "<table" in page
    [one] = [o for o in colab["check_one"] if o["output_type"] == "display_data"]
    lines = one["data"]["text/plain"].splitlines()
    assert [ln.split()[1] for ln in lines if ln.startswith("  FAIL") or ln.startswith("  PASS")] == [
        "test_batched_convolve",
        "test_batched_convolve_is_vectorized",
    ]
    assert "  FAIL  test_batched_convolve_is_vectorized [vectorization] 0/1" in one["data"]["text/plain"]
    assert HIDDEN_TESTS_NOTE in one["data"]["text/plain"] and "1/2 public tests passed" in one["data"]["text/plain"]


def _comparable(test: dict[str, Any]) -> tuple[Any, ...]:
    """A test's verdict, message and hint, its place named alike: the kernel knows `In [n]`, the
    notebook file `cell n`."""
    place = re.compile(r"In \[\d+\]|cell \d+")
    return test["name"], test["status"], test["score"], place.sub("<cell>", test["message"]), test["hint"]


def test_same_verdicts_as_jaxgrade_check_in_the_bundle(
    colab: dict[str, Any], bundle: Path, setup_source: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`jaxgrade check` run inside the release bundle (no --course), on notebooks made of the
    same cells, gives the self-check's verdicts, messages and hints."""
    monkeypatch.chdir(bundle)
    for kind, corpus in (("right", "correct_vmap"), ("wrong", "python_loop_over_batch")):
        nb = nbformat.read(bundle / "vmap_convolve.ipynb", as_version=4)
        sources = [setup_source, *code_cells(corpus), "jc.check()"]
        nb.cells = [nbformat.v4.new_code_cell(src) for src in sources]
        nbformat.write(nb, bundle / f"{kind}.ipynb")
        out = io.StringIO()
        code = main(["check", f"{kind}.ipynb", "--json"], out=out, err=io.StringIO())
        checked = json.loads(out.getvalue())
        live = json.loads(stream(colab[f"dump_{kind}"]))
        assert code == (0 if kind == "right" else 1)
        assert checked["cells"] == []  # the first cell and jc.check() do nothing in the grader's sandbox
        assert [_comparable(t) for t in live["tests"]] == [_comparable(t) for t in checked["tests"]]
    assert [t["status"] for t in live["tests"]].count("failed") == 1
    assert "In [" in next(t["message"] for t in live["tests"] if t["status"] == "failed")


def test_the_check_names_the_cells_that_raised(colab: dict[str, Any]) -> None:
    """As `jaxgrade check` lists a notebook's failing cells, the self-check names the kernel's
    cells whose latest run raised."""
    record = json.loads(stream(colab["dump_right"]))
    assert re.search(
        r"cells that raised when last run: In \[\d+\] \(`result = undefined_name_here \+ 1`\): NameError: "
        r"name 'undefined_name_here' is not defined",
        record["message"],
    ), record["message"]


def test_a_cell_fixed_and_run_again_is_no_longer_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from IPython.core.events import EventManager, available_events

    from grader.selfcheck import live

    ip = SimpleNamespace(events=EventManager(None, available_events))
    monkeypatch.setattr(live, "_ipython", lambda: ip)
    monkeypatch.setattr(live, "_RUNS", {})
    monkeypatch.setattr(live, "_HOOKS", [])

    def ran(n: int, cell: str | None, source: str, error: BaseException | None = None) -> None:
        info = SimpleNamespace(raw_cell=source, cell_id=cell)
        result = SimpleNamespace(info=info, execution_count=n, error_before_exec=None, error_in_exec=error)
        ip.events.trigger("post_run_cell", result)

    live._record_cell_runs()
    live._record_cell_runs()  # the first cell run again: one callback, not two
    assert len(ip.events.callbacks["post_run_cell"]) == 1
    ran(2, "a", "x = 1 / 0", ZeroDivisionError("division by zero"))
    ran(3, "b", "import nothing_here", ModuleNotFoundError("No module named 'nothing_here'"))
    ran(4, None, "# only a comment\nprint(y)", NameError("name 'y' is not defined"))
    assert live.raised_cells() == [
        "In [2] (`x = 1 / 0`): ZeroDivisionError: division by zero",
        "In [3] (`import nothing_here`): ModuleNotFoundError: No module named 'nothing_here'",
        "In [4] (`print(y)`): NameError: name 'y' is not defined",
    ]
    ran(5, "a", "x = 1 / 1")  # fixed and run again
    assert [c.split(" (")[0] for c in live.raised_cells()] == ["In [3]", "In [4]"]


def test_setup_cell_under_grading_stands_in_for_the_checker(setup_source: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """While graded (JAXGRADE_SANDBOX set) the first cell installs nothing, and every call of the
    checker's API a student may write still runs: nothing raises, so the rest of a cell is kept."""
    monkeypatch.setenv("JAXGRADE_SANDBOX", "1")
    ns: dict[str, Any] = {}
    exec(TransformerManager().transform_cell(setup_source), ns)  # %pip is never reached
    cell = "\n".join(
        [
            'jc.check(function="batched_convolve")',
            "jc.check('batched_convolve')",
            "jc.check()",
            "assert jc.run().ok and jc.run(function='batched_convolve').ok",
            "r = jc.run()",
            "parts = (r.record, r.html(), r.text(), r._repr_html_(), repr(r))",
            "after = True",
        ]
    )
    exec(cell, ns)
    assert ns["after"] and ns["parts"] == (None, "", "", "", "")


def test_setup_removes_its_previous_folder_and_cleans_up_at_exit(bundle: Path) -> None:
    from grader.selfcheck import live

    payload = encode_payload(
        {rel: (bundle / rel).read_text() for rel in ("grading.yaml", "assignment.yaml")}
        | {"tests/test_public.py": (bundle / "tests" / "test_public.py").read_text()}
    )
    saved = list(live._CHECKER)
    try:
        first = live.setup("vmap_convolve", payload).assignment.course.root
        second = live.setup("vmap_convolve", payload).assignment.course.root
        assert not first.exists() and second.is_dir()
        live._remove_folders()  # registered with atexit
        assert not second.exists()
    finally:
        live._CHECKER[:] = saved


def test_an_assignment_this_kernel_cannot_check_says_why(bundle: Path) -> None:
    """The pmap assignment in a kernel with JAX before 0.8 (Colab on Python 3.10): `jc.check()`
    names what is missing instead of failing every test with export errors."""
    from importlib import metadata

    from grader.selfcheck import live

    payload = encode_payload(
        {"grading.yaml": (bundle / "grading.yaml").read_text()}
        | {"assignment.yaml": (bundle / "assignment.yaml").read_text() + "requires: ['jax>=999']\n"}
        | {"tests/test_public.py": (bundle / "tests" / "test_public.py").read_text()}
    )
    saved = list(live._CHECKER)
    try:
        live.setup("vmap_convolve", payload)
        with pytest.raises(SelfCheckError) as info:
            run()
        assert str(info.value) == (
            f"vmap_convolve cannot be checked in this kernel: it needs jax>=999 (jax {metadata.version('jax')} is installed)"
        )
    finally:
        live._remove_folders()
        live._CHECKER[:] = saved


def test_a_missing_function_is_explained_for_the_kernel_it_was_looked_for_in() -> None:
    """`jaxgrade check` runs the notebook from the top; the self-check looks in the live kernel,
    where "not defined when the notebook runs top to bottom" was not what happened (a student's
    walkthrough)."""
    from grader.cli import render_check
    from grader.grading.record import Record
    from grader.selfcheck.live import render_html

    rec = Record(assignment="a", student="s", submission_sha256="x", status="graded", missing=["f"])
    cli, live = io.StringIO(), io.StringIO()
    render_check(rec, cli)
    render_check(rec, live, live=True)
    assert "missing: f (not defined when the notebook runs top to bottom)" in cli.getvalue()
    assert "missing: f (not defined in this kernel now: run the cell that defines it)" in live.getvalue()
    assert "not defined in this kernel now" in render_html(rec)


def test_check_says_a_misspelt_function_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """`jc.check("count_leafs")` showed its good message under a traceback into jaxgrade's code
    (a student's walkthrough); `run` still raises, for code that calls it."""
    from grader.selfcheck import live

    saved = list(live._CHECKER)
    try:
        live._CHECKER[:] = []
        live.check("count_leafs")
        assert capsys.readouterr().err == (
            "jaxgrade: the self-check is not set up: run the notebook's first cell, then `jc.check()` again\n"
        )
        with pytest.raises(SelfCheckError):
            run("count_leafs")
    finally:
        live._CHECKER[:] = saved
