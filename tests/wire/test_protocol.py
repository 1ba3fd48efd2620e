"""The wire format is the trust boundary's gate: round trips, and everything it must refuse."""

from __future__ import annotations

import io
import json
import math
import os
import pickle
import struct
import threading
import time

import numpy as np
import pytest

from grader.wire import protocol
from grader.wire.protocol import ChannelClosed, ChannelTimeout, ProtocolError

# --------------------------------------------------------------------------- helpers


def roundtrip(value, limits=None):
    frag, payload = protocol.pack_values({"v": value})
    # the header travels as JSON: make sure what we decode is what a real frame would carry
    frag = json.loads(json.dumps(frag, allow_nan=True))
    return protocol.unpack_values(frag, payload, limits)["v"]


def npy_record(header: dict, data: bytes) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, header)
    return buf.getvalue() + data


def decode_records(records: list[bytes], tree=None, limits=None):
    tree = tree if tree is not None else {"t": "array", "kind": "numpy", "i": 0}
    header = {"values": {"v": tree}, "arrays": [len(r) for r in records]}
    return protocol.unpack_values(header, b"".join(records), limits)["v"]


def assert_same(a, b):
    """Structural equality that also checks container types and NaN positions."""
    assert type(a) is type(b), (type(a), type(b))
    if isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_same(x, y)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    elif isinstance(a, float) and math.isnan(a):
        assert math.isnan(b)
    else:
        assert a == b


def iter_arrays(x):
    if isinstance(x, dict):
        for v in x.values():
            yield from iter_arrays(v)
    elif isinstance(x, (list, tuple)):
        for v in x:
            yield from iter_arrays(v)
    elif isinstance(x, np.ndarray):
        yield x


# --------------------------------------------------------------------------- round trips


def test_nested_pytree_roundtrip():
    value = {
        "none": None,
        "int": 3,
        "big_int": 2**62,
        "neg": -7,
        "float": 2.5,
        "bool": True,
        "false": False,
        "str": "héllo\n",
        "list": [1, [2.0, None], (3, "x")],
        "tuple": (np.arange(6, dtype=np.int32).reshape(2, 3), ()),
        "empty": {"l": [], "d": {}},
        "arrays": {
            "f32": np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4),
            "f64": np.array([1e-300, 1e300]),
            "f16": np.array([0.5, 1.5], dtype=np.float16),
            "i32": np.array([-(2**31), 2**31 - 1], dtype=np.int32),
            "u8": np.arange(256, dtype=np.uint8),
            "i64": np.array([-(2**63), 2**63 - 1], dtype=np.int64),
            "bool": np.array([[True, False], [False, True]]),
            "c64": np.array([1 + 2j, -3.5j], dtype=np.complex64),
            "c128": np.array([[1e200 + 1j]], dtype=np.complex128),
            "zero_d": np.array(4.25, dtype=np.float32),
            "zero_size": np.zeros((0, 3), dtype=np.float32),
            "fortran": np.asfortranarray(np.arange(12, dtype=np.float64).reshape(3, 4)),
            "strided": np.arange(20, dtype=np.int32)[::3],
        },
    }
    out = roundtrip(value)
    assert_same(value, out)
    assert out["arrays"]["zero_d"].shape == ()
    assert out["arrays"]["fortran"][1, 2] == 6.0


def test_numpy_scalars_roundtrip_as_numpy_scalars():
    value = [np.float32(1.5), np.int64(-3), np.bool_(True), np.complex64(1 - 1j), np.uint16(7)]
    out = roundtrip(value)
    for a, b in zip(value, out, strict=True):
        assert type(b) is type(a)
        assert b == a


def test_decoded_arrays_are_plain_writable_copies():
    class Sub(np.ndarray):
        pass

    sub = np.arange(4, dtype=np.float32).view(Sub)
    frag, payload = protocol.pack_values({"a": np.ones((2, 2), np.float32), "s": sub, "z": np.array(1, np.int32)})
    out = protocol.unpack_values(frag, payload)
    for name in ("a", "s", "z"):
        arr = out[name]
        assert type(arr) is np.ndarray
        assert arr.flags.writeable
        arr[...] = 0  # writable: must not raise
        assert not np.shares_memory(arr, np.frombuffer(payload, dtype=np.uint8))
    # the payload bytes are untouched by writing to the decoded arrays
    again = protocol.unpack_values(frag, payload)
    np.testing.assert_array_equal(again["a"], np.ones((2, 2)))


