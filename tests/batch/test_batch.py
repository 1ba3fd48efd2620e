"""The TA's batch: resume, --regrade, changed submissions, SIGKILL mid-batch, late policy, outputs.

These grade the tiny ``double`` course of ``tests/minicourse.py`` (seconds per notebook) through
the real command line and real sandboxes.
"""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from grader.batch.gradebook import Gradebook
from grader.cli import main
from grader.intake.notebook import sha256_file
from tests.minicourse import EXPECTED, make_minicourse, notebook, procs_with

pytestmark = pytest.mark.slow

KINDS = ["full", "half", "zero", "crash", "full", "half"]


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def course(tmp_path: Path) -> Path:
    return make_minicourse(tmp_path / "course")


def make_class(folder: Path, kinds: list[str] = KINDS) -> dict[str, str]:
    folder.mkdir(parents=True, exist_ok=True)
    students = {}
    for i, kind in enumerate(kinds):
        name = f"s{i:02d}_{kind}"
        (folder / f"{name}.ipynb").write_text(notebook(kind, salt=name))
        students[name] = kind
    return students


def scores(out: Path) -> dict[str, tuple[float, str]]:
    with Gradebook(out / "gradebook.db") as gb:
        return {r.student: (r.score, r.status) for r in gb.records("double")}


def rows(out: Path) -> list[tuple[str, str, str]]:
    con = sqlite3.connect(out / "gradebook.db")
    return sorted(con.execute("SELECT student, sha256, graded_at FROM results WHERE assignment='double'"))


def test_rerun_regrades_nothing_and_regrade_forces_it(course: Path, tmp_path: Path) -> None:
    students = make_class(tmp_path / "class", KINDS[:4])
    out = tmp_path / "out"
    args = ("--course", str(course), "grade", "--assignment", "double", "--out", str(out), "--jobs", "2")
    code, _, err = run(*args, str(tmp_path / "class"))
    assert code == 0, err
    assert scores(out) == {s: EXPECTED[k] for s, k in students.items()}
    first = rows(out)
    for s in students:
        assert (out / "results" / f"{s}.json").is_file() and (out / "feedback" / f"{s}.html").is_file()
    assert (out / "report.html").is_file() and (out / "grades.csv").is_file()

    check_pages_in_browser(out)

    code, _, err = run(*args, str(tmp_path / "class"))
    assert code == 0 and "4 already graded" in err, err
    assert rows(out) == first  # nothing regraded: same rows, same grading times

    # a resubmission is graded again, and only it
    changed = tmp_path / "class" / "s02_zero.ipynb"
    changed.write_text(notebook("full", salt="resubmitted"))
    code, _, err = run(*args, str(tmp_path / "class"))
    assert code == 0 and "3 already graded" in err and "1 to grade" in err, err
    assert scores(out)["s02_zero"] == (4.0, "graded")
    assert len(rows(out)) == 5  # the older submission stays in the gradebook's history

    code, _, err = run(*args, "--regrade", str(tmp_path / "class"))
    assert code == 0 and "4 to grade" in err, err
    after = {s: t for s, _, t in rows(out)}
    assert all(after[s] >= t for s, _, t in first)


def check_pages_in_browser(out: Path) -> None:
    """The report and feedback pages, rendered by Chromium, show the gradebook's numbers."""
    from tests.browser import chromium_required, dump_dom, find_chromium
    from tests.publish.test_feedback import parse

    if find_chromium() is None and not chromium_required():
        return
    with Gradebook(out / "gradebook.db") as gb:
        records = gb.records("double")
    report = parse(dump_dom(out / "report.html"))
    assert report.by_id("count").text == str(len(records))
    mean = sum(r.score for r in records) / len(records)
    assert report.by_id("mean").text == f"{mean:.2f}"
    rows = {r.attrs["data-student"]: r for r in report.find_all("tr", cls="student")}
    assert {s: float(r.attrs["data-score"]) for s, r in rows.items()} == {r.student: r.score for r in records}
    for rec in records:
        page = parse(dump_dom(out / rows[rec.student].find_all("a")[0].attrs["href"]))
        assert page.by_id("score").text == f"{rec.score:g}" and page.by_id("status").attrs["data-status"] == rec.status
        shown = {t.attrs["data-status"] for t in page.find_all("tr", cls="test")}
        assert shown == {t.status for t in rec.tests}
        assert "test_double_hidden[1000]" not in page.text and "test_double_hidden[case 2]" in page.text


