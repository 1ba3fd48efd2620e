"""purity, 3 points as in jaxgrade (hidden): for each function, 3 points over 5 functions."""

from otter.test_files import test_case
from vmap_convolve_checks import FUNCTIONS, check_pure

OK_FORMAT = False

name = "purity"


def pure(test, fn):
    return lambda env: check_pure(env, test, fn)


for fn in FUNCTIONS:
    test = f"test_pure[{fn}]"
    globals()[test] = test_case(name=test, points=3 / len(FUNCTIONS), hidden=True)(pure(test, fn))
