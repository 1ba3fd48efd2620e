"""The wire between the two sides: frames and plain-data values (:mod:`grader.wire.protocol`).

Imported by BOTH sides: the trusted grader, and the sandboxed worker, kernel and evaluator.  It
is mounted into the sandbox, so it imports nothing from ``grader`` outside ``grader.wire``.
"""

from __future__ import annotations

from grader.wire.protocol import *  # noqa: F403
from grader.wire.protocol import __all__ as __all__
