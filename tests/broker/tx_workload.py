"""Helpers of the transaction tests: partitions led by different MMs, what a partition's log
holds (read by offset, as the PySpark source reads it), a cluster whose CM pauses a commit, and
transfers judged from the logs.

A transfer consumes one message of ``queue:a<tag>`` (on the coordinator partition ``pa``) and
produces one record to ``topic:b<tag>`` (on ``pb``) and two to ``pc``, one to ``queue:c<tag>`` and
one to ``topic:d<tag>`` (two data batches there), so every commit is two-phase."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from hybridmq.client import ClientError, Consumer, Fetcher, Producer, Session
from hybridmq.local.runner import LocalCluster
from receiving import receive_until_quiet


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
    return [msg.value.decode() for msg in await receive_until_quiet(consumer, quiet_s)]


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


async def transfer_all(
    cluster: LocalCluster, pb: str, pc: str, committed: list[str], n: int, within_s: float, tag: str = ""
) -> None:
    """Transfer messages of ``queue:a<tag>`` until ``n`` were committed; a transfer whose commit
    is rolled back (or refused) is rolled back and done again."""
    session = await Session.connect(cluster.bootstrap, transacted=True, give_up_after_s=60)
    source: Consumer | None = None
    deadline = time.monotonic() + within_s
    while len(committed) < n and time.monotonic() < deadline:
        try:
            if source is None:
                source = await session.consumer(f"queue:a{tag}")
            msg = await session.receive(source, timeout=1)
        except TimeoutError:
            continue
        except Exception:  # its CM went away: a new consumer once one is back
            source = None
            await asyncio.sleep(0.2)
            continue
        v = msg.value.decode()
        try:
            await session.send(f"topic:b{tag}", f"b-{v}".encode(), partition=pb)
            await session.send(f"queue:c{tag}", f"c-{v}".encode(), partition=pc)
            await session.send(f"topic:d{tag}", f"d-{v}".encode(), partition=pc)
            await session.commit()
        except ClientError:  # rolled back (or refused): nothing of it happened; again
            await session.rollback()
            with contextlib.suppress(Exception):
                await source.close()
            source = None
            continue
        committed.append(v)
    await session.close()


async def send_to_a(cluster: LocalCluster, pa: str, n: int, tag: str = "") -> list[str]:
    """``n`` acknowledged messages in ``queue:a<tag>`` on ``pa``; their values."""
    producer = await Producer.connect(cluster.bootstrap, partition_type="fixed", partition=pa)
    sent = [f"t{i}" for i in range(n)]
    for v in sent:
        await producer.send(f"queue:a{tag}", v.encode())
    await producer.close()
    return sent


async def judge(
    cluster: LocalCluster, pb: str, pc: str, sent: list[str], committed: list[str], tag: str = ""
) -> None:
    """Every acknowledged message transferred exactly once, whole, exactly the committed ones:
    one record each in ``topic:b``, ``queue:c`` and ``topic:d``, and ``queue:a`` left empty."""
    assert sorted(committed) == sorted(sent), (committed, sent)
    for partition, name in ((pb, "b"), (pc, "c"), (pc, "d")):
        dest = f"{'queue' if name == 'c' else 'topic'}:{name}{tag}"
        found = await stored(cluster, partition, dest)
        assert sorted(found) == sorted(f"{name}-{v}" for v in sent), (dest, found)
    left = await Consumer.connect(cluster.bootstrap, f"queue:a{tag}")
    with pytest.raises(TimeoutError):
        extra = await left.receive(timeout=3)
        raise AssertionError(f"{extra.value!r} left in queue:a{tag} after its transfer committed")
    await left.close()
