"""The jit_control_flow corpus: every notebook in tests/corpus/jit_control_flow gets the verdict
that expected.yaml gives it, category by category, and a failure under jit names the JAX error,
the student's line and the fix.

Grading the corpus is slow (each notebook runs in a fresh sandbox with a kernel), so the whole
corpus is graded once, in a module-scoped fixture, and the parametrized tests only read results.
"""

from __future__ import annotations

from typing import Any

import corpus_harness as harness

CORPUS = harness.load("jit_control_flow")
pytestmark = harness.MARKS

graded = harness.graded_fixture(CORPUS)
test_expected_yaml_covers_the_corpus = harness.coverage_test(CORPUS)
test_untouched_starter_is_the_current_starter = harness.starter_test(CORPUS)
test_status = harness.status_test(CORPUS)
test_category_verdict = harness.category_test(CORPUS)


FUNCTIONS = ("f_jittable", "g_static", "g_traced", "selu_jit", "g_loop_cached")


def test_missing_functions_are_named(graded: dict[str, Any]) -> None:
    """Functions left as TODO are reported by name; correct notebooks miss nothing."""
    assert sorted(graded["partial_submission.ipynb"].missing) == ["g_loop_cached", "g_traced", "selu_jit"]
    assert sorted(graded["untouched_starter.ipynb"].missing) == sorted(FUNCTIONS)
    for name in ("correct_where.ipynb", "correct_select_cond.ipynb", "correct_cond_vectorize.ipynb"):
        assert graded[name].missing == [], harness.explain(graded[name])


# (notebook, test, words the message must contain, words the hint must contain)
TEACHING = [
    (
        "g_traced_python_while.ipynb",
        "test_works_under_jit[g_traced-n-traced]",
        ["TracerBoolConversionError", "while i < n"],
        ["lax.fori_loop"],
    ),
    (
        "g_traced_range_loop.ipynb",
        "test_works_under_jit[g_traced-n-traced]",
        ["TracerIntegerConversionError", "range(n)"],
        ["lax.fori_loop"],
    ),
    (
        "f_jittable_jit_of_f.ipynb",
        "test_works_under_jit[f_jittable-scalar]",
        ["TracerBoolConversionError", "if x > 0"],
        ["jnp.where", "lax.cond"],
    ),
    (
        "f_float_concretize.ipynb",
        "test_works_under_jit[f_jittable-scalar]",
        ["ConcretizationTypeError", "float(x)"],
        ["static_argnames"],
    ),
    (
        "g_static_not_static.ipynb",
        "test_works_under_jit[g_static]",
        ["TracerBoolConversionError", "while i < n"],
        ["static_argnames"],
    ),
    (
        "g_loop_fresh_lambda.ipynb",
        "test_g_loop_cached_compile_count",
        ["new jitted function inside its loop", "jax.jit(lambda"],
        ["outside the loop"],
    ),
    (
        "g_static_not_jitted.ipynb",
        "test_g_static_recompiles_only_for_new_n",
        ["not itself a jax.jit-compiled function", "new compiled program"],
        ["static_argnames"],
    ),
]


test_failures_teach = harness.teaching_test(TEACHING)
