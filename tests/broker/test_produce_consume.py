"""Topics, queues, wildcard and durable subscriptions through real CM and MM processes."""

from __future__ import annotations

import asyncio

from hybridmq.client import Consumer, Message, Producer, admin
from hybridmq.local.runner import LocalCluster
from receiving import receive_n


async def test_topic_every_subscription_gets_every_message(cluster: LocalCluster) -> None:
    a = await Consumer.connect(cluster.bootstrap, "topic:news")
    b = await Consumer.connect(cluster.bootstrap, "news")  # bare name = topic
    async with await Producer.connect(cluster.bootstrap, partition_type="fixed", key="k1") as p:
        acks = [await p.send("news", f"n{i}".encode()) for i in range(50)]
    assert [x.offset for x in acks] == sorted(x.offset for x in acks)
    assert len({x.partition for x in acks}) == 1 and acks[0].partition.startswith("fixed-")
    for c in (a, b):
        got = await receive_n(c, 50)
        assert [m.value for m in got] == [f"n{i}".encode() for i in range(50)]
        assert {m.id for m in got} == {f"{x.partition}:{x.offset}" for x in acks}
        await c.close()


async def test_topic_from_many_producers_and_partitions(cluster: LocalCluster) -> None:
    c = await Consumer.connect(cluster.bootstrap, "topic:fanin")
    producers = [await Producer.connect(cluster.bootstrap) for _ in range(4)]
    assert len({p.partition for p in producers}) >= 2  # on-demand: round robin over partitions/MMs
    await asyncio.gather(
        *(p.send("topic:fanin", f"{i}-{j}".encode()) for i, p in enumerate(producers) for j in range(25))
    )
    got = await receive_n(c, 100)
    assert sorted(m.value for m in got) == sorted(f"{i}-{j}".encode() for i in range(4) for j in range(25))
    for i in range(4):  # per-producer order holds
        mine = [m.value for m in got if m.value.startswith(f"{i}-".encode())]
        assert mine == [f"{i}-{j}".encode() for j in range(25)]
    for p in producers:
        await p.close()
    await c.close()


async def test_queue_competing_consumers_each_message_once(cluster: LocalCluster) -> None:
    c1 = await Consumer.connect(cluster.bootstrap, "queue:jobs", window=4)
    c2 = await Consumer.connect(cluster.bootstrap, "queue:jobs", window=4)
    async with await Producer.connect(cluster.bootstrap, linger_ms=0) as p:
        for i in range(40):
            await p.send("queue:jobs", f"j{i}".encode())
    seen: list[bytes] = []
    counts = [0, 0]

    async def take(c: Consumer, idx: int) -> None:
        while True:
            try:
                m = await c.receive(timeout=1.5)
            except TimeoutError:
                return
            assert isinstance(m, Message)
            seen.append(m.value)
            counts[idx] += 1

    await asyncio.gather(take(c1, 0), take(c2, 1))
    assert sorted(seen) == sorted(f"j{i}".encode() for i in range(40))
    assert counts[0] > 0 and counts[1] > 0
    await c1.close()
    await c2.close()


async def test_queue_keeps_messages_until_a_consumer_comes(cluster: LocalCluster) -> None:
    async with await Producer.connect(cluster.bootstrap) as p:
        await p.send("queue:later", b"waiting")
    c = await Consumer.connect(cluster.bootstrap, "queue:later")
    m = await c.receive(timeout=10)
    assert isinstance(m, Message) and m.value == b"waiting"
    await c.close()


async def test_wildcard_glob_and_regex_pick_up_new_destinations(cluster: LocalCluster) -> None:
    g = await Consumer.connect(cluster.bootstrap, "topic:metrics.*", match="glob")
    r = await Consumer.connect(cluster.bootstrap, r"topic:metrics\.(cpu|disk)", match="regex")
    async with await Producer.connect(cluster.bootstrap) as p:
        # destinations that did not exist when the subscriptions were made
        for dest in ("topic:metrics.cpu", "topic:metrics.disk", "topic:metrics.net", "topic:other"):
            await p.send(dest, dest.encode())
    got_g = {m.destination for m in await receive_n(g, 3)}
    got_r = {m.destination for m in await receive_n(r, 2)}
    assert got_g == {"topic:metrics.cpu", "topic:metrics.disk", "topic:metrics.net"}
    assert got_r == {"topic:metrics.cpu", "topic:metrics.disk"}
    await g.close()
    await r.close()


async def test_wildcard_queue_consumer(cluster: LocalCluster) -> None:
    c = await Consumer.connect(cluster.bootstrap, "queue:tasks.*", match="glob")
    async with await Producer.connect(cluster.bootstrap) as p:
        await p.send("queue:tasks.a", b"a")
        await p.send("queue:tasks.b", b"b")
    got = await receive_n(c, 2)
    assert sorted(m.value for m in got) == [b"a", b"b"]
    await c.close()


async def test_durable_subscription_resumes_after_reconnect(cluster: LocalCluster) -> None:
    c = await Consumer.connect(cluster.bootstrap, "topic:audit", durable="auditor")
    async with await Producer.connect(cluster.bootstrap, partition_type="fixed", key="audit") as p:
        await p.send("topic:audit", b"a1")
        assert [m.value for m in await receive_n(c, 1)] == [b"a1"]
        await c.close()
        await asyncio.sleep(0.3)
        await p.send("topic:audit", b"a2")  # sent while the durable subscriber is away
        await p.send("topic:audit", b"a3")
    c = await Consumer.connect(cluster.bootstrap, "topic:audit", durable="auditor")
    assert [m.value for m in await receive_n(c, 2)] == [b"a2", b"a3"]
    await c.close()


async def test_directory_and_admin_composite_reply(cluster: LocalCluster) -> None:
    from hybridmq.api.frames import FrameType
    from hybridmq.client.connection import connect

    conn, hello = await connect(cluster.bootstrap, app="dashboard")
    assert hello["session"].startswith("cm-0-")
    runner = asyncio.create_task(conn.run())
    d = await conn.request({"t": FrameType.DIRECTORY})
    assert {b["name"] for b in d["brokers"]} == {"cm-0", "mm-0", "mm-1"}
    assert d["applications"]["cm-0"]["dashboard"] == 1  # the application table
    reply = await conn.request({"t": FrameType.ADMIN, "cmd": "mm-stats"})
    assert len(reply["parts"]) == 2  # one part per MM, announced with "of"
    assert {p["node"] for p in reply["parts"]} == {"mm-0", "mm-1"}
    sessions = await admin(cluster.bootstrap, "sessions")
    assert any(s["client"] and s["user"] == "anonymous" for s in sessions)
    conn.close()
    runner.cancel()


async def test_processes_publish_log_events_to_LOG(cluster: LocalCluster) -> None:
    import json

    logs = await Consumer.connect(cluster.bootstrap, "topic:_LOG")
    for port in (cluster.cm_port, cluster.mm_ports["mm-1"]):  # both log a protocol-error warning
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"\x00\x00\x00\x03\xc1\xc1\xc1")
        await writer.drain()
        writer.close()
    nodes = set()
    while nodes != {"cm-0", "mm-1"}:
        m = await logs.receive(timeout=10)
        assert isinstance(m, Message) and m.destination == "topic:_LOG"
        event = json.loads(m.value)
        if "protocol error" in event["message"]:
            nodes.add(event["node"])
    await logs.close()
