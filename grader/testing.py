"""What course authors import in their test files: the checks, the errors they may catch, and
the PRNG key type.  ``from grader.testing import assert_close, check_jit, StudentRaised``.

The same names stay importable from their older homes (``grader.checks``, ``grader.session``,
``grader.protocol``), so existing courses keep working.
"""

from grader.errors import (
    CallTimedOut,
    CheckFailure,
    MissingName,
    SandboxLost,
    StudentRaised,
    SubmissionError,
    error_cause,
)
from grader.grading.checks import (
    Tolerance,
    assert_close,
    check_compile_count,
    check_is_jitted,
    check_jit,
    check_no_vmap,
    check_parallel,
    check_pure,
    check_recompiles,
    check_traces_once,
    check_vectorized,
    quoted,
)
from grader.grading.hints import hint_for, taught
from grader.wire import PRNGKeyData

__all__ = [
    "CallTimedOut",
    "CheckFailure",
    "MissingName",
    "PRNGKeyData",
    "SandboxLost",
    "StudentRaised",
    "SubmissionError",
    "Tolerance",
    "assert_close",
    "check_compile_count",
    "check_is_jitted",
    "check_jit",
    "check_no_vmap",
    "check_parallel",
    "check_pure",
    "check_recompiles",
    "check_traces_once",
    "check_vectorized",
    "error_cause",
    "hint_for",
    "quoted",
    "taught",
]
