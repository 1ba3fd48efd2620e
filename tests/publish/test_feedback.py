"""Feedback pages and the class report (grader/publish/feedback.py), from synthetic records; one in Chromium."""

from __future__ import annotations

import base64
import json
import statistics
import struct
from html.parser import HTMLParser

import pytest

from grader.grading.record import RECORD_MAX_BYTES, Record, TestResult, cap_record
from grader.publish.feedback import (
    PAGE_CELLS,
    PAGE_MAX_BYTES,
    feedback_file_name,
    feedback_href,
    feedback_html,
    report_html,
    shown_names,
    write_feedback,
    write_report,
)
from grader.publish.output import safe_name
from tests.browser import dump_dom, probe_images, requires_chromium

XSS = '<script>alert("x")</script>'
IMG_XSS = "<img src=x onerror=\"document.title='pwned'\">"

# --------------------------------------------------------------------------- a tiny DOM


VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class Node:
    def __init__(self, tag: str, attrs: dict[str, str | None], parent: Node | None) -> None:
        self.tag, self.attrs, self.parent = tag, attrs, parent
        self.children: list[Node | str] = []

    @property
    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text for c in self.children)

    def iter(self):
        yield self
        for c in self.children:
            if isinstance(c, Node):
                yield from c.iter()

    def find_all(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> list[Node]:
        out = []
        for n in self.iter():
            if tag and n.tag != tag:
                continue
            if cls and cls not in (n.attrs.get("class") or "").split():
                continue
            if any(n.attrs.get(k.replace("_", "-")) != v for k, v in attrs.items()):
                continue
            out.append(n)
        return out

    def by_id(self, ident: str) -> Node:
        found = [n for n in self.iter() if n.attrs.get("id") == ident]
        assert len(found) == 1, f"expected one element with id {ident!r}, found {len(found)}"
        return found[0]

    def has_id(self, ident: str) -> bool:
        return any(n.attrs.get("id") == ident for n in self.iter())


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {}, None)
        self.cur = self.root

    def handle_starttag(self, tag, attrs):
        node = Node(tag, dict(attrs), self.cur)
        self.cur.children.append(node)
        if tag not in VOID:
            self.cur = node

    def handle_startendtag(self, tag, attrs):
        self.cur.children.append(Node(tag, dict(attrs), self.cur))

    def handle_endtag(self, tag):
        n = self.cur
        while n is not None and n.tag != tag:
            n = n.parent
        if n is not None and n.parent is not None:
            self.cur = n.parent

    def handle_data(self, data):
        self.cur.children.append(data)


def parse(html: str) -> Node:
    b = _Builder()
    b.feed(html)
    b.close()
    return b.root


# --------------------------------------------------------------------------- records


def t(name, category="numerics", score=1.0, max_score=1.0, status="passed", **kw) -> TestResult:
    return TestResult(name=name, category=category, score=score, max_score=max_score, status=status, **kw)


def make_record(student="alice", score=None, **kw) -> Record:
    tests = kw.pop(
        "tests",
        [
            t("test_shape[2-3]", "numerics", 2, 2, "passed", title="Output shape"),
            t("test_shape[4-5]", "numerics", 0, 2, "failed", message="expected (4, 5), got (5, 4)", hint="Check axis"),
            t("test_jit", "jit", 3, 3, "passed"),
            t(
                "test_hidden_vals[7-11]",
                "numerics",
                0,
                2,
                "failed",
                message="wrong values",
                visibility="after_published",
            ),
            t("test_hidden_vals[13-17]", "numerics", 2, 2, "passed", visibility="after_published"),
        ],
    )
    got = sum(x.score for x in tests)
    return Record(
        assignment="hw1",
        student=student,
        submission_sha256="0" * 64,
        status=kw.pop("status", "graded"),
        score=got if score is None else score,
        max_score=kw.pop("max_score", sum(x.max_score for x in tests)),
        tests=tests,
        **kw,
    )


COURSE, TITLE = "CS 123: JAX", "Homework 1 — arrays"


