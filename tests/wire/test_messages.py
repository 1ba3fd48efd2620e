"""The typed messages of :mod:`grader.wire.messages`: every message round-trips, and decoding
rejects what the untrusted side could send instead (wrong discriminators, wrong field types,
missing fields, oversized strings), so that a reply of one kind is never taken for another."""

from __future__ import annotations

import json
import os
from dataclasses import fields, replace
from typing import Any

import pytest

from grader.host import sandbox
from grader.wire import messages as m
from grader.wire import protocol

WHERE = m.Where(cell=2, exec_count=None, lineno=3, text="y = f(x)", function="f")
CELL = m.CellReport(
    index=4,
    status="error",
    ename="ValueError",
    evalue="bad",
    location=WHERE,
    message="",
    duration=0.25,
    output="hello\n",
    strays=2,
    restarted=None,
)

REQUESTS: list[m.Request] = [
    m.Start(),
    m.Start(cell_timeout=5.5, output_cap=100, max_restarts=0),
    m.Execute("submission.ipynb", (1, 3)),
    m.Probe(1, 120.0, ("f", "g")),
    m.Call(2, 3.5, name="f", repeat=3, readonly=True, key_reuse=True),
    m.Export(3, 120.0, name="f", specs=(("B, 8", "float32"), ("", "int32")), vjp_order=1),
    m.Count(4, 240.0, name="g", how="compiles", static=("n",)),
    m.Eval(5),
    m.Grad(6, argnum=1),
    m.Analyze(7),
    m.Eval(8, batch_axes=((), (0,), (1, 2))),
]
PROGRESS: list[m.Progress] = [
    m.Ready(),
    m.Ready(ok=False, error="kernel failed to start: boom"),
    m.Ready(startup=1.25),
    m.CellStarted(index=7),
    m.Executed(cells=(CELL, m.CellReport(index=5, status="skipped")), exec_map={1: 0, 2: 4}, restarts=1, alive=False),
]
REPLIES: list[m.Reply] = [
    m.Probed(id=1, info={"f": m.NameInfo(True, True, "builtins.function"), "g": m.NameInfo(False)}),
    m.Called(id=2, mutated=(0, 2), elapsed=(0.5, 0.25), exec_map={3: 1}),
    m.Exported(id=3),
    m.Counted(id=4, counts=(1, 0, 0)),
    m.Evaluated(id=5, nr_devices=2, analysis={"analysis_error": "x"}, custom_calls=("cb",), elapsed=0.1),
    m.Evaluated(id=7, nr_devices=1, analysis={"analysis_error": "x"}),
    m.Missing(id=1, name="f"),
    m.Raised(id=2, ename="ZeroDivisionError", evalue="division by zero", location=WHERE),
    m.Raised(id=5, ename="XlaRuntimeError", evalue="x"),
    m.Unsendable(id=2, why="a str cannot be sent"),
    m.TimedOut(id=2, timeout=3.5, restarted=None),
    m.TimedOut(id=2, timeout=3.5, restarted=True),
    m.Died(id=2, restarted=False),
    m.Dead(id=2, why="the kernel is gone and could not be restarted"),
    m.Evaluated(id=8, analysis={"analysis_error": "x"}, elapsed=0.1, per_example_ops=128),
    m.Evaluated(id=8, analysis={"analysis_error": "x"}, elapsed=0.1, per_example_error="ValueError: x"),
]
ALL: list[m.Message] = [*REQUESTS, *PROGRESS, *REPLIES]


def _decode(msg: m.Message, header: Any) -> m.Message:
    if isinstance(msg, m.Request):
        return m.decode_request(header)
    if isinstance(msg, m.Progress):
        return m.decode_progress(header)
    return m.decode_reply(header)


def _wire(header: dict[str, Any]) -> dict[str, Any]:
    """``header`` as the other side reads it (through JSON)."""
    return json.loads(json.dumps(header))


@pytest.mark.parametrize("msg", ALL, ids=lambda msg: type(msg).__name__)
def test_every_message_round_trips(msg: m.Message) -> None:
    header = _wire(msg.encode())
    assert _decode(msg, header) == msg
    assert type(msg).decode(header) == msg


def test_every_message_class_is_covered_and_registered() -> None:
    covered = {type(x) for x in ALL}
    assert covered == {*m.REQUESTS.values(), *m.PROGRESS.values(), *m.REPLIES.values()}
    assert set(m.REPLIES) == {"probed", "called", "exported", "counted", "evaluated", *(f.NAME for f in m.FAILURES)}


def test_through_a_frame() -> None:
    r, w = os.pipe()
    try:
        call = m.Call(9, 1.0, name="f")
        frag, payload = protocol.pack_values({"args": [1, 2.0]})
        protocol.write_frame(w, {**call.encode(), **frag}, payload)
        header, got = protocol.read_frame(r)
    finally:
        os.close(r)
        os.close(w)
    assert m.decode_request(header, m.Call) == call
    assert protocol.unpack_values(header, got) == {"args": [1, 2.0]}


