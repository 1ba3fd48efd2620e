"""``jaxgrade post canvas``: the gradebook's current scores, posted through Canvas's REST API.

The scores are exactly those of ``jaxgrade export --format canvas`` (one record per student,
:func:`grader.exports.one_per_student`, ``record.score`` after any late deduction), and a
student's Canvas user id is the one the export writes (:func:`grader.exports.canvas_user_id`,
from the Canvas download the submission came from).  The client reads the assignment's current
grades (``GET /api/v1/courses/:course_id/assignments/:assignment_id/submissions``, paginated by
``Link`` headers), posts only the grades that differ in one
``POST .../submissions/update_grades`` (form fields ``grade_data[<user_id>][posted_grade]`` and,
with comments, ``grade_data[<user_id>][text_comment]``), and polls the returned Progress object
(``GET /api/v1/progress/:id``) until it is ``completed`` or ``failed``.

Requests are serial.  Canvas's throttling (``403 Forbidden (Rate Limit Exceeded)``, or ``429``)
is retried with backoff, honouring ``Retry-After``, up to :data:`MAX_ATTEMPTS` times.  The token
is sent only in the ``Authorization`` header, only to the configured ``base_url`` (no redirect
is followed, and no pagination or progress URL of another origin is used), and never appears in
a log line or an error message.
"""

from __future__ import annotations

import json
import logging
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from grader.grading.record import Record, format_score
from grader.publish.exports import ExportMeta, canvas_user_id, one_per_student, summary

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 6  # per request, while Canvas throttles
MAX_WAIT = 60.0  # seconds, the longest single backoff (also caps Retry-After)
POLL_INTERVAL = 1.0  # seconds between two looks at the Progress object, doubling up to POLL_MAX
POLL_MAX = 10.0
POLL_TIMEOUT = 900.0  # seconds of waiting for the job before giving up
MAX_PAGES = 1000
PER_PAGE = 100
_NEXT = re.compile(r'<([^>]+)>\s*;\s*rel="?next"?')


def _sleep(seconds: float) -> None:
    time.sleep(seconds)


class CanvasError(Exception):
    """Canvas refused or failed; ``message`` says what happened, ``tip`` what to check (never the token)."""

    def __init__(self, message: str, tip: str = "") -> None:
        super().__init__(message)
        self.message, self.tip = message, tip


def is_canvas_id(value: str | None) -> bool:
    """Whether ``value`` is a Canvas id: ASCII digits only, since it goes into a URL's path."""
    return value is not None and value.isascii() and value.isdigit()


def _checked_id(value: str, what: str) -> str:
    if not is_canvas_id(value):
        raise CanvasError(
            f"the {what} id {value!r} is not a number; not sending it to Canvas",
            "Set the ids in grading.yaml to the numbers in the Canvas addresses (.../courses/<id>/assignments/<id>).",
        )
    return value


# --------------------------------------------------------------------------- what to post


@dataclass(frozen=True)
class Posting:
    """One student's grade: ``score`` as the Canvas export writes it, ``current`` as Canvas has it
    (None: no grade there yet, or not read)."""

    student: str
    name: str
    user_id: str
    score: str
    comment: str = ""
    current: str | None = None

    @property
    def changed(self) -> bool:
        try:
            return self.current is None or abs(float(self.current) - float(self.score)) > 1e-9
        except ValueError:
            return True


@dataclass(frozen=True)
class Plan:
    """What ``post canvas`` would do for one assignment."""

    assignment: str
    assignment_id: str
    postings: tuple[Posting, ...]
    without_id: tuple[str, ...] = ()  # students with no Canvas user id: listed, never posted
    not_in_canvas: tuple[Posting, ...] = ()  # user ids Canvas does not list for the assignment
    read_current: bool = False

    @property
    def to_post(self) -> tuple[Posting, ...]:
        return tuple(p for p in self.postings if p.changed)

    def lines(self) -> list[str]:
        out = []
        for p in self.postings:
            who = f"{p.name} (user {p.user_id})"
            if not self.read_current:
                out.append(f"  {who}: {p.score}")
            elif p.changed:
                out.append(f"  {who}: {p.current if p.current is not None else 'no grade'} -> {p.score}")
            else:
                out.append(f"  {who}: {p.score} (unchanged)")
        for p in self.not_in_canvas:
            out.append(f"  not posted, not a student of this Canvas assignment: {p.name} (user {p.user_id})")
        for name in self.without_id:
            out.append(f"  not posted, no Canvas user id: {name}")
        return out


def plan(records: list[Record], meta: ExportMeta, *, comment: bool = False) -> Plan:
    """The grades of ``records`` for the Canvas assignment ``meta.canvas_id`` (nothing is sent)."""
    postings, without = [], []
    for r in one_per_student(records):
        name = r.identity.get("name") or r.student
        user_id = canvas_user_id(r)
        if not is_canvas_id(user_id):  # also keeps a forged id from adding fields to the form
            without.append(name)
            continue
        text = summary(r) if comment else ""
        postings.append(Posting(r.student, name, user_id, format_score(r.score), text))
    return Plan(meta.name, meta.canvas_id or "", tuple(postings), tuple(without))


