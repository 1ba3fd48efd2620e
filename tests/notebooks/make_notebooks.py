"""Generate the notebooks used by tests/host/test_session.py and tests/host/test_sandbox.py.

Run ``python tests/notebooks/make_notebooks.py`` after editing; the generated ``.ipynb`` files are
committed.  Cell indices and line numbers are asserted by the tests: keep them in sync.
"""

from __future__ import annotations

from pathlib import Path

import nbformat

HERE = Path(__file__).resolve().parent

# --------------------------------------------------------------------------- misbehaving.ipynb
# One notebook with every way a cell can go wrong, each followed by a definition that must
# still be callable afterwards.  The index of each cell is the position in this list.
MISBEHAVING = [
    # 0: definitions used by the call tests
    """import os, sys, time
import numpy as np
import jax
import jax.numpy as jnp


def add(x, y):
    return x + y


def relu_if(x):
    if x > 0:
        return x
    return 0.0 * x


def hang(x):
    while True:
        pass


class AlwaysEqual:
    def __eq__(self, other):
        return True

    __hash__ = object.__hash__


def liar(x):
    return AlwaysEqual()


def liar_array(x):
    class Sneaky(np.ndarray):
        def __eq__(self, other):
            return True
    return np.zeros(3).view(Sneaky)


def huge():
    return np.ones(300 * 1024 * 1024 // 4 + 16, dtype=np.float32)


def model(x, w):
    return jnp.tanh(x @ w) * 2.0 + jnp.sum(x, axis=-1, keepdims=True)


def python_loop(x):
    return jnp.stack([x[i] * 2.0 for i in range(x.shape[0])])


def scalar_sum(x):
    return jnp.sum(x)
""",
    # 1: raises on its second line
    "first = 1\nsecond = undefined_name + 1\nthird = 3",
    # 2
    "def after_error(x):\n    return x + 1",
    # 3: does not parse
    "def broken(:\n    pass",
    # 4: Python loop that never ends: interrupted
    "while True:\n    pass",
    # 5
    "def after_timeout(x):\n    return x * 3",
    # 6: a compiled loop that never ends: XLA ignores SIGINT, the kernel must be killed
    "forever = jax.jit(lambda: jax.lax.while_loop(lambda c: True, lambda c: c + 1, 0))\nint(forever())",
    # 7
    "def after_kill(x):\n    return x - 1",
    # 8: the kernel exits
    "import os\nos._exit(1)",
    # 9
    "def after_death(x):\n    return x * x",
    # 10: stdin is not available
    "name = input('your name? ')",
    # 11
    "%timeit -n1 -r1 sum(range(10))",
    # 12
    "!echo hi-from-shell",
    # 13: no network, no index: fails fast
    "!pip install flax",
    # 14
    "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()\nplotted = True",
    # 15: 50 MB of output
    "print('x' * 50_000_000)\nprinted_a_lot = True",
    # 16
    "def last_cell(x):\n    return -x",
]

# --------------------------------------------------------------------------- probes.ipynb
# Helpers the isolation tests call inside the sandbox.
PROBES = [
    '''import os, socket, subprocess, sys, time


def ids():
    return [os.getuid(), os.geteuid(), os.getgid(), os.getegid()]


def exists(paths):
    return [os.path.exists(p) for p in paths]


def try_read(path):
    try:
        with open(path, "rb") as f:
            return f.read(100).decode(errors="replace")
    except OSError as e:
        return "refused: " + type(e).__name__


def try_write(paths):
    out = []
    for p in paths:
        try:
            with open(p, "w") as f:
                f.write("pwned")
            out.append("written")
        except OSError as e:
            out.append("refused: " + type(e).__name__)
    return out


def try_mkdir(paths):
    out = []
    for p in paths:
        try:
            os.mkdir(p)
            out.append("made")
        except OSError as e:
            out.append("refused: " + type(e).__name__)
    return out


def try_connect(host, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(3)
    try:
        s.connect((host, port))
        return "connected"
    except OSError as e:
        return "refused: " + type(e).__name__ + ": " + str(e)
    finally:
        s.close()


DAEMON = """import os, time
if os.fork():
    os._exit(0)
os.setsid()
if os.fork():
    os._exit(0)
time.sleep(1000)
"""


def spawn_leftovers(token):
    """A detached child in its own session, and a double-forked daemon, both named by token."""
    quiet = dict(stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1000)", token + "-child"],
                             start_new_session=True, **quiet)
    subprocess.run([sys.executable, "-c", DAEMON, token + "-daemon"], start_new_session=True, **quiet)
    # evidence that both really run, from inside: how many processes carry the token
    seen = 0
    for _ in range(100):
        seen = 0
        for entry in os.listdir("/proc"):
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    seen += token.encode() in f.read()
            except OSError:
                pass
        if seen >= 2:
            break
        time.sleep(0.05)
    return seen


def add(x, y):
    return x + y
''',
]


def write(name: str, sources: list[str]) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(src) for src in sources]
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i}"  # stable ids: regenerating gives the same file
    path = HERE / name
    nbformat.write(nb, path)
    return path


def main() -> None:
    for name, sources in (("misbehaving.ipynb", MISBEHAVING), ("probes.ipynb", PROBES)):
        print(write(name, sources))


if __name__ == "__main__":
    main()