def page(record: Record) -> Node:
    return parse(feedback_html(record, course=COURSE, title=TITLE))


# --------------------------------------------------------------------------- feedback page


def test_header_score_status_and_tests():
    rec = make_record(identity={"lms": "canvas", "id": "42", "name": "Alice Liddell", "original": "hw1.ipynb"})
    doc = page(rec)
    assert doc.by_id("course").text == COURSE
    assert doc.by_id("assignment-title").text == TITLE
    assert doc.by_id("student-name").text == "Alice Liddell"
    assert doc.by_id("student-id").text == "alice"
    assert doc.by_id("score").text == "7" and doc.by_id("score").attrs["data-value"] == "7"
    assert doc.by_id("max-score").text == "11"
    assert doc.by_id("status").attrs["data-status"] == "graded"
    assert doc.by_id("passed-count").text == "3" and doc.by_id("test-count").text == "5"
    rows = doc.find_all("tr", cls="test")
    assert len(rows) == 5
    by_name = {r.attrs["data-name"]: r for r in rows}
    # visible tests keep their full names, titles, messages and hints
    failed = by_name["test_shape[4-5]"]
    assert failed.attrs["data-status"] == "failed" and failed.attrs["data-score"] == "0"
    assert failed.attrs["data-max-score"] == "2" and failed.attrs["data-visibility"] == "visible"
    assert "expected (4, 5), got (5, 4)" in failed.text and "Check axis" in failed.text
    assert "Output shape" in by_name["test_shape[2-3]"].text
    assert by_name["test_jit"].attrs["data-category"] == "jit"
    cats = {
        r.attrs["data-category"]: (r.attrs["data-score"], r.attrs["data-max-score"])
        for r in doc.find_all("tr", cls="category")
    }
    assert cats == {"numerics": ("4", "8"), "jit": ("3", "3")}
    assert not doc.has_id("late")
    assert not doc.find_all("script")
    assert not doc.find_all("link") and 'src="http' not in feedback_html(rec, course=COURSE, title=TITLE)


def test_hidden_parametrization_ids_never_appear():
    tests = [
        t("test_v[0.5-2]", "numerics", 1, 1, "passed"),
        t(
            "test_h[secretA-7]",
            "numerics",
            0,
            1,
            "failed",
            message="test_h[secretA-7] failed: wrong",
            hint="think",
            visibility="after_published",
            title="Values on hidden inputs",
        ),
        t("test_other[secretB]", "jit", 1, 1, "passed", visibility="after_published"),
        t("test_h[secretC-9]", "numerics", 1, 1, "passed", visibility="hidden"),
        t("test_plain_hidden", "prng", 1, 1, "passed", visibility="after_published"),
    ]
    rec = make_record(tests=tests)
    html = feedback_html(rec, course=COURSE, title=TITLE)
    for secret in ("secretA", "secretB", "secretC"):
        assert secret not in html
    doc = parse(html)
    names = [r.attrs["data-name"] for r in doc.find_all("tr", cls="test")]
    assert names == ["test_v[0.5-2]", "test_h[case 1]", "test_other[case 1]", "test_h[case 2]", "test_plain_hidden"]
    assert shown_names(tests) == names
    hidden = doc.find_all("tr", cls="test", data_name="test_h[case 1]")[0]
    assert hidden.attrs["data-visibility"] == "hidden"
    # title, verdict, message (the name in it redacted too) and hint are shown
    assert "Values on hidden inputs" in hidden.text and "failed" in hidden.text
    assert "test_h[case 1] failed: wrong" in hidden.text and "think" in hidden.text


