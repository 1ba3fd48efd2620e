"""Intake: turn notebooks, folders and LMS downloads (Canvas, Moodle, Gradescope) into
submissions with one student id each.  The rules (ids, groups, several notebooks of one student,
archives) are :func:`collect`'s contract; README's "For TAs" section summarizes them.
"""

from __future__ import annotations

import os
import re
import stat
import zipfile
from collections import Counter, defaultdict
from collections.abc import Iterable
from contextlib import ExitStack, suppress
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from grader.publish.output import atomic_target, safe_name

MiB = 1 << 20

# reasons shown in IntakeReport.skipped (tests and the CLI rely on the exact text)
OLDER = "older notebook of the same student"
OTHER_IN_FOLDER = "another notebook in the student's folder (the one named like the assignment's is graded)"
MACOSX = "macOS metadata (__MACOSX)"
HIDDEN = "hidden file or folder"
NOT_NOTEBOOK = "not a notebook (.ipynb)"
ONLINETEXT = "Moodle online text, not a notebook"
SYMLINK = "symbolic link (refused)"
ABSOLUTE = "absolute path in the archive (refused)"
TRAVERSAL = "path with '..' in the archive (refused)"
ENCRYPTED = "encrypted entry (refused)"
NESTED = "nested archive (not opened; extract it and pass it separately)"
OUTSIDE_GRADESCOPE = "not inside a submission folder of the Gradescope export"
PLANTED_META = (
    "Gradescope metadata inside a submission or too deep in the export (ignored: only the export's own"
    " submission_metadata.yml is read)"
)
_QUIET = (MACOSX, HIDDEN, NOT_NOTEBOOK, ONLINETEXT)  # junk, summarized by count in lines()

_ARCHIVE_SUFFIXES = (".zip", ".tar", ".gz", ".tgz", ".bz2", ".xz", ".7z", ".rar", ".jar")
_GRADESCOPE_META = "submission_metadata.yml"

_CANVAS = re.compile(r"^(?P<name>.+?)_(?:(?P<late>LATE|late)_)?(?P<uid>[0-9]+)_(?P<fid>[0-9]+)_(?P<orig>.+)$")
_CANVAS_ANON = re.compile(r"^(?:(?P<late>LATE|late)_)?(?P<uid>anon_[A-Za-z0-9]+)_(?P<fid>[0-9]+)_(?P<orig>.+)$")
_MOODLE_DIR = re.compile(r"^(?P<name>.+?)_(?P<pid>[0-9]+)_assignsubmission_(?P<plugin>[A-Za-z0-9]+)_?$")
_MOODLE_FLAT = re.compile(r"^(?P<name>.+?)_(?P<pid>[0-9]+)_assignsubmission_(?P<plugin>[A-Za-z0-9]+)_(?P<orig>.+)$")
_GS_FOLDER = re.compile(r"^submission_(?P<id>[0-9]+)$")
MAX_NAME = 1024  # characters of a file or folder name read as an LMS's (file systems allow 255 bytes)
_RESUBMISSION = re.compile(r"-([0-9]+)$")
_TIME = re.compile(
    r"^(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(?:\.(\d+))?\s*(Z|[+-]\d\d(?::?\d\d)?)?$", re.IGNORECASE
)


@dataclass(frozen=True)
class ArchiveLimits:
    max_entries: int = 5000  # entries in one zip (files and folders)
    max_notebook_bytes: int = 50 * MiB  # one notebook, as actually decompressed
    max_total_bytes: int = 2048 * MiB  # all notebooks of one zip, uncompressed
    max_ratio: float = 1000.0  # uncompressed / compressed, for entries above ratio_floor_bytes
    ratio_floor_bytes: int = 1 * MiB


@dataclass(frozen=True)
class Incoming:
    path: Path  # the notebook to grade (a real file on disk; archive entries are extracted)
    student: str  # stable key: Canvas user id, Moodle participant id, Gradescope sid/email/submission, file stem
    identity: dict[str, str] = field(hash=False)  # Record.identity: lms, id, name, email, original, ...
    late_flag: bool = False  # the LMS marked it late (Canvas LATE_ in the file name)
    submitted_at: datetime | None = None  # timezone-aware when known (Gradescope :created_at:)
    ignored: tuple[str, ...] = ()  # other notebooks of this student that the rule set aside
    source: str = ""  # where it came from, as shown to the TA ("submissions.zip:entry" or a path)


