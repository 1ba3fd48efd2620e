"""``jaxgrade post canvas`` against a Canvas stand-in on loopback: the bulk update_grades endpoint,
the Progress object (queued, running, completed or failed), paginated submissions, throttling
(403 "Rate Limit Exceeded" and 429 with Retry-After) and the bearer token, which never shows."""

from __future__ import annotations

import io
import json
import logging
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from grader.batch.gradebook import AssignmentInfo, Gradebook
from grader.cli import main
from grader.course.config import ConfigError, load_course
from grader.grading.record import Record
from grader.publish import canvas
from grader.publish.exports import summary
from tests.minicourse import make_minicourse

TOKEN = "7~s3cretTokenThatMustNeverBeShown4242"
COURSE, ASSIGNMENT = "7", "555"  # the minicourse's `double` has canvas_id "555"
THROTTLED = "403 Forbidden (Rate Limit Exceeded)"


class FakeCanvas:
    """The endpoints as Canvas documents them; ``queue`` holds responses served before any other."""

    def __init__(self, grades: dict[str, float | None]) -> None:
        self.grades = dict(grades)  # user id -> entered score
        self.page_size = 2  # small, so that two students need two pages
        self.queue: list[tuple[int, dict[str, str], str]] = []
        self.requests: list[tuple[str, str, dict[str, list[str]]]] = []
        self.fail_with: str | None = None  # a job that fails, with this message
        self.jobs: dict[int, dict[str, Any]] = {}
        self.active = self.most_active = 0
        self.lock = threading.Lock()
        self.base = ""

    def handle(self, h: BaseHTTPRequestHandler) -> None:
        """One request, counted as active until its answer starts to go out (_send): the client
        may send its next request as soon as it has the answer, before this thread returns."""
        with self.lock:
            self.active += 1
            self.most_active = max(self.most_active, self.active)
        done = []

        def answered() -> None:
            if not done:
                done.append(True)
                with self.lock:
                    self.active -= 1

        h.answered = answered  # type: ignore[attr-defined]
        try:
            self._handle(h)
        finally:
            answered()

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        url = urllib.parse.urlsplit(h.path)
        length = int(h.headers.get("Content-Length") or 0)
        form = urllib.parse.parse_qs(h.rfile.read(length).decode()) if length else {}
        self.requests.append((h.command, h.path, form))
        if self.queue:
            status, headers, body = self.queue.pop(0)
            return _send(h, status, body, headers)
        if h.headers.get("Authorization") != f"Bearer {TOKEN}":
            return _send(h, 401, json.dumps({"errors": [{"message": "Invalid access token."}]}))
        subs = f"/api/v1/courses/{COURSE}/assignments/{ASSIGNMENT}/submissions"
        if h.command == "GET" and url.path == subs:
            return self._list(h, urllib.parse.parse_qs(url.query))
        if h.command == "POST" and url.path == subs + "/update_grades":
            return self._update(h, form)
        if h.command == "GET" and url.path.startswith("/api/v1/progress/"):
            return self._progress(h, int(url.path.rsplit("/", 1)[1]))
        if url.path == "/api/v1/echo":  # an error page that quotes the request's headers
            return _send(h, 500, f"Internal error; request had {h.headers.get('Authorization')}")
        _send(h, 404, json.dumps({"errors": [{"message": "The specified resource does not exist."}]}))

    def _list(self, h: BaseHTTPRequestHandler, query: dict[str, list[str]]) -> None:
        page = int(query.get("page", ["1"])[0])
        users = sorted(self.grades, key=int)
        chunk = users[(page - 1) * self.page_size : page * self.page_size]
        body = [{"user_id": int(u), "score": self.grades[u], "entered_score": self.grades[u]} for u in chunk]
        headers = {}
        if page * self.page_size < len(users):
            nxt = f"{self.base}/api/v1/courses/{COURSE}/assignments/{ASSIGNMENT}/submissions?page={page + 1}&per_page=2"
            headers["Link"] = f'<{nxt}>; rel="next", <{self.base}/x?page=1>; rel="first"'
        _send(h, 200, json.dumps(body), headers)

    def _update(self, h: BaseHTTPRequestHandler, form: dict[str, list[str]]) -> None:
        job = len(self.jobs) + 1
        self.jobs[job] = {"form": form, "states": ["running", "failed" if self.fail_with else "completed"]}
        _send(h, 200, json.dumps(self._progress_object(job, "queued")))

    def _progress(self, h: BaseHTTPRequestHandler, job: int) -> None:
        state = self.jobs[job]["states"].pop(0) if len(self.jobs[job]["states"]) > 1 else self.jobs[job]["states"][0]
        if state == "completed":
            for key, values in self.jobs[job]["form"].items():
                if key.endswith("[posted_grade]"):
                    self.grades[key.split("[")[1].rstrip("]")] = float(values[0])
        _send(h, 200, json.dumps(self._progress_object(job, state)))

    def _progress_object(self, job: int, state: str) -> dict[str, Any]:
        return {
            "id": job,
            "tag": "submissions_update",
            "workflow_state": state,
            "completion": 100 if state == "completed" else 0,
            "message": self.fail_with if state == "failed" else None,
            "url": f"{self.base}/api/v1/progress/{job}",
        }


