"""Retention of consumed segments (cursors survive it and a restart) and stale-epoch fencing."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

import msgpack

from hybridmq.api.frames import PROTOCOL_VERSION, ErrorCode, FrameType
from hybridmq.client import Consumer, Message, Producer
from hybridmq.local.runner import LocalCluster
from hybridmq.protocol import open_connection


async def test_consumed_segments_are_deleted_and_cursors_survive(
    tmp_path: Path, retention_cluster: LocalCluster
) -> None:
    cluster = retention_cluster
    pdir = tmp_path / "mm-0" / "fixed-0-0"
    async with await Producer.connect(cluster.bootstrap, partition_type="fixed") as p:
        for i in range(2000):
            p.try_send("queue:ret", i.to_bytes(4, "big") + b"r" * 500)
            if i % 100 == 0:
                await p.flush()
    assert len(list(pdir.glob("*.log"))) > 10
    c = await Consumer.connect(cluster.bootstrap, "queue:ret")
    for i in range(2000):
        m = await c.receive(timeout=10)
        assert isinstance(m, Message) and m.value[:4] == i.to_bytes(4, "big")
    await c.close()
    for _ in range(50):
        await asyncio.sleep(0.2)
        if len(list(pdir.glob("*.log"))) <= 2:
            break
    assert len(list(pdir.glob("*.log"))) <= 2, sorted(pdir.glob("*.log"))

    cluster.kill_mm("mm-0", signal.SIGKILL)
    cluster.start_mm("mm-0")
    cluster.wait_linked()
    async with await Producer.connect(cluster.bootstrap, partition_type="fixed") as p:
        await p.send("queue:ret", b"after-restart")
    c = await Consumer.connect(cluster.bootstrap, "queue:ret")
    m = await c.receive(timeout=10)  # nothing consumed comes back; the new message does
    assert isinstance(m, Message) and m.value == b"after-restart"
    await c.close()


async def test_mm_refuses_a_stale_epoch(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, mms=1, fixed_per_mm=1, on_demand_per_mm=0)
    with cluster:
        data = json.loads(cluster.assignments.read_text())
        data["partitions"][0]["epoch"] = 3
        cluster.assignments.write_text(json.dumps(data))
        await asyncio.sleep(1.5)  # the MM's FileAssignmentSource picks up epoch 3
        conn, _ = await open_connection(
            "127.0.0.1",
            cluster.mm_ports["mm-0"],
            {
                "t": FrameType.HELLO,
                "v": PROTOCOL_VERSION,
                "id": "test",
                "role": "cm",
                "password": cluster.cluster_secret,
            },
        )
        runner = asyncio.create_task(conn.run())
        blob = msgpack.packb([[b"v", None, None, 0]])
        frame = {"t": FrameType.PRODUCE, "p": "fixed-0-0", "d": "topic:e", "n": 1, "b": blob, "f": 0, "x": 0}
        try:
            await conn.request({**frame, "e": 2})
        except Exception as exc:
            assert getattr(exc, "code", None) == ErrorCode.STALE_EPOCH
        else:
            raise AssertionError("stale epoch accepted")
        ack = await conn.request({**frame, "e": 3})
        assert ack["t"] == FrameType.PRODUCE_ACK and ack["o"] == 0
        conn.close()
        runner.cancel()


async def test_idempotent_resend_is_stored_once(cluster: LocalCluster) -> None:
    """A batch resent with the same (pid, producer epoch, sequence) is acked with its first offsets."""
    from hybridmq.client.connection import connect

    conn, _ = await connect(cluster.bootstrap)
    runner = asyncio.create_task(conn.run())
    opened = await conn.request({"t": FrameType.OPEN_PRODUCER, "ptype": "fixed", "key": "idem"})
    blob = msgpack.packb([[b"once", None, None, 0]])
    frame = {
        "t": FrameType.PRODUCE,
        "p": opened["partition"],
        "d": "queue:idem",
        "n": 1,
        "b": blob,
        "f": 0,
        "x": 0,
        "pid": opened["pid"],
        "pep": 0,
        "seq": 0,
    }
    first = await conn.request(dict(frame))
    again = await conn.request(dict(frame))
    assert again["o"] == first["o"] and again.get("dup") is True
    c = await Consumer.connect(cluster.bootstrap, "queue:idem")
    m = await c.receive(timeout=10)
    assert isinstance(m, Message) and m.value == b"once"
    try:
        await c.receive(timeout=1)
        raise AssertionError("duplicate delivered")
    except TimeoutError:
        pass
    await c.close()
    conn.close()
    runner.cancel()
