"""Partition log: appends, segment roll, index lookup, reads, raw appends (backup side)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from hybridmq.broker.log import (
    HEADER_SIZE,
    BatchTooLargeError,
    CorruptBatchError,
    InvalidOffsetError,
    LogClosedError,
    LogConfig,
    OffsetOutOfRangeError,
    PartitionLog,
    iter_batches,
    iter_headers,
)

SMALL = LogConfig(segment_bytes=2048, index_interval_bytes=256, fsync="never")


def payload(i: int, size: int = 100) -> bytes:
    return (f"{i:08d}".encode() * (size // 8 + 1))[:size]


def fill(log: PartitionLog, n: int, count: int = 5, size: int = 100, epoch: int = 0) -> None:
    for i in range(n):
        log.append(payload(i, size), count, epoch, timestamp=1000 + i)


def all_headers(log: PartitionLog) -> list[tuple[int, int]]:
    return [(h.base_offset, h.record_count) for h in log.iter_batch_headers()]


def test_empty_log(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p", SMALL)
    assert (log.log_start_offset, log.log_end_offset) == (0, 0)
    assert log.read(0, 1000) == b""
    with pytest.raises(OffsetOutOfRangeError):
        log.read(1, 1000)
    log.close()
    with pytest.raises(LogClosedError):
        log.append(b"x", 1, 0)


def test_offsets_count_records(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p", SMALL)
    r1 = log.append(b"a", 10, 0)
    r2 = log.append(b"b", 1, 0)
    r3 = log.append(b"c", 5, 0)
    assert (r1.base_offset, r1.last_offset, r1.end_offset) == (0, 9, 10)
    assert (r2.base_offset, r2.last_offset) == (10, 10)
    assert (r3.base_offset, r3.last_offset) == (11, 15)
    assert log.log_end_offset == 16


def test_segments_roll_on_size_and_are_named_by_base_offset(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p", SMALL)
    fill(log, 60)
    segments = log.segments
    assert len(segments) > 3
    for segment in segments:
        assert segment.size <= SMALL.segment_bytes
        assert segment.path.name == f"{segment.base_offset:020d}.log"
    for a, b in itertools.pairwise(segments):
        assert a.next_offset == b.base_offset
    assert all_headers(log) == [(i * 5, 5) for i in range(60)]
    assert sorted(p.name for p in (tmp_path / "p").glob("*.log")) == [s.path.name for s in segments]


def test_oversized_batch_gets_its_own_segment_and_limit_is_enforced(tmp_path: Path) -> None:
    log = PartitionLog.open(
        tmp_path / "p", LogConfig(segment_bytes=2048, max_batch_bytes=10000, fsync="never")
    )
    log.append(b"small", 1, 0)
    log.append(b"x" * 5000, 1, 0)
    assert len(log.segments) == 2 and log.segments[1].size == 5000 + HEADER_SIZE
    with pytest.raises(BatchTooLargeError):
        log.append(b"x" * 10000, 1, 0)


def test_read_every_offset_returns_the_batch_holding_it(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p", SMALL)
    fill(log, 40, count=3)
    for offset in range(log.log_end_offset):
        data = log.read(offset, 1)  # max_bytes smaller than a batch: still one whole batch
        headers = list(iter_headers(data, verify=True))
        assert len(headers) == 1
        assert headers[0].base_offset <= offset <= headers[0].last_offset
        assert bytes(next(iter_batches(data))[1]) == payload(offset // 3)


def test_read_respects_max_bytes_max_offset_and_segment_end(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p", SMALL)
    fill(log, 40, count=2)
    batch_size = HEADER_SIZE + 100
    data = log.read(0, batch_size * 3 + 10)
    assert [h.base_offset for h in iter_headers(data)] == [0, 2, 4]
    data = log.read(0, 1 << 20, max_offset=6)
    assert [h.base_offset for h in iter_headers(data)] == [0, 2, 4]
    data = log.read(0, 1 << 20)
    assert len(data) == log.segments[0].size  # never crosses a segment
    assert log.read(6, 1000, max_offset=6) == b""
    with pytest.raises(OffsetOutOfRangeError):
        log.read(log.log_end_offset + 1, 10)


def test_index_is_sparse_and_lookup_lands_before_target(tmp_path: Path) -> None:
    log = PartitionLog.open(
        tmp_path / "p", LogConfig(segment_bytes=1 << 20, index_interval_bytes=1000, fsync="never")
    )
    fill(log, 200, count=1, size=43)  # 100-byte batches
    index = log.active_segment.index
    assert 15 <= len(index) <= 25
    for offset in range(200):
        found_offset, position = index.lookup(offset)
        assert found_offset <= offset
        assert position == found_offset * 100
        assert offset - found_offset <= 10


def test_index_survives_reopen_and_is_rebuilt_when_missing(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p", SMALL)
    fill(log, 60)
    entries = [s.index.entries() for s in log.segments]
    log.close()
    log = PartitionLog.open(tmp_path / "p", SMALL)
    assert [s.index.entries() for s in log.segments] == entries
    log.close()
    for path in (tmp_path / "p").glob("*.index"):
        path.write_bytes(b"garbage")
    log = PartitionLog.open(tmp_path / "p", SMALL)
    assert [s.index.entries() for s in log.segments] == entries
    assert all_headers(log) == [(i * 5, 5) for i in range(60)]


def test_append_raw_copies_batches_byte_for_byte(tmp_path: Path) -> None:
    primary = PartitionLog.open(tmp_path / "primary", SMALL)
    backup = PartitionLog.open(tmp_path / "backup", SMALL)
    for i in range(50):
        primary.append(payload(i), 4, i // 20, producer_id=1, base_sequence=i * 4)
    offset = 0
    while offset < primary.log_end_offset:
        data = primary.read(offset, 700)
        result = backup.append_raw(data)
        assert result is not None and result.base_offset == offset
        offset = result.end_offset
    assert backup.log_end_offset == primary.log_end_offset
    assert all_headers(backup) == all_headers(primary)
    assert backup.epoch_entries == primary.epoch_entries
    assert backup.producer_state.get(1) == primary.producer_state.get(1)
    primary_bytes = b"".join(s.path.read_bytes() for s in primary.segments)
    backup_bytes = b"".join(s.path.read_bytes() for s in backup.segments)
    assert primary_bytes == backup_bytes
    assert backup.append_raw(b"") is None


def test_append_raw_rejects_gaps_overlaps_and_corruption(tmp_path: Path) -> None:
    primary = PartitionLog.open(tmp_path / "primary", SMALL)
    backup = PartitionLog.open(tmp_path / "backup", SMALL)
    fill(primary, 5)
    with pytest.raises(InvalidOffsetError):
        backup.append_raw(primary.read(5, 1000))
    data = primary.read(0, 10_000)
    corrupt = bytearray(data)
    corrupt[-1] ^= 1
    with pytest.raises(CorruptBatchError):
        backup.append_raw(corrupt)
    with pytest.raises(CorruptBatchError):
        backup.append_raw(data[:-1])
    assert backup.log_end_offset == 0 and backup.active_segment.size == 0  # nothing written
    backup.append_raw(data)
    with pytest.raises(InvalidOffsetError):
        backup.append_raw(data)
    assert backup.log_end_offset == 25


def test_iter_batches_walks_segments(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p", SMALL)
    fill(log, 30)
    seen = [(h.base_offset, bytes(p)) for h, p in log.iter_batches(12, max_bytes=500)]
    assert seen == [(i * 5, payload(i)) for i in range(2, 30)]


def test_idle_sealed_segments_do_not_keep_file_descriptors(tmp_path: Path) -> None:
    config = LogConfig(
        segment_bytes=2048, index_interval_bytes=256, fsync="always", max_open_sealed_segments=2
    )
    log = PartitionLog.open(tmp_path / "p", config)
    fill(log, 120)
    assert len(log.segments) >= 10
    for offset in range(0, log.log_end_offset, 7):
        assert next(iter_batches(log.read(offset, 1)))[1] == payload(offset // 5)
        assert sum(s.is_open for s in log.segments[:-1]) <= 2
    log.close()
    log = PartitionLog.open(tmp_path / "p", config)
    assert sum(s.is_open for s in log.segments[:-1]) == 0
    assert all_headers(log) == [(i * 5, 5) for i in range(120)]
    log.truncate_to(log.segments[3].base_offset + 5)
    log.delete_before(log.segments[1].base_offset)
    assert log.append(b"z", 1, 0).base_offset == log.log_end_offset - 1
    log.close()