def _send(h: BaseHTTPRequestHandler, status: int, body: str, headers: dict[str, str] | None = None) -> None:
    data = body.encode()
    h.send_response(status)
    h.send_header("Content-Type", "application/json; charset=utf-8")
    h.send_header("Content-Length", str(len(data)))
    for key, value in (headers or {}).items():
        h.send_header(key, value)
    getattr(h, "answered", lambda: None)()  # FakeCanvas.handle: no longer active
    h.end_headers()
    h.wfile.write(data)


@pytest.fixture
def server() -> Iterator[FakeCanvas]:
    fake = FakeCanvas({"5": 0.0, "9": None, "17": 3.0})

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            fake.handle(self)

        do_POST = do_GET

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    fake.base = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield fake
    httpd.shutdown()
    httpd.server_close()


def _record(student: str, score: float, identity: dict[str, str]) -> Record:
    return Record(
        assignment="double",
        student=student,
        submission_sha256=student.encode().hex().ljust(64, "0"),
        status="graded",
        score=score,
        max_score=4.0,
        identity=identity,
        graded_at="2026-11-02T10:00:00+00:00",
        assignment_version="v1",
    )


RECORDS = [
    _record("5", 2.5, {"lms": "canvas", "id": "5", "name": "Carol"}),
    _record("9", 4.0, {"lms": "canvas", "id": "9", "name": "Alice"}),
    _record("17", 3.0, {"lms": "canvas", "id": "17", "name": "Bob"}),
    _record("99", 1.0, {"lms": "canvas", "id": "99", "name": "Eve"}),
    _record("dave", 2.0, {"lms": "file", "id": "dave", "name": "Dave"}),
]


