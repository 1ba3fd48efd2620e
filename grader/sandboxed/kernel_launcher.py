"""The student's kernel: ipykernel's own, started without its debugger.

ipykernel imports debugpy as it starts, to offer Jupyter's visual debugger, which grading never
uses: about 0.06 s of CPU in every kernel start (each submission's, and each restart's).  Here
that import is refused while ipykernel looks for debugpy (it then runs without a debugger, as
where debugpy is not installed), and allowed again before any of the student's code runs: a
notebook that imports debugpy itself gets it.  Otherwise this is ``python -m ipykernel_launcher``.

Started by the worker (:mod:`grader.sandboxed.worker`) as ``python PATH/kernel_launcher.py -f
CONNECTION_FILE``, in the sandbox, with the scratch folder as its working directory.  Started by
its path, not with ``-m``: on every Python (3.10 has no ``PYTHONSAFEPATH``) the working directory
is then not on ``sys.path`` while the kernel starts, and IPython is told not to put it first for
the student's code (``ignore_cwd``: the worker's warm-up appends it last), so a ``grader/``,
``ipykernel/`` or ``numpy.py`` that a cell planted there before the kernel was restarted
shadows nothing the kernel imports.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any

#: What ipykernel's debugger support imports (debugpy and the pydevd it vendors).
REFUSED = ("debugpy", "_pydevd_bundle", "_pydev_bundle", "_pydevd_frame_eval", "pydevd")


class _Refuse:
    """A meta path finder that makes the modules of :data:`REFUSED` look absent."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name.split(".")[0] in REFUSED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


#: IPython's option that keeps the working directory off ``sys.path`` (its ``init_path``).
IGNORE_CWD = "--IPKernelApp.ignore_cwd=True"


def main() -> None:
    # `grader` is found on PYTHONPATH: the working directory is not on sys.path (run by path)
    from grader.sandboxed.rlimits import drop_start_folder

    drop_start_folder()  # this file's folder
    # the worker's choice of nbformat validator for its own cells (worker.validate_cells_only),
    # not the student's: the sandbox's environment (grader.host.sandbox.sandbox_env) sets none
    os.environ.pop("NBFORMAT_VALIDATOR", None)
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

    kernelapp.launch_new_instance(argv=[*sys.argv[1:], IGNORE_CWD])


if __name__ == "__main__":
    main()
