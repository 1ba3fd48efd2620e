"""Old import path of :mod:`grader.grading.checks` (the check library), kept so that existing course test
files keep working; new ones import from :mod:`grader.testing`."""

from grader.grading.checks import *  # noqa: F403