@pytest.fixture
def course(tmp_path: Path, server: FakeCanvas, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = make_minicourse(tmp_path / "course")
    with (root / "grading.yaml").open("a") as f:
        f.write(f'canvas: {{base_url: "{server.base}", course_id: "{COURSE}"}}\n')
    with Gradebook(tmp_path / "graded" / "gradebook.db") as gb:
        gb.set_assignment(AssignmentInfo("double", "Doubling", "Mini course", ASSIGNMENT, None, 4.0, "v1"))
        for r in RECORDS:
            gb.put(r)
    monkeypatch.setenv("CANVAS_TOKEN", TOKEN)
    return root


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    waited: list[float] = []
    monkeypatch.setattr(canvas, "_sleep", waited.append)
    return waited


def post(course: Path, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["--course", str(course), "post", "canvas", "--from", str(course.parent / "graded"), *argv], out, err)
    return code, out.getvalue(), err.getvalue()


PLAN = [
    "Canvas course 7, assignment 555 (double): 5 student(s) in the gradebook",
    "  Bob (user 17): 3 (unchanged)",
    "  Carol (user 5): 0 -> 2.5",
    "  Alice (user 9): no grade -> 4",
    "  not posted, not a student of this Canvas assignment: Eve (user 99)",
    "  not posted, no Canvas user id: Dave",
]


def test_dry_run_shows_old_and_new_grades_and_sends_nothing(course: Path, server: FakeCanvas, sleeps) -> None:
    code, out, _ = post(course, "--dry-run")
    assert code == 0
    assert out.splitlines() == [*PLAN, "dry run: 2 grade(s) would be posted; nothing was sent"]
    assert [(m, p.split("?")[0]) for m, p, _ in server.requests] == [
        ("GET", "/api/v1/courses/7/assignments/555/submissions"),
        ("GET", "/api/v1/courses/7/assignments/555/submissions"),  # the Link header's next page
    ]
    assert server.grades == {"5": 0.0, "9": None, "17": 3.0}


def test_dry_run_without_a_token_shows_the_plan_only(course: Path, server: FakeCanvas, monkeypatch) -> None:
    monkeypatch.delenv("CANVAS_TOKEN")
    code, out, _ = post(course, "--dry-run")
    assert code == 0 and server.requests == []
    assert "  Carol (user 5): 2.5" in out.splitlines()
    assert out.splitlines()[-1] == (
        "dry run: 4 grade(s) would be posted (current grades not read: CANVAS_TOKEN is not set); nothing was sent"
    )


def test_post_sends_the_changed_grades_in_one_bulk_update_and_waits_for_the_job(
    course: Path, server: FakeCanvas, sleeps: list[float]
) -> None:
    code, out, _ = post(course)
    assert code == 0
    assert out.splitlines() == [
        *PLAN,
        "posted 2 grade(s) to Canvas course 7, assignment 555 (double): Canvas job 1 completed",
    ]
    posts = [(p, form) for m, p, form in server.requests if m == "POST"]
    assert posts == [
        (
            "/api/v1/courses/7/assignments/555/submissions/update_grades",
            {"grade_data[5][posted_grade]": ["2.5"], "grade_data[9][posted_grade]": ["4"]},
        )
    ]
    assert [p for m, p, _ in server.requests if "progress" in p] == ["/api/v1/progress/1", "/api/v1/progress/1"]
    assert sleeps == [1.0, 2.0]  # queued, then running, then completed
    assert server.grades == {"5": 2.5, "9": 4.0, "17": 3.0}
    assert server.most_active == 1  # serial requests
    assert post(course)[1].splitlines()[-1] == "nothing to post: Canvas already has these grades"


def test_comment_carries_the_feedback_summary(course: Path, server: FakeCanvas, sleeps) -> None:
    assert post(course, "--comment")[0] == 0
    form = next(form for m, _, form in server.requests if m == "POST")
    assert form["grade_data[5][text_comment]"] == [summary(RECORDS[0])]
    assert set(form) == {f"grade_data[{u}][{k}]" for u in ("5", "9") for k in ("posted_grade", "text_comment")}


def test_comment_never_carries_hidden_parameter_ids(course: Path, server: FakeCanvas, sleeps) -> None:
    from grader.grading.record import TestResult

    rec = _record("5", 1.0, {"lms": "canvas", "id": "5", "name": "Carol"})
    rec.graded_at = "2026-11-03T10:00:00+00:00"  # the newer record of student 5
    rec.tests = [
        TestResult("test_public", "numerics", 1.0, 1.0, "passed"),
        TestResult("test_fit[lr=0.37-steps=12]", "numerics", 0.0, 3.0, "failed", visibility="hidden"),
    ]
    with Gradebook(course.parent / "graded" / "gradebook.db") as gb:
        gb.put(rec)
    assert post(course, "--comment")[0] == 0
    form = next(form for m, _, form in server.requests if m == "POST")
    (comment,) = form["grade_data[5][text_comment]"]
    assert "lr=0.37" not in comment and "steps=12" not in comment
    assert comment.endswith("Failed 1 of 2 tests: test_fit[case 1].")


def test_throttling_is_retried_with_backoff_and_retry_after(course: Path, server: FakeCanvas, sleeps) -> None:
    server.queue = [(403, {}, THROTTLED), (429, {"Retry-After": "3"}, "Too Many Requests"), (403, {}, THROTTLED)]
    code, out, _ = post(course)
    assert code == 0 and out.splitlines()[-1].startswith("posted 2 grade(s)")
    assert sleeps[:3] == [1.0, 3.0, 4.0]  # exponential backoff, Retry-After when Canvas sends it
    assert server.grades["5"] == 2.5


def test_throttling_that_does_not_stop_is_a_clear_error(course: Path, server: FakeCanvas, sleeps) -> None:
    server.queue = [(403, {}, THROTTLED)] * canvas.MAX_ATTEMPTS
    code, _, err = post(course)
    assert code == 1
    assert err.splitlines()[0] == (
        "jaxgrade: error: Canvas still throttled GET /api/v1/courses/7/assignments/555/submissions after "
        f"{canvas.MAX_ATTEMPTS} attempts (403 {THROTTLED})"
    )
    assert err.splitlines()[1].startswith("TIP: Wait a few minutes and run the command again")
    assert sleeps == [1.0, 2.0, 4.0, 8.0, 16.0]


def test_a_failed_job_is_an_error_with_canvas_message(course: Path, server: FakeCanvas, sleeps) -> None:
    server.fail_with = "3 grades could not be saved"
    code, _, err = post(course)
    assert code == 1
    assert err.splitlines()[0] == "jaxgrade: error: Canvas's grading job 1 failed: 3 grades could not be saved"
    assert "run the command again" in err.splitlines()[1]


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (
            {"CANVAS_TOKEN": "wrong"},
            "Canvas answered 401 to GET /api/v1/courses/7/assignments/555/submissions: the token in $CANVAS_TOKEN "
            "was refused (Invalid access token.)",
        ),
        (
            {"canvas_id": "556"},
            "Canvas answered 404 to GET /api/v1/courses/7/assignments/556/submissions: not found "
            "(The specified resource does not exist.)",
        ),
    ],
)
def test_refusals_name_what_to_check(course: Path, server, sleeps, monkeypatch, setup, message) -> None:
    if "CANVAS_TOKEN" in setup:
        monkeypatch.setenv("CANVAS_TOKEN", setup["CANVAS_TOKEN"])
    else:
        text = (course / "grading.yaml").read_text().replace('canvas_id: "555"', 'canvas_id: "556"')
        (course / "grading.yaml").write_text(text)
    code, _, err = post(course)
    assert code == 1 and err.splitlines()[0] == f"jaxgrade: error: {message}"
    assert err.splitlines()[1].startswith("TIP: ")


