"""The pmap corpus: every notebook in tests/corpus/pmap gets the verdict that expected.yaml gives
it, category by category, graded with 4 devices (the trusted side runs in spawned worker
processes started with them); vmap instead of pmap keeps its numerics and loses parallelism.

Grading the corpus is slow (each notebook runs in a fresh sandbox with a kernel), so the whole
corpus is graded once, in a module-scoped fixture, and the parametrized tests only read results.
"""

from __future__ import annotations

from typing import Any

import corpus_harness as harness

CORPUS = harness.load("pmap")
pytestmark = harness.MARKS

graded = harness.graded_fixture(CORPUS)
test_expected_yaml_covers_the_corpus = harness.coverage_test(CORPUS)
test_untouched_starter_is_the_current_starter = harness.starter_test(CORPUS)
test_status = harness.status_test(CORPUS)
test_category_verdict = harness.category_test(CORPUS)


FUNCTIONS = ("parallel_convolve", "global_mean")


def test_missing_functions_are_named(graded: dict[str, Any]) -> None:
    """Functions left as TODO are reported by name; correct notebooks miss nothing."""
    assert graded["partial_submission.ipynb"].missing == ["global_mean"]
    assert sorted(graded["untouched_starter.ipynb"].missing) == sorted(FUNCTIONS)
    for name in (
        "correct_pmap_psum.ipynb",
        "correct_decorator_pmean.ipynb",
        "correct_psum_of_sums.ipynb",
        "correct_all_gather.ipynb",
    ):
        assert graded[name].missing == [], harness.explain(graded[name])


def test_vmap_keeps_numerics_and_loses_parallelism(graded: dict[str, Any]) -> None:
    """vmap computes the right numbers on one device: every numerics test passes, every
    parallelism test fails."""
    record = graded["vmap_instead_of_pmap.ipynb"]
    for t in record.tests:
        if t.category == "numerics":
            assert t.status == "passed", harness.explain(record)
        if t.category == "parallelism":
            assert t.status == "failed", harness.explain(record)


# (notebook, test, words the message must contain, words the hint must contain)
TEACHING = [
    (
        "vmap_instead_of_pmap.ipynb",
        "test_runs_on_every_device[parallel_convolve]",
        ["1 device", "4 devices"],
        ["jax.pmap"],
    ),
    (
        "mean_on_one_device.ipynb",
        "test_global_mean_runs_on_every_device",
        ["1 device", "4 devices"],
        ["jax.pmap"],
    ),
    (
        "missing_psum.ipynb",
        "test_global_mean_numerics[6]",
        ["mean of its own row"],
        ["lax.psum", "axis_name"],
    ),
    (
        "missing_psum.ipynb",
        "test_global_mean",
        ["mean of its own row"],
        ["lax.psum"],
    ),
    (
        "psum_not_divided.ipynb",
        "test_global_mean_numerics[33]",
        ["sum of the row means"],
        ["divide by the number of devices"],
    ),
    (
        "psum_without_axis_name.ipynb",
        "test_global_mean_numerics[6]",
        ["NameError", "lax.psum"],
        ["axis_name="],
    ),
    (
        "mean_combined_on_host.ipynb",
        "test_traces_under_jit[global_mean]",
        ["does not work under jax.jit", "float("],
        [],
    ),
    (
        "vmap_then_device_put.ipynb",
        "test_runs_on_every_device[parallel_convolve]",
        ["as one program, then placed on the devices", "4 devices"],
        ["jax.pmap", "device_put"],
    ),
    (
        "mean_closed_over_no_psum.ipynb",
        "test_runs_on_every_device[global_mean]",
        ["never combine", "collective"],
        ["lax.psum", "axis_name"],
    ),
    (
        "mean_closed_over_no_psum.ipynb",
        "test_global_mean_runs_on_every_device",
        ["never combine"],
        ["lax.psum"],
    ),
]


test_failures_teach = harness.teaching_test(TEACHING)
