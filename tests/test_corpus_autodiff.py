"""The autodiff corpus: every notebook in tests/corpus/autodiff gets the verdict that
expected.yaml gives it, category by category (a finite-difference gradient loses numerics and
keeps jit; every autodiff route earns full marks), and failures name the error, the student's
line and the fix.

Grading the corpus is slow (each notebook runs in a fresh sandbox with a kernel), so the whole
corpus is graded once, in a module-scoped fixture, and the parametrized tests only read results.
"""

from __future__ import annotations

from typing import Any

import corpus_harness as harness

CORPUS = harness.load("autodiff")
pytestmark = harness.MARKS

graded = harness.graded_fixture(CORPUS)
test_expected_yaml_covers_the_corpus = harness.coverage_test(CORPUS)
test_untouched_starter_is_the_current_starter = harness.starter_test(CORPUS)
test_status = harness.status_test(CORPUS)
test_category_verdict = harness.category_test(CORPUS)


FUNCTIONS = ("grad_sse_wrt_x", "grad_sse_wrt_both", "sse_value_and_grad", "sse_with_aux_grad", "fit_linear_regression")


def test_missing_functions_are_named(graded: dict[str, Any]) -> None:
    """Functions left as TODO are reported by name; correct notebooks miss nothing."""
    assert sorted(graded["partial_submission.ipynb"].missing) == [
        "fit_linear_regression",
        "sse_value_and_grad",
        "sse_with_aux_grad",
    ]
    assert sorted(graded["untouched_starter.ipynb"].missing) == sorted(FUNCTIONS)
    for name in ("correct_grad.ipynb", "correct_vjp_jacrev.ipynb", "correct_jit_closures.ipynb"):
        assert graded[name].missing == [], harness.explain(graded[name])


# (notebook, test, words the message must contain, words the hint must contain)
TEACHING = [
    (
        "finite_differences.ipynb",
        "test_grad_sse_wrt_x_numerics[shape1]",
        ["values differ", "not float32-exact"],
        ["finite differences", "jax.grad"],
    ),
    (
        "forward_differences.ipynb",
        "test_sse_value_and_grad_numerics[shape0]",
        ["values differ", "not float32-exact"],
        ["finite differences", "jax.grad"],
    ),
    (
        "numpy_gradient.ipynb",
        "test_works_under_jit[grad_sse_wrt_x]",
        ["TracerArrayConversionError", "np.asarray(x)"],
        ["jax.numpy"],
    ),
    (
        "fit_steps_traced.ipynb",
        "test_fit_linear_regression_numerics[steps=5]",
        ["ConcretizationTypeError", "length=steps"],
        ["static_argnames"],
    ),
    (
        "argnums_0_only.ipynb",
        "test_grad_sse_wrt_both_numerics[shape0]",
        ["expected a tuple of length 2"],
        [],
    ),
    (
        "fit_sum_not_mean.ipynb",
        "test_fit_linear_regression_numerics[defaults]",
        ["2 of them NaN or infinite where finite values are expected"],
        ["diverged", "the loss is a mean"],
    ),
    (
        "gradient_ascent.ipynb",
        "test_fit_linear_regression_recovers_the_line",
        ["did not recover the line"],
        ["theta - lr * jax.grad"],
    ),
]


def test_finite_differences_lose_every_gradient_test(graded: dict[str, Any]) -> None:
    """Finite differences fail every numerics test of the four gradient functions, public and
    hidden. A jit test counts only for a function that works, so forward differences (too
    imprecise on the jit tests' inputs too) fail those as well, and say why."""
    for name in ("finite_differences.ipynb", "forward_differences.ipynb"):
        record = graded[name]
        for t in record.tests:
            if t.category != "jit" and "fit_linear_regression" not in t.name:
                assert t.status == "failed", f"{name}: {t.name} passed\n{harness.explain(record)}"
    for t in graded["forward_differences.ipynb"].tests:
        if t.category == "jit":
            assert t.status == "failed" and "gives wrong numbers" in t.message, harness.explain(
                graded["forward_differences.ipynb"]
            )


test_failures_teach = harness.teaching_test(TEACHING)