def with_current(p: Plan, current: dict[str, str | None]) -> Plan:
    """``p`` with Canvas's current grades (``current``: user id -> score, None when ungraded)."""
    listed = [replace(x, current=current[x.user_id]) for x in p.postings if x.user_id in current]
    missing = tuple(x for x in p.postings if x.user_id not in current)
    return replace(p, postings=tuple(listed), not_in_canvas=missing, read_current=True)


# --------------------------------------------------------------------------- the client


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect would carry the Authorization header to wherever it points: refuse it."""

    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str) -> None:
        return None


class CanvasClient:
    """Serial requests to one Canvas site with one token (``token_env`` names it in messages)."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        token_env: str = "CANVAS_TOKEN",
        sleep: Callable[[float], None] | None = None,
        max_attempts: int = MAX_ATTEMPTS,
        timeout: float = 60.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._token = token
        self.token_env = token_env
        self._sleep = sleep or _sleep
        self.max_attempts = max_attempts
        self.timeout = timeout
        self._opener = urllib.request.build_opener(_NoRedirect)

    def __repr__(self) -> str:
        return f"CanvasClient({self.base_url!r}, token from ${self.token_env})"

    # -- the three calls
    def current_grades(self, course_id: str, assignment_id: str) -> dict[str, str | None]:
        """User id -> the score Canvas has for the assignment (None when ungraded), for every student."""
        course_id, assignment_id = _checked_id(course_id, "course"), _checked_id(assignment_id, "assignment")
        url: str | None = self._url(
            f"/api/v1/courses/{course_id}/assignments/{assignment_id}/submissions?per_page={PER_PAGE}"
        )
        grades: dict[str, str | None] = {}
        for _ in range(MAX_PAGES):
            if url is None:
                return grades
            headers, body = self._request("GET", url)
            if not isinstance(body, list):
                raise CanvasError(f"Canvas answered GET {_path(url)} with {type(body).__name__}, not a list")
            for sub in body:
                if isinstance(sub, dict) and sub.get("user_id") is not None:
                    score = sub.get("entered_score", sub.get("score"))
                    grades[str(sub["user_id"])] = None if score is None else format_score(score)
            url = self._next(headers.get("Link", ""))
        raise CanvasError(f"Canvas listed more than {MAX_PAGES} pages of submissions")

    def update_grades(self, course_id: str, assignment_id: str, postings: tuple[Posting, ...]) -> dict[str, Any]:
        """Post ``postings`` in one bulk update; returns Canvas's Progress object."""
        course_id, assignment_id = _checked_id(course_id, "course"), _checked_id(assignment_id, "assignment")
        form = []
        for p in postings:
            form.append((f"grade_data[{p.user_id}][posted_grade]", p.score))
            if p.comment:
                form.append((f"grade_data[{p.user_id}][text_comment]", p.comment))
        url = self._url(f"/api/v1/courses/{course_id}/assignments/{assignment_id}/submissions/update_grades")
        log.info("Canvas: posting %d grade(s) to course %s, assignment %s", len(postings), course_id, assignment_id)
        _, body = self._request("POST", url, form)
        if not isinstance(body, dict) or not str(body.get("id", "")).isdigit():
            raise CanvasError(f"Canvas answered POST {_path(url)} without a Progress object (no job id)")
        return body

    def wait(self, progress: dict[str, Any], *, timeout: float = POLL_TIMEOUT) -> dict[str, Any]:
        """Poll the Progress object until its job has completed; a failed job is a :class:`CanvasError`."""
        job = str(progress["id"])
        url = self._url(f"/api/v1/progress/{job}")  # not progress["url"]: the token goes to base_url only
        waited, interval = 0.0, POLL_INTERVAL
        while True:
            state = progress.get("workflow_state")
            if state == "completed":
                return progress
            if state == "failed":
                why = _redact(str(progress.get("message") or "Canvas gave no reason"), self._token)
                raise CanvasError(
                    f"Canvas's grading job {job} failed: {why}",
                    "Look at the assignment in Canvas's gradebook: grades the job set before failing are kept. "
                    "Then run the command again: it posts only the grades that still differ.",
                )
            if waited >= timeout:
                raise CanvasError(
                    f"Canvas's grading job {job} is still {state} after {waited:.0f}s",
                    "Canvas is busy: look at the gradebook in Canvas later, or run the command again then.",
                )
            self._sleep(interval)
            waited += interval
            interval = min(POLL_MAX, interval * 2)
            _, body = self._request("GET", url)
            progress = body if isinstance(body, dict) else {}

    # -- HTTP
    def _url(self, path: str) -> str:
        return self.base_url + path

    def _next(self, link: str) -> str | None:
        match = _NEXT.search(link)
        if match is None:
            return None
        url = match.group(1)
        if _origin(url) != _origin(self.base_url):
            raise CanvasError(
                f"Canvas's next page is on another site ({_origin(url)}, not {self.base_url}); not following it",
                "Check canvas.base_url in grading.yaml: it must be the address Canvas itself uses.",
            )
        return url

    def _request(self, method: str, url: str, form: list[tuple[str, str]] | None = None) -> tuple[Any, Any]:
        data = urllib.parse.urlencode(form).encode() if form is not None else None
        for attempt in range(1, self.max_attempts + 1):
            request = urllib.request.Request(url, data=data, method=method)
            request.add_header("Authorization", f"Bearer {self._token}")
            request.add_header("Accept", "application/json")
            log.info("Canvas: %s %s", method, _path(url))
            try:
                with self._opener.open(request, timeout=self.timeout) as response:
                    return response.headers, _json(response.read(), method, url)
            except urllib.error.HTTPError as exc:
                text = _redact(exc.read(4000).decode("utf-8", "replace"), self._token)
                if not _throttled(exc.code, text):
                    raise self._refused(exc.code, exc.headers, text, method, url) from None
                if attempt == self.max_attempts:
                    raise CanvasError(
                        f"Canvas still throttled {method} {_path(url)} after {attempt} attempts ({exc.code} {text[:80]})",
                        "Wait a few minutes and run the command again; posting the same grades twice is harmless.",
                    ) from None
                wait = _backoff(exc.headers.get("Retry-After"), attempt)
                log.info("Canvas: throttled (%s); waiting %.1fs before attempt %d", exc.code, wait, attempt + 1)
                self._sleep(wait)
            except (urllib.error.URLError, OSError) as exc:
                reason = _redact(str(getattr(exc, "reason", exc)), self._token)
                raise CanvasError(
                    f"cannot reach Canvas at {self.base_url}: {reason}",
                    "Check canvas.base_url in grading.yaml and the network connection.",
                ) from None
        raise AssertionError("unreachable")

    def _refused(self, code: int, headers: Any, text: str, method: str, url: str) -> CanvasError:
        what = f"Canvas answered {code} to {method} {_path(url)}"
        why = _canvas_message(text)
        if 300 <= code < 400:
            where = _redact(str(headers.get("Location", "")), self._token)
            return CanvasError(
                f"{what}: a redirect to {where or 'elsewhere'}, not followed (it would carry the token)",
                "Set canvas.base_url in grading.yaml to the https:// address Canvas redirects to.",
            )
        if code == 401:
            return CanvasError(
                f"{what}: the token in ${self.token_env} was refused ({why or 'Unauthorized'})",
                f"Put a current Canvas access token in ${self.token_env} (Canvas: Account > Settings > "
                "New access token), of a teacher or TA of the course.",
            )
        if code == 403:
            return CanvasError(
                f"{what}: forbidden ({why or 'no reason given'})",
                "The token's user must be a teacher or TA allowed to grade in the course.",
            )
        if code == 404:
            return CanvasError(
                f"{what}: not found ({why or 'no such course or assignment'})",
                "Check canvas.course_id in grading.yaml and canvas_id under the assignment: the numbers in "
                "the course's and the assignment's Canvas addresses.",
            )
        return CanvasError(
            f"{what}" + (f": {why}" if why else ""),
            "Check canvas.base_url and the ids in grading.yaml; run again with -v to see each request.",
        )


