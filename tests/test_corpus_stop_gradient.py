"""The stop_gradient corpus: every notebook in tests/corpus/stop_gradient gets the verdict that
expected.yaml gives it, category by category; a misplaced stop_gradient is caught by the
gradient's numbers and named in the message; a loop over the batch fails vectorization.

Grading the corpus is slow (each notebook runs in a fresh sandbox with a kernel), so the whole
corpus is graded once, in a module-scoped fixture, and the parametrized tests only read results.
"""

from __future__ import annotations

from typing import Any

import corpus_harness as harness

CORPUS = harness.load("stop_gradient")
pytestmark = harness.MARKS

graded = harness.graded_fixture(CORPUS)
test_expected_yaml_covers_the_corpus = harness.coverage_test(CORPUS)
test_untouched_starter_is_the_current_starter = harness.starter_test(CORPUS)
test_status = harness.status_test(CORPUS)
test_category_verdict = harness.category_test(CORPUS)


FUNCTIONS = ("td_loss_with_stop_gradient", "td_update", "batched_td_update")


def test_missing_functions_are_named(graded: dict[str, Any]) -> None:
    """Functions left as TODO are reported by name; correct notebooks miss nothing."""
    assert sorted(graded["partial_submission.ipynb"].missing) == ["batched_td_update", "td_update"]
    assert sorted(graded["untouched_starter.ipynb"].missing) == sorted(FUNCTIONS)
    for name in (
        "correct_tutorial.ipynb",
        "correct_grad_of_mean.ipynb",
        "correct_array_ops.ipynb",
        "correct_stop_next_value_update_by_hand.ipynb",
    ):
        assert graded[name].missing == [], harness.explain(graded[name])


def test_loss_value_is_right_without_stop_gradient(graded: dict[str, Any]) -> None:
    """stop_gradient changes no value: the loss tests pass for every misplacement; only the
    gradient tests tell them apart."""
    for name in ("no_stop_gradient.ipynb", "stop_gradient_on_v_tm1.ipynb", "stop_gradient_whole_loss.ipynb"):
        record = graded[name]
        for t in record.tests:
            if "td_loss_with_stop_gradient" in t.name and t.category == "numerics":
                assert t.status == "passed", harness.explain(record)


# (notebook, test, words the message must contain, words the hint must contain)
TEACHING = [
    (
        "no_stop_gradient.ipynb",
        "test_td_update_is_the_semi_gradient[4]",
        ["full gradient", "not held constant"],
        ["jax.lax.stop_gradient"],
    ),
    (
        "stop_gradient_on_reward.ipynb",
        "test_td_update",
        ["full gradient"],
        ["jax.lax.stop_gradient"],
    ),
    (
        "stop_gradient_on_v_tm1.ipynb",
        "test_td_update_is_the_semi_gradient[9]",
        ["flows through the target"],
        ["jax.lax.stop_gradient"],
    ),
    (
        "stop_gradient_whole_loss.ipynb",
        "test_td_update_is_the_semi_gradient[1]",
        ["zero"],
        ["jax.lax.stop_gradient"],
    ),
    (
        "batched_python_loop.ipynb",
        "test_batched_td_update_vectorized",
        ["not vectorized", "symbolic batch size"],
        ["jax.vmap"],
    ),
    (
        "loss_is_td_loss_update_by_hand.ipynb",
        "test_td_loss_gradient_is_the_semi_gradient[4]",
        ["jax.grad(td_loss_with_stop_gradient)", "full gradient", "not held constant"],
        ["jax.lax.stop_gradient"],
    ),
    (
        "batched_lax_map.ipynb",
        "test_batched_td_update_vectorized",
        ["loops over the batch", "lax.map"],
        ["jax.vmap"],
    ),
    (
        "td_update_numpy_by_hand.ipynb",
        "test_works_under_jit[td_update]",
        ["does not work under jax.jit", "float("],
        [],
    ),
]


test_failures_teach = harness.teaching_test(TEACHING)
