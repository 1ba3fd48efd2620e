"""numerics, 20 points as in jaxgrade: public 5 × 1 (fixed inputs, NumPy's convolve row by row);
hidden 15, for each function 3 points over 5 shapes (random inputs, against the reference)."""

from otter.test_files import test_case
from vmap_convolve_checks import FUNCTIONS, SHAPES, check_numerics, check_public

OK_FORMAT = False

name = "numerics"


def public(fn):
    return lambda env: check_public(env, fn)


def hidden(test, fn, B, N):
    return lambda env: check_numerics(env, test, fn, B, N)


for fn in FUNCTIONS:
    globals()[f"test_{fn}"] = test_case(name=f"test_{fn}", points=1)(public(fn))
for fn in FUNCTIONS:
    for B, N in SHAPES:
        test = f"test_{fn}_numerics[{B}-{N}]"
        globals()[test] = test_case(name=test, points=3 / len(SHAPES), hidden=True)(hidden(test, fn, B, N))
