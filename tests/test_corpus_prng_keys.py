"""The `prng_keys` submission corpus: every notebook in tests/corpus/prng_keys gets the verdict
that expected.yaml gives it, category by category.

Grading the corpus is slow (each notebook runs in a fresh sandbox with a kernel), so the whole
corpus is graded once, in a module-scoped fixture, and the parametrized tests only read results.
"""

from __future__ import annotations

from typing import Any

import corpus_harness as harness

CORPUS = harness.load("prng_keys")
pytestmark = harness.MARKS

graded = harness.graded_fixture(CORPUS)
test_expected_yaml_covers_the_corpus = harness.coverage_test(CORPUS)
test_untouched_starter_is_the_current_starter = harness.starter_test(CORPUS)
test_status = harness.status_test(CORPUS)
test_category_verdict = harness.category_test(CORPUS)


FUNCTIONS = ("init_mlp_params", "sample_noise", "dropout")


def test_every_mutant_is_in_the_corpus() -> None:
    """Each reference mutant has a corpus notebook of the same name."""
    mutants = {p.stem for p in (harness.ROOT / "reference" / "prng_keys" / "mutants").glob("*.py")}
    assert mutants, "no mutants found"
    missing = sorted(m for m in mutants if f"{m}.ipynb" not in CORPUS.expected)
    assert not missing, f"mutants without a corpus notebook: {missing}"


def test_untouched_starter_names_every_missing_function(graded: dict[str, Any]) -> None:
    record = graded["untouched_starter.ipynb"]
    assert set(FUNCTIONS) <= set(record.missing), harness.explain(record)
    assert record.score == 0 and record.max_score > 0, harness.explain(record)


def test_key_reuse_is_reported_with_the_students_line(graded: dict[str, Any]) -> None:
    """A KeyReuseError names the line that reused the key, and the hint says to split."""
    record = graded["one_key_every_layer.ipynb"]
    failed = [t for t in record.tests if t.name == "test_no_key_reuse[init_mlp_params]"]
    assert failed and failed[0].status == "failed", harness.explain(record, "prng")
    assert "KeyReuseError" in failed[0].message and "random.normal(key" in failed[0].message, failed[0].message
    assert "split" in failed[0].hint, failed[0].hint


def test_key_reuse_hidden_from_the_checker_is_seen_in_the_returned_numbers(graded: dict[str, Any]) -> None:
    """A parent key reused with the kernel's checker off, or laundered through jax.random.clone,
    fails test_no_key_reuse on the trusted side, and the per-sample loops of the tutorial do not."""
    for name in ("parent_key_reused_debug_off.ipynb", "parent_key_reused_clone.ipynb"):
        record = graded[name]
        failed = harness.find_test(record, "test_no_key_reuse[sample_noise]")
        assert failed.status == "failed", harness.explain(record, "prng")
        assert "a key it also split" in failed.message and "KeyReuseError" not in failed.message, failed.message
        assert "clone" in failed.hint, failed.hint
    init = harness.find_test(graded["parent_key_reused_clone.ipynb"], "test_no_key_reuse[init_mlp_params]")
    assert init.status == "failed" and "layer 0's weights" in init.message, init.message
    for name in ("correct_tutorial.ipynb", "correct_tutorial_split_n_loop.ipynb"):
        for test in (
            harness.find_test(graded[name], "test_no_key_reuse[sample_noise]"),
            harness.find_test(graded[name], "test_sample_noise_is_iid_standard_normal[scalars]"),
        ):
            assert test.status == "passed", harness.explain(graded[name])
            assert test.duration < 30, f"{name}: {test.name} took {test.duration:.1f}s"
