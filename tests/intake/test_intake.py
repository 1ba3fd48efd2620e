"""Intake of notebooks, folders and LMS downloads (Canvas, Moodle, Gradescope): ids, rules, zip safety."""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import struct
import zipfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from grader.intake import collect as intake
from grader.intake.collect import ArchiveLimits, IntakeError, collect
from grader.publish.output import safe_name

MiB = 1 << 20
T0 = (2024, 3, 1, 10, 0, 0)


def nb(marker: str) -> bytes:
    """A small notebook whose only cell names the marker (to tell which file was chosen)."""
    doc = {
        "cells": [{"cell_type": "code", "id": "c0", "metadata": {}, "execution_count": None, "outputs": [],
                   "source": f"x = {marker!r}"}],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }  # fmt: skip
    return json.dumps(doc, ensure_ascii=False).encode()


def marker(path: Path) -> str:
    return json.loads(path.read_text(encoding="utf-8"))["cells"][0]["source"]


def make_zip(
    path: Path, entries: list[tuple[str | zipfile.ZipInfo, bytes]], method: int = zipfile.ZIP_DEFLATED
) -> Path:
    with zipfile.ZipFile(path, "w", method) as zf:
        for name, data in entries:
            info = name if isinstance(name, zipfile.ZipInfo) else zipfile.ZipInfo(name, date_time=T0)
            info.compress_type = method
            zf.writestr(info, data)
    return path


def at(name: str, when: tuple[int, ...]) -> zipfile.ZipInfo:
    return zipfile.ZipInfo(name, date_time=when)


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def by_student(report: intake.IntakeReport) -> dict[str, intake.Incoming]:
    return {s.student: s for s in report.submissions}


def patch_headers(
    data: bytes, name: str, *, size: int | None = None, clear_utf8: bool = False, encrypted: bool = False
) -> bytes:
    """Rewrite one entry's uncompressed size and/or flags in both its local and central headers."""
    buf = bytearray(data)
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        info = next(i for i in zf.infolist() if i.filename == name)
        start = zf.start_dir
    local = info.header_offset
    assert buf[local : local + 4] == b"PK\x03\x04"
    pos = start
    while buf[pos : pos + 4] == b"PK\x01\x02":
        nlen, elen, clen = struct.unpack("<HHH", buf[pos + 28 : pos + 34])
        offset = struct.unpack("<I", buf[pos + 42 : pos + 46])[0]
        if offset == local:
            for flag_at, size_at in ((local + 6, local + 22), (pos + 8, pos + 24)):
                if size is not None:
                    buf[size_at : size_at + 4] = struct.pack("<I", size)
                (flags,) = struct.unpack("<H", buf[flag_at : flag_at + 2])
                flags = (flags & ~0x800 if clear_utf8 else flags) | (0x1 if encrypted else 0)
                buf[flag_at : flag_at + 2] = struct.pack("<H", flags)
        pos += 46 + nlen + elen + clen
    return bytes(buf)


# --------------------------------------------------------------------------- Canvas


def canvas_zip(tmp_path: Path) -> Path:
    return make_zip(
        tmp_path / "submissions.zip",
        [
            # Jane resubmitted: the later upload has the larger file id, though its zip date is older
            (at("doejane_123_1001_hw1.ipynb", (2024, 3, 2, 9, 0, 0)), nb("jane first")),
            (at("doejane_123_1005_hw1-1.ipynb", (2024, 3, 1, 9, 0, 0)), nb("jane second")),
            ("doejane_123_1003_notes.pdf", b"%PDF-1.4"),
            ("smithbob_LATE_456_2001_hw1.ipynb", nb("bob")),
            ("leeann_late_789_3001_Homework 1.ipynb", nb("ann")),
            ("LATE_anon_Ab3dE_4001_hw1.ipynb", nb("anonymous")),
            ("müllerjürgen_321_5001_übung.ipynb", nb("jürgen")),
            ("__MACOSX/._doejane_123_1001_hw1.ipynb", b"\0\5\26\7"),
            (".DS_Store", b"\0\0\0\1Bud1"),
        ],
    )


def test_canvas_ids_late_flags_and_resubmissions(tmp_path: Path) -> None:
    staging = tmp_path / "out" / "submissions"
    report = collect([canvas_zip(tmp_path)], staging)
    subs = by_student(report)
    assert sorted(subs) == ["123", "321", "456", "789", "anon_Ab3dE"]

    jane = subs["123"]
    assert jane.identity == {"lms": "canvas", "id": "123", "name": "doejane", "original": "hw1-1.ipynb"}
    assert marker(jane.path) == "x = 'jane second'"
    assert jane.path == staging / "submissions" / "123.ipynb"
    assert jane.late_flag is False and jane.submitted_at is None
    assert jane.ignored == ("submissions.zip:doejane_123_1001_hw1.ipynb",)
    assert jane.source == "submissions.zip:doejane_123_1005_hw1-1.ipynb"

    assert subs["456"].late_flag is True
    assert subs["456"].identity == {"lms": "canvas", "id": "456", "name": "smithbob", "original": "hw1.ipynb"}
    assert subs["789"].late_flag is True
    assert subs["789"].identity["original"] == "Homework 1.ipynb"
    assert subs["anon_Ab3dE"].identity == {"lms": "canvas", "id": "anon_Ab3dE", "original": "hw1.ipynb"}
    assert subs["anon_Ab3dE"].late_flag is True
    assert subs["321"].identity == {"lms": "canvas", "id": "321", "name": "müllerjürgen", "original": "übung.ipynb"}
    assert marker(subs["321"].path) == "x = 'jürgen'"

    assert sorted(report.skipped) == sorted(
        [
            ("submissions.zip:doejane_123_1003_notes.pdf", intake.NOT_NOTEBOOK),
            ("submissions.zip:__MACOSX/._doejane_123_1001_hw1.ipynb", intake.MACOSX),
            ("submissions.zip:.DS_Store", intake.HIDDEN),
            ("submissions.zip:doejane_123_1001_hw1.ipynb", "older notebook of the same student"),
        ]
    )
    # only the graded notebooks were written, under names built from the ids
    assert sorted(p.name for p in (staging / "submissions").iterdir()) == [
        "123.ipynb",
        "321.ipynb",
        "456.ipynb",
        "789.ipynb",
        "anon_Ab3dE.ipynb",
    ]