@dataclass
class IntakeReport:
    submissions: list[Incoming]
    skipped: list[tuple[str, str]]  # (entry or file name, reason)
    #: students whose uploads hold files but no notebook (a PDF, a zip), where the source names
    #: the student (an LMS download, a folder per student): who (the id, and the LMS's name for
    #: them) -> the names of those files.  They get no row.
    no_notebook: dict[str, list[str]] = field(default_factory=dict)

    def lines(self) -> list[str]:
        """A human-readable summary for the CLI."""
        kinds = Counter(s.identity.get("lms", "file") for s in self.submissions)
        head = f"intake: {len(self.submissions)} submission(s)"
        if kinds:
            head += " (" + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) + ")"
        late = sum(s.late_flag for s in self.submissions)
        if late:
            head += f", {late} marked late by the LMS"
        out = [head]
        folders = [s.student for s in self.submissions if "folder" in s.identity]
        if folders:
            shown = ", ".join(folders[:5]) + (", ..." if len(folders) > 5 else "")
            out.append(f"  a folder per student: {len(folders)} student id(s) are their folder's name ({shown})")
        for s in self.submissions:
            if s.ignored:
                out.append(
                    f"  {s.student}: graded the latest, {s.source}; set aside {len(s.ignored)} older:"
                    f" {', '.join(s.ignored)}"
                )
        quiet: dict[str, list[str]] = defaultdict(list)
        for name, reason in self.skipped:
            if reason == OLDER:
                continue
            if reason in _QUIET:
                quiet[reason].append(name)
            else:
                out.append(f"  skipped {name}: {reason}")
        for reason, names in quiet.items():
            shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
            out.append(f"  skipped {len(names)} file(s), {reason}: {shown}")
        if self.no_notebook:
            out.append(
                f"  no notebook graded for {len(self.no_notebook)} student(s) who sent other files (no row): "
                + self.no_notebook_text()
            )
        return out

    def no_notebook_text(self, most: int = 5) -> str:
        """``bob: hw.pdf, 124 (roesam): hw.zip, notes.txt``, the first ``most`` students."""
        shown = [
            f"{who}: {', '.join(files[:3])}" + (", ..." if len(files) > 3 else "")
            for who, files in list(self.no_notebook.items())[:most]
        ]
        return ", ".join(shown) + (", ..." if len(self.no_notebook) > most else "")


class IntakeError(Exception):
    """Bad input the TA must fix: ``message`` names the file and the problem, ``tip`` (by default
    the message's last sentence, when it is advice) says what to do."""

    def __init__(self, message: str, tip: str = "") -> None:
        if not tip:
            head, sep, tail = message.rpartition(". ")
            if sep and tail[:1].isupper() and tail.endswith("."):
                message, tip = head, tail
        super().__init__(f"{message}. {tip}" if tip else message)
        self.message, self.tip = message, tip


class _Refused(Exception):
    """One entry cannot be used; the message is the reason reported in ``skipped``."""


# --------------------------------------------------------------------------- sources


@dataclass
class _Archive:
    path: Path
    zf: zipfile.ZipFile
    dirname: str  # folder under staging
    names: dict[str, str] = field(default_factory=dict)  # student -> file name (without .ipynb)


@dataclass
class _Cand:
    student: str
    identity: dict[str, str]
    display: str
    late_flag: bool = False
    submitted_at: datetime | None = None
    stamp: float | None = None
    fileid: int | None = None
    disk: Path | None = None
    archive: _Archive | None = None
    info: zipfile.ZipInfo | None = None


@dataclass
class _Budget:
    limit: int
    used: int = 0


