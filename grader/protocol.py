"""Old import path of :mod:`grader.wire.protocol`, kept for course test files
(``from grader.protocol import PRNGKeyData``).  Trusted side only: not mounted into the sandbox."""

from __future__ import annotations

from grader.wire.protocol import *  # noqa: F403
from grader.wire.protocol import __all__ as __all__
