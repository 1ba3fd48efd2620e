"""``grader.sandboxed.rlimits.drop_start_folder``, as the worker and the evaluator start: under
``python -m`` Python puts the working directory (in a sandbox, the scratch folder, which student
code can write) first on ``sys.path``; where ``PYTHONSAFEPATH`` does not keep it off (Python
3.10 has none), both programs take it off again before they do anything else."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# Loaded from PYTHONPATH before the program starts: writes sys.path as the program ends.
HOOK = """
import atexit, json, os, sys
def _write():
    with open(os.environ["PATH_RECORD"], "w") as f:
        json.dump(list(sys.path), f)
atexit.register(_write)
"""


def path_at_exit(module: str, tmp_path: Path, *, safe_path: bool) -> tuple[list[str], str]:
    """``sys.path`` as ``python -m module --help``, started in a working folder of its own,
    ends; and that folder."""
    scratch, hook = tmp_path / "scratch", tmp_path / "hook"
    scratch.mkdir(exist_ok=True)
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(HOOK, encoding="utf-8")
    record = tmp_path / f"{module}-{safe_path}.json"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONSAFEPATH", "PYTHONPATH")}
    env.update(PYTHONPATH=os.pathsep.join([str(hook), str(REPO)]), PATH_RECORD=str(record))
    if safe_path:
        env["PYTHONSAFEPATH"] = "1"
    done = subprocess.run(
        [sys.executable, "-m", module, "--help"], cwd=scratch, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(record.read_text(encoding="utf-8")), str(scratch)


@pytest.mark.parametrize("module", ["grader.sandboxed.worker", "grader.sandboxed.evaluator"])
def test_the_scratch_folder_is_off_the_module_path_once_the_program_runs(module: str, tmp_path: Path) -> None:
    """Measured against a program started the same way that does not drop it (the standard
    library's json.tool): that one keeps the folder first on its path to the end; the worker and
    the evaluator end with the same path less that folder, and nothing else taken off."""
    plain, scratch = path_at_exit("json.tool", tmp_path, safe_path=False)
    assert plain[0] == scratch  # what `python -m` does without PYTHONSAFEPATH
    ours, _ = path_at_exit(module, tmp_path, safe_path=False)
    assert scratch not in ours and "" not in ours
    assert ours == plain[1:]


@pytest.mark.skipif(sys.version_info < (3, 11), reason="PYTHONSAFEPATH is Python 3.11+")
@pytest.mark.parametrize("module", ["grader.sandboxed.worker", "grader.sandboxed.evaluator"])
def test_with_pythonsafepath_nothing_is_taken_off(module: str, tmp_path: Path) -> None:
    """PYTHONSAFEPATH (in every sandbox's environment) already kept the folder off: then the
    path's first entry is one of the installation's, and it stays."""
    plain, scratch = path_at_exit("json.tool", tmp_path, safe_path=True)
    assert scratch not in plain
    ours, _ = path_at_exit(module, tmp_path, safe_path=True)
    assert ours == plain
