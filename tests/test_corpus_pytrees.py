"""The pytrees corpus: every notebook in tests/corpus/pytrees gets the verdict that expected.yaml
gives it, category by category, and a failure names what differs (the structure, the count, the
student's line under jit) and the fix.

Grading the corpus is slow (each notebook runs in a fresh sandbox with a kernel), so the whole
corpus is graded once, in a module-scoped fixture, and the parametrized tests only read results.
"""

from __future__ import annotations

from typing import Any

import corpus_harness as harness

CORPUS = harness.load("pytrees")
pytestmark = harness.MARKS

graded = harness.graded_fixture(CORPUS)
test_expected_yaml_covers_the_corpus = harness.coverage_test(CORPUS)
test_untouched_starter_is_the_current_starter = harness.starter_test(CORPUS)
test_status = harness.status_test(CORPUS)
test_category_verdict = harness.category_test(CORPUS)


FUNCTIONS = ("count_leaves", "tree_shapes", "scale_tree", "sgd_update", "tree_l2_norm")


def test_missing_functions_are_named(graded: dict[str, Any]) -> None:
    """Functions left as TODO are reported by name; correct notebooks miss nothing."""
    assert sorted(graded["partial_submission.ipynb"].missing) == ["scale_tree", "sgd_update", "tree_l2_norm"]
    assert sorted(graded["untouched_starter.ipynb"].missing) == sorted(FUNCTIONS)
    for name in ("correct_tree_map.ipynb", "correct_flatten_unflatten.ipynb", "correct_recursive.ipynb"):
        assert graded[name].missing == [], harness.explain(graded[name])


# (notebook, test, words the message must contain, words the hint must contain)
TEACHING = [
    (
        "flatten_to_list.ipynb",
        "test_scale_tree_keeps_structure[mixed]",
        ["structure changed", "PyTreeDef"],
        ["jax.tree.map"],
    ),
    (
        "counts_none.ipynb",
        "test_count_leaves[no-leaves]",
        ["expected 0 leaves, got"],
        ["`None`", "jax.tree.leaves"],
    ),
    (
        "shapes_as_lists.ipynb",
        "test_tree_shapes[tuple-top]",
        ["expected a tuple", "got a list"],
        ["tuple of ints"],
    ),
    (
        "scale_keeps_dtype.ipynb",
        "test_scale_tree_numerics[mixed--0.5]",
        ["dtype int32"],
        ["do not cast"],
    ),
    (
        "norm_math_sqrt.ipynb",
        "test_tree_l2_norm_under_jit[mixed]",
        ["does not work under jax.jit", "ConcretizationTypeError", "math.sqrt(total)"],
        ["Keep values as arrays"],
    ),
    (
        "sgd_float_lr.ipynb",
        "test_sgd_update_under_jit[mlp]",
        ["does not work under jax.jit", "ConcretizationTypeError", "lr = float(lr)"],
        ["Keep values as arrays"],
    ),
]


test_failures_teach = harness.teaching_test(TEACHING)