def collect(
    inputs: list[Path],
    staging: Path,
    *,
    limits: ArchiveLimits = ArchiveLimits(),
    own_names: Iterable[str] = (),
) -> IntakeReport:
    """The submissions in ``inputs`` (notebooks, folders, zips), archive entries extracted under ``staging``.

    ``jaxgrade grade`` accepts, in any mix:

    - **notebooks** (``.ipynb``) and **folders** of them (searched recursively; hidden files and
      folders such as ``.ipynb_checkpoints``, ``__MACOSX`` and symbolic links inside a folder are
      skipped and reported);
    - a **Canvas** "Download Submissions" zip (or its extracted folder): files named
      ``name_[LATE_]userid_fileid_original.ipynb`` (``late_`` in lowercase too; with anonymous
      grading ``[LATE_]anon_<id>_fileid_original.ipynb``). Student = the Canvas user id (or
      ``anon_<id>``); the LATE mark becomes ``late_flag``; identity keeps the name (Canvas's
      lowercased "lastfirst") and the original file name;
    - a **Moodle** "Download all submissions" zip (or its extracted folder): folders
      ``Full Name_participantid_assignsubmission_file_/original.ipynb``, or the flat form
      ``Full Name_participantid_assignsubmission_file_original.ipynb``. Student = the participant
      id (Moodle's grading worksheet names rows "Participant <id>"); identity name = Full Name.
      ``assignsubmission_onlinetext`` entries are skipped;
    - a **Gradescope** "Export Submissions" zip (or its extracted folder): a folder (usually
      ``assignment_<id>_export/``) holding ``submission_metadata.yml`` and one
      ``submission_<id>/`` folder per submission. Student = the first submitter's sid, else their
      email, else the folder name ``submission_<id>``; ``submitted_at`` = ``:created_at:``.
      ``submission_metadata.yml`` is read only where Gradescope puts it (the export's top level, or
      the zip's single top-level folder), never from inside a submission folder: one there is a
      student's file, ignored and reported.
    - anything else: student = the notebook's file stem; but a **folder per student** (an input
      holding, in a subfolder, a notebook named like the assignment's own, ``own_names``: the
      starter's stem, ``alice/vmap_convolve.ipynb``, nbgrader's ``submitted/alice/ps1/ps1.ipynb``)
      gives each notebook in a subfolder the student of its top folder below the input
      (:func:`_per_student_folders`).

    The kind is decided per notebook, so a folder that is an extracted Moodle or Gradescope
    download is handled as such, and a folder holding a Canvas download is recognised by the
    file names.

    **Group submissions (Gradescope)** are graded once per submission. The student key is the
    first submitter's key (as listed in the metadata); identity ``name`` and ``email`` list all
    submitters joined with ", ", and ``members`` lists every submitter's key joined with ", ",
    so that exports can copy the grade to each member.

    **Several notebooks for one student** (several attachments or resubmissions on Canvas, a
    Moodle folder with several ``.ipynb``, two inputs that give the same student id): the latest
    one is graded. "Latest" compares, in order: the submission time when the LMS gives one
    (Gradescope ``:created_at:``); else the file's timestamp (a zip entry's date, a file's
    modification time on disk), except for Canvas files, whose zip dates are when Canvas built the
    zip and say nothing about the upload; else the Canvas file id (Canvas numbers files in upload
    order); else the name, where a resubmission suffix ``-1``, ``-2`` counts up and digits compare
    as numbers. Something with a time beats something without, so a loose notebook named after a
    Canvas user id (``123.ipynb``, say one that came by email) replaces that student's Canvas file. The others are listed in the submission's ``ignored`` and in ``skipped`` with the
    reason "older notebook of the same student". If the latest cannot be extracted (corrupt entry,
    over a limit), it is reported and the next one is graded.

    **Archives** are read with :mod:`zipfile` and never extracted as they are: each graded
    notebook is streamed (with its real size checked against the limits, whatever the header says)
    to ``STAGING/<archive stem>/<safe student id>.ipynb``, a path built from the student id, never
    from the archive, written atomically (temp file + rename) and left untouched when its content
    is already there, so that re-running on the same zip gives the same paths and bytes. Entries
    with absolute paths, ``..`` components, symbolic links, encryption or nested archives are
    refused and reported; so are notebooks over the size or compression-ratio limits. An archive
    with too many entries, too much uncompressed notebook data, or that is not a readable zip
    raises :class:`IntakeError`.
    """
    staging = Path(staging)
    own = {n.casefold() for n in own_names}
    skipped: list[tuple[str, str]] = []
    cands: list[_Cand] = []
    seen_files: set[Path] = set()
    archives: dict[Path, _Archive] = {}
    owners: list[tuple[str, str, str]] = []  # (student, who, file name) of the files that are not notebooks
    with ExitStack() as stack:
        for raw in inputs:
            p = Path(raw)
            if p.is_dir():
                others: list[_Cand] = []
                found = _scan_dir(p, staging, skipped, seen_files, others)
                rel = {id(c): c.disk.relative_to(p).parts for c in [*found, *others] if c.disk is not None}
                chosen = _per_student_folders(found, rel, own, skipped)
                cands += chosen
                owners += _owners(others, rel, chosen)
            elif p.is_file():
                real = p.resolve()
                if _is_notebook_name(p.name):
                    if real not in seen_files:
                        seen_files.add(real)
                        parts = [p.absolute().parent.name, p.name]
                        cands.append(_candidate(parts, {}, str(p), _mtime(p), disk=p))
                    continue
                if real in archives:
                    continue
                zf = _open_zip(p, limits)
                stack.callback(zf.close)
                taken = {a.dirname.casefold() for a in archives.values()}
                archive = _Archive(p, zf, _unique(safe_name(p.stem), taken))
                archives[real] = archive
                others = []
                found = _scan_zip(archive, limits, skipped, others)
                rel = {id(c): PurePosixPath(_entry_name(c.info)).parts for c in [*found, *others] if c.info is not None}
                chosen = _per_student_folders(found, rel, own, skipped)
                cands += chosen
                owners += _owners(others, rel, chosen)
            else:
                raise IntakeError(
                    f"{p}: no such file or directory. Pass notebooks (.ipynb), folders of notebooks, "
                    "or the zip your LMS gave you."
                )
        budgets = {id(a): _Budget(limits.max_total_bytes) for a in archives.values()}
        submissions = _choose(cands, staging, limits, budgets, skipped)
    graded = {s.student for s in submissions}
    no_notebook: dict[str, list[str]] = defaultdict(list)
    for who, label, name in sorted(owners):
        if who not in graded:
            no_notebook[label].append(name)
    return IntakeReport(submissions, skipped, dict(no_notebook))


