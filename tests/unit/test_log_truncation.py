"""truncate_to, delete_before (retention) and reset_to."""

from __future__ import annotations

from pathlib import Path

import pytest

from hybridmq.broker.log import LogConfig, OffsetOutOfRangeError, PartitionLog

SMALL = LogConfig(segment_bytes=2048, index_interval_bytes=256, fsync="never")


def fill(log: PartitionLog, n: int, count: int = 5, epoch: int = 0) -> None:
    for i in range(n):
        log.append(bytes([i % 256]) * 100, count, epoch)


def bases(log: PartitionLog) -> list[int]:
    return [h.base_offset for h in log.iter_batch_headers()]


def test_truncate_to_batch_boundary(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p", SMALL)
    fill(log, 10)
    assert log.truncate_to(25) == 25
    assert bases(log) == [0, 5, 10, 15, 20]
    assert log.truncate_to(100) == 25  # beyond the end: no-op


def test_truncate_inside_a_batch_removes_the_whole_batch(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p", SMALL)
    fill(log, 10)
    assert log.truncate_to(23) == 20
    assert log.log_end_offset == 20
    assert log.append(b"new", 1, 0).base_offset == 20


def test_truncate_across_segments_deletes_files(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p", SMALL)
    fill(log, 60)
    n_segments = len(log.segments)
    assert n_segments > 3
    target = log.segments[1].base_offset + 5
    log.truncate_to(target)
    assert len(log.segments) == 2
    assert log.log_end_offset == target
    assert len(list((tmp_path / "p").glob("*.log"))) == 2
    fill(log, 3)
    log.close()
    log = PartitionLog.open(tmp_path / "p", SMALL)
    assert bases(log) == list(range(0, target + 15, 5))


def test_truncate_to_segment_base_keeps_an_empty_active_segment(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p", SMALL)
    fill(log, 60)
    second = log.segments[1].base_offset
    log.truncate_to(second)
    assert log.log_end_offset == second
    log.append(b"z", 1, 0)
    assert bases(log)[-1] == second


def test_truncate_below_start_empties_the_log(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p", SMALL)
    fill(log, 60)
    start = log.delete_before(100)
    assert log.truncate_to(0) == start
    assert log.log_start_offset == log.log_end_offset == start


def test_delete_before_removes_only_whole_consumed_segments(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p", SMALL)
    fill(log, 60)
    segments = log.segments
    consumed = segments[2].base_offset + 1  # inside the third segment
    assert log.delete_before(consumed) == segments[2].base_offset
    assert log.log_start_offset == segments[2].base_offset
    assert [s.base_offset for s in log.segments] == [s.base_offset for s in segments[2:]]
    assert not segments[0].path.exists() and not segments[1].path.exists()
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)
    assert log.read(consumed, 100)
    assert log.delete_before(0) == segments[2].base_offset  # never goes back


def test_delete_before_everything_leaves_an_empty_log_at_its_end(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p", SMALL)
    fill(log, 60)
    end = log.log_end_offset
    assert log.delete_before(end) == end
    assert log.log_start_offset == log.log_end_offset == end
    assert len(list((tmp_path / "p").glob("*.log"))) == 1
    log.close()
    log = PartitionLog.open(tmp_path / "p", SMALL)
    assert log.log_start_offset == log.log_end_offset == end
    assert log.append(b"x", 1, 0).base_offset == end


def test_retention_keeps_epochs_and_producer_state(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p", SMALL)
    for i in range(60):
        log.append(b"x" * 100, 1, i // 10, producer_id=5, producer_epoch=0, base_sequence=i)
    log.delete_before(log.segments[-1].base_offset)
    assert log.epoch_entries[0].start_offset == log.log_start_offset
    assert log.latest_epoch == 5
    log.close()
    log = PartitionLog.open(tmp_path / "p", SMALL)
    entry = log.producer_state.get(5)
    assert entry is not None and entry.last_sequence == 59


def test_reset_to(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p", SMALL)
    fill(log, 60, epoch=3)
    log.reset_to(1000)
    assert log.log_start_offset == log.log_end_offset == 1000
    assert log.epoch_entries == [] and len(log.producer_state) == 0
    assert log.append(b"x", 1, 4).base_offset == 1000
    log.close()
    log = PartitionLog.open(tmp_path / "p", SMALL)
    assert (log.log_start_offset, log.log_end_offset, log.latest_epoch) == (1000, 1001, 4)