# --------------------------------------------------------------------------- discriminators


@pytest.mark.parametrize("reply", REPLIES, ids=lambda r: type(r).__name__)
def test_a_reply_of_one_kind_is_never_decoded_as_another(reply: m.Reply) -> None:
    header = _wire(reply.encode())
    for other in m.REPLIES.values():
        if other is type(reply):
            assert m.decode_reply(header, other) == reply
            continue
        with pytest.raises(m.MessageError):
            m.decode_reply(header, other)
        with pytest.raises(m.MessageError):
            other.decode(header)


def test_a_reply_is_decoded_by_its_kind_not_by_its_keys() -> None:
    # the keys of another kind do not make it that kind
    header = {"kind": "called", "id": 1, "mutated": [], "elapsed": [], "missing": "f", "timeout": 1.0, "ok": False}
    assert m.decode_reply(header) == m.Called(id=1)
    # the old shapes (told apart by their keys) have no kind: rejected
    for old in ({"ok": True, "id": 1}, {"ok": False, "missing": "f", "id": 1}, {"ok": False, "timeout": 3, "id": 1}):
        with pytest.raises(m.MessageError, match="unknown reply"):
            m.decode_reply(old)


@pytest.mark.parametrize("kind", [None, 1, "", "ok", "Called", "called ", ["called"], {"k": 1}, True])
def test_unknown_kinds_are_rejected(kind: Any) -> None:
    with pytest.raises(m.MessageError):
        m.decode_reply({"kind": kind, "id": 1, "mutated": [], "elapsed": []})


def test_a_shutdown_request_is_no_longer_a_request() -> None:
    """Sandboxes are killed at the end, not asked to stop: the message is gone from the protocol."""
    with pytest.raises(m.MessageError):
        m.decode_request({"op": "shutdown"})


def test_requests_and_progress_are_not_confused() -> None:
    with pytest.raises(m.MessageError):
        m.decode_progress(m.Start().encode())
    with pytest.raises(m.MessageError):
        m.decode_request(m.Ready().encode())
    with pytest.raises(m.MessageError):
        m.decode_request(m.Execute("submission.ipynb").encode(), m.Start)
    with pytest.raises(m.MessageError):
        m.decode_progress(m.CellStarted(index=1).encode(), m.Ready)
    with pytest.raises(m.MessageError):
        m.decode_reply(m.Call(1, 1.0, name="f").encode())
    for not_a_header in (None, [], "x", 1):
        with pytest.raises(m.MessageError):
            m.decode_reply(not_a_header)


# --------------------------------------------------------------------------- fields