def test_everything_is_escaped():
    rec = make_record(
        student='bob"><script>x</script>',
        identity={"name": XSS, "original": IMG_XSS},
        message=f"the notebook printed {XSS}",
        tests=[
            t("test_a", "numerics", 0, 1, "failed", message=f"got {IMG_XSS}", hint=XSS, title=XSS),
            t("test_b[<b>]", "numerics", 0, 1, "failed", message="x", visibility="visible"),
        ],
        cells=[{"index": 0, "status": "error", "ename": "ValueError", "evalue": XSS, "line": 1, "source": IMG_XSS}],
        missing=[XSS],
        late={"days": 1, "percent": 10, "raw_score": 0, "submitted_at": XSS, "due": IMG_XSS},
    )
    html = feedback_html(rec, course=XSS, title=IMG_XSS)
    assert "<script>" not in html.replace("&lt;script&gt;", "")
    assert "<img src=x" not in html and "<b>" not in html
    doc = parse(html)
    assert not doc.find_all("script") and not doc.find_all("img") and not doc.find_all("b")
    # the text reads back exactly as it was written
    assert doc.by_id("student-name").text == XSS
    assert doc.by_id("student-id").text == rec.student
    assert doc.by_id("course").text == XSS and doc.by_id("assignment-title").text == IMG_XSS
    assert doc.by_id("message").text == rec.message
    row = doc.find_all("tr", cls="test", data_name="test_a")[0]
    assert IMG_XSS in row.text and XSS in row.text
    assert doc.find_all("tr", cls="test", data_name="test_b[<b>]")
    assert doc.find_all("li", cls="missing", data_name=XSS)
    assert XSS in doc.by_id("cells").text and IMG_XSS in doc.by_id("cells").text

    report = report_html([rec], course=XSS, title=IMG_XSS, assignment=XSS)
    rdoc = parse(report)
    assert len(rdoc.find_all("script")) == 0
    assert [i.attrs["id"] for i in rdoc.find_all("img")] == ["histogram"]
    assert rdoc.find_all("tr", cls="student", data_student=rec.student)
    assert rdoc.find_all("tr", cls="student")[0].find_all("a")[0].attrs["href"] == feedback_href(rec.student)


def test_late_deduction_shown():
    rec = make_record(
        score=5.6,
        late={
            "days": 2,
            "percent": 20.0,
            "raw_score": 7.0,
            "flag": True,
            "submitted_at": "2025-03-03T10:00:00Z",
            "due": "2025-03-01T23:59:00Z",
        },
    )
    doc = page(rec)
    late = doc.by_id("late")
    assert late.attrs["data-days"] == "2" and late.attrs["data-percent"] == "20"
    assert late.attrs["data-raw-score"] == "7" and late.attrs["data-final-score"] == "5.6"
    assert doc.by_id("late-days").text == "2" and doc.by_id("late-percent").text == "20"
    assert doc.by_id("raw-score").text == "7" and doc.by_id("final-score").text == "5.6"
    assert doc.by_id("score").text == "5.6"
    assert "2025-03-03T10:00:00Z" in late.text and "2025-03-01T23:59:00Z" in late.text


def test_cell_errors_and_missing_functions_shown():
    rec = make_record(
        cells=[
            {
                "index": 2,
                "status": "error",
                "ename": "NameError",
                "evalue": "name 'jnp' is not defined",
                "line": 3,
                "source": "y = jnp.ones(3)",
            },
            {
                "index": 5,
                "status": "error",
                "ename": "TypeError",
                "evalue": "bad",
                "line": 1,
                "line_cell": 4,
                "source": "f(x)",
            },
            {"index": 7, "status": "timeout", "message": "the cell ran past its 60 s limit"},
            {"index": 8, "status": "ok", "strays": 2},
        ],
        missing=["softmax", "init_params"],
    )
    doc = page(rec)
    cells = doc.find_all("li", cls="cell")
    assert [c.attrs["data-index"] for c in cells] == ["2", "5", "7", "8"]
    assert [c.attrs["data-status"] for c in cells] == ["error", "error", "timeout", "ok"]
    assert cells[0].attrs["data-ename"] == "NameError" and cells[0].attrs["data-line"] == "3"
    assert "cell 3, line 3" in cells[0].text and "NameError: name 'jnp' is not defined" in cells[0].text
    assert "y = jnp.ones(3)" in cells[0].text
    assert "line 1 of cell 5" in cells[1].text
    assert "ran past its 60 s limit" in cells[2].text
    assert "2 process(es)" in cells[3].text
    assert [m.attrs["data-name"] for m in doc.find_all("li", cls="missing")] == ["softmax", "init_params"]


