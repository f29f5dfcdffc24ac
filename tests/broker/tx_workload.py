"""Helpers of the transaction tests: partitions led by different MMs, what a partition's log
holds (read by offset, as the PySpark source reads it), and a cluster whose CM pauses a commit."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from hybridmq.client import Consumer, Fetcher
from hybridmq.local.runner import LocalCluster


def spread(cluster: LocalCluster) -> tuple[str, str, str]:
    """Three partitions whose primaries are three different MMs, lowest name first (the
    coordinator partition of a transaction over all three)."""
    by_mm: dict[str, str] = {}
    for name, a in sorted(cluster.table().items()):
        by_mm.setdefault(a.primary or "", name)
    assert len(by_mm) == 3, cluster.table()
    a, b, c = sorted(by_mm.values())
    return a, b, c


async def stored(cluster: LocalCluster, partition: str, destination: str) -> list[str]:
    """The values of ``destination``'s data records in ``partition``'s log."""
    fetcher = await Fetcher.connect(cluster.bootstrap)
    values: list[str] = []
    offset = 0
    while True:
        result = await fetcher.fetch(partition, offset)
        for batch in result.batches:
            if not batch.control and batch.destination == destination:
                values.extend(r[0].decode() for r in batch.records)
        if result.next_offset >= result.end_offset:
            break
        offset = result.next_offset
    await fetcher.close()
    return values


async def drain(consumer: Consumer, quiet_s: float = 1.5) -> list[str]:
    """Everything ``consumer`` receives until nothing came for ``quiet_s``."""
    got: list[str] = []
    while True:
        try:
            msg = await consumer.receive(timeout=quiet_s)
        except TimeoutError:
            return got
        got.append(msg.value.decode())


@contextmanager
def paused_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str, replicas: int = 3, **env: str
) -> Iterator[tuple[LocalCluster, Path]]:
    """1 CM + 3 MMs (3 fixed partitions) whose CM pauses its first two-phase commit at ``step``
    until the returned file is deleted; prepared transactions are resolved after 2 s."""
    pause_file = tmp_path / "paused"
    monkeypatch.setenv("HYBRIDMQ_TX_PAUSE", step)
    monkeypatch.setenv("HYBRIDMQ_TX_PAUSE_FILE", str(pause_file))
    monkeypatch.setenv("HYBRIDMQ_TX_TIMEOUT_S", "2")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with LocalCluster(tmp_path / "c", mms=3, replicas=replicas, fixed=3, on_demand_per_mm=0) as cluster:
        cluster.wait_in_sync()
        yield cluster, pause_file