#: (message, field, a value of the wrong type) for every field the sandbox fills in
WRONG_TYPES: list[tuple[m.Message, str, Any]] = [
    (m.Ready(), "ok", 1),
    (m.Ready(), "startup", "1"),
    (m.Ready(ok=False, error="x"), "error", 5),
    (m.CellStarted(index=1), "index", "1"),
    (m.CellStarted(index=1), "index", 1.0),
    (m.CellStarted(index=1), "index", True),
    (m.CellStarted(index=1), "index", -1),
    (PROGRESS[-1], "cells", {}),
    (PROGRESS[-1], "cells", [1]),
    (PROGRESS[-1], "cells", [{"index": "0", "status": "ok"}]),
    (PROGRESS[-1], "cells", [{"index": 0, "status": "fine"}]),
    (PROGRESS[-1], "cells", [{"index": 0, "status": "ok", "location": {"lineno": "3"}}]),
    (PROGRESS[-1], "cells", [{"index": 0, "status": "ok", "duration": "fast"}]),
    (PROGRESS[-1], "cells", [{"index": 0, "status": "ok", "strays": 1.5}]),
    (PROGRESS[-1], "exec_map", {"1": "0"}),
    (PROGRESS[-1], "exec_map", {"x": 0}),
    (PROGRESS[-1], "exec_map", [1]),
    (PROGRESS[-1], "restarts", None),
    (PROGRESS[-1], "alive", "yes"),
    (REPLIES[0], "info", []),
    (REPLIES[0], "info", {"f": {"exists": 1}}),
    (REPLIES[0], "info", {"f": {"exists": True, "callable": True, "type": 3}}),
    (REPLIES[0], "info", {"f": []}),
    (REPLIES[1], "mutated", [0, "1"]),
    (REPLIES[1], "mutated", [True]),
    (REPLIES[1], "mutated", 0),
    (REPLIES[1], "elapsed", ["0.5"]),
    (REPLIES[1], "elapsed", [float("nan")]),
    (REPLIES[1], "exec_map", {"1": 1.0}),
    (REPLIES[1], "id", "2"),
    (REPLIES[3], "counts", [1, 0.0, 0]),
    (REPLIES[3], "counts", "1"),
    (REPLIES[4], "nr_devices", "2"),
    (REPLIES[4], "custom_calls", [1]),
    (REPLIES[4], "elapsed", [0.1]),
    (REPLIES[6], "name", None),
    (REPLIES[7], "ename", {"x": 1}),
    (REPLIES[7], "evalue", 1),
    (REPLIES[7], "location", "cell 2"),
    (REPLIES[7], "location", {"cell": "2"}),
    (REPLIES[7], "location", {"exec_count": 1.5}),
    (REPLIES[9], "why", ["x"]),
    (REPLIES[10], "timeout", "3.5"),
    (REPLIES[10], "timeout", float("inf")),
    (REPLIES[10], "restarted", 0),
    (REPLIES[12], "restarted", None),
    (REPLIES[13], "why", None),
    # and what the trusted side sends (decoded in the sandbox)
    (REQUESTS[1], "cell_timeout", "5"),
    (REQUESTS[1], "output_cap", 1.5),
    (REQUESTS[2], "skip", [1, "3"]),
    (REQUESTS[3], "names", "f"),
    (REQUESTS[4], "id", None),
    (REQUESTS[4], "repeat", "3"),
    (REQUESTS[4], "readonly", 1),
    (REQUESTS[5], "specs", [["B", "float32", "x"]]),
    (REQUESTS[5], "specs", [[8, "float32"]]),
    (REQUESTS[6], "how", "calls"),
    (REQUESTS[6], "static", [1]),
    (REQUESTS[8], "argnum", "1"),
    (REQUESTS[10], "batch_axes", "0"),
    (REQUESTS[10], "batch_axes", [0]),
    (REQUESTS[10], "batch_axes", [[-1]]),
    (REQUESTS[10], "batch_axes", [[0.5]]),
    (REQUESTS[10], "batch_axes", [["0"]]),
    (REPLIES[14], "per_example_ops", -1),
    (REPLIES[14], "per_example_ops", "128"),
    (REPLIES[15], "per_example_error", 3),
]


@pytest.mark.parametrize(
    ("msg", "key", "value"), WRONG_TYPES, ids=[f"{type(x).__name__}.{k}={v!r}" for x, k, v in WRONG_TYPES]
)
def test_wrong_field_types_are_rejected(msg: m.Message, key: str, value: Any) -> None:
    header = _wire(msg.encode())
    assert key in header
    header[key] = value
    with pytest.raises(m.MessageError):
        _decode(msg, header)


def _required(msg: m.Message) -> list[str]:
    """The fields a header must carry: those whose absence decoding rejects."""
    out = []
    for f in fields(msg):  # type: ignore[arg-type]
        header = _wire(msg.encode())
        header.pop(f.name, None)
        try:
            _decode(msg, header)
        except m.MessageError:
            out.append(f.name)
    return out


def test_missing_fields_are_rejected() -> None:
    assert _required(REQUESTS[4]) == ["id", "timeout", "name"]
    assert _required(REQUESTS[8]) == ["id", "argnum"]
    assert _required(PROGRESS[-1]) == ["cells", "exec_map", "restarts", "alive"]
    assert _required(PROGRESS[0]) == ["ok"]
    assert _required(REPLIES[1]) == ["mutated", "elapsed"]
    assert _required(REPLIES[3]) == ["counts"]
    assert _required(REPLIES[10]) == ["timeout"]
    assert _required(REPLIES[12]) == ["restarted"]
    assert _required(REPLIES[13]) == ["why"]
    assert _required(REPLIES[7]) == ["ename", "evalue"]
    for header in ({"kind": "probed", "id": 1}, {"op": "cell"}, {"op": "executed", "cells": []}, {}):
        with pytest.raises(m.MessageError):
            (m.decode_reply if "kind" in header else m.decode_progress)(header)


@pytest.mark.parametrize(
    ("msg", "key"),
    [(REPLIES[13], "why"), (REPLIES[9], "why"), (REPLIES[7], "evalue"), (REPLIES[6], "name"), (REPLIES[7], "ename")],
)
def test_oversized_strings_are_rejected(msg: m.Reply, key: str) -> None:
    header = _wire(msg.encode())
    header[key] = "x" * m.MAX_TEXT
    assert _decode(msg, header) == replace(msg, **{key: "x" * m.MAX_TEXT})
    header[key] = "x" * (m.MAX_TEXT + 1)
    with pytest.raises(m.MessageError, match="at most"):
        _decode(msg, header)