@pytest.mark.parametrize("status", ["error", "timeout"])
def test_ungraded_submission(status):
    rec = make_record(status=status, tests=[], score=0, max_score=11, message="the kernel died: out of memory")
    doc = page(rec)
    assert doc.by_id("status").attrs["data-status"] == status
    assert "not graded" in doc.by_id("status").text
    assert doc.by_id("message").text == "the kernel died: out of memory"
    assert not doc.find_all("tr", cls="test") and "No tests ran" in doc.text
    assert doc.by_id("score").text == "0" and doc.by_id("max-score").text == "11"


def test_feedback_with_fractional_scores():
    rec = make_record(tests=[t("test_a[1]", "numerics", 1 / 3, 1 / 3), t("test_a[2]", "numerics", 0, 1 / 3, "failed")])
    doc = page(rec)
    assert doc.by_id("score").attrs["data-value"] == "0.333333"
    assert float(doc.find_all("tr", cls="test")[0].attrs["data-score"]) == pytest.approx(1 / 3, abs=1e-6)


# --------------------------------------------------------------------------- report


def flood_record() -> Record:
    """Issue 11: 330 failing cells, each printing 20,000 characters (a 7.4 MB record before the cap)."""
    cells = [
        {
            "index": i,
            "status": "error",
            "ename": "ValueError",
            "evalue": f"{i}:" + "e" * 20_000,
            "output": f"{i}:" + "x" * 20_000,
            "line": 2,
            "source": "raise ValueError('e' * 20_000)",
        }
        for i in range(330)
    ]
    return make_record(cells=cells, message="m" * 50_000)


def test_the_whole_record_is_capped_and_says_what_was_cut():
    rec = flood_record()
    before = len(rec.to_json().encode())
    assert before > 7_000_000
    capped = cap_record(rec)
    size = len(capped.to_json().encode())
    assert size <= RECORD_MAX_BYTES < 256 * 1024
    cut = capped.truncated
    assert cut["original_bytes"] == before and cut["limit_bytes"] == RECORD_MAX_BYTES
    assert cut["cell_texts"] >= 2 * len(capped.cells) and cut.get("cells_dropped", 0) == 330 - len(capped.cells)
    # scores, verdicts and the first failures are kept; each cut text says so
    fresh = flood_record()
    assert (capped.score, capped.status, [x.status for x in capped.tests]) == (
        fresh.score,
        fresh.status,
        [x.status for x in fresh.tests],
    )
    assert capped.cells[0]["index"] == 0 and capped.cells[0]["ename"] == "ValueError"
    assert "characters cut: the result record is capped" in capped.cells[0]["output"]
    assert Record.from_dict(json.loads(capped.to_json())).truncated == cut  # it round-trips
    small = make_record()
    assert cap_record(small).truncated == {} and cap_record(small) is small  # nothing cut: nothing said


def test_the_feedback_page_is_capped():
    rec = flood_record()  # uncapped: the page alone must stay small as well
    html = feedback_html(rec, course=COURSE, title=TITLE)
    assert len(html.encode()) <= PAGE_MAX_BYTES
    doc = parse(html)
    shown = doc.find_all("li", cls="cell")
    assert 1 <= len(shown) <= PAGE_CELLS and shown[0].attrs["data-index"] == "0"
    assert int(doc.by_id("cells-hidden").attrs["data-count"]) == 330 - len(shown)
    capped = parse(feedback_html(cap_record(flood_record()), course=COURSE, title=TITLE))
    assert "cut from this result" in capped.by_id("truncated").text
    assert int(capped.by_id("cells-hidden").attrs["data-count"]) == 330 - len(capped.find_all("li", cls="cell"))


