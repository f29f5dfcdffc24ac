"""Leader-epoch cache: assignment, fencing, end_offset_for_epoch, truncation, persistence."""

from __future__ import annotations

from pathlib import Path

import pytest

from hybridmq.broker.log import (
    UNDEFINED_EPOCH,
    UNDEFINED_OFFSET,
    EpochEntry,
    LeaderEpochCache,
    LogConfig,
    PartitionLog,
    StaleEpochError,
    encode_batch,
)

CFG = LogConfig(segment_bytes=4096, fsync="never")


def test_cache_end_offsets_like_kafka(tmp_path: Path) -> None:
    cache = LeaderEpochCache(tmp_path / "epochs")
    cache.assign(1, 0)
    cache.assign(1, 5)  # same epoch: no-op
    cache.assign(3, 10)
    cache.assign(4, 20)
    assert cache.entries == [EpochEntry(1, 0), EpochEntry(3, 10), EpochEntry(4, 20)]
    assert cache.end_offset_for_epoch(4, 30) == (4, 30)
    assert cache.end_offset_for_epoch(3, 30) == (3, 20)
    assert cache.end_offset_for_epoch(2, 30) == (1, 10)  # unknown epoch: the floor epoch's end
    assert cache.end_offset_for_epoch(0, 30) == (0, 0)  # older than everything
    assert cache.end_offset_for_epoch(5, 30) == (UNDEFINED_EPOCH, UNDEFINED_OFFSET)
    assert cache.end_offset_for_epoch(UNDEFINED_EPOCH, 30) == (UNDEFINED_EPOCH, UNDEFINED_OFFSET)
    assert cache.epoch_for_offset(15) == 3
    with pytest.raises(StaleEpochError):
        cache.assign(2, 25)
    assert LeaderEpochCache(tmp_path / "epochs").entries == cache.entries
    cache.truncate_from_end(10)
    assert cache.entries == [EpochEntry(1, 0)]
    cache.assign(5, 12)
    cache.truncate_from_start(13)
    assert cache.entries == [EpochEntry(5, 13)]
    assert LeaderEpochCache(tmp_path / "epochs").entries == [EpochEntry(5, 13)]


def test_log_fences_older_epochs(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p", CFG)
    log.append(b"a", 2, 1)
    log.append(b"b", 2, 3)
    with pytest.raises(StaleEpochError) as info:
        log.append(b"c", 1, 2)
    assert (info.value.epoch, info.value.latest_epoch) == (2, 3)
    stale = encode_batch(b"d", base_offset=4, record_count=1, epoch=2)
    with pytest.raises(StaleEpochError):
        log.append_raw(stale)
    assert log.log_end_offset == 4
    assert log.epoch_entries == [EpochEntry(1, 0), EpochEntry(3, 2)]
    assert log.end_offset_for_epoch(1) == (1, 2)
    assert log.end_offset_for_epoch(3) == (3, 4)


def test_epochs_follow_truncation_and_survive_reopen(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p", CFG)
    for epoch in range(5):
        for _ in range(10):
            log.append(b"x" * 50, 1, epoch)
    log.truncate_to(25)
    assert log.epoch_entries == [EpochEntry(0, 0), EpochEntry(1, 10), EpochEntry(2, 20)]
    assert log.latest_epoch == 2
    log.append(b"y", 1, 7)
    log.close()
    log = PartitionLog.open(tmp_path / "p", CFG)
    assert log.epoch_entries == [EpochEntry(0, 0), EpochEntry(1, 10), EpochEntry(2, 20), EpochEntry(7, 25)]


def test_epoch_cache_is_rebuilt_when_the_checkpoint_is_lost(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p", CFG)
    for epoch in (0, 0, 2, 2, 5):
        log.append(b"x", 1, epoch)
    log.close()
    (tmp_path / "p" / "leader-epoch-checkpoint").write_text("garbage")
    log = PartitionLog.open(tmp_path / "p", CFG)
    assert log.epoch_entries == [EpochEntry(0, 0), EpochEntry(2, 2), EpochEntry(5, 4)]


def test_divergent_backup_truncates_with_end_offset_for_epoch(tmp_path: Path) -> None:
    """The Kafka scenario: the old primary wrote past what the new primary has."""
    old = PartitionLog.open(tmp_path / "old", CFG)
    new = PartitionLog.open(tmp_path / "new", CFG)
    for _ in range(5):
        old.append(b"x", 1, 1)
    new.append_raw(old.read(0, 1 << 20, max_offset=3))  # the backup had only 3 records
    old.append(b"lost", 1, 1)  # offsets 5.. never reached the new primary
    new.append(b"new-epoch", 2, 2)  # new primary, epoch 2, starts at 3
    epoch, end = new.end_offset_for_epoch(old.latest_epoch)
    assert (epoch, end) == (1, 3)
    old.truncate_to(end)
    while old.log_end_offset < new.log_end_offset:
        old.append_raw(new.read(old.log_end_offset, 1 << 20))
    assert [h.base_offset for h in old.iter_batch_headers()] == [
        h.base_offset for h in new.iter_batch_headers()
    ]
    assert old.epoch_entries == new.epoch_entries