def _owners(others: list[_Cand], rel: dict[int, tuple[str, ...]], chosen: list[_Cand]) -> list[tuple[str, str, str]]:
    """Whose the files that are not notebooks are, where the source says it: an LMS download's
    names, or a folder per student (where :func:`_per_student_folders` applied to the input).
    A loose file's stem says nothing (``alice_report.pdf`` beside ``alice.ipynb``)."""
    per_student = any("folder" in c.identity for c in chosen)
    out = []
    for o in others:
        if o.identity.get("lms") != "file":
            name = o.identity.get("name")
            out.append(
                (o.student, f"{o.student} ({name})" if name else o.student, o.identity.get("original", o.display))
            )
        elif per_student and len(rel.get(id(o), ())) >= 2:
            top, *inner = rel[id(o)]
            out.append((top, top, "/".join(inner)))
    return out


def _per_student_folders(
    cands: list[_Cand], rel: dict[int, tuple[str, ...]], own: set[str], skipped: list[tuple[str, str]]
) -> list[_Cand]:
    """One input's plain notebooks (``rel``: each one's path below the input), given a folder per
    student where the input holds, in a subfolder, a notebook named like the assignment's own
    (``own``: ``alice/vmap_convolve.ipynb``, nbgrader's ``submitted/alice/ps1/ps1.ipynb``).

    Then every plain notebook in a subfolder belongs to the student of its top folder below the
    input, whatever its own name or the folders a student made inside (``alice/bob/x.ipynb`` is
    alice's: a student names nothing outside their folder), and where that folder holds a
    notebook named like the assignment's, the others are set aside (``alice/scratch.ipynb``).
    Notebooks at the input's top level, LMS downloads and inputs without such a notebook keep
    their rules."""

    def plain_sub(c: _Cand) -> bool:
        return c.identity.get("lms") == "file" and len(rel.get(id(c), ())) >= 2

    if not any(plain_sub(c) and c.student.casefold() in own for c in cands):
        return cands
    out: list[_Cand] = []
    folders: dict[str, list[_Cand]] = defaultdict(list)
    for c in cands:
        (folders[rel[id(c)][0]] if plain_sub(c) else out).append(c)
    for top, group in folders.items():
        named = [c for c in group if c.student.casefold() in own]
        for c in group:
            if named and c not in named:
                skipped.append((c.display, OTHER_IN_FOLDER))
                continue
            out.append(replace(c, student=top, identity={**c.identity, "id": top, "folder": top}))
    return out


def _is_notebook_name(name: str) -> bool:
    return name.lower().endswith(".ipynb")


def _mtime(p: Path) -> float | None:
    try:
        return p.stat().st_mtime
    except OSError:
        return None


def _unique(base: str, taken: set[str]) -> str:
    name, n = base, 1
    while name.casefold() in taken:
        n += 1
        name = f"{base}-{n}"
    return name


def _open_zip(p: Path, limits: ArchiveLimits) -> zipfile.ZipFile:
    if not zipfile.is_zipfile(p):
        if p.suffix.lower() == ".zip":
            raise IntakeError(
                f"{p}: is not a readable zip archive (corrupt or incomplete download). Download it again from the LMS."
            )
        raise IntakeError(
            f"{p}: is neither a notebook (.ipynb) nor a zip archive. Pass notebooks, folders of notebooks, "
            "or the zip your LMS gave you (extract other archive formats first)."
        )
    try:
        zf = zipfile.ZipFile(p)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise IntakeError(f"{p}: is a corrupt zip archive ({exc}). Download it again from the LMS.") from None
    if len(zf.infolist()) > limits.max_entries:
        n = len(zf.infolist())
        zf.close()
        raise IntakeError(
            f"{p}: has {n} entries, over the limit of {limits.max_entries}. "
            "Download the submissions in smaller parts, or extract the zip and pass the folder."
        )
    return zf


# --------------------------------------------------------------------------- zip


def _entry_name(info: zipfile.ZipInfo) -> str:
    """The entry's name; UTF-8 names written without the UTF-8 flag (macOS, old tools) are repaired."""
    name = info.filename
    if not info.flag_bits & 0x800:
        try:
            name = name.encode("cp437").decode("utf-8")
        except (UnicodeEncodeError, UnicodeDecodeError):
            pass
    return name.replace("\\", "/")


def _path_problem(name: str) -> str | None:
    if name.startswith("/") or re.match(r"^[A-Za-z]:", name):
        return ABSOLUTE
    if ".." in name.split("/"):
        return TRAVERSAL
    return None


def _junk_reason(parts: list[str]) -> str | None:
    if "__MACOSX" in parts:
        return MACOSX
    if any(p.startswith(".") for p in parts):
        return HIDDEN
    return None


