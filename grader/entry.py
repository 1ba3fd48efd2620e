"""The ``jaxgrade`` command.  A ``jaxgrade check`` that a check server can answer
(:mod:`grader.grading.check_server`) is handed to it before the CLI and its imports load, which
is most of what a warm check saves; every other command is :func:`grader.cli.main`."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    from grader.grading.check_server import client_main

    code = client_main(argv)
    if code is not None:
        return code
    from grader.cli import main as cli_main

    return cli_main(argv)
