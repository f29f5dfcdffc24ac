"""Every produce a partition host took is answered, whatever stops the host.

A CM forwards a producer's PRODUCE to the partition's primary and relays the MM's answer; while its
link to that MM stays up nothing else ever answers the producer. So a host that stops serving (a
demotion halts it, a deleted partition stops it) must answer each request it holds: the ones still
queued and the ones whose commit was under way. A commit cut short used to drop its answers, and a
producer moved off a drained on-demand partition waited in ``close()`` for ever.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import msgpack
from host_wire import Wire, decoded, until

from hybridmq.api.frames import ErrorCode, FrameType
from hybridmq.broker.log.config import LogConfig
from hybridmq.broker.mm.partition import PartitionHost
from hybridmq.broker.mm.storage import PartitionStorage
from hybridmq.broker.replication import PartitionPrimary

QUEUE = "queue:answered"


def _produce(corr: int) -> dict[str, Any]:
    records = msgpack.packb([[b"v%d" % corr, None, {}, 0]], use_bin_type=True)
    return decoded({"t": FrameType.PRODUCE, "c": corr, "p": "p0", "d": QUEUE, "n": 1, "b": records})


def _host_waiting_for_a_backup(tmp_path: Path) -> tuple[PartitionHost, PartitionStorage]:
    """A primary whose backup is in sync but never fetches: each commit waits (up to its timeout)."""
    storage = PartitionStorage.open(tmp_path / "p", LogConfig(fsync="never"))
    leader = PartitionPrimary(
        storage.log,
        partition="p",
        replica_id="mm-0",
        epoch=0,
        replicas=("mm-0", "mm-1"),
        in_sync=("mm-0", "mm-1"),
        min_in_sync=2,
    )
    return PartitionHost("p", storage, leader), storage


def _answers(wire: Wire) -> dict[int, dict[str, Any]]:
    return {int(f["r"]): f for f in wire.frames if "r" in f}


async def test_a_host_halted_mid_commit_answers_what_it_was_committing(tmp_path: Path) -> None:
    host, storage = _host_waiting_for_a_backup(tmp_path)
    host.start()
    wire = Wire()
    try:
        host.enqueue_produce(wire, _produce(1))
        await until(lambda: storage.end_offset > 0, "the record appended, its commit under way")
        await asyncio.sleep(0.1)
        assert not wire.frames, "acknowledged without the in-sync backup"
        # Demoted without the leader's close (which fails the replication wait): the halt itself
        # cuts the commit short.
        await host.halt()
        host.enqueue_produce(wire, _produce(2))  # a late arrival, after the halt: no worker any more
        await host.stop()
    finally:
        storage.close()
    answers = _answers(wire)
    assert set(answers) == {1, 2}, wire.frames
    assert all(a["t"] == FrameType.ERROR for a in answers.values()), answers
    assert answers[1]["code"] == ErrorCode.NOT_PRIMARY, answers[1]  # the producer resends elsewhere
    assert answers[2]["code"] == ErrorCode.MM_UNAVAILABLE, answers[2]


async def test_a_stopped_host_answers_its_queued_produces(tmp_path: Path) -> None:
    host, storage = _host_waiting_for_a_backup(tmp_path)
    wire = Wire()
    try:
        for corr in range(1, 4):
            host.enqueue_produce(wire, _produce(corr))  # never started: nothing takes them
        await host.stop()
    finally:
        storage.close()
    answers = _answers(wire)
    assert sorted(answers) == [1, 2, 3], wire.frames
    assert {a["code"] for a in answers.values()} == {ErrorCode.MM_UNAVAILABLE}, answers
    assert storage.end_offset == 0, "a refused produce was stored"