def test_oversized_names_lists_and_maps_are_rejected() -> None:
    long_name = "f" * (m.MAX_NAME + 1)
    cases = [
        (m.decode_reply, {**m.Probed(id=1).encode(), "info": {long_name: {"exists": False}}}),
        (
            m.decode_reply,
            {**m.Probed(id=1).encode(), "info": {"f": {"exists": True, "callable": True, "type": long_name}}},
        ),
        (m.decode_reply, {**m.Counted(id=1).encode(), "counts": [0] * (m.MAX_LIST + 1)}),
        (m.decode_reply, {**m.Raised(id=1).encode(), "location": {"text": "x" * (m.MAX_TEXT + 1)}}),
        (
            m.decode_progress,
            {**m.Executed().encode(), "cells": [{"index": 0, "status": "ok", "output": "x" * (m.MAX_TEXT + 1)}]},
        ),
        (m.decode_progress, {**m.Executed().encode(), "exec_map": {str(i): 0 for i in range(m.MAX_LIST + 1)}}),
        (m.decode_request, {**m.Call(1, 1.0, name="f").encode(), "name": long_name}),
    ]
    for decode, header in cases:
        with pytest.raises(m.MessageError):
            decode(header)


def test_integers_are_plain_ints_in_range() -> None:
    header = m.Counted(id=1, counts=(1,)).encode()
    for bad in (2**63, -(2**63) - 1, True, 1.0):
        with pytest.raises(m.MessageError):
            m.decode_reply({**header, "counts": [bad]})
    with pytest.raises(m.MessageError):
        m.decode_reply({**header, "id": 2**70})


def test_unknown_fields_are_ignored_not_kept() -> None:
    header = {**m.Probed(id=1, info={"f": m.NameInfo(True, True, "x")}).encode(), "score": 4}
    header["info"]["f"]["jitted"] = True
    got = m.decode_reply(header)
    assert got == m.Probed(id=1, info={"f": m.NameInfo(True, True, "x")})
    assert got.info["f"].as_dict() == {"exists": True, "callable": True, "type": "x"}


def test_answers_checks_the_id_exactly() -> None:
    req = m.Eval(3)
    assert m.answers({"id": 3}, req)
    for header in ({"id": 4}, {"id": "3"}, {"id": 3.0}, {"id": True}, {}, [], None):
        assert not m.answers(header, req)


def test_stamp_exec_map() -> None:
    header = m.Called(id=1).encode()
    got = m.decode_reply(_wire(m.stamp_exec_map(header, {3: 1, 4: 2})))
    assert got.exec_map == {3: 1, 4: 2}


def test_analysis_is_checked_field_by_field() -> None:
    good = {
        "nr_devices": 1,
        "custom_calls": [],
        "loops": 0,
        "batch_loops": 0,
        "whole_call": True,
        "collectives": [],
        "per_device": False,
        "vmapped": False,
        "outside_ops": 0,
        "outside_op": "",
        "whole_inputs": [],
        "rows_kept": True,
    }
    reply = m.decode_reply({**m.Evaluated(id=1).encode(), "analysis": {**good, "whole_call": 1}})
    assert "whole_call" not in reply.analysis and "whole_call" in reply.analysis["analysis_error"]
    for field, bad in (
        ("outside_ops", "0"),
        ("outside_ops", True),
        ("outside_op", 1),
        ("whole_inputs", [0]),
        ("rows_kept", 1),
    ):
        reply = m.decode_reply({**m.Evaluated(id=1).encode(), "analysis": {**good, field: bad}})
        assert field not in reply.analysis and field in reply.analysis["analysis_error"], (field, bad)
    assert m.decode_reply({**m.Evaluated(id=1).encode(), "analysis": good}).analysis == good


def test_limits_defaults_are_defined_once() -> None:
    limits = sandbox.Limits()
    start = m.Start()
    assert (limits.cell_timeout, limits.output_cap, limits.max_restarts, limits.call_timeout) == (
        m.CELL_TIMEOUT,
        m.OUTPUT_CAP,
        m.MAX_RESTARTS,
        m.CALL_TIMEOUT,
    )
    assert (start.cell_timeout, start.output_cap, start.max_restarts) == (
        limits.cell_timeout,
        limits.output_cap,
        limits.max_restarts,
    )


def test_an_exec_map_key_of_non_ascii_digits_is_refused_not_a_crash() -> None:
    """Red team: "²".isdigit() is true and int("²") raises ValueError; a forged Executed frame
    with that key stopped the whole batch."""
    header = {"op": "executed", "cells": [], "exec_map": {"\u00b2": 0}, "restarts": 0, "alive": True}
    with pytest.raises(m.MessageError):
        m.decode_progress(header)


def test_any_decoder_failure_is_a_message_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(cls: type, header: dict) -> None:
        raise ValueError("a case the decoder missed")

    monkeypatch.setattr(m.Executed, "decode", classmethod(broken))
    with pytest.raises(m.MessageError, match="malformed message 'executed'"):
        m.decode_progress({"op": "executed"})
