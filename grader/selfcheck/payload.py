"""The public tests and configuration inside the release's first cell: one ASCII string."""

from __future__ import annotations

import base64
import json
import zlib
from pathlib import Path

from grader import __version__

PAYLOAD_FORMAT = 1


class SelfCheckError(Exception):
    """The self-check cannot run (not set up, an unknown function); the message says what to do."""


# --------------------------------------------------------------------------- the payload


def encode_payload(files: dict[str, str]) -> str:
    """``files`` (relative path -> text) as one ASCII string for the notebook's first cell."""
    data = json.dumps({"format": PAYLOAD_FORMAT, "files": files}, sort_keys=True).encode()
    return base64.b64encode(zlib.compress(data, 9)).decode("ascii")


def decode_payload(payload: str) -> dict[str, str]:
    """The files of a payload made by :func:`encode_payload`."""
    try:
        data = json.loads(zlib.decompress(base64.b64decode(payload.encode("ascii"), validate=True)))
    except (ValueError, zlib.error, UnicodeEncodeError) as exc:
        raise SelfCheckError(
            f"the first cell's payload is damaged ({exc}); download the starter notebook again"
        ) from None
    if not isinstance(data, dict) or data.get("format") != PAYLOAD_FORMAT or not isinstance(data.get("files"), dict):
        raise SelfCheckError(
            f"the first cell's payload is not one this jaxgrade ({__version__}) reads; "
            "run the first cell as the course released it (it installs the matching jaxgrade)"
        )
    files = data["files"]
    for rel, text in files.items():
        if not isinstance(rel, str) or not isinstance(text, str) or rel.startswith("/") or ".." in Path(rel).parts:
            raise SelfCheckError(f"the first cell's payload holds an invalid file name {rel!r}")
    return files
