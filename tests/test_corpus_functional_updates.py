"""The functional_updates corpus: every notebook in tests/corpus/functional_updates gets the verdict
that expected.yaml gives it, category by category, and a failure names the JAX or NumPy error,
the student's line and the fix.

Grading the corpus is slow (each notebook runs in a fresh sandbox with a kernel), so the whole
corpus is graded once, in a module-scoped fixture, and the parametrized tests only read results.
"""

from __future__ import annotations

from typing import Any

import corpus_harness as harness

CORPUS = harness.load("functional_updates")
pytestmark = harness.MARKS

graded = harness.graded_fixture(CORPUS)
test_expected_yaml_covers_the_corpus = harness.coverage_test(CORPUS)
test_untouched_starter_is_the_current_starter = harness.starter_test(CORPUS)
test_status = harness.status_test(CORPUS)
test_category_verdict = harness.category_test(CORPUS)


FUNCTIONS = ("set_first", "increment_at", "clamp_negatives")


def test_missing_functions_are_named(graded: dict[str, Any]) -> None:
    """Functions left as TODO are reported by name; correct notebooks miss nothing."""
    assert sorted(graded["partial_submission.ipynb"].missing) == ["clamp_negatives", "increment_at"]
    assert sorted(graded["untouched_starter.ipynb"].missing) == sorted(FUNCTIONS)
    for name in ("correct_at.ipynb", "correct_where_onehot.ipynb", "correct_concat_bincount.ipynb"):
        assert graded[name].missing == [], harness.explain(graded[name])


# (notebook, test, words the message must contain, words the hint must contain)
TEACHING = [
    (
        "boolean_mask.ipynb",
        "test_works_under_jit[clamp_negatives-2d]",
        ["NonConcreteBooleanIndexError", "x.at[x < 0]"],
        ["jnp.where"],
    ),
    (
        "numpy_copy_in_place.ipynb",
        "test_works_under_jit[set_first]",
        ["TracerArrayConversionError", "np.array(x)"],
        ["jax.numpy"],
    ),
    (
        "set_instead_of_add.ipynb",
        "test_increment_at_numerics[repeats-per-index]",
        ["values differ"],
        ["accumulate", "x.at[idx].add(amount)"],
    ),
    (
        "writes_into_input.ipynb",
        "test_read_only_inputs[set_first]",
        ["writes into its input argument", "x[0] = value"],
        [".at[i].set(v)"],
    ),
    (
        "writes_into_input.ipynb",
        "test_inputs_unchanged[set_first]",
        ["writes into its input argument", "x[0] = value"],
        ["x.at[i].set(v)"],
    ),
    (
        "no_asarray.ipynb",
        "test_set_first_numerics[n17]",
        ["AttributeError", "x.at[0].set(value)"],
        ["jnp.asarray(x)"],
    ),
    (
        "jax_item_assignment.ipynb",
        "test_set_first_numerics[n2]",
        ["TypeError", "y[0] = value"],
        ["x.at[i].set(v)"],
    ),
]


test_failures_teach = harness.teaching_test(TEACHING)
