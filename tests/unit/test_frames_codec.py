"""Property tests of the frame codec: round trips, garbage only ever raises ProtocolError, and typed
requests decode into their Structs or, malformed, into an InvalidFrame that names the field."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hybridmq.api.frames import ErrorCode, FrameType, canonical, is_reserved, split_kind
from hybridmq.api.requests import DATA_REQUESTS, Fetch, Nack, Produce, Request
from hybridmq.protocol import ProtocolError, decode_body, encode_frame, read_frame
from hybridmq.protocol.codec import FrameDecoder, InvalidFrame, encode_body

values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.text(max_size=20)
    | st.binary(max_size=50),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
frames = st.dictionaries(st.text(max_size=6).filter(lambda k: k != "t"), values, max_size=6).map(
    lambda d: {"t": int(FrameType.PRODUCE), **d}
)


def _read(data: bytes, max_frame: int = 1 << 16) -> dict | None:  # type: ignore[type-arg]
    async def go() -> dict | None:  # type: ignore[type-arg]
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        return await read_frame(reader, max_frame)

    return asyncio.run(go())


@given(frames)
@settings(max_examples=200, deadline=None)
def test_round_trip(frame: dict) -> None:  # type: ignore[type-arg]
    assert _read(encode_frame(frame)) == frame


@given(st.binary(max_size=300))
@settings(max_examples=300, deadline=None)
def test_random_bodies_decode_or_raise_protocol_error(body: bytes) -> None:
    try:
        frame = decode_body(body)
    except ProtocolError as exc:
        assert exc.code == ErrorCode.PROTOCOL_ERROR
    else:
        assert isinstance(frame, dict) and isinstance(frame["t"], int)


@given(st.binary(max_size=300))
@settings(max_examples=300, deadline=None)
def test_random_streams_read_or_raise_protocol_error(data: bytes) -> None:
    try:
        _read(data)
    except ProtocolError:
        pass


@given(frames, st.integers(min_value=1, max_value=200))
@settings(max_examples=100, deadline=None)
def test_truncated_frames_are_protocol_errors(frame: dict, cut: int) -> None:  # type: ignore[type-arg]
    data = encode_frame(frame)
    cut = min(cut, len(data) - 1)
    with pytest.raises(ProtocolError):
        _read(data[:cut])


@given(st.integers(min_value=(1 << 16) + 1, max_value=2**32 - 1))
@settings(max_examples=50, deadline=None)
def test_oversized_frames_are_rejected_before_the_body(length: int) -> None:
    with pytest.raises(ProtocolError) as err:
        _read(struct.pack(">I", length) + b"x" * 10)
    assert err.value.code == ErrorCode.FRAME_TOO_LARGE


def test_non_map_bodies_are_rejected() -> None:
    for body in (msgpack.packb([1, 2]), msgpack.packb({"t": "x"}), msgpack.packb(7), b"\xc1"):
        with pytest.raises(ProtocolError):
            decode_body(body)


@pytest.mark.parametrize("decode", [decode_body, FrameDecoder(DATA_REQUESTS).decode])
def test_a_hostile_depth_of_nesting_is_a_protocol_error(decode: Any) -> None:
    """Arrays nested 5,000 deep inside a PRODUCE (a few kilobytes): a clear error for that
    connection, not a RecursionError out of its read loop."""
    for body in (b"\x91" * 5000 + b"\xc0", b"\x82\xa1t\x0b\xa1p" + b"\x91" * 5000 + b"\xc0"):
        with pytest.raises(ProtocolError) as err:
            decode(body)
        assert err.value.code == ErrorCode.PROTOCOL_ERROR


def test_destination_names() -> None:
    assert split_kind("queue:a") == ("queue", "a")
    assert canonical("orders") == "topic:orders"
    assert is_reserved("queue:_DMQ") and is_reserved("_ADMIN") and not is_reserved("topic:a_b")


# -- typed requests: decoded and validated in one step at the connection --------------------------
TYPED = FrameDecoder(DATA_REQUESTS)


def test_a_typed_request_decodes_into_its_struct_with_named_fields() -> None:
    wire = {"t": int(FrameType.PRODUCE), "c": 9, "p": "f-0", "d": "queue:q", "n": 2, "b": b"rr", "e": 4}
    frame = TYPED.decode(msgpack.packb(wire | {"pid": 5, "seq": 11, "unknown": [1]}))
    assert isinstance(frame, Produce)
    assert (frame.partition, frame.destination, frame.count, frame.records) == ("f-0", "queue:q", 2, b"rr")
    assert (frame.epoch, frame.pid, frame.producer_epoch, frame.sequence, frame.c) == (4, 5, 0, 11, 9)
    # Sent on, it is the same frame on the wire, defaults left out (what a broker before it expects).
    assert msgpack.unpackb(encode_body(frame)) == wire | {"pid": 5, "seq": 11}
    nack = TYPED.decode(msgpack.packb({"t": int(FrameType.NACK), "s": "k", "o": 3, "a": [3, 4], "rq": False}))
    assert isinstance(nack, Nack) and (nack.records, nack.requeue, nack.c) == ((3, 4), False, None)
    # The same key, another frame type, another meaning: a FETCH's ``e`` is where the read ends.
    fetch = TYPED.decode(msgpack.packb({"t": int(FrameType.FETCH), "c": 2, "p": "f-0", "o": 7, "e": 9}))
    assert isinstance(fetch, Fetch) and (fetch.offset, fetch.end, fetch.partition_epoch) == (7, 9, None)


@pytest.mark.parametrize(
    ("wire", "says"),
    [
        ({"t": int(FrameType.PRODUCE), "c": 1, "d": "q", "n": 1, "b": b"x"}, "missing required field `p`"),
        ({"t": int(FrameType.PRODUCE), "c": 2, "p": "f", "d": "q", "n": "1", "b": b"x"}, "at `$.n`"),
        ({"t": int(FrameType.PRODUCE), "c": 3, "p": "f", "d": "q", "n": 1, "b": "text"}, "at `$.b`"),
        ({"t": int(FrameType.ACK), "c": 4, "s": 1, "o": 0, "a": [1]}, "at `$.a`"),
        ({"t": int(FrameType.ACK), "c": 5, "s": True, "o": 0}, "at `$.s`"),
        ({"t": int(FrameType.NACK), "c": 6, "s": 1, "o": 0, "rq": "no"}, "at `$.rq`"),
        ({"t": int(FrameType.READER_COMMIT), "c": 7, "p": "f", "rn": "r", "o": -1}, ">= 0 - at `$.o`"),
        ({"t": int(FrameType.TX_COMMIT), "c": 8, "x": "t" * 65}, "length <= 64 - at `$.x`"),
        (
            {"t": int(FrameType.TX_COMMIT), "c": 9, "x": "t", "b": [["f", "q", 0, b"", 0, 0]]},
            "at `$.b[0][2]`",
        ),
        ({"t": int(FrameType.TX_RESOLVE), "c": 10, "x": "t", "ps": []}, "length >= 1 - at `$.ps`"),
    ],
)
def test_a_malformed_typed_request_is_invalid_not_a_protocol_error(wire: dict, says: str) -> None:  # type: ignore[type-arg]
    frame = TYPED.decode(msgpack.packb(wire))
    assert isinstance(frame, InvalidFrame), frame
    assert frame.frame == wire and says in frame.reason, frame.reason  # its ``c`` is answered


def test_other_frames_stay_dicts() -> None:
    for wire in (
        {"t": int(FrameType.PING), "c": 1},
        {"t": int(FrameType.OK), "r": 3, "x": {"a": 1}},
        {"t": 250},
    ):
        assert TYPED.decode(msgpack.packb(wire)) == wire


@given(st.binary(max_size=300))
@settings(max_examples=300, deadline=None)
def test_random_bodies_through_the_typed_decoder(body: bytes) -> None:
    try:
        frame = TYPED.decode(body)
    except ProtocolError as exc:
        assert exc.code == ErrorCode.PROTOCOL_ERROR
    else:
        assert isinstance(frame, dict | Request | InvalidFrame)


@given(frames)
@settings(max_examples=200, deadline=None)
def test_random_produce_maps_are_a_struct_or_invalid(frame: dict) -> None:  # type: ignore[type-arg]
    decoded = TYPED.decode(encode_body(frame))
    assert isinstance(decoded, Produce | InvalidFrame), decoded
    if isinstance(decoded, Produce):
        assert (decoded.partition, decoded.records) == (frame["p"], frame["b"])
