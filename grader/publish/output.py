"""Writing results atomically: per-student JSON records, safe file names, spreadsheet-safe cells."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path

from grader.grading.record import Record

_SAFE = re.compile(r"[^A-Za-z0-9._@+-]+")
MAX_NAME = 150  # characters of a file name made from a student id


def safe_name(student: str) -> str:
    """A file name for a student id (no path separators, no leading dots), one per id: an id that
    is a safe name itself is its own name; any other id gets its characters made safe and ``~``
    and a digest of the id after them (``José García`` -> ``Jos_Garc_a~978edf99a5ad71c4``).  No safe id has a
    ``~``, so two ids never share a name: ``_alice`` or ``alice!`` cannot write over ``alice``'s
    record and feedback page (a student picks their file's name, hence the id, in a plain folder)."""
    name = _SAFE.sub("_", student).strip("._") or "student"
    if name == student and len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(student.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{name[: MAX_NAME - 17]}~{digest}"


class OutputPathError(Exception):
    """An output path (a command's ``--out``) names a place the output cannot go: a folder where a
    file is to be written, or a file where a folder is.  Raised before anything is written."""


def check_file_target(path: Path) -> None:
    """Raise :class:`OutputPathError` where a file cannot be written at ``path``: a folder is
    there (:func:`atomic_target` would write the whole file beside it, then fail to rename it over
    the folder), or something that is not a folder stands where one of its folders would be."""
    if path.is_dir():
        raise OutputPathError(f"{path}: is a folder, not a file")
    _check_parents(path)


def check_folder_target(path: Path) -> None:
    """Raise :class:`OutputPathError` where ``path`` cannot be (or be made) a folder: something
    else is there, or where one of its parent folders would be."""
    if os.path.lexists(path) and not path.is_dir():
        raise OutputPathError(f"{path}: exists and is not a folder")
    _check_parents(path)


def _check_parents(path: Path) -> None:
    # the nearest parent that exists must be a folder: the missing ones are then made in it
    for parent in path.parents:
        if os.path.lexists(parent):
            if not parent.is_dir():
                raise OutputPathError(f"{path}: {parent} is not a folder")
            return


@contextlib.contextmanager
def atomic_target(path: Path, *, keep_if_same: bool = False, follow_links: bool = False) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on success it replaces ``path`` in one rename,
    on failure it is removed, so ``path`` is always either the old file or the whole new one.
    With ``keep_if_same``, a ``path`` already holding those bytes is left as it is (its mtime too).

    The new file has the mode a plain write would give it: a replaced regular file's mode
    (the temporary stays private, 0600, until it is complete), else ``0o666`` less the umask.
    A link at ``path`` is replaced by the file, unless ``follow_links``: then the file it points
    to is replaced and the link stays."""
    if follow_links and path.is_symlink():
        path = Path(os.path.realpath(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        old = os.lstat(path)
    except FileNotFoundError:
        old = None
    keep_mode = stat.S_IMODE(old.st_mode) if old is not None and stat.S_ISREG(old.st_mode) else None
    tmp = _create_temporary(path, 0o600 if keep_mode is not None else 0o666)  # 0o666: the kernel applies the umask
    try:
        yield tmp
        if keep_if_same and _same_file_bytes(path, tmp):
            os.unlink(tmp)
            return
        if keep_mode is not None:
            os.chmod(tmp, keep_mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _create_temporary(path: Path, mode: int) -> Path:
    """A new empty file ``.<name>.<random>.tmp`` beside ``path``, created with ``mode`` (less the umask)."""
    for _ in range(100):
        tmp = path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp"
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode))
        except FileExistsError:
            continue
        return tmp
    raise FileExistsError(f"{path.parent}: no free temporary name for {path.name}")


def _same_file_bytes(a: Path, b: Path) -> bool:
    """Whether ``a`` is a regular file (not a link) with exactly ``b``'s bytes."""
    try:
        if a.is_symlink() or not a.is_file() or a.stat().st_size != b.stat().st_size:
            return False
        return a.read_bytes() == b.read_bytes()
    except OSError:
        return False


def write_atomic(path: Path, text: str, *, follow_links: bool = False) -> None:
    """Write ``text`` to ``path`` through :func:`atomic_target`."""
    with atomic_target(path, follow_links=follow_links) as tmp:
        tmp.write_text(text, encoding="utf-8", newline="")


def write_record(out_dir: Path, record: Record) -> Path:
    path = out_dir / "results" / f"{safe_name(record.student)}.json"
    write_atomic(path, record.to_json() + "\n")
    return path


def spreadsheet_safe(value: str) -> str:
    """Quote cells that a spreadsheet would run as a formula."""
    return "'" + value if value[:1] in ("=", "+", "-", "@", "\t", "\r") else value


#: Characters a terminal acts on rather than shows: C0 and C1 controls but tab and newline (ESC
#: starts sequences that recolour, retitle or rewrite a terminal; CR overwrites a line), and
#: Unicode's direction overrides, which show text in another order than it is.
_NOT_SHOWN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def terminal_safe(text: str) -> str:
    """Text that came from students (file names and the ids made from them, messages, code) as a
    TA's terminal may print it: every character it would act on is written out (``\\x1b``)."""
    return _NOT_SHOWN.sub(
        lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}", text
    )