def test_nan_and_inf_survive():
    value = {
        "py": [float("nan"), float("inf"), float("-inf"), -0.0],
        "arr": np.array([np.nan, np.inf, -np.inf, -0.0, 1.0], dtype=np.float32),
        "cplx": np.array([complex(np.nan, np.inf)], dtype=np.complex64),
        "scalar": np.float64("nan"),
    }
    out = roundtrip(value)
    py = out["py"]
    assert math.isnan(py[0]) and py[1] == math.inf and py[2] == -math.inf
    assert py[3] == 0.0 and math.copysign(1.0, py[3]) == -1.0
    arr = out["arr"]
    assert np.isnan(arr[0]) and arr[1] == np.inf and arr[2] == -np.inf and np.signbit(arr[3])
    assert np.isnan(out["cplx"][0].real) and np.isinf(out["cplx"][0].imag)
    assert type(out["scalar"]) is np.float64 and np.isnan(out["scalar"])


def test_big_endian_arrays_decode_to_native_with_same_values():
    value = np.array([1.5, -2.25, 3e9], dtype=">f8")
    out = roundtrip(value)
    assert type(out) is np.ndarray and out.dtype.isnative
    np.testing.assert_array_equal(out, value.astype("<f8"))


def test_jax_arrays_and_keys_are_sent_as_data():
    import jax
    import jax.numpy as jnp

    key = jax.random.key(0)
    frag, payload = protocol.pack_values({"x": jnp.arange(3.0), "k": key})
    kinds = {name: protocol.value_kind(tree) for name, tree in frag["values"].items()}
    assert kinds["x"] == "jax"
    out = protocol.unpack_values(frag, payload)
    assert type(out["x"]) is np.ndarray and out["x"].tolist() == [0.0, 1.0, 2.0]
    assert isinstance(out["k"], protocol.PRNGKeyData)
    assert type(out["k"].data) is np.ndarray
    np.testing.assert_array_equal(out["k"].data, np.asarray(jax.random.key_data(key)))


def test_frames_roundtrip_over_a_pipe():
    r, w = os.pipe()
    try:
        big = os.urandom(1 << 20)  # larger than a pipe buffer: needs a concurrent reader
        t = threading.Thread(target=protocol.write_frame, args=(w, {"op": "x", "n": float("nan")}, big))
        t.start()
        header, payload = protocol.read_frame(r, deadline=time.monotonic() + 10)
        t.join()
        assert header["op"] == "x" and math.isnan(header["n"])
        assert payload == big
    finally:
        os.close(r)
        os.close(w)


# --------------------------------------------------------------------------- the encoder refuses objects


@pytest.mark.parametrize(
    "value",
    [
        object(),
        {1: "non-string key"},
        np.array(["a", "b"]),
        np.array([object()], dtype=object),
        np.zeros(2, dtype=[("a", "f4"), ("b", "i4")]),
        lambda: 0,
        {"s": {1, 2}},
    ],
    ids=["object", "int-key", "str-array", "object-array", "structured", "function", "set"],
)
def test_encoder_refuses_non_data(value):
    with pytest.raises(TypeError):
        protocol.pack_values({"v": value})


def test_encoder_refuses_subclassed_containers():
    class Tricky(dict):
        def __eq__(self, other):
            return True

    with pytest.raises(TypeError):
        protocol.pack_values({"v": Tricky(a=1)})


def test_encoder_refuses_deep_nesting():
    deep: list = []
    for _ in range(protocol.MAX_DEPTH + 5):
        deep = [deep]
    with pytest.raises(TypeError):
        protocol.pack_values({"v": deep})


# --------------------------------------------------------------------------- the decoder refuses


def test_object_dtype_npy_is_rejected():
    rec = npy_record({"descr": "|O", "fortran_order": False, "shape": (1,)}, b"\0" * 8)
    with pytest.raises(ProtocolError, match="dtype"):
        decode_records([rec])


