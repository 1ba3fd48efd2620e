"""The per_example_grads corpus: every notebook in tests/corpus/per_example_grads gets the
verdict that expected.yaml gives it, category by category, and failures say what is wrong and
how to fix it (a loop over the examples, mapping over params, the batch gradient repeated).

Grading the corpus is slow (each notebook runs in a fresh sandbox with a kernel), so the whole
corpus is graded once, in a module-scoped fixture, and the parametrized tests only read results.
"""

from __future__ import annotations

from typing import Any

import corpus_harness as harness

CORPUS = harness.load("per_example_grads")
pytestmark = harness.MARKS

graded = harness.graded_fixture(CORPUS)
test_expected_yaml_covers_the_corpus = harness.coverage_test(CORPUS)
test_untouched_starter_is_the_current_starter = harness.starter_test(CORPUS)
test_status = harness.status_test(CORPUS)
test_category_verdict = harness.category_test(CORPUS)


FUNCTIONS = ("per_example_grads", "batch_grad")


def test_missing_functions_are_named(graded: dict[str, Any]) -> None:
    """Functions left as TODO are reported by name; correct notebooks miss nothing."""
    assert sorted(graded["partial_submission.ipynb"].missing) == ["batch_grad"]
    assert sorted(graded["untouched_starter.ipynb"].missing) == sorted(FUNCTIONS)
    for name in ("correct_jit_vmap_grad.ipynb", "correct_closure_vmap.ipynb", "correct_jacrev_extra_cells.ipynb"):
        assert graded[name].missing == [], harness.explain(graded[name])


# (notebook, test, words the message must contain, words the hint must contain)
TEACHING = [
    (
        "python_loop_over_examples.ipynb",
        "test_per_example_grads_vectorized",
        ["not vectorized", "range(xs.shape[0])"],
        ["jax.vmap"],
    ),
    (
        "batch_grad_python_loop.ipynb",
        "test_batch_grad_vectorized",
        ["not vectorized", "for x, y in zip(xs, ys)"],
        ["jax.vmap"],
    ),
    (
        "maps_over_params.ipynb",
        "test_per_example_grads_numerics[7-5]",
        ["ValueError"],
        ["in_axes=(None, 0, 0)"],
    ),
    (
        "per_example_is_batch_grad.ipynb",
        "test_mean_of_per_example_grads_is_batch_grad[6-4]",
        ["not shape (B, P)"],
        ["rows of xs and ys"],
    ),
    (
        "batch_grad_sum_not_mean.ipynb",
        "test_mean_of_per_example_grads_is_batch_grad[48-9]",
        ["batch_grad(params, xs, ys)", "gradient of the mean loss"],
        ["mean of the gradients"],
    ),
    (
        "not_jitted.ipynb",
        "test_per_example_grads_is_itself_jitted",
        ["not a jax.jit-compiled function"],
        ["jax.jit"],
    ),
]


def test_repeated_batch_gradient_passes_only_the_mean_check(graded: dict[str, Any]) -> None:
    """The batch gradient repeated B times has the right mean: the consistency check alone cannot
    catch it, the per-example numerics (B > 1) do."""
    record = graded["batch_grad_repeated.ipynb"]
    for t in record.tests:
        if t.name.startswith("test_mean_of_per_example_grads_is_batch_grad"):
            assert t.status == "passed", harness.explain(record)
        elif t.name.startswith("test_per_example_grads_numerics[") and not t.name.startswith(
            "test_per_example_grads_numerics[1-"
        ):
            assert t.status == "failed", harness.explain(record)


def test_consistency_failure_blames_the_wrong_function(graded: dict[str, Any]) -> None:
    """With a wrong batch_grad and right per-example gradients, the consistency test names
    batch_grad, not the correct per_example_grads."""
    test = harness.find_test(
        graded["batch_grad_sum_not_mean.ipynb"], "test_mean_of_per_example_grads_is_batch_grad[6-4]"
    )
    assert test.status == "failed" and "batch_grad(params, xs, ys)" in test.message
    assert "per_example_grads over the batch" not in test.message and "Row b" not in test.hint


test_failures_teach = harness.teaching_test(TEACHING)