# --------------------------------------------------------------------------- helpers


def post(client: CanvasClient, course_id: str, p: Plan) -> dict[str, Any]:
    """Post the changed grades of ``p`` and wait for Canvas's job; returns the completed Progress."""
    return client.wait(client.update_grades(course_id, p.assignment_id, p.to_post))


def _throttled(code: int, text: str) -> bool:
    return code == 429 or (code == 403 and "rate limit exceeded" in text.lower())


def _backoff(retry_after: str | None, attempt: int) -> float:
    try:
        seconds = float(retry_after) if retry_after is not None else None
    except ValueError:
        seconds = None  # an HTTP date: fall back to the exponential wait
    if seconds is None or seconds < 0 or seconds != seconds:
        seconds = 2.0 ** (attempt - 1)
    return min(MAX_WAIT, seconds)


def _json(raw: bytes, method: str, url: str) -> Any:
    try:
        return json.loads(raw.decode("utf-8")) if raw.strip() else None
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise CanvasError(
            f"Canvas answered {method} {_path(url)} with something that is not JSON",
            "Check canvas.base_url in grading.yaml: it must be the Canvas site itself, not a login page.",
        ) from None


def _canvas_message(text: str) -> str:
    """Canvas's own error text (``{"errors": [{"message": ...}]}`` or ``{"message": ...}``), short."""
    try:
        body = json.loads(text)
    except json.JSONDecodeError:
        return " ".join(text.split())[:200]
    messages: list[str] = []
    if isinstance(body, dict):
        errors = body.get("errors")
        if isinstance(errors, list):
            messages = [str(e.get("message", e)) if isinstance(e, dict) else str(e) for e in errors]
        elif body.get("message"):
            messages = [str(body["message"])]
    return "; ".join(messages)[:200]


def _redact(text: str, token: str) -> str:
    return text.replace(token, "[token]") if token else text


def _path(url: str) -> str:
    return urllib.parse.urlsplit(url).path


def _origin(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"