def test_pickled_object_array_is_rejected():
    buf = io.BytesIO()
    np.save(buf, np.array([{"evil": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(ProtocolError):
        decode_records([buf.getvalue()])


def test_raw_pickle_payload_is_rejected():
    class Boom:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    blob = pickle.dumps(Boom())
    with pytest.raises(ProtocolError):
        decode_records([blob])


@pytest.mark.parametrize(
    "descr",
    [
        [("a", "<f4"), ("b", "<i4")],
        [("", "<f4", (2,))],
        "|V8",
        "<U3",
        "|S4",
        "<M8[s]",
        "<m8[s]",
    ],
    ids=["struct", "subarray-struct", "void", "unicode", "bytes", "datetime", "timedelta"],
)
def test_non_numeric_dtypes_are_rejected(descr):
    itemsize = np.dtype(descr).itemsize
    rec = npy_record({"descr": descr, "fortran_order": False, "shape": (2,)}, b"\0" * (2 * itemsize))
    with pytest.raises(ProtocolError, match="dtype"):
        decode_records([rec])


def test_lengths_table_mismatch_is_rejected():
    frag, payload = protocol.pack_values({"v": np.arange(4, dtype=np.int32)})
    for bad in ([frag["arrays"][0] + 1], [frag["arrays"][0] - 1], [], [frag["arrays"][0], 0, 0, 1], "12", [-1, 1]):
        with pytest.raises(ProtocolError):
            protocol.unpack_values({**frag, "arrays": bad}, payload)
    with pytest.raises(ProtocolError):
        protocol.unpack_values(frag, payload + b"\0")


def test_record_whose_data_does_not_match_its_header_is_rejected():
    rec = npy_record({"descr": "<f4", "fortran_order": False, "shape": (4,)}, b"\0" * 12)
    with pytest.raises(ProtocolError):
        decode_records([rec])


def test_negative_dimensions_are_rejected():
    # numpy's header parser accepts negative dims; prod((-1, -2)) == 2 matches 2 items of data
    rec = npy_record({"descr": "<f4", "fortran_order": False, "shape": (-1, -2)}, b"\0" * 8)
    with pytest.raises(ProtocolError):
        decode_records([rec])


def test_array_over_the_size_cap_is_rejected():
    limits = protocol.Limits(max_array_bytes=1000)
    ok = np.zeros(250, dtype=np.float32)
    assert roundtrip(ok, limits).shape == (250,)
    with pytest.raises(ProtocolError, match="cap"):
        roundtrip(np.zeros(251, dtype=np.float32), limits)


def test_header_claiming_a_gigantic_shape_is_rejected_before_allocating():
    rec = npy_record({"descr": "<f8", "fortran_order": False, "shape": (10**9, 10**9)}, b"")
    with pytest.raises(ProtocolError, match="cap"):
        decode_records([rec])


def test_total_size_cap():
    limits = protocol.Limits(max_total_bytes=2000)
    with pytest.raises(ProtocolError):
        roundtrip([np.zeros(200, np.float32), np.zeros(200, np.float32), np.zeros(200, np.float32)], limits)


def test_nesting_deeper_than_the_cap_is_rejected():
    limits = protocol.Limits(max_depth=8)
    ok: list = []
    for _ in range(8):
        ok = [ok]
    assert roundtrip(ok, limits) is not None
    deep = {"t": "none"}
    for _ in range(200):
        deep = {"t": "list", "v": [deep]}
    with pytest.raises(ProtocolError, match="nested"):
        protocol.unpack_values({"values": {"v": deep}, "arrays": []}, b"", limits)
    with pytest.raises(ProtocolError, match="nested"):
        protocol.unpack_values({"values": {"v": deep}, "arrays": []}, b"")


def test_too_many_nodes_is_rejected():
    tree = {"t": "list", "v": [{"t": "none"}] * 50}
    with pytest.raises(ProtocolError, match="nodes"):
        protocol.unpack_values({"values": {"v": tree}, "arrays": []}, b"", protocol.Limits(max_nodes=10))


@pytest.mark.parametrize(
    "tree",
    [
        {"t": "pickle", "v": "gASVAAAA"},
        {"t": "object"},
        {"t": "callable", "v": "os.system"},
        {"v": 1},
        ["t", "none"],
        "none",
        {"t": "int", "v": "3"},
        {"t": "int", "v": 2**70},
        {"t": "bool", "v": 1},
        {"t": "float", "v": "nan"},
        {"t": "str", "v": 5},
        {"t": "str", "v": "x" * (protocol.MAX_STRING + 1)},
        {"t": "list", "v": {"a": 1}},
        {"t": "dict", "k": ["a", "a"], "v": [{"t": "none"}, {"t": "none"}]},
        {"t": "dict", "k": [1], "v": [{"t": "none"}]},
        {"t": "dict", "k": ["a"], "v": []},
        {"t": "array", "i": 0},
        {"t": "array", "i": -1},
        {"t": "array", "i": "0"},
        {"t": "key", "impl": "threefry2x32", "i": 3},
    ],
)
def test_malformed_value_nodes_are_rejected(tree):
    with pytest.raises(ProtocolError):
        protocol.unpack_values({"values": {"v": tree}, "arrays": []}, b"")


def test_an_array_record_cannot_be_referenced_twice():
    frag, payload = protocol.pack_values({"v": np.arange(3)})
    node = frag["values"]["v"]
    frag["values"]["w"] = dict(node)
    with pytest.raises(ProtocolError):
        protocol.unpack_values(frag, payload)


def test_values_must_be_an_object():
    with pytest.raises(ProtocolError):
        protocol.unpack_values({"values": [1, 2], "arrays": []}, b"")


# --------------------------------------------------------------------------- frames


@pytest.fixture
def pipe():
    r, w = os.pipe()
    fds = {"r": r, "w": w}
    yield fds
    for fd in fds.values():
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass


def close_writer(pipe):
    os.close(pipe["w"])
    pipe["w"] = None


def test_bad_magic_is_rejected(pipe):
    head = b"{}"
    os.write(pipe["w"], struct.pack(">4sIQ", b"PKL0", len(head), 0) + head)
    with pytest.raises(ProtocolError, match="magic") as info:
        protocol.read_frame(pipe["r"], deadline=time.monotonic() + 5)
    assert not isinstance(info.value, ChannelClosed)


def test_header_over_the_cap_is_rejected_without_reading_it(pipe):
    protocol.write_frame(pipe["w"], {"blob": "x" * 1000})
    with pytest.raises(ProtocolError, match="header"):
        protocol.read_frame(pipe["r"], deadline=time.monotonic() + 5, max_header=100)


def test_a_header_length_of_4_gib_is_rejected_immediately(pipe):
    os.write(pipe["w"], struct.pack(">4sIQ", protocol.MAGIC, 2**32 - 1, 0))
    t0 = time.monotonic()
    with pytest.raises(ProtocolError, match="header"):
        protocol.read_frame(pipe["r"], deadline=time.monotonic() + 5)
    assert time.monotonic() - t0 < 1


def test_payload_over_the_cap_is_rejected(pipe):
    os.write(pipe["w"], struct.pack(">4sIQ", protocol.MAGIC, 2, 2**60) + b"{}")
    with pytest.raises(ProtocolError, match="payload"):
        protocol.read_frame(pipe["r"], deadline=time.monotonic() + 5)


@pytest.mark.parametrize("head", [b"[1, 2]", b"not json", b"\xff\xfe\x00garbage", b'"str"', b"[" * 100_000])
def test_header_that_is_not_a_json_object_is_rejected(pipe, head):
    data = struct.pack(">4sIQ", protocol.MAGIC, len(head), 0) + head
    t = threading.Thread(target=os.write, args=(pipe["w"], data))
    t.start()
    try:
        with pytest.raises(ProtocolError) as info:
            protocol.read_frame(pipe["r"], deadline=time.monotonic() + 5)
        assert not isinstance(info.value, (ChannelClosed, ChannelTimeout))
    finally:
        t.join()


@pytest.mark.parametrize("cut", [0, 3, 10, 16 + 5, 16 + 13 + 2])
def test_truncated_frame_raises_channel_closed(pipe, cut):
    r2, w2 = os.pipe()
    protocol.write_frame(w2, {"op": "call", "x": 1}, b"0123456789")
    os.close(w2)
    full = os.read(r2, 1 << 16)
    os.close(r2)
    assert len(full) > cut
    os.write(pipe["w"], full[:cut])
    close_writer(pipe)
    with pytest.raises(ChannelClosed):
        protocol.read_frame(pipe["r"], deadline=time.monotonic() + 5)
    # and a ChannelClosed is a ProtocolError and an EOFError
    assert issubclass(ChannelClosed, ProtocolError) and issubclass(ChannelClosed, EOFError)


def test_silence_raises_channel_timeout(pipe):
    t0 = time.monotonic()
    with pytest.raises(ChannelTimeout):
        protocol.read_frame(pipe["r"], deadline=time.monotonic() + 0.3)
    assert 0.25 <= time.monotonic() - t0 < 3


def test_partial_frame_then_silence_raises_channel_timeout(pipe):
    os.write(pipe["w"], struct.pack(">4sIQ", protocol.MAGIC, 50, 0) + b'{"op":')
    t0 = time.monotonic()
    with pytest.raises(ChannelTimeout):
        protocol.read_frame(pipe["r"], deadline=time.monotonic() + 0.3)
    assert time.monotonic() - t0 < 3
    assert issubclass(ChannelTimeout, ProtocolError)


def test_deadline_already_passed_raises_channel_timeout(pipe):
    protocol.write_frame(pipe["w"], {"op": "x"})
    with pytest.raises(ChannelTimeout):
        protocol.read_frame(pipe["r"], deadline=time.monotonic() - 1)


def test_abstract_keeps_structure_and_drops_every_value():
    """Exports receive shapes and dtypes only: no value of a hidden input travels."""
    key = protocol.PRNGKeyData("threefry2x32", np.array([[1, 2], [3, 4]], dtype=np.uint32))
    tree = {"w": np.full((2, 3), 7.25, np.float32), "b": [np.int32(5), 1.5, None], "k": key}
    spec = protocol.abstract((tree, 3))
    assert spec == (
        {
            "w": protocol.ShapeSpec((2, 3), "float32"),
            "b": [protocol.ShapeSpec((), "int32"), protocol.ShapeSpec((), "float64"), None],
            "k": protocol.ShapeSpec((2,), "key", "threefry2x32"),
        },
        protocol.ShapeSpec((), "int64"),
    )
    frag, payload = protocol.pack_values({"example": spec})
    assert payload == b"" and "7.25" not in json.dumps(frag)
    assert protocol.unpack_values(frag, payload) == {"example": spec}


@pytest.mark.parametrize(
    "node",
    [
        {"t": "spec", "shape": [-1], "dtype": "float32"},
        {"t": "spec", "shape": [2], "dtype": 5},
        {"t": "spec", "shape": "2", "dtype": "float32"},
        {"t": "spec", "shape": [1.5], "dtype": "float32"},
    ],
)
def test_malformed_specs_are_rejected(node):
    with pytest.raises(ProtocolError, match="bad spec"):
        protocol.unpack_values({"values": {"x": node}, "arrays": []}, b"")


def test_a_readable_interrupt_descriptor_raises_keyboard_interrupt_while_waiting(pipe):
    """A stop asked while the frame is awaited (grader/host/interrupts.py writes a byte) ends the
    wait at once with KeyboardInterrupt, with a deadline or without one."""
    stop_r, stop_w = os.pipe()
    try:
        for deadline in (time.monotonic() + 60, None):
            timer = threading.Timer(0.2, os.write, args=(stop_w, b"!"))
            # without a deadline, an interrupt that did not work would wait for ever: a frame
            # comes after 30 s, and then the read returns it instead of raising
            fallback = threading.Timer(30, protocol.write_frame, args=(pipe["w"], {"op": "late"}))
            timer.start()
            fallback.start()
            try:
                with pytest.raises(KeyboardInterrupt):
                    protocol.read_frame(pipe["r"], deadline=deadline, interrupt=stop_r)
            finally:
                timer.join()
                fallback.cancel()
            os.read(stop_r, 16)
        # not asked: the frame is read as ever
        protocol.write_frame(pipe["w"], {"op": "x"})
        assert protocol.read_frame(pipe["r"], deadline=time.monotonic() + 5, interrupt=stop_r)[0] == {"op": "x"}
    finally:
        os.close(stop_r)
        os.close(stop_w)
