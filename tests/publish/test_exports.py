"""Exports for Canvas, Moodle, Gradescope and plain CSV, from stored records."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import pytest

from grader.batch.gradebook import AssignmentInfo, Gradebook
from grader.cli import main
from grader.grading.record import Record, TestResult
from grader.publish.exports import (
    ExportError,
    ExportMeta,
    canvas_csv,
    format_score,
    gradescope_results,
    moodle_csv,
    one_per_student,
    plain_csv,
    summary,
    write_gradescope,
)
from grader.publish.output import safe_name

REPO = Path(__file__).resolve().parents[2]
META = ExportMeta(name="vmap_convolve", title="Vectorization with vmap", points_possible=40.0, canvas_id="101")


def _tests(passed: int, failed: int, *, hidden_failed: int = 0) -> list[TestResult]:
    out = [TestResult(f"test_ok_{i}", "numerics", 2.0, 2.0, "passed", title=f"ok {i}") for i in range(passed)]
    out += [
        TestResult(f"test_bad_{i}", "jit", 0.0, 2.0, "failed", message="wrong", hint="use jnp.where")
        for i in range(failed)
    ]
    out += [
        TestResult(f"test_hidden_{i}", "vectorization", 0.0, 1.0, "failed", visibility="after_published")
        for i in range(hidden_failed)
    ]
    return out


def _record(student: str, tests: list[TestResult], *, identity: dict[str, str] | None = None, **kw) -> Record:
    score = round(sum(t.score for t in tests), 6)
    rec = Record(
        assignment="vmap_convolve",
        student=student,
        submission_sha256="ab" * 32,
        status="graded",
        score=score,
        max_score=round(sum(t.max_score for t in tests), 6),
        tests=tests,
        identity=identity or {},
        graded_at="2026-01-05T10:00:00+00:00",
        timings={"total": 12.6},
    )
    for key, value in kw.items():
        setattr(rec, key, value)
    return rec


@pytest.fixture
def records() -> list[Record]:
    return [
        _record("17", _tests(3, 1), identity={"lms": "canvas", "id": "17", "name": "Bob Jones", "sis_id": "S17"}),
        _record("9", _tests(4, 0), identity={"lms": "canvas", "id": "9", "name": "Alice Smith"}),
        _record(
            "5", _tests(1, 3), identity={"lms": "canvas", "id": "5", "name": '=HYPERLINK("http://x.example","click")'}
        ),
    ]


def _rows(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


# --------------------------------------------------------------------------- Canvas


def test_canvas_header_and_points_possible_row(records):
    rows = _rows(canvas_csv(records, META))
    assert rows[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Vectorization with vmap (101)"]
    assert rows[1] == ["Points Possible", "", "", "", "", "40"]


def test_canvas_one_row_per_student_with_record_scores(records):
    rows = _rows(canvas_csv(records, META))[2:]
    assert len(rows) == len(records)
    by_id = {r[1]: r for r in rows}
    for rec in records:
        row = by_id[rec.identity["id"]]
        assert float(row[5]) == rec.score
    assert by_id["17"][:3] == ["Bob Jones", "17", "S17"]
    assert by_id["9"][5] == "8"  # no trailing zeros


def test_canvas_quotes_formula_names(records):
    text = canvas_csv(records, META)
    rows = _rows(text)
    names = [r[0] for r in rows[2:]]
    assert '\'=HYPERLINK("http://x.example","click")' in names
    assert not any(cell.startswith(("=", "+", "-", "@")) for row in rows for cell in row)


def test_canvas_quotes_a_formula_title():
    meta = ExportMeta(name="a", title="=cmd()", points_possible=1, canvas_id="7")
    assert _rows(canvas_csv([], meta))[0][5] == "'=cmd() (7)"


def test_canvas_without_canvas_id_names_the_key(records):
    meta = ExportMeta(name="vmap_convolve", title="t", points_possible=40)
    with pytest.raises(ExportError, match=r"canvas_id.*assignments\.vmap_convolve.*grading\.yaml") as err:
        canvas_csv(records, meta)
    assert err.value.setting == "canvas_id"  # the CLI's TIP is chosen by this, never by the text


def test_an_error_that_no_setting_fixes_names_none():
    with pytest.raises(ExportError) as err:
        moodle_csv([Record("a", "s", "x", "graded")], ExportMeta(name="a", title="t", points_possible=1))
    assert err.value.setting is None


def test_canvas_leaves_ids_of_other_systems_out():
    rec = _record("alice", _tests(1, 0), identity={"lms": "file", "id": "alice"})
    rec2 = _record("123", _tests(1, 0), identity={"lms": "moodle", "id": "123", "name": "M"})
    rows = _rows(canvas_csv([rec, rec2], META))[2:]
    assert rows == [["M", "", "", "", "", "2"], ["alice", "", "", "", "", "2"]]


def test_one_row_per_student_keeps_the_latest_graded():
    old = _record("9", _tests(1, 1), identity={"lms": "canvas", "id": "9"}, graded_at="2026-01-01T00:00:00+00:00")
    new = _record("9", _tests(2, 0), identity={"lms": "canvas", "id": "9"}, graded_at="2026-01-02T00:00:00+00:00")
    assert one_per_student([new, old]) == [new]
    rows = _rows(canvas_csv([old, new], META))[2:]
    assert len(rows) == 1 and rows[0][5] == "4"


def test_late_score_is_the_record_score():
    rec = _record("9", _tests(4, 0), identity={"lms": "canvas", "id": "9"})
    rec.late = {"days": 1, "percent": 10.0, "raw_score": 8.0, "flag": False, "submitted_at": None, "due": None}
    rec.score = 7.2
    assert _rows(canvas_csv([rec], META))[2][5] == "7.2"


@pytest.mark.parametrize(
    ("value", "text"),
    [(40.0, "40"), (33.5, "33.5"), (1 / 3, "0.333333"), (-0.0, "0"), (math.nan, "0"), (1e7, "10000000")],
)
def test_format_score(value, text):
    assert format_score(value) == text


# --------------------------------------------------------------------------- Moodle


def _moodle_records() -> list[Record]:
    return [
        _record("41", _tests(4, 0), identity={"lms": "moodle", "id": "41", "name": "Ann Lee", "email": "ann@x.org"}),
        _record(
            "7",
            _tests(2, 2),
            identity={"lms": "moodle", "id": "7", "name": "@SUM(A1)", "email": "-x@y.org"},
        ),
    ]


def test_moodle_columns_and_identifiers():
    rows = _rows(moodle_csv(_moodle_records(), META))
    assert rows[0] == [
        "Identifier",
        "Full name",
        "Email address",
        "Grade",
        "Maximum Grade",
        "Last modified (grade)",
        "Feedback comments",
    ]
    assert [r[0] for r in rows[1:]] == ["Participant 41", "Participant 7"]
    ann = rows[1]
    assert ann[1:6] == ["Ann Lee", "ann@x.org", "8", "40", "2026-01-05T10:00:00+00:00"]
    assert ann[6] == "Score 8/8. All 4 tests passed."


def test_moodle_feedback_names_failed_tests_and_is_spreadsheet_safe():
    rows = _rows(moodle_csv(_moodle_records(), META))
    row = rows[2]
    assert row[1] == "'@SUM(A1)" and row[2] == "'-x@y.org"
    assert row[3] == "4"
    assert "Score 4/8." in row[6] and "test_bad_0, test_bad_1" in row[6]
    assert not any(cell.startswith(("=", "+", "-", "@")) for r in rows for cell in r)


def test_moodle_feedback_mentions_the_late_deduction():
    rec = _moodle_records()[0]
    rec.late = {"days": 2, "percent": 20.0, "raw_score": 8.0, "flag": False, "submitted_at": "x", "due": "y"}
    rec.score = 6.4
    assert "Late: 2 days late: -20% (8 -> 6.4)." in summary(rec)
    assert _rows(moodle_csv([rec], META))[1][3] == "6.4"


def test_summary_of_an_ungraded_record():
    rec = _record("41", [], identity={"lms": "moodle", "id": "41"}, status="error", message="x.ipynb: not a notebook")
    assert summary(rec) == "Score 0/0. Status: error (x.ipynb: not a notebook)."


def _parametrized_record() -> Record:
    """A hidden parametrized test whose ids carry its inputs, failing next to a public one."""
    return _record(
        "41",
        [
            TestResult("test_public[x=1]", "numerics", 0.0, 1.0, "failed"),
            TestResult("test_fit[lr=0.37-steps=12]", "numerics", 0.0, 1.0, "failed", visibility="hidden"),
            TestResult("test_fit[lr=0.5-steps=3]", "numerics", 1.0, 1.0, "passed", visibility="hidden"),
            TestResult("test_fit[lr=2.0-steps=9]", "numerics", 0.0, 1.0, "failed", visibility="after_published"),
            TestResult("test_shape", "numerics", 0.0, 1.0, "failed", visibility="hidden"),
        ],
        identity={"lms": "moodle", "id": "41"},
    )


def test_summary_names_hidden_tests_as_the_feedback_page_does():
    text = summary(_parametrized_record())
    assert "lr=" not in text and "steps=" not in text
    assert text.endswith("Failed 4 of 5 tests: test_public[x=1], test_fit[case 1], test_fit[case 3], test_shape.")


def test_moodle_feedback_never_carries_hidden_parameter_ids():
    comment = _rows(moodle_csv([_parametrized_record()], META))[1][6]
    assert "lr=0.37" not in comment and "steps=" not in comment
    assert "test_fit[case 1]" in comment


def test_gradescope_test_names_never_carry_hidden_parameter_ids():
    res = gradescope_results(_parametrized_record())
    assert [t["name"] for t in res["tests"]] == [
        "test_public[x=1]",
        "test_fit[case 1]",
        "test_fit[case 2]",
        "test_fit[case 3]",
        "test_shape",
    ]
    assert "lr=" not in json.dumps(res)


def test_moodle_without_participant_numbers_is_an_error():
    recs = [*_moodle_records(), _record("alice", _tests(1, 0), identity={"lms": "file", "id": "alice"})]
    with pytest.raises(ExportError, match=r"alice.*Participant <number>"):
        moodle_csv(recs, META)


# --------------------------------------------------------------------------- plain CSV


def test_plain_csv_one_row_per_student(records):
    rows = _rows(plain_csv(records, META))
    header = rows[0]
    assert header[:7] == ["student", "name", "email", "assignment", "score", "max_score", "status"]
    assert "numerics" in header and "jit" in header and "late_days" in header
    body = {r[0]: dict(zip(header, r)) for r in rows[1:]}
    assert set(body) == {"17", "9", "5"}
    assert float(body["17"]["score"]) == 6 and body["17"]["name"] == "Bob Jones"
    assert body["5"]["name"].startswith("'=")


# --------------------------------------------------------------------------- Gradescope


def _check_schema(res: dict) -> None:
    assert isinstance(res["score"], float) and math.isfinite(res["score"])
    assert isinstance(res["execution_time"], int)
    assert isinstance(res["output"], str)
    assert res["visibility"] in ("visible", "hidden", "after_due_date", "after_published")
    assert res["stdout_visibility"] in ("visible", "hidden", "after_due_date", "after_published")
    assert res["output_format"] == "text"
    for t in res["tests"]:
        assert set(t) >= {"name", "score", "max_score", "status", "output", "visibility"}
        assert isinstance(t["name"], str) and isinstance(t["output"], str) and isinstance(t["number"], str)
        assert isinstance(t["score"], float) and isinstance(t["max_score"], float)
        assert math.isfinite(t["score"]) and math.isfinite(t["max_score"])
        assert t["status"] in ("passed", "failed")
        assert t["visibility"] in ("visible", "after_published")
        assert all(isinstance(tag, str) for tag in t["tags"])
    json.dumps(res, allow_nan=False)


def test_gradescope_schema_statuses_and_visibility():
    rec = _record("9", _tests(2, 1, hidden_failed=2))
    rec.tests.append(TestResult("test_broken", "numerics", 0.0, 1.0, "error", message="fixture error"))
    res = gradescope_results(rec)
    _check_schema(res)
    assert res["score"] == rec.score == sum(t["score"] for t in res["tests"])
    by_name = {t["name"]: t for t in res["tests"]}
    assert by_name["test_ok_0"]["status"] == "passed" and by_name["test_ok_0"]["visibility"] == "visible"
    assert by_name["test_bad_0"]["status"] == "failed" and "use jnp.where" in by_name["test_bad_0"]["output"]
    assert by_name["test_hidden_0"]["visibility"] == "after_published"
    assert by_name["test_broken"]["status"] == "failed"
    assert by_name["test_ok_0"]["tags"] == ["numerics"]
    assert [t["number"] for t in res["tests"]] == [str(i) for i in range(1, len(rec.tests) + 1)]
    assert res["execution_time"] == 13


def test_gradescope_output_keeps_hidden_results_back():
    """Students see ``output`` at once: while hidden tests wait, it must not give away the total."""
    rec = _record("9", _tests(2, 1, hidden_failed=2))
    rec.late = {"days": 2, "percent": 20.0, "raw_score": rec.score, "flag": False, "submitted_at": "s", "due": "d"}
    rec.score = round(rec.score * 0.8, 6)
    out = gradescope_results(rec)["output"]
    assert out.splitlines()[0] == (
        "vmap_convolve: 2/3 public tests passed (4/6 points); the results of 2 hidden tests "
        "and the total score are shown when grades are published."
    )
    assert "Late deduction: 2 days late: -20%." in out
    assert format_score(rec.score) not in out and "/8" not in out


def test_gradescope_hidden_visibility_becomes_after_published():
    rec = _record("9", [TestResult("t", "numerics", 1.0, 1.0, "passed", visibility="hidden")])
    assert gradescope_results(rec)["tests"][0]["visibility"] == "after_published"


def test_gradescope_late_deduction_in_output():
    rec = _record("9", _tests(4, 0))
    rec.late = {"days": 1, "percent": 10.0, "raw_score": 8.0, "flag": False, "submitted_at": "s", "due": "d"}
    rec.score = 7.2
    res = gradescope_results(rec)
    _check_schema(res)
    assert res["score"] == 7.2
    assert sum(t["score"] for t in res["tests"]) == 8.0
    assert "Late deduction: 1 day late: -10% (8 -> 7.2)." in res["output"]
    assert res["output"].startswith("vmap_convolve: 7.2/8 points; 4/4 tests passed.")
    assert res["extra_data"]["raw_score"] == 8.0


def test_gradescope_never_nan():
    rec = _record("9", [TestResult("t", "numerics", math.nan, math.inf, "failed")])
    rec.score = math.nan
    res = gradescope_results(rec)
    _check_schema(res)
    assert res["score"] == 0.0 and res["tests"][0]["score"] == 0.0 and res["tests"][0]["max_score"] == 0.0


def test_gradescope_error_record_explains():
    rec = _record("9", [])
    rec.status, rec.message = "error", "x.ipynb: not a notebook (invalid JSON)"
    res = gradescope_results(rec)
    _check_schema(res)
    assert res["score"] == 0.0 and res["tests"] == []
    assert "not a notebook" in res["output"] and "could not be graded" in res["output"]


def test_write_gradescope(tmp_path, records):
    records.append(_record("a/b", _tests(1, 0)))
    paths = write_gradescope(records, tmp_path)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in paths) == [
        "17/results.json",
        "5/results.json",
        "9/results.json",
        f"{safe_name('a/b')}/results.json",
    ]
    assert safe_name("a/b").startswith("a_b~")
    for p in paths:
        _check_schema(json.loads(p.read_text(encoding="utf-8")))


def test_write_gradescope_gives_ids_that_look_alike_folders_of_their_own(tmp_path):
    paths = write_gradescope([_record("a b", _tests(1, 0)), _record("a_b", _tests(1, 0))], tmp_path)
    assert len({p.parent for p in paths}) == 2 and (tmp_path / "a_b" / "results.json") in paths


def test_gradescope_says_nothing_of_a_lateness_that_deducts_nothing():
    """Late, but no policy deducts (a TA's walkthrough saw "Late deduction: 2 days late: -0%")."""
    rec = _record("9", _tests(4, 0))
    rec.late = {"days": 2, "percent": 0.0, "raw_score": 8.0, "flag": False, "submitted_at": "s", "due": "d"}
    assert "Late" not in gradescope_results(rec)["output"]


# --------------------------------------------------------------------------- `jaxgrade export --out`


@pytest.fixture
def graded(tmp_path: Path, records: list[Record]) -> Path:
    """A `jaxgrade grade --out` folder: its gradebook only."""
    folder = tmp_path / "graded"
    with Gradebook(folder / "gradebook.db") as gb:
        gb.set_assignment(AssignmentInfo("vmap_convolve", META.title, "JAX 101", "101", None, 8.0, "v1"))
        for r in records:
            gb.put(r)
    return folder


def _export(graded: Path, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["--course", str(REPO), "export", "--from", str(graded), *argv], out, err)
    return code, out.getvalue(), err.getvalue()


def _files(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))