def _scan_zip(
    archive: _Archive, limits: ArchiveLimits, skipped: list[tuple[str, str]], others: list[_Cand] | None = None
) -> list[_Cand]:
    """Notebooks in an archive; ``others`` gets a candidate for each file that is not one (a PDF,
    a nested zip), to say whose it is."""
    zf = archive.zf
    label = archive.path.name
    notebooks: list[tuple[zipfile.ZipInfo, list[str], str]] = []
    metas: dict[tuple[str, ...], dict[str, Any]] = {}
    found_metas: list[tuple[tuple[str, ...], tuple[zipfile.ZipInfo, str]]] = []
    tops: set[str] = set()  # top-level folders of the archive ("" for files at its top level)
    other_files: list[tuple[zipfile.ZipInfo, list[str], str]] = []
    total = 0
    for info in zf.infolist():
        name = _entry_name(info)
        display = f"{label}:{name}"
        problem = _path_problem(name)
        if problem:
            skipped.append((display, problem))
            continue
        if stat.S_ISLNK(info.external_attr >> 16):
            skipped.append((display, SYMLINK))
            continue
        if info.is_dir() or name.endswith("/"):
            continue
        parts = [p for p in name.split("/") if p not in ("", ".")]
        if not parts:
            continue
        junk = _junk_reason(parts)
        if junk:
            skipped.append((display, junk))
            continue
        tops.add(parts[0] if len(parts) > 1 else "")
        kind = _file_kind(parts)
        if kind == _META:
            found_metas.append((tuple(parts[:-1]), (info, display)))
            continue
        if kind != _NOTEBOOK:
            skipped.append((display, kind))
            if kind in (NOT_NOTEBOOK, NESTED):
                other_files.append((info, parts, display))
            continue
        if info.flag_bits & 0x1:
            skipped.append((display, ENCRYPTED))
            continue
        if info.file_size > limits.max_notebook_bytes:
            skipped.append((display, _too_big(limits)))
            continue
        if info.file_size > limits.ratio_floor_bytes and info.file_size / max(info.compress_size, 1) > limits.max_ratio:
            skipped.append((display, _ratio(limits)))
            continue
        total += info.file_size
        notebooks.append((info, parts, display))
    # an export is one folder (or files at the top): a folder beside others is not the export
    single_top = tops if len(tops) == 1 and "" not in tops else set()
    for folder, (info, display) in found_metas:
        if not _lms_placed(folder, [f for f, _ in found_metas], single_top):
            skipped.append((display, PLANTED_META))
            continue
        if info.flag_bits & 0x1:
            skipped.append((display, ENCRYPTED))
            continue
        try:
            text = _read_small(zf, info, limits)
        except _Refused as exc:
            raise IntakeError(
                f"{display}: cannot read Gradescope's metadata ({exc}). Download the export again."
            ) from None
        metas[folder] = _parse_metadata(text, display)
    if total > limits.max_total_bytes:
        raise IntakeError(
            f"{archive.path}: its notebooks expand to {total / MiB:.0f} MiB, over the limit of "
            f"{limits.max_total_bytes / MiB:.0f} MiB. Check the download, or extract it and pass the folder."
        )
    out: list[_Cand] = []
    for info, parts, display in notebooks:
        try:
            stamp: float | None = datetime(*info.date_time).timestamp()
        except (ValueError, OverflowError, OSError):
            stamp = None
        try:
            out.append(_candidate(parts, metas, display, stamp, archive=archive, info=info))
        except _Refused as exc:
            skipped.append((display, str(exc)))
    for info, parts, display in other_files if others is not None else []:
        with suppress(_Refused):
            others.append(_candidate(parts, metas, display, None, archive=archive, info=info))
    return out


_META, _NOTEBOOK = "metadata", "notebook"


def _file_kind(parts: list[str]) -> str:
    """What one (non-junk) file of an archive or folder is, by its path: Gradescope's metadata,
    a notebook, or the reason it is set aside.  The same rules for zips and folders."""
    if parts[-1] == _GRADESCOPE_META:
        return _META
    if _moodle_plugin(parts) == "onlinetext":
        return ONLINETEXT
    if not _is_notebook_name(parts[-1]):
        return NESTED if parts[-1].lower().endswith(_ARCHIVE_SUFFIXES) else NOT_NOTEBOOK
    return _NOTEBOOK


def _too_big(limits: ArchiveLimits) -> str:
    return f"notebook larger than the {limits.max_notebook_bytes / MiB:g} MiB limit"


def _ratio(limits: ArchiveLimits) -> str:
    return f"compression ratio over {limits.max_ratio:g}:1 (zip bomb?)"


def _read_small(zf: zipfile.ZipFile, info: zipfile.ZipInfo, limits: ArchiveLimits) -> bytes:
    if info.file_size > limits.max_notebook_bytes:
        raise _Refused(_too_big(limits))
    chunks, n = [], 0
    try:
        with zf.open(info) as src:
            while chunk := src.read(1 << 16):
                n += len(chunk)
                if n > limits.max_notebook_bytes:
                    raise _Refused(_too_big(limits))
                chunks.append(chunk)
    except (zipfile.BadZipFile, EOFError, OSError, RuntimeError, NotImplementedError, ValueError) as exc:
        raise _Refused(f"corrupt entry ({exc})") from None
    except Exception as exc:  # zlib.error, lzma.LZMAError
        raise _Refused(f"corrupt entry ({type(exc).__name__}: {exc})") from None
    return b"".join(chunks)