def class_records() -> list[Record]:
    recs = []
    for i, (passed_jit, passed_shape) in enumerate([(True, True), (True, False), (False, False), (True, True)]):
        tests = [
            t("test_jit", "jit", 3 if passed_jit else 0, 3, "passed" if passed_jit else "failed"),
            t("test_shape[2-3]", "numerics", 2 if passed_shape else 0, 2, "passed" if passed_shape else "failed"),
            t("test_hidden[9]", "numerics", 1, 1, "passed", visibility="after_published"),
        ]
        recs.append(make_record(f"s{i}", tests=tests, timings={"total": 10.0 + i}))
    recs.append(
        make_record(
            "s_err",
            status="error",
            tests=[],
            score=0,
            max_score=6,
            message="notebook is not valid JSON",
            timings={"total": 0.5},
        )
    )
    recs.append(
        make_record(
            "s_slow",
            status="timeout",
            tests=[],
            score=0,
            max_score=6,
            message="ran past the 600 s limit",
            timings={"total": 600.0},
        )
    )
    return recs


def test_report_numbers():
    recs = class_records()
    scores = [r.score for r in recs]
    assert scores == [6, 4, 1, 6, 0, 0]
    doc = parse(report_html(recs, course=COURSE, title=TITLE, assignment="hw1"))
    assert doc.by_id("count").text == "6"
    assert float(doc.by_id("mean").attrs["data-value"]) == pytest.approx(statistics.fmean(scores), abs=1e-6)
    assert doc.by_id("mean").text == f"{statistics.fmean(scores):.2f}" == "2.83"
    assert doc.by_id("median").text == "2.5"
    assert doc.by_id("max").text == "6" and doc.by_id("min").text == "0"
    assert doc.by_id("possible").text == "6"
    assert doc.by_id("errored").text == "1" and doc.by_id("timed-out").text == "1"
    assert doc.by_id("assignment").text == "hw1"

    rates = {r.attrs["data-name"]: r.attrs for r in doc.find_all("tr", cls="test-rate")}
    assert list(rates) == ["test_jit", "test_shape[2-3]", "test_hidden[9]"]  # staff see full names
    assert (rates["test_jit"]["data-passed"], rates["test_jit"]["data-total"], rates["test_jit"]["data-rate"]) == (
        "3",
        "4",
        "75",
    )
    assert (rates["test_shape[2-3]"]["data-passed"], rates["test_shape[2-3]"]["data-rate"]) == ("2", "50")
    assert rates["test_hidden[9]"]["data-rate"] == "100"
    assert "3 / 4" in doc.find_all("tr", cls="test-rate", data_name="test_jit")[0].text
    assert "75.0%" in doc.find_all("tr", cls="test-rate", data_name="test_jit")[0].text

    cats = {r.attrs["data-category"]: r.attrs for r in doc.find_all("tr", cls="category-rate")}
    assert list(cats) == ["numerics", "jit"]
    assert (cats["jit"]["data-score"], cats["jit"]["data-max-score"], cats["jit"]["data-rate"]) == ("9", "12", "75")
    assert (cats["numerics"]["data-score"], cats["numerics"]["data-max-score"]) == ("8", "12")
    assert float(cats["numerics"]["data-rate"]) == pytest.approx(100 * 8 / 12, abs=1e-6)

    slow = [r.attrs["data-student"] for r in doc.find_all("tr", cls="slow")]
    assert slow == ["s_slow", "s3", "s2", "s1", "s0", "s_err"]
    failed = {r.attrs["data-student"]: r for r in doc.find_all("tr", cls="failed-submission")}
    assert set(failed) == {"s_err", "s_slow"}
    assert failed["s_slow"].attrs["data-status"] == "timeout" and "600 s limit" in failed["s_slow"].text
    assert "not valid JSON" in failed["s_err"].text

    students = doc.find_all("tr", cls="student")
    assert [s.attrs["data-student"] for s in students] == sorted(r.student for r in recs)
    by = {s.attrs["data-student"]: s for s in students}
    assert by["s1"].attrs["data-score"] == "4" and by["s1"].attrs["data-max-score"] == "6"
    assert by["s_err"].attrs["data-status"] == "error"
    assert by["s1"].find_all("a", cls="feedback-link")[0].attrs["href"] == "feedback/s1.html"