@pytest.mark.parametrize("bad", ["555/../../../users/self", "555?as_user_id=1", "\uff15\uff15\uff15", " 555", "12a"])
@pytest.mark.parametrize("argv", [[], ["--dry-run"]])
def test_a_canvas_id_that_is_not_digits_is_refused_before_any_request(
    course: Path, server: FakeCanvas, bad: str, argv: list[str]
) -> None:
    text = (course / "grading.yaml").read_text().replace('canvas_id: "555"', f"canvas_id: {json.dumps(bad)}")
    (course / "grading.yaml").write_text(text)
    code, out, err = post(course, *argv)
    assert code == 2 and server.requests == [] and out == ""
    assert err.splitlines() == [
        f"jaxgrade: error: assignment 'double': canvas_id {bad!r} is not a Canvas assignment id",
        "TIP: Set canvas_id under assignments.double in grading.yaml to the number in the Canvas assignment's "
        'address (.../assignments/<id>), e.g. canvas_id: "555".',
    ]


def test_the_client_refuses_ids_that_are_not_digits() -> None:
    client = canvas.CanvasClient("http://127.0.0.1:9", TOKEN)
    with pytest.raises(canvas.CanvasError, match=r"assignment id '5/x' is not a number"):
        client.current_grades("7", "5/x")
    with pytest.raises(canvas.CanvasError, match="course id '\uff17' is not a number"):
        client.update_grades("\uff17", "555", ())


