"""Micro-benchmark of the partition log: acknowledged appends with group commit, then reads.

Each of ``--producers`` asyncio tasks appends batches of ``--batch-records`` records of
``--record-size`` bytes (one opaque payload per batch) and waits for durability
(``flush_until``) before its next append, as an acknowledged producer would. Then the whole log is
read back in ``--read-bytes`` chunks, as consumers and follower fetches do.

With ``--backups N`` the appends go through ``PartitionPrimary.produce`` with ``min_in_sync =
N + 1`` and N in-process ``BackupFetcher``s (``LocalTransport``, no network) copy the log, so an
acknowledgement waits for every copy: the replication machinery's own cost.

Appends a JSON line to bench/results/log_append.jsonl and ends with one key=value line:
``batches_per_s=… records_per_s=… mb_per_s=… fsyncs=… read_mb_per_s=…``.

    .venv/bin/python bench/log_append.py --seconds 5
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path

import _results  # bench/, the script's directory

from hybridmq.broker.log import LogConfig, PartitionLog, iter_headers
from hybridmq.broker.replication import BackupFetcher, LocalTransport, PartitionPrimary


async def produce(
    log: PartitionLog,
    payload: bytes,
    records: int,
    producers: int,
    seconds: float,
    primary: PartitionPrimary | None = None,
) -> int:
    stop = time.perf_counter() + seconds
    count = 0

    async def producer(pid: int) -> None:
        nonlocal count
        seq = 0
        while time.perf_counter() < stop:
            if primary is not None:
                await primary.produce(payload, records, epoch=1, producer_id=pid, base_sequence=seq)
            else:
                result = log.append(payload, records, 0, producer_id=pid, base_sequence=seq)
                await log.flush_until(result.end_offset)
            seq += records
            count += 1

    await asyncio.gather(*(producer(p) for p in range(producers)))
    return count


def read_all(log: PartitionLog, read_bytes: int) -> tuple[int, int]:
    offset = log.log_start_offset
    total = batches = 0
    while offset < log.log_end_offset:
        data = log.read(offset, read_bytes)
        total += len(data)
        for header in iter_headers(data):
            batches += 1
            offset = header.next_offset
    return total, batches


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--batch-records", type=int, default=500)
    parser.add_argument("--record-size", type=int, default=100)
    parser.add_argument("--producers", type=int, default=8)
    parser.add_argument("--fsync", choices=["group", "always", "never"], default="group")
    parser.add_argument("--segment-mb", type=int, default=64)
    parser.add_argument("--read-bytes", type=int, default=1 << 20)
    parser.add_argument("--backups", type=int, default=0, help="in-process backups (replication cost)")
    parser.add_argument("--dir", type=Path, default=None, help="data directory (default: a temp dir)")
    args = parser.parse_args()

    base = args.dir or Path(tempfile.mkdtemp(prefix="hmq-bench-log-"))
    path = base / "bench-0"
    shutil.rmtree(path, ignore_errors=True)
    config = LogConfig(segment_bytes=args.segment_mb << 20, fsync=args.fsync)
    log = PartitionLog.open(path, config)
    payload = os.urandom(args.record_size) * args.batch_records

    primary = None
    backups: list[tuple[PartitionLog, BackupFetcher, asyncio.Task[None]]] = []
    if args.backups:
        names = ["primary"] + [f"backup-{i}" for i in range(args.backups)]
        primary = PartitionPrimary(
            log, partition="bench-0", replica_id="primary", epoch=1, replicas=names, min_in_sync=len(names)
        )
        for name in names[1:]:
            backup_log = PartitionLog.open(base / name, config)
            fetcher = BackupFetcher(
                backup_log,
                partition="bench-0",
                replica_id=name,
                epoch=1,
                transport=LocalTransport(primary),
                max_wait_ms=100,
            )
            backups.append((backup_log, fetcher, asyncio.create_task(fetcher.run())))

    started = time.perf_counter()
    batches = await produce(log, payload, args.batch_records, args.producers, args.seconds, primary)
    elapsed = time.perf_counter() - started
    fsyncs = log.committer().syncs if args.fsync == "group" else 0
    for backup_log, fetcher, task in backups:
        await fetcher.stop()
        await task
        await backup_log.aclose()
    if primary is not None:
        primary.close()
    await log.aclose()

    log = PartitionLog.open(path, config)
    started = time.perf_counter()
    read_bytes, read_batches = read_all(log, args.read_bytes)
    read_elapsed = time.perf_counter() - started
    recovery = log.recovery
    log.close()
    if args.dir is None:
        shutil.rmtree(base, ignore_errors=True)

    records = batches * args.batch_records
    result = {
        "host": platform.node(),
        "params": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "batches_per_s": round(batches / elapsed, 1),
        "records_per_s": round(records / elapsed),
        "mb_per_s": round(batches * len(payload) / elapsed / 1e6, 2),
        "fsyncs": fsyncs,
        "records_per_fsync": round(records / fsyncs, 1) if fsyncs else None,
        "read_mb_per_s": round(read_bytes / read_elapsed / 1e6, 1) if read_elapsed else None,
        "read_batches": read_batches,
        "recovery_segments_scanned": recovery.segments_scanned,
    }
    _results.append(
        "log_append",
        result,
        {k: result[k] for k in ("batches_per_s", "records_per_s", "mb_per_s", "fsyncs", "read_mb_per_s")},
    )


if __name__ == "__main__":
    asyncio.run(main())
