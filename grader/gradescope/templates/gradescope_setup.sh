#!/usr/bin/env bash
# jaxgrade autograder setup: Gradescope runs this once, as root, when it builds the image.
set -eu
ROOT="${JAXGRADE_AUTOGRADER_ROOT:-/autograder}"
export DEBIAN_FRONTEND=noninteractive
if command -v apt-get >/dev/null 2>&1; then
    apt-get update || true
    # bubblewrap keeps student code away from the hidden tests and the network (best effort:
    # without it jaxgrade falls back to a plain subprocess and says so in the log).
    apt-get install -y --no-install-recommends bubblewrap \
        || echo "jaxgrade setup: bubblewrap could not be installed; student code will run without it" >&2
    apt-get install -y --no-install-recommends python3 python3-pip python3-venv \
        || echo "jaxgrade setup: python3-pip/python3-venv could not be installed" >&2
fi
# a virtual environment outside the course files (newer Ubuntu images refuse system-wide pip)
python3 -m venv "$ROOT/venv"
"$ROOT/venv/bin/python3" -m pip install --upgrade pip
"$ROOT/venv/bin/python3" -m pip install "$ROOT/source/jaxgrade"
# fail the build now, not on the first submission: the course loads, and what its assignment
# requires is installed (the pmap assignment needs JAX 0.8, so Python 3.11 or newer)
"$ROOT/venv/bin/python3" -c "import sys; from grader.gradescope.runtime import preflight; print(preflight(sys.argv[1]))" "$ROOT"
