"""The self-check inside a student's notebook (``from grader import selfcheck as jc; jc.check()``).

The release's first cell installs jaxgrade and calls :func:`setup` with the assignment's public
tests and configuration (a compressed payload inside the cell: on Colab the notebook has no files
beside it).  :func:`check` then runs those tests through pytest with the grading plugin, exactly
as ``jaxgrade check`` does, but the ``submission`` fixture's session answers in this process: the
kernel side's and the evaluator's own request handlers are called directly, with the same typed
messages and plain-data values, so verdicts, messages and hints are those of ``jaxgrade check``.
It decides no grade: it is the student's own code checked by public tests, in their own kernel.
"""

from __future__ import annotations

from grader.selfcheck.live import Checker, Result, check, run, setup
from grader.selfcheck.payload import SelfCheckError, decode_payload, encode_payload

__all__ = ["Checker", "Result", "SelfCheckError", "check", "decode_payload", "encode_payload", "run", "setup"]
