"""The wire between the two sides: frames and plain-data values (:mod:`grader.wire.protocol`),
and one typed definition per message (:mod:`grader.wire.messages`).

Imported by BOTH sides: the trusted grader, and the sandboxed worker, kernel and evaluator.  It
is mounted into the sandbox, so it imports nothing from ``grader`` outside ``grader.wire``.
"""

from __future__ import annotations

from grader.wire import messages as messages
from grader.wire import protocol as protocol
from grader.wire.messages import *  # noqa: F403
from grader.wire.messages import __all__ as _messages_all
from grader.wire.protocol import *  # noqa: F403
from grader.wire.protocol import __all__ as _protocol_all

__all__ = [*_protocol_all, *_messages_all, "messages", "protocol"]
