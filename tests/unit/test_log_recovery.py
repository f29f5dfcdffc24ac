"""Crash recovery: torn and corrupt tails, lost segments, and a real kill -9 under group commit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from hybridmq.broker.log import LogConfig, PartitionLog

CFG = LogConfig(segment_bytes=4096, index_interval_bytes=512, fsync="group")


def body(i: int) -> bytes:
    return f"record-batch-{i:06d}|".encode() * 5


def fill(log: PartitionLog, n: int) -> None:
    for i in range(n):
        log.append(body(i), 2, 0, producer_id=1, base_sequence=2 * i)


def check_contents(log: PartitionLog, n: int) -> None:
    batches = [(h.base_offset, h.record_count, bytes(p)) for h, p in log.iter_batches()]
    assert batches == [(2 * i, 2, body(i)) for i in range(n)]


def test_garbage_tail_is_truncated(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p", CFG)
    fill(log, 50)
    log.close()
    last = sorted((tmp_path / "p").glob("*.log"))[-1]
    size = last.stat().st_size
    with last.open("ab") as f:
        f.write(os.urandom(333))
    log = PartitionLog.open(tmp_path / "p", CFG)
    assert log.recovery.bytes_truncated == 333
    assert last.stat().st_size == size
    check_contents(log, 50)
    assert log.append(b"next", 1, 0).base_offset == 100


def test_torn_last_batch_is_dropped(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p", CFG)
    fill(log, 50)
    log.close()
    last = sorted((tmp_path / "p").glob("*.log"))[-1]
    os.truncate(last, last.stat().st_size - 7)
    log = PartitionLog.open(tmp_path / "p", CFG)
    check_contents(log, 49)
    entry = log.producer_state.get(1)
    assert entry is not None and entry.last_sequence == 97


def test_corrupt_byte_truncates_from_that_batch(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p", CFG)
    fill(log, 50)
    active = log.active_segment
    n_before = (active.base_offset) // 2
    log.close()
    data = bytearray(active.path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    active.path.write_bytes(data)
    log = PartitionLog.open(tmp_path / "p", CFG)
    assert n_before <= log.log_end_offset // 2 < 50
    check_contents(log, log.log_end_offset // 2)


def test_clean_reopen_scans_only_the_active_segment(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p", CFG)
    fill(log, 200)
    assert len(log.segments) > 5
    log.close()
    log = PartitionLog.open(tmp_path / "p", CFG)
    assert log.recovery.segments_scanned == 1
    check_contents(log, 200)


def test_unsynced_middle_segment_loses_its_tail_and_later_segments(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p", LogConfig(segment_bytes=4096, fsync="never"))
    fill(log, 200)
    segments = log.segments
    log.close()
    # Simulate a power cut before the group commit reached the recovery point: every segment is
    # suspect and the third one lost its last bytes.
    (tmp_path / "p" / "recovery-point").write_text("0\n")
    os.truncate(segments[2].path, segments[2].size - 10)
    log = PartitionLog.open(tmp_path / "p", CFG)
    assert len(log.segments) == 3
    assert log.recovery.segments_deleted == len(segments) - 3
    n = log.log_end_offset // 2
    assert n < segments[3].base_offset // 2
    check_contents(log, n)
    assert log.latest_epoch == 0 and log.epoch_entries[0].start_offset == 0


def test_empty_active_segment_after_roll_is_fine(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p", CFG)
    fill(log, 20)
    log.roll()
    log.close()
    log = PartitionLog.open(tmp_path / "p", CFG)
    check_contents(log, 20)
    assert log.active_segment.size == 0


WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from hybridmq.broker.log import LogConfig, PartitionLog

    def body(i):
        return (f"record-batch-{i:06d}|".encode() * 40)

    async def main(path):
        log = PartitionLog.open(path, LogConfig(segment_bytes=64 * 1024, fsync="group"))
        counter = 0

        async def producer(pid):
            nonlocal counter
            seq = 0
            while True:
                i = counter
                counter += 1
                result = log.append(body(i), 3, 0, producer_id=pid, base_sequence=seq)
                seq += 3
                await log.flush_until(result.end_offset)
                print(f"ACK {result.base_offset} {i} {pid} {seq - 3}", flush=True)
                await asyncio.sleep(0)

        await asyncio.gather(*(producer(p) for p in range(8)))

    asyncio.run(main(sys.argv[1]))
    """
)


@pytest.mark.parametrize("kill_after", [200, 3000])
def test_kill_9_during_group_commit_keeps_every_acknowledged_record(tmp_path: Path, kill_after: int) -> None:
    data = tmp_path / "p"
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(data)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    acked: dict[int, tuple[int, int, int]] = {}
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    try:
        while len(acked) < kill_after and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            fields = [int(x) for x in line.split()[1:]]
            acked[fields[0]] = (fields[1], fields[2], fields[3])
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert len(acked) >= kill_after, proc.stderr.read() if proc.stderr else ""
    # A torn write on top of whatever was in flight.
    last = sorted(data.glob("*.log"))[-1]
    with last.open("ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x10" + os.urandom(100))

    log = PartitionLog.open(data, CFG)
    assert log.recovery.bytes_truncated >= 106
    seen: dict[int, tuple[int, bytes]] = {}
    expected_offset = 0
    for header, payload in log.iter_batches():
        assert header.base_offset == expected_offset  # contiguous, in order
        expected_offset = header.next_offset
        seen[header.base_offset] = (header.record_count, bytes(payload))
    assert expected_offset == log.log_end_offset
    for base, (i, _pid, _seq) in acked.items():
        assert base in seen, f"acknowledged batch at offset {base} lost"
        assert seen[base] == (3, f"record-batch-{i:06d}|".encode() * 40)
    for pid in range(8):
        entry = log.producer_state.get(pid)
        acked_seqs = [seq for (_, p, seq) in acked.values() if p == pid]
        if acked_seqs:
            assert entry is not None and entry.last_sequence >= max(acked_seqs) + 2
    # Everything after the recovered end can be appended again.
    assert log.append(b"after", 1, 0).base_offset == log.log_end_offset - 1
    log.close()