def _extract(cand: _Cand, dest: Path, limits: ArchiveLimits, budget: _Budget) -> None:
    """Stream one entry to ``dest`` atomically, checking the real size and ratio as it goes."""
    assert cand.archive is not None and cand.info is not None
    info = cand.info
    n = 0
    with atomic_target(dest, keep_if_same=True) as tmp, open(tmp, "wb") as out:
        try:
            src = cand.archive.zf.open(info)
        except (zipfile.BadZipFile, EOFError, OSError, RuntimeError, NotImplementedError, ValueError) as exc:
            raise _Refused(f"corrupt entry ({exc})") from None
        with src:
            while True:
                try:
                    chunk = src.read(1 << 16)
                except (zipfile.BadZipFile, EOFError, OSError, RuntimeError, ValueError) as exc:
                    raise _Refused(f"corrupt entry ({exc})") from None
                except Exception as exc:  # zlib.error, lzma.LZMAError
                    raise _Refused(f"corrupt entry ({type(exc).__name__}: {exc})") from None
                if not chunk:
                    break
                n += len(chunk)
                if n > limits.max_notebook_bytes:
                    raise _Refused(_too_big(limits))
                if n > limits.ratio_floor_bytes and n / max(info.compress_size, 1) > limits.max_ratio:
                    raise _Refused(_ratio(limits))
                budget.used += len(chunk)
                if budget.used > budget.limit:
                    raise IntakeError(
                        f"{cand.archive.path}: its notebooks expand to more than "
                        f"{budget.limit / MiB:.0f} MiB. Check the download, or extract it and pass the folder."
                    )
                out.write(chunk)
        if n != info.file_size:
            raise _Refused(f"corrupt entry ({n} bytes where the header says {info.file_size})")


# --------------------------------------------------------------------------- folders


