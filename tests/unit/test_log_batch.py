"""Batch format: round trip, CRC coverage, framing helpers, control records."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hybridmq.broker.log import (
    HEADER_SIZE,
    AckRanges,
    CorruptBatchError,
    CursorCommit,
    DeliveredThrough,
    Marker,
    ProducerSequence,
    Redelivery,
    SubscriptionState,
    UnknownControl,
    decode_control,
    encode_batch,
    encode_control,
    iter_batches,
    iter_headers,
    parse_header,
    verify_batch,
)
from hybridmq.broker.log.batch import whole_batches_prefix


def make(payload: bytes = b"hello", **kw: int) -> bytes:
    fields = dict(base_offset=10, record_count=3, epoch=2)
    fields.update(kw)
    return encode_batch(payload, **fields)


def test_round_trip_all_fields() -> None:
    batch = make(
        b"payload",
        base_offset=1 << 40,
        record_count=1000,
        epoch=7,
        attributes=1,
        first_timestamp=111,
        max_timestamp=222,
        producer_id=99,
        producer_epoch=3,
        base_sequence=12345,
    )
    header = verify_batch(batch)
    assert header.base_offset == 1 << 40
    assert header.length == HEADER_SIZE + 7 == len(batch)
    assert header.record_count == 1000
    assert header.last_offset == (1 << 40) + 999
    assert header.next_offset == (1 << 40) + 1000
    assert header.epoch == 7
    assert header.is_control
    assert (header.first_timestamp, header.max_timestamp) == (111, 222)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (99, 3, 12345)
    assert header.last_sequence == 12345 + 999
    assert bytes(batch[HEADER_SIZE:]) == b"payload"


def test_defaults_are_not_idempotent_data_batch() -> None:
    header = verify_batch(make())
    assert not header.is_control
    assert header.producer_id == -1 and header.base_sequence == -1 and header.last_sequence == -1


@pytest.mark.parametrize("position", [0, 5, 9, 12, 17, 21, 25, 30, 45, 55, HEADER_SIZE, HEADER_SIZE + 3])
def test_crc_catches_a_flipped_byte_anywhere_but_the_crc(position: int) -> None:
    batch = bytearray(make(b"some payload bytes"))
    batch[position] ^= 0x40
    with pytest.raises(CorruptBatchError):
        verify_batch(batch)


def test_crc_field_itself_corrupted() -> None:
    batch = bytearray(make())
    batch[14] ^= 1
    with pytest.raises(CorruptBatchError, match="CRC"):
        verify_batch(batch)


def test_truncated_batch_is_rejected() -> None:
    batch = make(b"0123456789")
    for cut in (1, HEADER_SIZE - 1, HEADER_SIZE, len(batch) - 1):
        with pytest.raises(CorruptBatchError):
            verify_batch(batch[:cut])


def test_bad_magic_and_count() -> None:
    batch = bytearray(make())
    batch[12] = 9
    with pytest.raises(CorruptBatchError, match="magic"):
        parse_header(batch)
    with pytest.raises(ValueError):
        make(record_count=0)


def test_iterating_a_buffer_of_batches() -> None:
    batches = [make(bytes([i]) * i, base_offset=i * 3) for i in range(1, 6)]
    buf = b"".join(batches)
    headers = list(iter_headers(buf, verify=True))
    assert [h.base_offset for h in headers] == [3, 6, 9, 12, 15]
    pairs = list(iter_batches(buf))
    assert [bytes(p) for _, p in pairs] == [bytes([i]) * i for i in range(1, 6)]
    assert whole_batches_prefix(buf) == len(buf)
    assert whole_batches_prefix(buf[:-1]) == len(buf) - len(batches[-1])
    assert whole_batches_prefix(buf[:10]) == 0
    with pytest.raises(CorruptBatchError):
        list(iter_headers(buf[:-1]))


@given(
    payload=st.binary(max_size=300),
    base=st.integers(0, 2**62),
    count=st.integers(1, 2**31 - 1),
    epoch=st.integers(0, 2**31 - 1),
    pid=st.integers(-1, 2**62),
    seq=st.integers(-1, 2**31 - 1),
)
def test_round_trip_property(payload: bytes, base: int, count: int, epoch: int, pid: int, seq: int) -> None:
    batch = encode_batch(
        payload, base_offset=base, record_count=count, epoch=epoch, producer_id=pid, base_sequence=seq
    )
    header = verify_batch(batch)
    assert (header.base_offset, header.record_count, header.epoch) == (base, count, epoch)
    assert (header.producer_id, header.base_sequence) == (pid, seq)
    assert batch[HEADER_SIZE:] == payload


def test_control_records_round_trip() -> None:
    records = [
        CursorCommit("orders/a", 42),
        AckRanges("orders/q", ((44, 50), (52, 52))),
        Redelivery("orders/q", 43, 2),
        ProducerSequence(7, 1, 99),
        Marker("takeover", "m-1", {"dead": "c-3"}),
        SubscriptionState("orders/a", True),
        DeliveredThrough("orders/q", 60),
    ]
    payload, count = encode_control(records)
    assert count == len(records)
    assert decode_control(payload) == records


def test_control_unknown_type_and_garbage() -> None:
    import msgpack

    decoded = decode_control(msgpack.packb([[99, "x", 1], [1, "s", 5]]))
    assert decoded == [UnknownControl(99, ("x", 1)), CursorCommit("s", 5)]
    for bad in (b"\xc1", msgpack.packb({"a": 1}), msgpack.packb([["x"]]), msgpack.packb([[1, "s"]])):
        with pytest.raises(CorruptBatchError):
            decode_control(bad)
    with pytest.raises(ValueError):
        encode_control([])