def test_late_policy_from_a_canvas_flag(course: Path, tmp_path: Path) -> None:
    import zipfile

    archive = tmp_path / "submissions.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("doejane_LATE_1001_9001_double.ipynb", notebook("full", salt="a"))
        z.writestr("roesam_1002_9002_double.ipynb", notebook("full", salt="b"))
        z.writestr("poeedgar_1003_9003_double.pdf", b"%PDF-1.4")  # no notebook: no row, but named
    out = tmp_path / "out"
    code, _, err = run("--course", str(course), "grade", "--assignment", "double", "--out", str(out), str(archive))
    assert code == 0, err
    assert (
        "note: no notebook graded for 1 student(s) who sent other files, and they have no row: 1003 (poeedgar): double.pdf"
        in err
    )
    with Gradebook(out / "gradebook.db") as gb:
        recs = {r.student: r for r in gb.records("double")}
    assert recs["1001"].score == 3.0 and recs["1001"].late["days"] == 1 and recs["1001"].late["raw_score"] == 4.0
    assert recs["1002"].score == 4.0 and recs["1002"].late == {}
    assert recs["1001"].identity["lms"] == "canvas" and recs["1001"].identity["name"] == "doejane"
    feedback = (out / "feedback" / "1001.html").read_text()
    assert "late" in feedback

    code, text, err = run("--course", str(course), "export", "--from", str(out), "--format", "canvas", "--out", "-")
    assert code == 0, err
    table = list(csv.reader(io.StringIO(text)))
    assert table[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Doubling (555)"]
    assert table[1][0].strip() == "Points Possible" and table[1][5] == "4"
    assert sorted((r[1], r[5]) for r in table[2:]) == [("1001", "3"), ("1002", "4")]

    # the instructor doubles the late penalty after grading: applied to the results kept, nobody regraded
    graded = rows(out)
    yaml = course / "grading.yaml"
    yaml.write_text(yaml.read_text().replace("percent_per_day: 25", "percent_per_day: 50"))
    code, _, err = run("--course", str(course), "grade", "--assignment", "double", "--out", str(out), str(archive))
    assert code == 0, err
    assert "2 already graded" in err and "1 of them with a new late deduction" in err and "(1001)" in err, err
    assert rows(out) == graded  # no sandbox ran: same rows, same grading times
    with Gradebook(out / "gradebook.db") as gb:
        recs = {r.student: r for r in gb.records("double")}
    assert recs["1001"].score == 2.0 and recs["1001"].late["percent"] == 50 and recs["1001"].late["raw_score"] == 4.0
    assert recs["1002"].score == 4.0 and recs["1002"].late == {}
    assert json.loads((out / "results" / "1001.json").read_text())["score"] == 2.0
    assert 'data-percent="50" data-raw-score="4" data-final-score="2"' in (out / "feedback" / "1001.html").read_text()
    table = {r["student"]: r for r in csv.DictReader(io.StringIO((out / "grades.csv").read_text()))}
    assert (table["1001"]["score"], table["1001"]["raw_score"], table["1001"]["late_percent"]) == ("2", "4", "50")

    # and forgives lateness flagged by the LMS: the raw score comes back
    yaml.write_text(yaml.read_text().replace("percent_per_day: 50", "percent_per_day: 50, flag_days: 0"))
    code, _, err = run("--course", str(course), "grade", "--assignment", "double", "--out", str(out), str(archive))
    assert code == 0 and "1 of them with a new late deduction" in err, err
    with Gradebook(out / "gradebook.db") as gb:
        assert {r.student: (r.score, r.late) for r in gb.records("double")} == {"1001": (4.0, {}), "1002": (4.0, {})}
    code, _, err = run("--course", str(course), "grade", "--assignment", "double", "--out", str(out), str(archive))
    assert code == 0 and "2 already graded" in err and "new late deduction" not in err, err


def test_sigkill_mid_batch_then_rerun_grades_everyone_exactly_once(course: Path, tmp_path: Path) -> None:
    students = make_class(tmp_path / "class", KINDS * 2)
    out = tmp_path / "out"
    tag = f"JAXGRADE_TEST_TAG={uuid.uuid4().hex}"
    env = {**os.environ, tag.split("=")[0]: tag.split("=")[1]}
    cmd = [sys.executable, "-m", "grader", "--course", str(course), "grade", "--assignment", "double"]
    cmd += ["--out", str(out), "--jobs", "2", str(tmp_path / "class")]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    db = out / "gradebook.db"
    while time.monotonic() < deadline:  # wait until some, not all, are committed
        if db.exists():
            with Gradebook(db) as gb:
                if gb.count("double") >= 3:
                    break
        time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail("no results within 300 s: " + proc.stderr.read().decode()[-2000:])
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stderr.close()
    done = scores(out)
    assert 3 <= len(done) < len(students), "the kill came too late to test anything"
    deadline = time.monotonic() + 30
    while procs_with(tag) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert procs_with(tag) == [], "grading processes outlived a SIGKILLed jaxgrade"

    code, _, err = run(
        "--course",
        str(course),
        "grade",
        "--assignment",
        "double",
        "--out",
        str(out),
        "--jobs",
        "2",
        str(tmp_path / "class"),
    )
    assert code == 0, err
    assert f"{len(done)} already graded" in err
    assert scores(out) == {s: EXPECTED[k] for s, k in students.items()}
    keys = [s for s, _, _ in rows(out)]
    assert sorted(keys) == sorted(students)  # every student exactly once
    results = json.loads((out / "results" / "s00_full.json").read_text())
    assert results["score"] == 4.0


def test_moodle_download_round_trip_and_gradescope_export(course: Path, tmp_path: Path) -> None:
    import zipfile

    archive = tmp_path / "moodle.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("Ada Lovelace_4242_assignsubmission_file_/double.ipynb", notebook("full", salt="ada"))
        z.writestr("Alan Turing_4343_assignsubmission_file_/double.ipynb", notebook("half", salt="alan"))
        z.writestr("__MACOSX/._double.ipynb", b"junk")
    out = tmp_path / "out"
    code, _, err = run("--course", str(course), "grade", "--assignment", "double", "--out", str(out), str(archive))
    assert code == 0, err
    assert "skipped 1 file(s)" in err

    code, text, err = run("--course", str(course), "export", "--from", str(out), "--format", "moodle", "--out", "-")
    assert code == 0, err
    table = {r["Identifier"]: r for r in csv.DictReader(io.StringIO(text))}
    assert set(table) == {"Participant 4242", "Participant 4343"}
    assert table["Participant 4242"]["Full name"] == "Ada Lovelace" and float(table["Participant 4242"]["Grade"]) == 4
    assert float(table["Participant 4343"]["Grade"]) == 2 and float(table["Participant 4343"]["Maximum Grade"]) == 4

    code, _, err = run("export", "--from", str(out), "--format", "gradescope", "--out", str(tmp_path / "gs"))
    assert code == 0, err
    results = json.loads((tmp_path / "gs" / "4343" / "results.json").read_text())
    assert results["score"] == 2
    assert {t["visibility"] for t in results["tests"]} == {"visible", "after_published"}

    # the Moodle records cannot go to Canvas: no canvas user ids, but a clear message
    code, text, err = run("--course", str(course), "export", "--from", str(out), "--format", "canvas", "--out", "-")
    assert code == 0, err
    assert [r[1] for r in csv.reader(io.StringIO(text))][2:] == ["", ""]


def test_a_moved_deadline_regrades_nobody_and_is_applied_to_the_results_kept(course: Path, tmp_path: Path) -> None:
    """The due date and the late policy decide no test's verdict: they are not part of the
    assignment's version, and a batch applies them as they are now to the results it keeps (a
    TA who moved the deadline for the class regraded everyone, for hours).  A record updated so
    stays where it was in the student's history; a rerun whose input has lost the submission's
    time keeps the record's; a deduction that is the same after the move is not named."""
    from datetime import datetime, timezone

    from grader.batch.run import Batch
    from grader.course.config import load_course
    from grader.grading.record import Record
    from grader.intake.collect import Incoming

    def submitted(name: str, day: int, hour: int = 12) -> Incoming:
        nb = tmp_path / f"{name}.ipynb"
        nb.write_text(notebook("full", salt=name))
        when = datetime(2026, 11, day, hour, tzinfo=timezone.utc)
        return Incoming(nb, "s", {"lms": "gradescope"}, submitted_at=when)

    def setting(old: str, new: str) -> Batch:
        yaml = course / "grading.yaml"
        yaml.write_text(yaml.read_text().replace(old, new))
        return Batch(load_course(course).assignment("double"), tmp_path / "out")

    def current(batch: Batch) -> list[tuple[str, float]]:
        return [(r.submission_sha256, r.score) for r in batch.gradebook.records("double")]

    older, newer = submitted("older", 2), submitted("newer", 3)  # 1 and 2 days late: -25%, -50%
    first = load_course(course).assignment("double")
    with Batch(first, tmp_path / "out") as batch:
        for inc in (older, newer):
            rec = Record(
                assignment="double", student="s", submission_sha256=sha256_file(inc.path), status="graded",
                score=4.0, max_score=4.0,
            )  # fmt: skip
            batch.complete(rec, inc)
            batch.commit(rec)
        assert current(batch) == [(sha256_file(newer.path), 2.0)]
        graded_at = [r.graded_at for r in batch.gradebook.records("double")]

    with setting("due: 2026-11-01T23:59:00+00:00", "due: 2026-11-02T23:59:00+00:00") as batch:
        assert batch.version == first.version()
        assert batch.plan([newer]) == []
        assert [(r.score, r.late["days"], r.late["raw_score"]) for r in batch.late_changed] == [(3.0, 1, 4.0)]
        assert current(batch) == [(sha256_file(newer.path), 3.0)]
        assert [r.graded_at for r in batch.gradebook.records("double")] == graded_at
        assert json.loads((tmp_path / "out" / "results" / "s.json").read_text())["score"] == 3.0
        # the older notebook passed again: its own row is updated, and it does not become current
        assert batch.plan([older]) == [] and [(r.score, r.late) for r in batch.late_changed[1:]] == [(4.0, {})]
        assert current(batch) == [(sha256_file(newer.path), 3.0)]
        # the same notebook without its LMS's time: the record's time is kept, nothing forgiven
        plain = Incoming(newer.path, "s", {"lms": "file"})
        before = len(batch.late_changed)
        assert batch.plan([plain]) == [] and len(batch.late_changed) == before
        assert current(batch) == [(sha256_file(newer.path), 3.0)]

    # an hour earlier: still one started day late, the same deduction: stored, not named
    with setting("due: 2026-11-02T23:59:00+00:00", "due: 2026-11-02T22:59:00+00:00") as batch:
        assert batch.plan([newer]) == [] and batch.late_changed == []
        assert [r.late["due"] for r in batch.gradebook.records("double")] == ["2026-11-02T22:59:00+00:00"]
    with setting("due: 2026-11-02T22:59:00+00:00", "due: 2026-11-04T23:59:00+00:00") as batch:
        assert batch.plan([newer]) == [] and [(r.score, r.late) for r in batch.late_changed] == [(4.0, {})]
    with setting("percent_per_day: 25", "percent_per_day: 25") as batch:
        assert batch.plan([newer]) == [] and batch.late_changed == []  # nothing changed: nothing written
        assert batch.plan([newer], regrade=True) == [newer]
        # a record whose score before the deduction is not known is left as it is
        rec = batch.gradebook.get("double", "s", sha256_file(newer.path), batch.version)
        assert rec is not None
        rec.score, rec.late = 1.0, {"days": 3, "percent": 75}
        batch.gradebook.update(rec)
        assert batch.plan([newer]) == [] and batch.late_changed == []
        assert current(batch) == [(sha256_file(newer.path), 1.0)]


def test_a_submission_named_like_a_classmate_writes_over_nothing(course: Path, tmp_path: Path) -> None:
    """``_alice.ipynb`` beside ``alice.ipynb``: both made safe read ``alice``. Each keeps its own
    record file and feedback page, the report is written, and a rerun finishes (the red team's
    attack, session 24: alice's record and page held ``_alice``'s 0, and every run then stopped
    with a traceback before the report)."""
    folder = tmp_path / "class"
    folder.mkdir()
    (folder / "alice.ipynb").write_text(notebook("full", salt="alice"))
    (folder / "_alice.ipynb").write_text(notebook("zero", salt="_alice"))
    out = tmp_path / "out"
    for _ in range(2):
        code, _, err = run("--course", str(course), "grade", "--assignment", "double", "--out", str(out), str(folder))
        assert code == 0, err
        assert scores(out) == {"alice": (4.0, "graded"), "_alice": (0.0, "graded")}
        assert (out / "report.html").is_file()
        records = {json.loads(p.read_text())["student"]: p.name for p in (out / "results").glob("*.json")}
        assert sorted(records) == ["_alice", "alice"] and records["alice"] == "alice.json"
        pages = {p.name: p.read_text() for p in (out / "feedback").glob("*.html")}
        assert len(pages) == 2 and 'id="student-id">alice<' in pages["alice.html"]