def _scan_dir(
    root: Path, staging: Path, skipped: list[tuple[str, str]], seen: set[Path], others: list[_Cand] | None = None
) -> list[_Cand]:
    """Notebooks under a folder; the folder's own name takes part in recognising Moodle folders.
    ``others`` gets a candidate for each file that is not a notebook, to say whose it is."""
    skip_dirs = {staging.resolve()} if staging.exists() else set()
    top = root.resolve().name
    notebooks: list[tuple[Path, list[str]]] = []
    other_files: list[tuple[Path, list[str]]] = []
    metas: dict[tuple[str, ...], dict[str, Any]] = {}
    found_metas: list[tuple[tuple[str, ...], Path]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        rel = here.relative_to(root).parts
        keep = []
        for d in sorted(dirnames):
            sub = here / d
            if sub.resolve() in skip_dirs:
                continue
            if sub.is_symlink():
                skipped.append((str(sub), SYMLINK))
                continue
            junk = _junk_reason([d])
            if junk:
                skipped.append((f"{sub}/", junk))
                continue
            keep.append(d)
        dirnames[:] = keep
        for f in sorted(filenames):
            p = here / f
            parts = [top, *rel, f]
            junk = _junk_reason([f])
            if junk:
                skipped.append((str(p), junk))
                continue
            if p.is_symlink():
                skipped.append((str(p), SYMLINK))
                continue
            kind = _file_kind(parts)
            if kind == _META:
                found_metas.append((tuple(parts[:-1]), p))
                continue
            if kind != _NOTEBOOK:
                skipped.append((str(p), kind))
                if kind in (NOT_NOTEBOOK, NESTED):
                    other_files.append((p, parts))
                continue
            notebooks.append((p, parts))
    placed = [(f, p) for f, p in found_metas if _lms_placed(f[1:], [g[1:] for g, _ in found_metas], None)]
    nested = [p for f, p in placed if len(f) > 1]
    outside = [p for p, parts in notebooks if not any(tuple(parts[: len(f)]) == f for f, _ in placed)]
    if nested and outside:
        # a top-level folder's metadata is an export's only where the input is exports and
        # nothing else: beside other notebooks, that folder may be a student's (a folder per
        # student), whose metadata would hand their notebooks to any classmate's id; dropping it
        # would grade a real export as one student: neither is guessed
        raise IntakeError(
            f"{root}: Gradescope's submission_metadata.yml in {nested[0].parent} beside notebooks that are in "
            f"no Gradescope export ({outside[0]}{f' and {len(outside) - 1} more' if len(outside) > 1 else ''}). "
            "Pass the export folder itself; if that file is not Gradescope's (a student's folder holds it), "
            "remove it."
        )
    for folder, p in found_metas:
        # the folder passed is the export itself or holds it (a TA's downloads folder may hold
        # several exports, and nothing else): then any top-level folder that is not a
        # submission's may hold metadata
        if (folder, p) not in placed:
            skipped.append((str(p), PLANTED_META))
            continue
        try:
            data = p.read_bytes()
        except OSError as exc:
            raise IntakeError(f"{p}: cannot read Gradescope's metadata ({exc.strerror}).") from None
        metas[folder] = _parse_metadata(data, str(p))
    out: list[_Cand] = []
    for p, parts in notebooks:
        real = p.resolve()
        if real in seen:
            continue
        seen.add(real)
        try:
            out.append(_candidate(parts, metas, str(p), _mtime(p), disk=p))
        except _Refused as exc:
            skipped.append((str(p), str(exc)))
    for p, parts in other_files if others is not None else []:
        with suppress(_Refused):
            others.append(_candidate(parts, metas, str(p), None, disk=p))
    return out


# --------------------------------------------------------------------------- recognising the LMS


def _lms_placed(folder: tuple[str, ...], all_folders: list[tuple[str, ...]], tops: set[str] | None) -> bool:
    """Whether a ``submission_metadata.yml`` in ``folder`` (relative to the input) is where
    Gradescope puts it: at the export's top level, or in its single top-level folder.

    Never one inside a submission folder: a student's upload can hold any file, and a metadata
    file there would rename the class's submissions (issue 11).  A top-level one wins over all
    others.  ``tops``: the top-level folders that may hold it (an archive's single top-level
    folder), or None for a folder input, where any top-level folder not named like a submission
    folder qualifies."""
    if folder == ():
        return True
    if len(folder) != 1 or () in all_folders or _GS_FOLDER.match(folder[0]):
        return False
    return tops is None or folder[0] in tops


def _moodle_plugin(parts: list[str]) -> str | None:
    for d in parts[:-1]:
        m = _MOODLE_DIR.match(d)
        if m:
            return m["plugin"].lower()
    m = _MOODLE_FLAT.match(parts[-1]) if len(parts[-1]) <= MAX_NAME else None
    return m["plugin"].lower() if m else None


def _candidate(
    parts: list[str],
    metas: dict[tuple[str, ...], dict[str, Any]],
    display: str,
    stamp: float | None,
    *,
    disk: Path | None = None,
    archive: _Archive | None = None,
    info: zipfile.ZipInfo | None = None,
) -> _Cand:
    """Who submitted the notebook at ``parts`` (a path split into components)."""
    base = parts[-1]
    common: dict[str, Any] = {"display": display, "stamp": stamp, "disk": disk, "archive": archive, "info": info}
    # Gradescope: under a folder that holds submission_metadata.yml (the deepest such folder)
    prefix = max((k for k in metas if tuple(parts[: len(k)]) == k and len(parts) > len(k)), key=len, default=None)
    if prefix is not None:
        rest = parts[len(prefix) :]
        folder = rest[0]
        meta = metas[prefix]
        m = _GS_FOLDER.match(folder)
        if len(rest) < 2 or (folder not in meta and not m):
            raise _Refused(OUTSIDE_GRADESCOPE)
        return _gradescope(folder, m["id"] if m else folder, meta.get(folder), "/".join(rest[1:]), common)
    # Moodle: a participant's folder anywhere on the path, or the flat file name
    for d in parts[:-1]:
        m = _MOODLE_DIR.match(d)
        if m:
            inner = parts[parts.index(d) + 1 :]
            return _moodle(m["name"], m["pid"], "/".join(inner), common)
    # (names longer than any file system allows are no LMS's: their patterns would take time with
    # the square of the length on a name with a newline)
    m = _MOODLE_FLAT.match(base) if len(base) <= MAX_NAME else None
    if m:
        return _moodle(m["name"], m["pid"], m["orig"], common)
    # Canvas: name_[LATE_]userid_fileid_original.ipynb, or [LATE_]anon_<id>_fileid_original.ipynb
    m = (_CANVAS_ANON.match(base) or _CANVAS.match(base)) if len(base) <= MAX_NAME else None
    if m:
        identity = {"lms": "canvas", "id": m["uid"], "original": m["orig"]}
        if m.re is _CANVAS:
            identity["name"] = m["name"]
        # the dates in a Canvas zip are when Canvas built the zip: the file id orders uploads instead
        common["stamp"] = None
        return _Cand(m["uid"], identity, late_flag=bool(m["late"]), fileid=int(m["fid"]), **common)
    stem = base[: -len(".ipynb")]
    return _Cand(stem, {"lms": "file", "id": stem, "original": base}, **common)


def _moodle(name: str, pid: str, original: str, common: dict[str, Any]) -> _Cand:
    identity = {"lms": "moodle", "id": pid, "name": name.replace("_", " ").strip(), "original": original}
    return _Cand(pid, identity, **common)


def _gradescope(folder: str, sub_id: str, entry: Any, original: str, common: dict[str, Any]) -> _Cand:
    names: list[str] = []
    emails: list[str] = []
    keys: list[str] = []
    submitters = _get(entry, "submitters") if isinstance(entry, dict) else None
    for person in submitters if isinstance(submitters, list) else []:
        if not isinstance(person, dict):
            continue
        name, sid, email = (_scalar(_get(person, k)) for k in ("name", "sid", "email"))
        if name:
            names.append(name)
        if email:
            emails.append(email)
        key = sid or email
        if key:
            keys.append(key)
    student = keys[0] if keys else folder
    identity = {"lms": "gradescope", "id": student, "submission_id": sub_id, "original": original}
    if names:
        identity["name"] = ", ".join(names)
    if emails:
        identity["email"] = ", ".join(emails)
    if len(keys) > 1:
        identity["members"] = ", ".join(keys)
    when = parse_time(_get(entry, "created_at")) if isinstance(entry, dict) else None
    return _Cand(student, identity, submitted_at=when, **common)


def _get(d: dict[str, Any], key: str) -> Any:
    """A Gradescope metadata field, written Ruby-style (``:key:``) or plainly (``key:``)."""
    for k in (f":{key}", key, f":{key}:"):
        if k in d:
            return d[k]
    return None


def _scalar(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return ""
    if isinstance(v, (str, int, float)):
        return str(v).strip()
    return ""


def parse_time(v: Any) -> datetime | None:
    """An LMS time (ISO 8601, any fraction digits, `Z` or an offset; none: UTC), or None."""
    if isinstance(v, datetime):
        dt = v
    elif isinstance(v, str):
        m = _TIME.match(v.strip())
        if not m:
            return None
        y, mo, d, h, mi, s, frac, tz = m.groups()
        micro = int((frac or "0")[:6].ljust(6, "0"))
        tzinfo = None
        if tz and tz.upper() == "Z":
            tzinfo = timezone.utc
        elif tz:
            sign = -1 if tz[0] == "-" else 1
            digits = tz[1:].replace(":", "")
            hours, minutes = int(digits[:2]), int(digits[2:] or 0)
            tzinfo = timezone(sign * timedelta(hours=hours, minutes=minutes))
        try:
            dt = datetime(int(y), int(mo), int(d), int(h), int(mi), int(s), micro, tzinfo=tzinfo)
        except ValueError:
            return None
    else:
        return None
    # YAML: a timestamp without a time zone is UTC
    return dt if dt.tzinfo is not None else dt.replace(tzinfo=timezone.utc)


class _MetaLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """Safe YAML that reads unknown (Ruby) tags as plain data instead of failing."""


def _plain(loader: Any, _suffix: str, node: Any) -> Any:
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node, deep=True)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    return loader.construct_scalar(node)


_MetaLoader.add_multi_constructor("!", _plain)


def _parse_metadata(data: bytes, where: str) -> dict[str, Any]:
    try:
        doc = yaml.load(data.decode("utf-8-sig"), Loader=_MetaLoader)  # a safe loader (Ruby tags read as plain data)
    except (yaml.YAMLError, UnicodeDecodeError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise IntakeError(
            f"{where}: cannot read Gradescope's submission metadata ({first}). Download the export again."
        ) from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise IntakeError(
            f"{where}: Gradescope's submission metadata is not a mapping of submissions. Download the export again."
        )
    return {str(k): v for k, v in doc.items() if isinstance(v, dict)}


# --------------------------------------------------------------------------- choosing and staging


def _natural(s: str) -> tuple[tuple[int, int, str], ...]:
    return tuple((0, int(p), "") if p.isdigit() and p.isascii() else (1, 0, p) for p in re.split(r"([0-9]+)", s) if p)


def _order_key(c: _Cand) -> tuple[Any, ...]:
    """Larger is later: submission time, file timestamp, Canvas file id, resubmission suffix, name."""
    name = c.identity.get("original") or c.display
    stem = PurePosixPath(name).stem
    m = _RESUBMISSION.search(stem)
    return (
        c.submitted_at.timestamp() if c.submitted_at else float("-inf"),
        c.stamp if c.stamp is not None else float("-inf"),
        c.fileid if c.fileid is not None else -1,
        int(m.group(1)) if m else 0,
        _natural(name),
        c.display,
    )


def _choose(
    cands: list[_Cand],
    staging: Path,
    limits: ArchiveLimits,
    budgets: dict[int, _Budget],
    skipped: list[tuple[str, str]],
) -> list[Incoming]:
    groups: dict[str, list[_Cand]] = defaultdict(list)
    for c in cands:
        groups[c.student].append(c)
    out: list[Incoming] = []
    for student in sorted(groups):
        ordered = sorted(groups[student], key=_order_key, reverse=True)
        winner: tuple[_Cand, Path] | None = None
        older: list[_Cand] = []
        for c in ordered:
            if winner is not None:
                older.append(c)
                continue
            if c.disk is not None:
                winner = (c, c.disk)
                continue
            assert c.archive is not None
            dest = staging / c.archive.dirname / f"{_file_name(c.archive, student)}.ipynb"
            try:
                _extract(c, dest, limits, budgets[id(c.archive)])
            except _Refused as exc:
                skipped.append((c.display, str(exc)))
                continue
            winner = (c, dest)
        if winner is None:
            continue
        c, path = winner
        for o in older:
            skipped.append((o.display, OLDER))
        out.append(
            Incoming(
                path=path,
                student=student,
                identity=dict(c.identity),
                late_flag=c.late_flag,
                submitted_at=c.submitted_at,
                ignored=tuple(o.display for o in older),
                source=c.display,
            )
        )
    return out


def _file_name(archive: _Archive, student: str) -> str:
    """A file name under the archive's staging folder, the same for the same student on every run."""
    if student not in archive.names:
        taken = {n.casefold() for n in archive.names.values()}
        archive.names[student] = _unique(safe_name(student), taken)
    return archive.names[student]