def test_resubmission_suffix_and_zip_date_break_ties_without_file_ids(tmp_path: Path) -> None:
    # same Moodle student, no file ids: the zip date decides, then the -N suffix
    z = make_zip(
        tmp_path / "m.zip",
        [
            (at("Jane Doe_7_assignsubmission_file_/hw.ipynb", T0), nb("plain")),
            (at("Jane Doe_7_assignsubmission_file_/hw-1.ipynb", T0), nb("one")),
            (at("Jane Doe_7_assignsubmission_file_/hw-2.ipynb", T0), nb("two")),
        ],
    )
    report = collect([z], tmp_path / "s")
    (jane,) = report.submissions
    assert marker(jane.path) == "x = 'two'"
    assert jane.ignored == (
        "m.zip:Jane Doe_7_assignsubmission_file_/hw-1.ipynb",
        "m.zip:Jane Doe_7_assignsubmission_file_/hw.ipynb",
    )


def test_idempotent_extraction(tmp_path: Path) -> None:
    z = canvas_zip(tmp_path)
    staging = tmp_path / "out" / "submissions"
    first = collect([z], staging)
    digests = {s.student: (s.path, sha(s.path)) for s in first.submissions}
    mtimes = {s.student: s.path.stat().st_mtime_ns for s in first.submissions}
    second = collect([z], staging)
    assert {s.student: (s.path, sha(s.path)) for s in second.submissions} == digests
    assert {s.student: s.path.stat().st_mtime_ns for s in second.submissions} == mtimes  # left untouched
    assert [(s.student, s.identity, s.ignored) for s in second.submissions] == [
        (s.student, s.identity, s.ignored) for s in first.submissions
    ]
    # a damaged staged copy is put back; no temporary files are left behind
    damaged = first.submissions[0].path
    damaged.write_text("garbage", encoding="utf-8")
    third = collect([z], staging)
    assert sha(third.submissions[0].path) == digests[third.submissions[0].student][1]
    assert not [p for p in staging.rglob("*") if p.name.startswith(".")]


# --------------------------------------------------------------------------- Moodle


def test_moodle_folder_form(tmp_path: Path) -> None:
    z = make_zip(
        tmp_path / "HW1-12345.zip",
        [
            (at("Jane Doe_101_assignsubmission_file_/hw1.ipynb", (2024, 3, 2, 10, 0, 0)), nb("jane final")),
            (at("Jane Doe_101_assignsubmission_file_/scratch.ipynb", (2024, 3, 1, 10, 0, 0)), nb("scratch")),
            ("Jane Doe_101_assignsubmission_onlinetext_/onlinetext.html", b"<p>hi</p>"),
            ("Ünal Çelik_102_assignsubmission_file_/Ödev 1.ipynb", nb("ünal")),
            ("Participant_103_assignsubmission_file_/sub/hw1.ipynb", nb("blind")),
            ("Ünal Çelik_102_assignsubmission_file_/data.csv", b"a,b\n"),
        ],
    )
    report = collect([z], tmp_path / "s")
    subs = by_student(report)
    assert sorted(subs) == ["101", "102", "103"]
    assert subs["101"].identity == {"lms": "moodle", "id": "101", "name": "Jane Doe", "original": "hw1.ipynb"}
    assert marker(subs["101"].path) == "x = 'jane final'"
    assert subs["101"].ignored == ("HW1-12345.zip:Jane Doe_101_assignsubmission_file_/scratch.ipynb",)
    assert subs["102"].identity == {"lms": "moodle", "id": "102", "name": "Ünal Çelik", "original": "Ödev 1.ipynb"}
    assert subs["103"].identity == {"lms": "moodle", "id": "103", "name": "Participant", "original": "sub/hw1.ipynb"}
    assert subs["102"].path == tmp_path / "s" / "HW1-12345" / "102.ipynb"
    assert sorted(report.skipped) == sorted(
        [
            ("HW1-12345.zip:Jane Doe_101_assignsubmission_onlinetext_/onlinetext.html", intake.ONLINETEXT),
            ("HW1-12345.zip:Ünal Çelik_102_assignsubmission_file_/data.csv", intake.NOT_NOTEBOOK),
            ("HW1-12345.zip:Jane Doe_101_assignsubmission_file_/scratch.ipynb", intake.OLDER),
        ]
    )


def test_moodle_flat_form(tmp_path: Path) -> None:
    z = make_zip(
        tmp_path / "flat.zip",
        [
            ("Bob Ray_201_assignsubmission_file_hw1.ipynb", nb("bob")),
            ("Bob Ray_201_assignsubmission_onlinetext_onlinetext.html", b"<p>text</p>"),
            ("Zoë Ng_202_assignsubmission_file_my_hw_1.ipynb", nb("zoë")),
        ],
    )
    report = collect([z], tmp_path / "s")
    subs = by_student(report)
    assert subs["201"].identity == {"lms": "moodle", "id": "201", "name": "Bob Ray", "original": "hw1.ipynb"}
    assert subs["202"].identity == {"lms": "moodle", "id": "202", "name": "Zoë Ng", "original": "my_hw_1.ipynb"}
    assert report.skipped == [("flat.zip:Bob Ray_201_assignsubmission_onlinetext_onlinetext.html", intake.ONLINETEXT)]


