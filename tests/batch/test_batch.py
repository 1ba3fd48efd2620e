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
    out = tmp_path / "out"
    code, _, err = run("--course", str(course), "grade", "--assignment", "double", "--out", str(out), str(archive))
    assert code == 0, err
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
