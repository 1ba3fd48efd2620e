"""Old import path of :mod:`grader.host.session` (the session (course test files import its exception types from here)), kept so that existing course test
files keep working; new ones import from :mod:`grader.testing`."""

from grader.host.session import *  # noqa: F403