def test_moodle_extracted_folder(tmp_path: Path) -> None:
    root = tmp_path / "HW1 download"
    (root / "Jane Doe_101_assignsubmission_file_").mkdir(parents=True)
    (root / "Jane Doe_101_assignsubmission_file_" / "hw1.ipynb").write_bytes(nb("jane"))
    (root / "Jane Doe_101_assignsubmission_file_" / ".ipynb_checkpoints").mkdir()
    (root / "Jane Doe_101_assignsubmission_file_" / ".ipynb_checkpoints" / "hw1-checkpoint.ipynb").write_bytes(nb("c"))
    (root / "Li Wei_102_assignsubmission_file_").mkdir()
    (root / "Li Wei_102_assignsubmission_file_" / "hw1.ipynb").write_bytes(nb("li"))
    report = collect([root], tmp_path / "s")
    subs = by_student(report)
    assert sorted(subs) == ["101", "102"]
    assert subs["101"].path == root / "Jane Doe_101_assignsubmission_file_" / "hw1.ipynb"  # graded in place
    assert subs["101"].identity == {"lms": "moodle", "id": "101", "name": "Jane Doe", "original": "hw1.ipynb"}
    assert report.skipped == [
        (f"{root / 'Jane Doe_101_assignsubmission_file_' / '.ipynb_checkpoints'}/", intake.HIDDEN)
    ]
    assert not (tmp_path / "s").exists()  # nothing to extract
    # the participant's folder itself, passed directly, is recognised too
    single = collect([root / "Li Wei_102_assignsubmission_file_"], tmp_path / "s")
    assert [(s.student, s.identity["name"]) for s in single.submissions] == [("102", "Li Wei")]


# --------------------------------------------------------------------------- Gradescope

GRADESCOPE_META = """\
submission_111:
  :submitters:
  - :name: Ada Lovelace
    :sid: '1001'
    :email: ada@example.edu
  :created_at: 2024-03-01 10:00:00.123456789 -08:00
  :score: 0.0
  :history: []
submission_222:
  :submitters:
  - :name: Grace Hopper
    :sid: '1002'
    :email: grace@example.edu
  - :name: Alan Turing
    :sid: '1003'
    :email: alan@example.edu
  :created_at: 2024-03-02 09:30:00.000000000 +01:00
submission_333:
  :submitters:
  - :name: Émile Zola
    :email: emile@example.edu
  :created_at: '2024-03-03T12:00:00Z'
submission_555:
  :submitters:
  - :name: Ada Lovelace
    :sid: '1001'
    :email: ada@example.edu
  :created_at: 2024-02-28 10:00:00.000000000 -08:00
"""


def gradescope_tree() -> list[tuple[str, bytes]]:
    top = "assignment_9_export/"
    return [
        (top + "submission_metadata.yml", GRADESCOPE_META.encode()),
        (top + "submission_111/hw1.ipynb", nb("ada")),
        (top + "submission_222/hw1.ipynb", nb("group")),
        (top + "submission_333/hw1.ipynb", nb("émile")),
        (top + "submission_444/hw1.ipynb", nb("unknown")),
        (top + "submission_555/hw1.ipynb", nb("ada old")),
        (top + "stray.ipynb", nb("stray")),
    ]


def check_gradescope(report: intake.IntakeReport, label: str) -> None:
    subs = by_student(report)
    assert sorted(subs) == ["1001", "1002", "emile@example.edu", "submission_444"]
    ada = subs["1001"]
    assert ada.identity == {
        "lms": "gradescope",
        "id": "1001",
        "submission_id": "111",
        "original": "hw1.ipynb",
        "name": "Ada Lovelace",
        "email": "ada@example.edu",
    }
    assert ada.submitted_at == datetime(2024, 3, 1, 10, 0, 0, 123456, tzinfo=timezone(timedelta(hours=-8)))
    assert marker(ada.path) == "x = 'ada'"  # the later of her two submissions, by :created_at:
    assert ada.ignored == (f"{label}submission_555/hw1.ipynb",)
    group = subs["1002"]
    assert group.identity == {
        "lms": "gradescope",
        "id": "1002",
        "submission_id": "222",
        "original": "hw1.ipynb",
        "name": "Grace Hopper, Alan Turing",
        "email": "grace@example.edu, alan@example.edu",
        "members": "1002, 1003",
    }
    assert group.submitted_at == datetime(2024, 3, 2, 8, 30, tzinfo=timezone.utc)
    emile = subs["emile@example.edu"]
    assert emile.identity["name"] == "Émile Zola" and emile.identity["id"] == "emile@example.edu"
    assert emile.submitted_at == datetime(2024, 3, 3, 12, 0, tzinfo=timezone.utc)
    assert subs["submission_444"].identity == {
        "lms": "gradescope",
        "id": "submission_444",
        "submission_id": "444",
        "original": "hw1.ipynb",
    }
    assert subs["submission_444"].submitted_at is None
    assert sorted(report.skipped) == sorted(
        [
            (f"{label}stray.ipynb", intake.OUTSIDE_GRADESCOPE),
            (f"{label}submission_555/hw1.ipynb", intake.OLDER),
        ]
    )


def test_gradescope_export_zip(tmp_path: Path) -> None:
    z = make_zip(tmp_path / "assignment_9_export.zip", gradescope_tree())
    staging = tmp_path / "s"
    report = collect([z], staging)
    check_gradescope(report, "assignment_9_export.zip:assignment_9_export/")
    assert by_student(report)["emile@example.edu"].path == staging / "assignment_9_export" / "emile@example.edu.ipynb"


def test_gradescope_extracted_folder(tmp_path: Path) -> None:
    root = tmp_path / "download"
    for name, data in gradescope_tree():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    report = collect([root], tmp_path / "s")
    check_gradescope(report, f"{root}/assignment_9_export/")
    assert by_student(report)["1001"].path == root / "assignment_9_export" / "submission_111" / "hw1.ipynb"


