"""Property tests of the frame codec: round trips, and garbage only ever raises ProtocolError."""

from __future__ import annotations

import asyncio
import struct

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hybridmq.api.frames import ErrorCode, FrameType, canonical, is_reserved, split_kind
from hybridmq.protocol import ProtocolError, decode_body, encode_frame, read_frame

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


def test_destination_names() -> None:
    assert split_kind("queue:a") == ("queue", "a")
    assert canonical("orders") == "topic:orders"
    assert is_reserved("queue:_DMQ") and is_reserved("_ADMIN") and not is_reserved("topic:a_b")