def test_report_lists_at_most_ten_slowest():
    recs = [make_record(f"st{i:02d}", timings={"total": float(i)}) for i in range(15)]
    recs.append(make_record("untimed"))
    doc = parse(report_html(recs, course=COURSE, title=TITLE, assignment="hw1"))
    slow = doc.find_all("tr", cls="slow")
    assert [r.attrs["data-student"] for r in slow] == [f"st{i:02d}" for i in range(14, 4, -1)]
    assert slow[0].attrs["data-seconds"] == "14"


def test_report_names_the_notebooks_to_read():
    """grader/intake/review.py's findings: each notebook with its score, every finding up to five
    with its cell, line, reason and code (escaped), the rest counted; none, no section."""
    finding = {"cell": 4, "line": 2, "code": "import grader.sandboxed.kernel_side as ks  # <b>", "kind": "grader"}
    finding |= {"what": "import grader.sandboxed.kernel_side", "why": "reaches into the grader"}
    recs = [
        make_record("mallory", review=[finding | {"line": i} for i in range(1, 8)]),
        make_record("alice"),
        make_record("trent", review=[finding]),
    ]
    html = report_html(recs, course=COURSE, title=TITLE, assignment="hw1")
    doc = parse(html)
    rows = doc.find_all("tr", cls="review-finding")
    assert [(r.attrs["data-student"], r.attrs["data-line"]) for r in rows] == [
        *(("mallory", str(i)) for i in range(1, 6)),
        ("trent", "2"),
    ]
    assert "cell 4, line 2" in rows[-1].text and "reaches into the grader" in rows[-1].text
    assert "&lt;b&gt;" in html and "<b>" not in html
    assert [r.attrs["data-student"] for r in doc.find_all("tr", cls="review-more")] == ["mallory"]
    assert "and 2 more in the record" in doc.find_all("tr", cls="review-more")[0].text
    clean = report_html([make_record("alice")], course=COURSE, title=TITLE, assignment="hw1")
    assert 'id="review"' not in clean and "Notebooks to read" not in clean


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_histogram_is_an_embedded_png():
    doc = parse(report_html(class_records(), course=COURSE, title=TITLE, assignment="hw1"))
    img = doc.by_id("histogram")
    src = img.attrs["src"]
    assert src.startswith("data:image/png;base64,")
    data = base64.b64decode(src.split(",", 1)[1], validate=True)
    assert png_size(data) == (int(img.attrs["width"]), int(img.attrs["height"]))
    assert data.rstrip().endswith(b"IEND\xaeB`\x82")
    alt = img.attrs["alt"]
    assert "6 submission" in alt and "mean 2.83" in alt


def test_report_without_records_and_with_fractional_points():
    doc = parse(report_html([], course=COURSE, title=TITLE, assignment="hw1"))
    assert doc.by_id("count").text == "0" and not doc.has_id("histogram") and not doc.has_id("mean")
    recs = [
        make_record(f"s{i}", tests=[t("test_a", "numerics", i * 12.5, 62.5, "passed")], max_score=62.5)
        for i in range(6)
    ]
    doc = parse(report_html(recs, course=COURSE, title=TITLE, assignment="hw1"))
    data = base64.b64decode(doc.by_id("histogram").attrs["src"].split(",", 1)[1])
    assert png_size(data) == (640, 300)
    assert doc.by_id("mean").attrs["data-value"] == "31.25"