def test_gradescope_plain_keys(tmp_path: Path) -> None:
    meta = "submission_7:\n  submitters:\n  - name: Plain Keys\n    sid: 77\n  created_at: 2024-01-01 00:00:00\n"
    z = make_zip(tmp_path / "gs.zip", [("submission_metadata.yml", meta.encode()), ("submission_7/a.ipynb", nb("p"))])
    (sub,) = collect([z], tmp_path / "s").submissions
    assert sub.student == "77"
    assert sub.identity == {
        "lms": "gradescope",
        "id": "77",
        "submission_id": "7",
        "original": "a.ipynb",
        "name": "Plain Keys",
    }
    assert sub.submitted_at == datetime(2024, 1, 1, tzinfo=timezone.utc)  # YAML: no zone means UTC


def test_gradescope_bad_metadata(tmp_path: Path) -> None:
    z = make_zip(
        tmp_path / "gs.zip", [("x/submission_metadata.yml", b"a: [unclosed"), ("x/submission_1/a.ipynb", nb("a"))]
    )
    with pytest.raises(IntakeError, match=r"gs\.zip:x/submission_metadata\.yml: cannot read Gradescope"):
        collect([z], tmp_path / "s")


# --------------------------------------------------------------------------- zip safety


def test_refused_entries(tmp_path: Path) -> None:
    link = zipfile.ZipInfo("link.ipynb", date_time=T0)
    link.create_system = 3
    link.external_attr = (stat.S_IFLNK | 0o777) << 16
    z = make_zip(
        tmp_path / "bad.zip",
        [
            ("../evil.ipynb", nb("evil")),
            ("a/../../evil2.ipynb", nb("evil")),
            ("/abs.ipynb", nb("abs")),
            ("C:\\Users\\x\\win.ipynb", nb("win")),
            (link, b"/etc/passwd"),
            ("locked.ipynb", nb("locked")),
            ("inner.zip", b"PK\x05\x06" + b"\0" * 18),
            ("good.ipynb", nb("good")),
        ],
    )
    z.write_bytes(patch_headers(z.read_bytes(), "locked.ipynb", encrypted=True))  # writestr clears the flag
    staging = tmp_path / "out" / "submissions"
    report = collect([z], staging)
    assert [(s.student, s.identity) for s in report.submissions] == [
        ("good", {"lms": "file", "id": "good", "original": "good.ipynb"})
    ]
    assert sorted(report.skipped) == sorted(
        [
            ("bad.zip:../evil.ipynb", intake.TRAVERSAL),
            ("bad.zip:a/../../evil2.ipynb", intake.TRAVERSAL),
            ("bad.zip:/abs.ipynb", intake.ABSOLUTE),
            ("bad.zip:C:/Users/x/win.ipynb", intake.ABSOLUTE),
            ("bad.zip:link.ipynb", intake.SYMLINK),
            ("bad.zip:locked.ipynb", intake.ENCRYPTED),
            ("bad.zip:inner.zip", intake.NESTED),
        ]
    )
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert written == ["bad.zip", "out/submissions/bad/good.ipynb"]


