"""Idempotent producers: duplicates, gaps, fencing, and rebuilding the state on recovery."""

from __future__ import annotations

from pathlib import Path

import pytest

from hybridmq.broker.log import (
    DuplicateSequence,
    LogConfig,
    OutOfOrderSequence,
    OutOfOrderSequenceError,
    PartitionLog,
    ProducerFenced,
    ProducerFencedError,
    ProducerStateManager,
    SequenceOk,
)

SMALL = LogConfig(segment_bytes=2048, fsync="never", producer_window=5)


def test_manager_rules() -> None:
    state = ProducerStateManager(window=3)
    assert state.check(-1, 0, -1, 5) == SequenceOk()
    assert state.check(1, 0, 17, 5) == SequenceOk()  # unknown producer: any start
    state.record(1, 0, 0, 4, 100, 104)
    state.record(1, 0, 5, 9, 105, 109)
    assert state.check(1, 0, 10, 3) == SequenceOk()
    assert state.check(1, 0, 5, 5) == DuplicateSequence(105, 109)
    assert state.check(1, 0, 0, 5) == DuplicateSequence(100, 104)
    assert state.check(1, 0, 12, 3) == OutOfOrderSequence(10, 12)
    assert state.check(1, 0, 3, 1) == DuplicateSequence(-1, -1)  # older than any whole batch
    assert state.check(1, 1, 0, 1) == SequenceOk()  # new producer epoch restarts at 0
    assert state.check(1, 1, 4, 1) == OutOfOrderSequence(0, 4)
    state.record(1, 2, 0, 0, 110, 110)
    assert state.check(1, 1, 1, 1) == ProducerFenced(2)
    for i in range(1, 5):
        state.record(1, 2, i, i, 110 + i, 110 + i)
    entry = state.get(1)
    assert entry is not None and len(entry.batches) == 3 and entry.last_sequence == 4


def test_log_drops_duplicates_and_refuses_gaps(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p", SMALL)
    first = log.append(b"a", 3, 0, producer_id=9, base_sequence=0)
    second = log.append(b"b", 3, 0, producer_id=9, base_sequence=3)
    resent = log.append(b"b", 3, 0, producer_id=9, base_sequence=3)
    assert resent.duplicate and resent[:2] == second[:2]
    assert log.log_end_offset == 6
    with pytest.raises(OutOfOrderSequenceError) as info:
        log.append(b"c", 1, 0, producer_id=9, base_sequence=9)
    assert (info.value.expected, info.value.got) == (6, 9)
    log.append(b"c", 1, 0, producer_id=9, producer_epoch=1, base_sequence=0)
    with pytest.raises(ProducerFencedError):
        log.append(b"d", 1, 0, producer_id=9, producer_epoch=0, base_sequence=6)
    assert log.check_sequence(9, 1, 1, 1) == SequenceOk()
    assert first.base_offset == 0


def append_many(log: PartitionLog, producers: int, batches: int) -> None:
    for i in range(batches):
        for pid in range(producers):
            log.append(b"p" * 80, 2, 0, producer_id=pid, base_sequence=i * 2)


def test_state_is_rebuilt_after_reopen_with_and_without_snapshots(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p", SMALL)
    append_many(log, 3, 40)
    assert len(log.segments) > 3
    expected = {pid: log.producer_state.get(pid) for pid in range(3)}
    log.close()
    log = PartitionLog.open(tmp_path / "p", SMALL)
    assert {pid: log.producer_state.get(pid) for pid in range(3)} == expected
    assert log.append(b"x", 2, 0, producer_id=1, base_sequence=78).duplicate
    log.close()
    for snapshot in (tmp_path / "p").glob("*.snapshot"):
        snapshot.unlink()
    log = PartitionLog.open(tmp_path / "p", SMALL)
    assert {pid: log.producer_state.get(pid) for pid in range(3)} == expected
    log.close()
    for snapshot in (tmp_path / "p").glob("*.snapshot"):
        snapshot.write_bytes(b"\xc1garbage")
    log = PartitionLog.open(tmp_path / "p", SMALL)
    assert {pid: log.producer_state.get(pid) for pid in range(3)} == expected


def test_state_follows_truncation(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p", SMALL)
    append_many(log, 1, 60)  # producer 0, sequences 0..119, offsets == sequences
    log.truncate_to(51)  # inside the batch 50-51
    entry = log.producer_state.get(0)
    assert entry is not None and entry.last_sequence == 49
    assert log.check_sequence(0, 0, 50, 2) == SequenceOk()
    assert log.append(b"again", 2, 0, producer_id=0, base_sequence=50).base_offset == 50
    log.close()
    log = PartitionLog.open(tmp_path / "p", SMALL)
    entry = log.producer_state.get(0)
    assert entry is not None and entry.last_sequence == 51


def test_backup_learns_producer_state_from_raw_batches(tmp_path: Path) -> None:
    primary = PartitionLog.open(tmp_path / "a", SMALL)
    backup = PartitionLog.open(tmp_path / "b", SMALL)
    append_many(primary, 2, 10)
    backup.append_raw(primary.read(0, 1 << 20))
    while backup.log_end_offset < primary.log_end_offset:
        backup.append_raw(primary.read(backup.log_end_offset, 1 << 20))
    # After a failover the backup, now primary, recognises the resend.
    assert backup.append(b"p" * 80, 2, 1, producer_id=1, base_sequence=18).duplicate


def test_snapshot_restore_into_empty_log(tmp_path: Path) -> None:
    primary = PartitionLog.open(tmp_path / "a", SMALL)
    append_many(primary, 2, 10)
    backup = PartitionLog.open(tmp_path / "b", SMALL)
    backup.reset_to(primary.log_end_offset)
    backup.restore_producer_snapshot(primary.producer_snapshot())
    backup.restore_epochs(primary.epoch_entries)
    assert backup.producer_state.get(0) == primary.producer_state.get(0)
    assert backup.latest_epoch == 0
    backup.close()
    backup = PartitionLog.open(tmp_path / "b", SMALL)
    assert backup.producer_state.get(1) == primary.producer_state.get(1)
