"""vectorization, 10 points as in jaxgrade: public 1 (batched_convolve traces once for any batch
size); hidden 9: each function is vectorized (1, 2, 2, 1, 1), manually_vectorized_convolve works
without jax.vmap (2)."""

from otter.test_files import test_case
from vmap_convolve_checks import check_batch_vectorized, check_no_vmap, check_public_vectorized

OK_FORMAT = False

name = "vectorization"


@test_case(name="test_batched_convolve_is_vectorized", points=1)
def public_vectorized(env):
    check_public_vectorized(env)


def vectorized(test, fn):
    return lambda env: check_batch_vectorized(env, test, fn)


POINTS = {
    "batched_convolve": 1,
    "batched_convolve_shared_w": 2,
    "batched_convolve_axis1": 2,
    "fast_batched_convolve": 1,
    "manually_vectorized_convolve": 1,
}
for fn, pts in POINTS.items():
    test = f"test_{fn}_vectorized"
    globals()[test] = test_case(name=test, points=pts, hidden=True)(vectorized(test, fn))


@test_case(name="test_manually_vectorized_convolve_no_vmap", points=2, hidden=True)
def no_vmap(env):
    check_no_vmap(env, "test_manually_vectorized_convolve_no_vmap", "manually_vectorized_convolve")
