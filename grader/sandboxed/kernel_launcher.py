"""The student's kernel: ipykernel's own, started without its debugger.

ipykernel imports debugpy as it starts, to offer Jupyter's visual debugger, which grading never
uses: about 0.06 s of CPU in every kernel start (each submission's, and each restart's).  Here
that import is refused while ipykernel looks for debugpy (it then runs without a debugger, as
where debugpy is not installed), and allowed again before any of the student's code runs: a
notebook that imports debugpy itself gets it.  Otherwise this is ``python -m ipykernel_launcher``.

Started by the worker (:mod:`grader.sandboxed.worker`) as ``python -m
grader.sandboxed.kernel_launcher -f CONNECTION_FILE``, in the sandbox.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any

#: What ipykernel's debugger support imports (debugpy and the pydevd it vendors).
REFUSED = ("debugpy", "_pydevd_bundle", "_pydev_bundle", "_pydevd_frame_eval", "pydevd")


class _Refuse:
    """A meta path finder that makes the modules of :data:`REFUSED` look absent."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name.split(".")[0] in REFUSED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


def main() -> None:
    # as ipykernel_launcher: the working directory leaves sys.path while ipykernel loads
    # (InteractiveShellApp.init_path puts it back for the student's code)
    if sys.path and (sys.path[0] == "" or Path(sys.path[0]) == Path.cwd()):
        del sys.path[0]
    refuse = _Refuse()
    sys.meta_path.insert(0, refuse)
    try:
        # it notes that debugpy is not available (an ipykernel without this module has no
        # debugger to skip: it starts as ever)
        with contextlib.suppress(ImportError):
            import ipykernel.debugger  # noqa: F401
    finally:
        sys.meta_path.remove(refuse)
    from ipykernel import kernelapp

    kernelapp.launch_new_instance()


if __name__ == "__main__":
    main()