def test_zip_bomb_with_lying_header_falls_back_to_older_notebook(tmp_path: Path) -> None:
    bomb = b'{"cells": [], "x": "' + b"a" * (3 * MiB) + b'"}'
    raw = io.BytesIO()
    with zipfile.ZipFile(raw, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(at("doejane_123_1001_hw1.ipynb", T0), nb("good old"))
        zf.writestr(at("doejane_123_1002_hw1.ipynb", T0), bomb)  # the later upload, whose header lies
    lying = patch_headers(raw.getvalue(), "doejane_123_1002_hw1.ipynb", size=1000)
    z = tmp_path / "bomb.zip"
    z.write_bytes(lying)
    staging = tmp_path / "s"
    report = collect([z], staging, limits=ArchiveLimits(max_notebook_bytes=1 * MiB))
    (jane,) = report.submissions
    assert marker(jane.path) == "x = 'good old'"
    assert jane.ignored == ()
    ((name, reason),) = report.skipped
    assert name == "bomb.zip:doejane_123_1002_hw1.ipynb"
    assert reason.startswith("corrupt entry")
    assert [p.name for p in staging.rglob("*") if p.is_file()] == ["123.ipynb"]  # no temp file left
    assert (staging / "bomb" / "123.ipynb").stat().st_size < 1000


def test_size_and_ratio_limits(tmp_path: Path) -> None:
    big = b'{"x": "' + os.urandom(3 * MiB // 2).hex().encode()[: 2 * MiB] + b'"}'
    zeros = b" " * (4 * MiB)
    z1 = make_zip(tmp_path / "big.zip", [("big.ipynb", big), ("ok.ipynb", nb("ok"))])
    report = collect([z1], tmp_path / "s", limits=ArchiveLimits(max_notebook_bytes=1 * MiB))
    assert [s.student for s in report.submissions] == ["ok"]
    assert report.skipped == [("big.zip:big.ipynb", "notebook larger than the 1 MiB limit")]

    z2 = make_zip(tmp_path / "ratio.zip", [("bomb.ipynb", zeros), ("ok.ipynb", nb("ok"))], zipfile.ZIP_BZIP2)
    report = collect([z2], tmp_path / "s")
    assert [s.student for s in report.submissions] == ["ok"]
    assert report.skipped == [("ratio.zip:bomb.ipynb", "compression ratio over 1000:1 (zip bomb?)")]


def test_archive_limits_raise(tmp_path: Path) -> None:
    z = make_zip(tmp_path / "many.zip", [(f"s{i}.ipynb", nb(str(i))) for i in range(11)])
    with pytest.raises(IntakeError, match=r"many\.zip: has 11 entries, over the limit of 10"):
        collect([z], tmp_path / "s", limits=ArchiveLimits(max_entries=10))
    with pytest.raises(IntakeError, match=r"many\.zip: its notebooks expand to"):
        collect([z], tmp_path / "s", limits=ArchiveLimits(max_total_bytes=500))


def test_not_a_zip_and_corrupt_zip(tmp_path: Path) -> None:
    fake = tmp_path / "submissions.zip"
    fake.write_text("this is not a zip", encoding="utf-8")
    with pytest.raises(IntakeError, match=r"submissions\.zip: is not a readable zip archive.*Download it again"):
        collect([fake], tmp_path / "s")
    other = tmp_path / "grades.tar.gz"
    other.write_bytes(b"\x1f\x8b\x08\x00")
    with pytest.raises(IntakeError, match=r"grades\.tar\.gz: is neither a notebook \(\.ipynb\) nor a zip archive"):
        collect([other], tmp_path / "s")
    good = make_zip(tmp_path / "good.zip", [(f"s{i}.ipynb", nb(str(i))) for i in range(3)])
    data = good.read_bytes()
    cut = tmp_path / "cut.zip"
    cut.write_bytes(data[: len(data) // 2] + data[-22:])  # the end record survives, the directory does not
    with pytest.raises(IntakeError, match=r"cut\.zip: is (a corrupt|not a readable) zip"):
        collect([cut], tmp_path / "s")
    with pytest.raises(IntakeError, match=r"nowhere\.zip: no such file or directory"):
        collect([tmp_path / "nowhere.zip"], tmp_path / "s")


def test_utf8_names_without_the_utf8_flag_are_repaired(tmp_path: Path) -> None:
    raw = io.BytesIO()
    with zipfile.ZipFile(raw, "w") as zf:
        zf.writestr(at("Zoë Ng_5_assignsubmission_file_/Übung.ipynb", T0), nb("zoë"))
    z = tmp_path / "mac.zip"
    z.write_bytes(patch_headers(raw.getvalue(), "Zoë Ng_5_assignsubmission_file_/Übung.ipynb", clear_utf8=True))
    with zipfile.ZipFile(z) as zf:
        assert zf.infolist()[0].filename != "Zoë Ng_5_assignsubmission_file_/Übung.ipynb"  # mojibake as read
    (sub,) = collect([z], tmp_path / "s").submissions
    assert sub.identity == {"lms": "moodle", "id": "5", "name": "Zoë Ng", "original": "Übung.ipynb"}


# --------------------------------------------------------------------------- plain files, folders, duplicates


def test_plain_files_and_folders(tmp_path: Path) -> None:
    d = tmp_path / "class"
    (d / "sub").mkdir(parents=True)
    (d / "alice.ipynb").write_bytes(nb("alice"))
    (d / "sub" / "José.ipynb").write_bytes(nb("josé"))
    (d / "notes.txt").write_text("x", encoding="utf-8")
    (d / ".hidden.ipynb").write_bytes(nb("h"))
    (d / "__MACOSX").mkdir()
    (d / "__MACOSX" / "._alice.ipynb").write_bytes(b"\0")
    (tmp_path / "elsewhere.ipynb").write_bytes(nb("target"))
    (d / "link.ipynb").symlink_to(tmp_path / "elsewhere.ipynb")
    report = collect([d, d / "alice.ipynb"], tmp_path / "s")  # alice named twice: one submission
    subs = by_student(report)
    assert sorted(subs) == ["José", "alice"]
    assert subs["alice"].path == d / "alice.ipynb"
    assert subs["José"].identity == {"lms": "file", "id": "José", "original": "José.ipynb"}
    assert sorted(report.skipped) == sorted(
        [
            (str(d / "notes.txt"), intake.NOT_NOTEBOOK),
            (str(d / ".hidden.ipynb"), intake.HIDDEN),
            (f"{d / '__MACOSX'}/", intake.MACOSX),
            (str(d / "link.ipynb"), intake.SYMLINK),
        ]
    )


def test_two_inputs_same_student_latest_wins(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    old, new = tmp_path / "a" / "alice.ipynb", tmp_path / "b" / "alice.ipynb"
    old.write_bytes(nb("old"))
    new.write_bytes(nb("new"))
    os.utime(old, (1_700_000_000, 1_700_000_000))
    os.utime(new, (1_700_000_100, 1_700_000_100))
    report = collect([new, old], tmp_path / "s")
    (alice,) = report.submissions
    assert alice.path == new and alice.ignored == (str(old),)
    assert report.skipped == [(str(old), intake.OLDER)]
    # a Canvas download and a loose notebook named after the user id: the loose one has a time, it wins
    z = make_zip(tmp_path / "c.zip", [(at("doejane_123_1_hw.ipynb", (2030, 1, 1, 0, 0, 0)), nb("zip"))])
    loose = tmp_path / "123.ipynb"
    loose.write_bytes(nb("loose"))
    report = collect([z, loose], tmp_path / "s")
    (sub,) = report.submissions
    assert sub.path == loose and sub.identity == {"lms": "file", "id": "123", "original": "123.ipynb"}
    assert report.skipped == [("c.zip:doejane_123_1_hw.ipynb", intake.OLDER)]
    assert not (tmp_path / "s" / "c").exists()  # the older one is not extracted
    # two Canvas downloads with the same student: the later upload (file id) wins, whatever the zip dates
    z2 = make_zip(tmp_path / "d.zip", [(at("doejane_123_7_hw.ipynb", (2001, 1, 1, 0, 0, 0)), nb("later upload"))])
    (sub,) = collect([z, z2], tmp_path / "s").submissions
    assert marker(sub.path) == "x = 'later upload'"


def test_staging_names_never_collide(tmp_path: Path) -> None:
    (tmp_path / "x").mkdir()
    (tmp_path / "y").mkdir()
    z1 = make_zip(tmp_path / "x" / "submissions.zip", [("a b.ipynb", nb("space")), ("a_b.ipynb", nb("underscore"))])
    z2 = make_zip(tmp_path / "y" / "submissions.zip", [("c.ipynb", nb("c"))])
    staging = tmp_path / "s"
    report = collect([z1, z2], staging)
    paths = {s.student: s.path for s in report.submissions}
    assert paths == {
        "a b": staging / "submissions" / f"{safe_name('a b')}.ipynb",  # a_b~<digest>: never a_b
        "a_b": staging / "submissions" / "a_b.ipynb",
        "c": staging / "submissions-2" / "c.ipynb",
    }
    assert marker(paths["a_b"]) == "x = 'underscore'"


def test_staging_folder_inside_an_input_is_not_read_back(tmp_path: Path) -> None:
    d = tmp_path / "class"
    d.mkdir()
    z = make_zip(d / "canvas.zip", [("doejane_123_1_hw.ipynb", nb("jane"))])
    staging = d / "out" / "submissions"
    collect([z], staging)
    report = collect([d], staging)  # the folder now holds the zip (skipped) and the staged copy (not read)
    assert report.submissions == []
    assert report.skipped == [(str(z), intake.NESTED)]


def test_lines_summarize(tmp_path: Path) -> None:
    report = collect([canvas_zip(tmp_path)], tmp_path / "s")
    text = "\n".join(report.lines())
    assert report.lines()[0] == "intake: 5 submission(s) (5 canvas), 3 marked late by the LMS"
    assert "123: graded the latest, submissions.zip:doejane_123_1005_hw1-1.ipynb; set aside 1 older:" in text
    assert "skipped 1 file(s), not a notebook (.ipynb): submissions.zip:doejane_123_1003_notes.pdf" in text
    assert "older notebook of the same student" not in text
    refused = collect([make_zip(tmp_path / "r.zip", [("../x.ipynb", b"{}")])], tmp_path / "s")
    assert refused.lines() == ["intake: 0 submission(s)", "  skipped r.zip:../x.ipynb: " + intake.TRAVERSAL]


# --------------------------------------------------------------------------- planted metadata (issue 11)

PLANTED_META = """\
submission_111:
  :submitters:
  - :name: Ada Lovelace
    :sid: '1001'
  :created_at: 2024-01-01 00:00:00 +00:00
submission_222:
  :submitters:
  - :name: Ada Lovelace
    :sid: '1001'
  :created_at: 2023-01-01 00:00:00 +00:00
submission_999:
  :submitters:
  - :name: Grace Hopper
    :sid: '1002'
  :created_at: 2099-01-01 00:00:00 +00:00
"""


def planted_tree(planted: bytes) -> list[tuple[str, bytes]]:
    """Ada (1001, submission_111, late) plants metadata in her own folder that dates her submission
    early and gives Grace (1002, submission_222) a later notebook she also plants, in submission_999."""
    top = "assignment_9_export/"
    return [
        (top + "submission_metadata.yml", GRADESCOPE_META.encode()),
        (top + "submission_111/hw1.ipynb", nb("ada")),
        (top + "submission_111/submission_metadata.yml", planted),
        (top + "submission_111/deeper/submission_metadata.yml", planted),
        (top + "submission_111/submission_999/hw1.ipynb", nb("planted for grace")),
        (top + "submission_222/hw1.ipynb", nb("group")),
    ]


@pytest.mark.parametrize("planted", [PLANTED_META.encode(), b"a: [unclosed"], ids=["rewrite", "malformed"])
@pytest.mark.parametrize("as_folder", [False, True], ids=["zip", "folder"])
def test_metadata_planted_inside_a_submission_is_ignored(tmp_path: Path, planted: bytes, as_folder: bool) -> None:
    entries = planted_tree(planted)
    if as_folder:
        root = tmp_path / "download"
        for name, data in entries:
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_bytes(data)
        report = collect([root], tmp_path / "s")
        label = f"{root}/assignment_9_export/"
    else:
        report = collect(
            [make_zip(tmp_path / "export.zip", entries)], tmp_path / "s"
        )  # a malformed one never refuses the class
        label = "export.zip:assignment_9_export/"
    subs = by_student(report)
    assert sorted(subs) == ["1001", "1002"]
    ada, grace = subs["1001"], subs["1002"]
    # the attacker keeps her real submission time (hence her real late days)
    assert ada.submitted_at == datetime(2024, 3, 1, 10, 0, 0, 123456, tzinfo=timezone(timedelta(hours=-8)))
    assert ada.identity["submission_id"] == "111"
    # what she uploaded stays hers (whichever of her two files is graded), never the classmate's
    assert marker(ada.path) in ("x = 'ada'", "x = 'planted for grace'")
    assert len(ada.ignored) == 1 and ada.ignored[0].startswith(f"{label}submission_111/")
    # the classmate keeps her own notebook; nothing is set aside for her
    assert marker(grace.path) == "x = 'group'" and grace.identity["submission_id"] == "222" and grace.ignored == ()
    assert grace.submitted_at == datetime(2024, 3, 2, 8, 30, tzinfo=timezone.utc)
    planted_reports = sorted(n for n, r in report.skipped if r == intake.PLANTED_META)
    assert planted_reports == [
        f"{label}submission_111/deeper/submission_metadata.yml",
        f"{label}submission_111/submission_metadata.yml",
    ]
    assert any("ignored: only the export's own" in line for line in report.lines())  # the TA sees it


def test_metadata_in_a_folder_beside_the_export_is_not_read(tmp_path: Path) -> None:
    """In a zip, metadata is read at the top or in the single top-level folder: a second top-level
    folder (not what Gradescope writes) does not make its own metadata count."""
    z = make_zip(
        tmp_path / "gs.zip",
        [
            ("a/submission_metadata.yml", PLANTED_META.encode()),
            ("a/submission_999/x.ipynb", nb("a")),
            ("b/c.ipynb", nb("b")),
        ],
    )
    report = collect([z], tmp_path / "s")
    assert ("gs.zip:a/submission_metadata.yml", intake.PLANTED_META) in report.skipped
    assert "1002" not in by_student(report)


def test_metadata_in_a_students_own_folder_renames_nobody(tmp_path: Path) -> None:
    """A folder per student (a Moodle download, one clone per student): mallory's folder holds
    Gradescope metadata that gives her starter to alice's id, dated in the future (the red team's
    attack, session 24: alice was graded 0 on it). Metadata in a top-level folder beside notebooks
    outside any export is not guessed at: the run stops and names the file."""
    meta = (
        "submission_1:\n  :submitters:\n  - :name: Alice\n    :sid: alice\n"
        "  :created_at: 2099-01-01 00:00:00.000000000 +00:00\n"
    )
    d = tmp_path / "class"
    for who in ("alice", "carol", "mallory"):
        (d / who).mkdir(parents=True)
        (d / who / "vmap_convolve.ipynb").write_bytes(nb(who))
    (d / "mallory" / "submission_metadata.yml").write_text(meta)
    (d / "mallory" / "submission_1").mkdir()
    (d / "mallory" / "submission_1" / "hw.ipynb").write_bytes(nb("planted for alice"))
    with pytest.raises(IntakeError, match=r"submission_metadata\.yml in .*mallory beside notebooks that are in no"):
        collect([d], tmp_path / "s", own_names=["vmap_convolve"])
    # nor is a real export beside a stray notebook taken for one student (a review of the first fix)
    stray = tmp_path / "dl"
    (stray / "hw3_export" / "submission_1").mkdir(parents=True)
    (stray / "hw3_export" / "submission_1" / "hw.ipynb").write_bytes(nb("1001"))
    (stray / "hw3_export" / "submission_metadata.yml").write_text(meta.replace(":sid: alice", ":sid: '1001'"))
    (stray / "vmap_convolve.ipynb").write_bytes(nb("starter"))
    with pytest.raises(IntakeError, match="Pass the export folder itself"):
        collect([stray], tmp_path / "s3", own_names=["vmap_convolve"])
    assert by_student(collect([stray / "hw3_export"], tmp_path / "s4")).keys() == {"1001"}
    # the same layout made only of exports (a TA's downloads folder): each export's metadata is read
    exports = tmp_path / "downloads"
    for section, sid in (("section_1", "1001"), ("section_2", "1002")):
        (exports / section / "submission_5").mkdir(parents=True)
        (exports / section / "submission_5" / "hw.ipynb").write_bytes(nb(sid))
        (exports / section / "submission_metadata.yml").write_text(
            f"submission_5:\n  :submitters:\n  - :name: S\n    :sid: '{sid}'\n  :created_at: 2024-01-01 00:00:00 +00:00\n"
        )
    subs = by_student(collect([exports], tmp_path / "s2"))
    assert sorted(subs) == ["1001", "1002"] and marker(subs["1002"].path) == "x = '1002'"


def test_metadata_planted_in_a_submission_of_an_export_without_a_top_folder(tmp_path: Path) -> None:
    """Metadata at the zip's top level, submissions beside it: a planted one is one level down."""
    meta = "submission_7:\n  submitters:\n  - name: Ada\n    sid: 1001\n  created_at: 2024-01-01 00:00:00\n"
    z = make_zip(
        tmp_path / "gs.zip",
        [
            ("submission_metadata.yml", meta.encode()),
            ("submission_7/a.ipynb", nb("ada")),
            ("submission_7/submission_metadata.yml", PLANTED_META.encode()),
            ("submission_8/a.ipynb", nb("grace")),
        ],
    )
    report = collect([z], tmp_path / "s")
    subs = by_student(report)
    assert sorted(subs) == ["1001", "submission_8"]
    assert subs["1001"].submitted_at == datetime(2024, 1, 1, tzinfo=timezone.utc)
    assert marker(subs["submission_8"].path) == "x = 'grace'"
    assert ("gs.zip:submission_7/submission_metadata.yml", intake.PLANTED_META) in report.skipped


def test_a_folder_per_student_with_the_assignments_notebook_name(tmp_path: Path) -> None:
    """Students who kept the notebook's name (``vmap_convolve.ipynb``), one folder each: each
    folder is a student, not one student with two older notebooks set aside (a TA's walkthrough).
    A student names nothing outside their folder: a notebook they plant in ``alice/bob/`` is
    alice's, and their scratch notebook is set aside (a review of the first version)."""
    d = tmp_path / "perstudent"
    for who in ("alice", "bob", "carol"):
        (d / who).mkdir(parents=True)
        (d / who / "vmap_convolve.ipynb").write_bytes(nb(who))
    (d / "alice" / "scratch.ipynb").write_bytes(nb("alice's scratch"))
    (d / "alice" / "bob").mkdir()
    (d / "alice" / "bob" / "vmap_convolve.ipynb").write_bytes(nb("planted by alice"))
    os.utime(d / "alice" / "bob" / "vmap_convolve.ipynb", (1_000_000_000, 1_000_000_000))  # older than alice's
    (d / "carol" / "notes").mkdir()
    (d / "dave").mkdir()
    (d / "dave" / "vmap_convolve_final.ipynb").write_bytes(nb("dave"))  # renamed: his only notebook
    (d / "loose.ipynb").write_bytes(nb("loose"))  # at the top: its stem, as before
    report = collect([d], tmp_path / "s", own_names=["vmap_convolve"])
    subs = by_student(report)
    assert sorted(subs) == ["alice", "bob", "carol", "dave", "loose"]
    for who in ("alice", "bob", "carol", "dave"):
        assert marker(subs[who].path) == f"x = {who!r}", who
        assert subs[who].identity["id"] == who
    assert subs["carol"].identity["original"] == "vmap_convolve.ipynb"
    assert subs["alice"].ignored == (str(d / "alice" / "bob" / "vmap_convolve.ipynb"),)  # the planted one
    assert (str(d / "alice" / "scratch.ipynb"), intake.OTHER_IN_FOLDER) in report.skipped
    # the TA is told where the ids came from
    assert "  a folder per student: 4 student id(s) are their folder's name (alice, bob, carol, dave)" in report.lines()
    # nbgrader's layout, the assignment's folder named otherwise (submitted/<student>/hw1/<notebook>)
    for who in ("erin", "frank"):
        (tmp_path / "submitted" / who / "hw1").mkdir(parents=True)
        (tmp_path / "submitted" / who / "hw1" / "VMAP_convolve.ipynb").write_bytes(nb(who))
    assert sorted(by_student(collect([tmp_path / "submitted"], tmp_path / "s", own_names=["vmap_convolve"]))) == [
        "erin",
        "frank",
    ]
    # a zip of the folders
    z = make_zip(tmp_path / "class.zip", [(f"{w}/vmap_convolve.ipynb", nb(w)) for w in ("alice", "bob")])
    assert sorted(by_student(collect([z], tmp_path / "s", own_names=["vmap_convolve"]))) == ["alice", "bob"]
    # a notebook passed by itself, or a flat folder, keeps its stem (no folder per student there)
    (one,) = collect([d / "alice" / "vmap_convolve.ipynb"], tmp_path / "s", own_names=["vmap_convolve"]).submissions
    assert one.student == "vmap_convolve"
    assert sorted(by_student(collect([d / "bob"], tmp_path / "s", own_names=["vmap_convolve"]))) == ["vmap_convolve"]
    # without the assignment's name (the old rule): one student, the others set aside
    assert [s.student for s in collect([d], tmp_path / "s").submissions].count("vmap_convolve") == 1


def test_students_who_sent_files_but_no_notebook_are_named(tmp_path: Path) -> None:
    """A student who uploaded only a PDF (or a zip of the notebook) got no row and was named
    nowhere but among skipped files (a TA's walkthrough).  Where the source says whose a file
    is (an LMS download, a folder per student) the intake names them; a loose file's stem says
    nothing, and a student whose notebook was graded is not named for a PDF beside it."""
    canvas = make_zip(
        tmp_path / "canvas.zip",
        [
            ("doejane_1001_9001_hw.ipynb", nb("jane")),
            ("doejane_1001_9002_hw.pdf", b"%PDF-1.4"),  # beside a notebook: not named
            ("roesam_LATE_1002_9003_report.pdf", b"%PDF-1.4"),
            ("roesam_LATE_1002_9004_hw.zip", b"PK\x05\x06" + bytes(18)),  # a zip of the notebook
            ("anon_x7_9005_hw.docx", b"doc"),
        ],
    )
    report = collect([canvas], tmp_path / "s")
    assert sorted(by_student(report)) == ["1001"]
    assert report.no_notebook == {"1002 (roesam)": ["hw.zip", "report.pdf"], "anon_x7": ["hw.docx"]}
    assert (
        "  no notebook graded for 2 student(s) who sent other files (no row): "
        "1002 (roesam): hw.zip, report.pdf, anon_x7: hw.docx"
    ) in report.lines()

    moodle = make_zip(
        tmp_path / "moodle.zip",
        [
            ("Jane Doe_7_assignsubmission_file_/hw.ipynb", nb("jane")),
            ("Sam Roe_8_assignsubmission_file_/hw.pdf", b"%PDF-1.4"),
            ("Sam Roe_8_assignsubmission_onlinetext_/onlinetext.html", b"<p>see the pdf</p>"),
        ],
    )
    assert collect([moodle], tmp_path / "s").no_notebook == {"8 (Sam Roe)": ["hw.pdf"]}

    per_student = tmp_path / "perstudent"
    for who in ("alice", "bob"):
        (per_student / who).mkdir(parents=True)
    (per_student / "alice" / "vmap_convolve.ipynb").write_bytes(nb("alice"))
    (per_student / "bob" / "work").mkdir()
    (per_student / "bob" / "work" / "hw.pdf").write_bytes(b"%PDF-1.4")
    report = collect([per_student], tmp_path / "s", own_names=["vmap_convolve"])
    assert report.no_notebook == {"bob": ["work/hw.pdf"]}
    assert collect([per_student], tmp_path / "s").no_notebook == {}  # not a folder per student: a loose file

    flat = tmp_path / "flat"
    flat.mkdir()
    (flat / "alice.ipynb").write_bytes(nb("alice"))
    (flat / "alice_report.pdf").write_bytes(b"%PDF-1.4")
    report = collect([flat], tmp_path / "s")
    assert report.no_notebook == {} and not any("no notebook" in line for line in report.lines())


def test_a_name_longer_than_any_file_system_allows_is_no_lms_name(tmp_path: Path) -> None:
    """The LMS patterns take time with the square of a name's length where a newline stops them
    (65,000 characters: 7 s an entry, a red-team review); names past MAX_NAME are not read as
    an LMS's, which no LMS writes (file systems allow 255 bytes)."""
    long = "doejane_1001_9001_" + "_1_1" * (intake.MAX_NAME // 4) + ".ipynb"
    report = collect(
        [make_zip(tmp_path / "c.zip", [(long, nb("long")), ("roesam_1002_9002_hw.ipynb", nb("sam"))])], tmp_path / "s"
    )
    subs = by_student(report)
    assert "1002" in subs and "1001" not in subs and subs[long[: -len(".ipynb")]].identity["lms"] == "file"