def test_write_feedback_and_report(tmp_path):
    recs = [*class_records(), make_record("a b/c", identity={"name": "Odd Name"})]
    paths = write_feedback(tmp_path, recs, course=COURSE, title=TITLE)
    assert [p.name for p in paths] == [f"{safe_name(r.student)}.html" for r in recs]
    assert all(p.parent == tmp_path / "feedback" and p.is_file() for p in paths)
    assert feedback_file_name("a b/c").startswith("a_b_c~") and feedback_file_name("alice") == "alice.html"
    report = write_report(tmp_path, recs, course=COURSE, title=TITLE, assignment="hw1")
    assert report == tmp_path / "report.html"
    doc = parse(report.read_text(encoding="utf-8"))
    for a in doc.find_all("a", cls="feedback-link"):
        assert (tmp_path / a.attrs["href"]).is_file()
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(".tmp")]
    odd = parse((tmp_path / "feedback" / feedback_file_name("a b/c")).read_text(encoding="utf-8"))
    assert odd.by_id("student-name").text == "Odd Name" and odd.by_id("student-id").text == "a b/c"


def test_student_ids_that_look_alike_never_share_a_file(tmp_path):
    """A student names their file, hence their id, in a plain folder: ``_alice``, ``alice!`` and
    ``alice `` made safe all read ``alice``. Each id gets a file of its own (the red team's attack,
    session 24: the record and page of ``alice`` were overwritten, and every run then stopped)."""
    ids = ["alice", "_alice", "alice!", "alice ", "x y", "x_y", "José García", "Jos_Garc_a", "é", "ü", "a" * 200]
    names = [safe_name(i) for i in ids]
    assert len(set(names)) == len(ids) and names[0] == "alice" and names[5] == "x_y"
    assert all(len(n) <= 150 and "/" not in n and not n.startswith(".") for n in names)
    paths = write_feedback(tmp_path, [make_record(i) for i in ids], course=COURSE, title=TITLE)
    assert len(paths) == len(ids)
    for i, path in zip(ids, paths):
        assert parse(path.read_text(encoding="utf-8")).by_id("student-id").text == i


# --------------------------------------------------------------------------- in a real browser


@requires_chromium
def test_pages_render_in_chromium(tmp_path):
    recs = class_records()
    recs[0].identity = {"name": IMG_XSS}
    recs[0].message = XSS
    recs[1].late = {"days": 1, "percent": 10.0, "raw_score": 4.5}
    write_feedback(tmp_path, recs, course=COURSE, title=TITLE)
    report = write_report(tmp_path, recs, course=COURSE, title=TITLE, assignment="hw1")

    doc = parse(dump_dom(report))
    assert doc.find_all("title")[0].text == f"{TITLE} — class report"
    assert doc.by_id("count").text == str(len(recs))
    assert doc.by_id("mean").text == f"{statistics.fmean(r.score for r in recs):.2f}"
    assert [r.attrs["data-student"] for r in doc.find_all("tr", cls="student")] == sorted(r.student for r in recs)
    assert doc.find_all("tr", cls="test-rate", data_name="test_jit")[0].attrs["data-rate"] == "75"

    for rec in recs[:2]:
        path = tmp_path / doc.find_all("tr", cls="student", data_student=rec.student)[0].find_all("a")[0].attrs["href"]
        fb = parse(dump_dom(path))
        assert fb.find_all("title")[0].text.startswith(TITLE)  # the payload in the name did not retitle it
        assert fb.by_id("score").text == f"{rec.score:g}"
        assert fb.by_id("student-id").text == rec.student
        assert len(fb.find_all("tr", cls="test")) == len(rec.tests)
        assert not fb.find_all("script") and not fb.find_all("img")
    fb0 = parse(dump_dom(tmp_path / "feedback" / "s0.html"))
    assert fb0.by_id("student-name").text == IMG_XSS and fb0.by_id("message").text == XSS
    fb1 = parse(dump_dom(tmp_path / "feedback" / "s1.html"))
    assert fb1.by_id("late-percent").text == "10" and fb1.by_id("raw-score").text == "4.5"

    # the histogram is decoded by the browser at its full size
    probed = parse(probe_images(report, tmp_path))
    img = probed.by_id("histogram")
    assert img.attrs.get("data-probe-complete") == "true"
    assert (img.attrs.get("data-probe-width"), img.attrs.get("data-probe-height")) == ("640", "300")
