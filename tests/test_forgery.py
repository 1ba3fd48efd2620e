"""The forgery corpus (issue 10): wrong solutions paired with forgeries of what the grader
observes in the student's kernel, written by a student who has read the grader's source.

Every notebook in ``tests/corpus/forgery/<assignment>/`` (written by
``tests/corpus/forgery/make_corpus.py``) must get the verdict that its ``expected.yaml`` gives,
category by category: the verdict a careful grader gives the WRONG solution, as if the forgery
were not there. Observations that decide points must come from the trusted side (the exported
module analysed in the evaluator, values compared there, the reference), so a forgery gains
nothing. Besides the verdicts, a student who spies on the requests must not be able to carry a
hidden test's input values into the feedback (``test_hidden_inputs_stay_hidden``).

What TODAY's grader (before the defences of issue 10) gives each notebook is recorded in its
``why`` in expected.yaml; every forgery there succeeds, so these tests fail until the defences
land. Today (grader at commit cbc8f7a) every forgery gets full marks, and these verdicts fail:

- vmap_convolve (40/40 each): forge_vmap_watch_disarmed, forge_batchtrace_swapped_back,
  forge_lax_map_sequential, forge_compared_with_itself: vectorization 10/10 (expected lost);
  forge_numpy_forged_ops: jit 7/7 (expected zero), vectorization 10/10 (expected lost)
- vmap_convolve/forge_leak_hidden_inputs: 0/40 as expected, but 36 hidden tests' messages carry
  the hidden inputs (6 to 42 values each) and the feedback page shows 1231 of them;
  forge_leak_in_error_names: 0/40 as expected, but the values reach 36 hidden tests' messages
  AND hints (72 fields) through the exception's class name and the linecache-patched "source
  line" (both reported by the kernel)
- jit_control_flow (32/32 each): forge_compile_counter_reset, forge_monitoring_unhooked,
  forge_fake_compile_events, forge_jitted_by_attributes, forge_constants_from_frames,
  forge_numpy_forged_ops: jit 16/16 (expected lost)
- pmap (17/17 each): forge_devices_patched: parallelism 6/6 (expected zero);
  forge_vmap_device_put, forge_mean_closed_over: parallelism 6/6 (expected lost)
- prng_keys (42/42 each): forge_key_reuse_checker_off, forge_key_reuse_clone: prng 15/15
  (expected lost)
- functional_updates (24/24 each): forge_mutated_patched, forge_snapshots_edited,
  forge_array_equal_replaced: purity 7/7 (expected lost)

(See the ``why`` of each notebook for the exact scores observed.)
"""

from __future__ import annotations

import importlib.util
import re
import zlib
from collections.abc import Callable
from typing import Any

import corpus_harness as harness
import numpy as np
import pytest

from tests.conftest import jax_before

FORGERY = harness.ROOT / "tests" / "corpus" / "forgery"
ASSIGNMENTS = (
    "vmap_convolve",
    "jit_control_flow",
    "pmap",
    "prng_keys",
    "functional_updates",
    "pytrees",
    "autodiff",
    "per_example_grads",
    "stop_gradient",
)
CORPORA = {a: harness.load(a, FORGERY / a) for a in ASSIGNMENTS}
pytestmark = harness.MARKS

#: notebooks that spy on the requests and carry the values into their errors (vmap_convolve)
LEAKS = ("forge_leak_hidden_inputs.ipynb", "forge_leak_in_error_names.ipynb")


@pytest.fixture(scope="module")
def graded() -> Callable[[str], dict[str, Any]]:
    """assignment -> its forgery corpus graded (file name -> Record), each corpus once, on demand
    (so that ``-k pmap`` grades only the pmap forgeries)."""
    cache: dict[str, dict[str, Any]] = {}

    def get(assignment: str) -> dict[str, Any]:
        if assignment not in cache:
            cache[assignment] = harness.grade(CORPORA[assignment])
        return cache[assignment]

    return get


# --------------------------------------------------------------------------- the corpus itself