def test_export_out_that_is_a_folder_or_inside_a_file_is_a_clear_error(graded: Path, tmp_path: Path) -> None:
    """These were IsADirectoryError and NotADirectoryError tracebacks."""
    folder, afile = tmp_path / "exports", tmp_path / "notes.txt"
    folder.mkdir()
    afile.write_text("mine")
    before = _files(tmp_path)
    code, out, err = _export(graded, "--format", "csv", "--out", str(folder))
    assert (code, out) == (2, "")
    assert err == (
        f"jaxgrade: error: {folder}: is a folder, not a file\n"
        f"TIP: --out names the file to write: e.g. --out {folder / 'grades-vmap_convolve.csv'}, or - for stdout.\n"
    )
    code, _, err = _export(graded, "--format", "canvas", "--out", str(afile / "canvas.csv"))
    assert code == 2
    assert err == (
        f"jaxgrade: error: {afile / 'canvas.csv'}: {afile} is not a folder\n"
        "TIP: --out names the file to write: choose another, or - for stdout.\n"
    )
    code, _, err = _export(graded, "--format", "gradescope", "--out", str(afile))
    assert code == 2
    assert err == (
        f"jaxgrade: error: {afile}: exists and is not a folder\n"
        "TIP: --out names the folder to write the results.json files into: choose another.\n"
    )
    assert _files(tmp_path) == before and afile.read_text() == "mine"  # nothing written, not even a temporary


def test_a_gradescope_export_to_stdout_is_refused(graded: Path, tmp_path: Path, monkeypatch) -> None:
    """``--out -`` is stdout for the CSV formats; a gradescope export (a folder of results.json
    files) made a folder named ``-`` in the working directory."""
    monkeypatch.chdir(tmp_path)
    before = _files(tmp_path)
    code, out, err = _export(graded, "--format", "gradescope", "--out", "-")
    assert (code, out) == (2, "")
    assert err == (
        "jaxgrade: error: --out -: a gradescope export is a folder (a results.json for each student), not one "
        "file for stdout\n"
        f"TIP: Pass the folder to write it into, e.g. --out gradescope-vmap_convolve, or drop --out to write "
        f"{graded / 'gradescope-vmap_convolve'}.\n"
    )
    assert _files(tmp_path) == before
    code, out, _ = _export(graded, "--format", "csv", "--out", "-")  # the CSV formats still print
    assert code == 0 and out.startswith("student,") and _files(tmp_path) == before
