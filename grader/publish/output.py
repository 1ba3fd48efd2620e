"""Writing results atomically: per-student JSON records, safe file names, spreadsheet-safe cells."""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

from grader.grading.record import Record

_SAFE = re.compile(r"[^A-Za-z0-9._@+-]+")


def safe_name(student: str) -> str:
    """A file name for a student id (no path separators, no leading dots)."""
    name = _SAFE.sub("_", student).strip("._") or "student"
    return name[:150]


@contextlib.contextmanager
def atomic_target(path: Path, *, keep_if_same: bool = False) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on success it replaces ``path`` in one rename,
    on failure it is removed, so ``path`` is always either the old file or the whole new one.
    With ``keep_if_same``, a ``path`` already holding those bytes is left as it is (its mtime too)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        yield Path(tmp)
        if keep_if_same and _same_file_bytes(path, Path(tmp)):
            os.unlink(tmp)
            return
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _same_file_bytes(a: Path, b: Path) -> bool:
    """Whether ``a`` is a regular file (not a link) with exactly ``b``'s bytes."""
    try:
        if a.is_symlink() or not a.is_file() or a.stat().st_size != b.stat().st_size:
            return False
        return a.read_bytes() == b.read_bytes()
    except OSError:
        return False


def write_atomic(path: Path, text: str) -> None:
    with atomic_target(path) as tmp:
        tmp.write_text(text, encoding="utf-8", newline="")


def write_record(out_dir: Path, record: Record) -> Path:
    path = out_dir / "results" / f"{safe_name(record.student)}.json"
    write_atomic(path, record.to_json() + "\n")
    return path


def spreadsheet_safe(value: str) -> str:
    """Quote cells that a spreadsheet would run as a formula."""
    return "'" + value if value[:1] in ("=", "+", "-", "@", "\t", "\r") else value