def _generator() -> Any:
    spec = importlib.util.spec_from_file_location("forgery_make_corpus", FORGERY / "make_corpus.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_notebooks_are_generated() -> None:
    """Every notebook is what make_corpus.py writes (run it after changing a cell)."""
    gen = _generator()
    import notebook_kit as kit

    assert set(gen.CORPORA) == set(ASSIGNMENTS)
    for assignment, make in gen.CORPORA.items():
        for name, nb in make().items():
            path = FORGERY / assignment / name
            assert path.read_text(encoding="utf-8") == kit.render(nb), (
                f"{path.relative_to(harness.ROOT)} is stale: run `python tests/corpus/forgery/make_corpus.py`"
            )


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_expected_yaml_covers_the_corpus(assignment: str) -> None:
    harness.coverage_test(CORPORA[assignment])()
    for name, exp in CORPORA[assignment].expected.items():
        assert name.startswith("forge_"), f"{assignment}/{name}: forgery notebooks are named forge_<what>.ipynb"
        assert str(exp.get("why", "")).strip(), f"{assignment}/{name}: say why (and what today's grader gives)"
        gaps = exp.get("known_gap", [])
        assert set(gaps) <= set(CORPORA[assignment].categories), (
            f"{assignment}/{name}: known_gap {gaps} names no category"
        )


# --------------------------------------------------------------------------- verdicts

CASES = [(a, n) for a in ASSIGNMENTS for n in sorted(CORPORA[a].expected)]
VERDICT_CASES = [(a, n, c) for a in ASSIGNMENTS for n in CORPORA[a].graded_names() for c in CORPORA[a].categories]


@pytest.mark.parametrize(("assignment", "name"), CASES, ids=[f"{a}/{n}" for a, n in CASES])
def test_status(graded: Callable[[str], dict[str, Any]], assignment: str, name: str) -> None:
    record = graded(assignment)[name]
    assert record.status == CORPORA[assignment].expected[name]["status"], harness.explain(record)


FAILING_CASES = [
    (a, n, t) for a in ASSIGNMENTS for n, e in sorted(CORPORA[a].expected.items()) for t in e.get("fails", [])
]


@pytest.mark.parametrize(
    ("assignment", "name", "test"), FAILING_CASES, ids=[f"{a}/{n}/{t}" for a, n, t in FAILING_CASES]
)
def test_a_forged_test_earns_nothing(
    graded: Callable[[str], dict[str, Any]], assignment: str, name: str, test: str
) -> None:
    """Where a forgery's gain is smaller than its category (a verdict of "lost" either way),
    expected.yaml's ``fails`` names the tests it forged: each earns nothing."""
    result = harness.find_test(graded(assignment)[name], test)
    assert result.score == 0, (
        f"{assignment}/{name}: {test} earned {result.score:g}/{result.max_score:g} (the forgery worked)"
    )


@pytest.mark.parametrize(
    ("assignment", "name", "category"), VERDICT_CASES, ids=[f"{a}/{n}/{c}" for a, n, c in VERDICT_CASES]
)
def test_category_verdict(graded: Callable[[str], dict[str, Any]], assignment: str, name: str, category: str) -> None:
    """The wrong solution gets the verdict a careful grader gives it: the forgery gains nothing."""
    record = graded(assignment)[name]
    cats = record.categories()
    assert category in cats, f"{name}: no {category} tests ran\n{harness.explain(record)}"
    score, max_score = cats[category]
    assert max_score > 0, f"{name}: {category} is worth no points"
    expected = CORPORA[assignment].expected[name]
    got, want = harness.verdict(score, max_score), expected[category]
    before = (expected.get("forged_before_jax") or {}).get(category)
    if got != want and before is not None and jax_before(before):
        pytest.xfail(f"the forgery works on JAX before {before} (SECURITY.md)")
    if category in expected.get("known_gap", ()):
        assert got != want, (
            f"{assignment}/{name}: {category} now gets {got!r}: the known gap is closed; take it out of "
            "known_gap in expected.yaml and out of SECURITY.md"
        )
        pytest.xfail(f"a known gap: the forgery still works ({category} {score:g}/{max_score:g}; SECURITY.md)")
    assert got == want, (
        f"{assignment}/{name}: {category} {score:g}/{max_score:g} is {got!r}, expected {want!r} "
        f"(the forgery worked)\n{harness.explain(record, category)}"
    )


# --------------------------------------------------------------------------- hidden inputs


NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def _significant(text: str) -> int:
    return sum(ch.isdigit() for ch in text.split("e")[0].lstrip("-0."))


def _hidden_input_values(record: Any, assignment: str) -> set[str]:
    """The float values the hidden tests drew, as ``f"{v:.6g}"`` (those with at least 5
    significant digits, so that they cannot be confused with counts, shapes or scores).

    Each hidden test's ``rng`` is seeded with the assignment's seed and the test's node id (see
    grader/grading/plugin.py), and every vmap_convolve test draws its arrays with ``standard_normal``,
    one after the other: the first values of that stream are the test's inputs, in order (at
    most 64 * 17 + 64 * 3 of them in one test)."""
    from grader.course.config import load_course

    asg = load_course(harness.ROOT).assignment(assignment)
    hidden = asg.hidden_tests.resolve()
    files = sorted(hidden.glob("test_*.py")) if hidden.is_dir() else [hidden]
    out: set[str] = set()
    for t in record.tests:
        if t.visibility == "visible":
            continue
        for path in files:
            nodeid = f"{path.relative_to(harness.ROOT).as_posix()}::{t.name.split('::')[-1]}"
            rng = np.random.default_rng([asg.seed & 0xFFFFFFFF, zlib.crc32(nodeid.encode())])
            for v in rng.standard_normal(64 * 17 + 64 * 3).astype(np.float32):
                text = f"{float(v):.6g}"
                if _significant(text) >= 5:
                    out.add(text)
    return out


def _leaked(text: str, values: set[str]) -> list[str]:
    """The numbers written in ``text`` that are hidden input values (whole numbers, not parts)."""
    return sorted({n for n in NUMBER.findall(text) if n in values})


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_forgeries_that_tamper_are_named_for_review(
    graded: Callable[[str], dict[str, Any]], assignment: str
) -> None:
    """Each record lists what grader/intake/review.py found in the notebook: exactly the
    forgeries that reach into the kernel side, patch a library, use reflection or tell traced
    calls from eager ones (tests/intake/test_review.py lists them), not the wrong solutions that
    only look right to an analysis."""
    from tests.intake.test_review import TAMPERING

    records = graded(assignment)
    want = {k.rsplit("/", 1)[1] for k in TAMPERING if k.startswith(f"forgery/{assignment}/")}
    assert {name for name, rec in records.items() if rec.review} == want
    for name in want:
        kinds = {f["kind"] for f in records[name].review}
        assert kinds >= TAMPERING[f"forgery/{assignment}/{name}"], (name, records[name].review)


@pytest.mark.parametrize("name", LEAKS)
def test_hidden_inputs_stay_hidden(graded: Callable[[str], dict[str, Any]], name: str) -> None:
    """A student who wraps kernel_side.serve sees every request's values and raises an error that
    carries them (in its message; or in its class name and its "source line"): no hidden test's
    message or hint, and nothing on the feedback page, may show a hidden input value. Public
    tests keep the student's full error text."""
    from grader.publish.feedback import feedback_html

    assignment = "vmap_convolve"
    record = graded(assignment)[name]
    values = _hidden_input_values(record, assignment)
    assert len(values) > 10_000, "the hidden tests' inputs could not be reconstructed"
    if name == "forge_leak_hidden_inputs.ipynb":
        public = [t for t in record.tests if t.visibility == "visible"]
        assert any("the hidden inputs:" in t.message for t in public), (
            "the notebook's error text should reach the public tests' messages\n" + harness.explain(record)
        )
    leaks = []
    for t in record.tests:
        if t.visibility == "visible":
            continue
        for field in ("message", "hint"):
            found = _leaked(getattr(t, field), values)
            if found:
                leaks.append(f"{t.name} {field}: {len(found)} values, e.g. {found[:3]}")
    assert not leaks, f"hidden inputs in {len(leaks)} hidden test results:\n" + "\n".join(leaks)
    page = feedback_html(record, course="Forgery course", title="vmap_convolve")
    on_page = _leaked(page, values)
    assert not on_page, f"{len(on_page)} hidden input values on the feedback page, e.g. {on_page[:10]}"


# --------------------------------------------------------------------------- the evaluator's kept answers


def test_the_evaluators_kept_answers_are_out_of_reach(graded: Callable[[str], dict[str, Any]], isolation: str) -> None:
    """forge_poison_eval_answers exports the same lax.map modules as forge_lax_map_sequential,
    graded before it, whose answers the trusted side kept (grader/host/eval_cache.py). It searched
    the disk for those entries and rewrote every analysis to say "no loop", marking what it
    wrote. Its verdicts are above; here, the folder: answers were kept (there was something to
    find), the lax.map answers still say "loop", and nothing carries the mark."""
    import json
    import os

    from grader.course.config import load_course
    from grader.grading.grade import answers_dir

    if isolation != "bwrap":  # the answers are kept under bubblewrap only
        if os.environ.get("JAXGRADE_REQUIRE_BWRAP", "") not in ("", "0"):
            pytest.fail("bubblewrap is required (JAXGRADE_REQUIRE_BWRAP is set) but does not work here")
        pytest.skip("the evaluator's answers are kept under bubblewrap only")
    graded("vmap_convolve")
    folder = answers_dir(load_course(harness.ROOT).assignment("vmap_convolve"))
    analyses = []
    for path in folder.rglob("*"):
        if not path.is_file():
            continue
        data = path.read_bytes()
        assert b"forged_by" not in data, f"{path}: an entry was rewritten from a sandbox"
        n = int.from_bytes(data[:8], "big")
        header = json.loads(data[8 : 8 + n])
        if isinstance(header.get("analysis"), dict):
            analyses.append(header["analysis"])
    assert analyses, f"{folder}: no answers were kept, so the forgery had nothing to find"
    assert any(a.get("loops", 0) > 0 or a.get("batch_loops", 0) > 0 for a in analyses), (
        "no kept answer says `loop`: lax.map's modules should have left some"
    )