def test_missing_token_or_settings_are_usage_errors(course: Path, server: FakeCanvas, monkeypatch) -> None:
    monkeypatch.delenv("CANVAS_TOKEN")
    code, _, err = post(course)
    assert code == 2 and server.requests == []
    assert err.startswith("jaxgrade: error: no Canvas token: the environment variable CANVAS_TOKEN is not set\nTIP: ")
    text = (course / "grading.yaml").read_text()
    (course / "grading.yaml").write_text(text[: text.index("canvas:")])
    code, _, err = post(course)
    assert code == 2 and "grading.yaml has no canvas: settings" in err


def test_the_token_never_appears_in_output_logs_or_errors(
    course: Path, server: FakeCanvas, sleeps, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    texts = []
    for argv in (["--dry-run"], [], ["--comment"]):
        texts += post(course, *argv)[1:]
    server.queue = [(401, {}, json.dumps({"errors": [{"message": f"bad token {TOKEN}"}]}))]
    texts += post(course)[1:]
    client = canvas.CanvasClient(server.base, TOKEN)
    with pytest.raises(canvas.CanvasError) as info:
        client._request("GET", server.base + "/api/v1/echo")  # Canvas quoting the header back
    texts += [str(info.value), info.value.tip, repr(client), caplog.text]
    assert "[token]" in str(info.value) and "[token]" in texts[7]
    assert "GET /api/v1/progress/1" in caplog.text  # the log has the requests, without the header
    assert not [t for t in texts if TOKEN in t]


def test_a_redirect_is_not_followed_with_the_token(server: FakeCanvas) -> None:
    server.queue = [(302, {"Location": "http://elsewhere.example/api"}, "")]
    with pytest.raises(canvas.CanvasError, match=r"a redirect to http://elsewhere.example/api, not followed"):
        canvas.CanvasClient(server.base, TOKEN).current_grades(COURSE, ASSIGNMENT)
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("block", "message"),
    [
        (
            '{base_url: "http://canvas.example.edu", course_id: "7"}',
            "grading.yaml: canvas.base_url: expected an https:// address (the token must not travel in clear "
            "text), got 'http://canvas.example.edu'",
        ),
        (
            '{base_url: "https://canvas.example.edu/courses/7", course_id: "7"}',
            "grading.yaml: canvas.base_url: expected the address of the Canvas site alone",
        ),
        ('{base_url: "https://canvas.example.edu", course_id: "CS-101"}', "grading.yaml: canvas.course_id: expected"),
        ('{base_url: "https://canvas.example.edu", course_id: "\uff17"}', "grading.yaml: canvas.course_id: expected"),
        (
            '{base_url: "https://canvas.example.edu", course_id: 7, token: "abc"}',
            "grading.yaml: canvas: a token never goes in grading.yaml",
        ),
        (
            '{base_url: "https://canvas.example.edu", course_id: 7, token_env: "A-B"}',
            "grading.yaml: canvas.token_env: expected the name of an environment variable",
        ),
    ],
)
def test_canvas_settings_are_checked(tmp_path: Path, block: str, message: str) -> None:
    root = make_minicourse(tmp_path / "c")
    with (root / "grading.yaml").open("a") as f:
        f.write(f"canvas: {block}\n")
    with pytest.raises(ConfigError) as info:
        load_course(root)
    assert str(info.value).startswith(message)


def test_https_and_loopback_settings_load(tmp_path: Path) -> None:
    root = make_minicourse(tmp_path / "c")
    with (root / "grading.yaml").open("a") as f:
        f.write('canvas: {base_url: "https://canvas.example.edu/", course_id: 7, token_env: MY_TOKEN}\n')
    settings = load_course(root).canvas
    assert settings is not None
    assert (settings.base_url, settings.course_id, settings.token_env) == (
        "https://canvas.example.edu",
        "7",
        "MY_TOKEN",
    )


def test_dry_run_with_comments_shows_one(course: Path, server: FakeCanvas, sleeps) -> None:
    """A TA about to post comments sees what a student would read (a TA's walkthrough: the dry run
    did not show them)."""
    code, out, _ = post(course, "--dry-run", "--comment")
    assert code == 0
    lines = out.splitlines()
    at = lines.index("the comment each grade would carry, e.g. Carol's:")
    assert lines[at + 1].startswith("  Score 2.5/4") and lines[-1].startswith("dry run: 2 grade(s) would be posted")
