"""kill -9 of an MM in the middle of a produce stream, a torn tail, then a restart."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from pathlib import Path

from hybridmq.client import ClientError, Consumer, Message, Producer
from hybridmq.local.runner import LocalCluster


async def test_kill9_mid_stream_keeps_every_acked_message_in_order(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, mms=1, fixed_per_mm=1, on_demand_per_mm=0, fsync="group")
    with cluster:
        producer = await Producer.connect(
            cluster.bootstrap, partition_type="fixed", key="crash", linger_ms=1, delivery_timeout=0
        )
        acked: list[tuple[int, int]] = []  # (sequence, offset)
        failed = 0

        async def send(i: int) -> None:
            nonlocal failed
            try:
                ack = await producer.send("queue:crash", i.to_bytes(8, "big") + b"p" * 92)
                acked.append((i, ack.offset))
            except (ClientError, ConnectionError):
                failed += 1

        tasks: list[asyncio.Task[None]] = []
        i = 0
        loop = asyncio.get_running_loop()
        kill_at = loop.time() + 1.0
        rounds_after_kill = 0
        # Sends go on for 0.5 s and at least 3 rounds after the kill: on a loaded machine one round
        # took longer than 0.5 s, and every send was acknowledged before the kill (none in flight).
        while rounds_after_kill < 3 or loop.time() < kill_at + 0.5:
            if not producer.is_blocked:
                for _ in range(200):
                    tasks.append(asyncio.create_task(send(i)))
                    i += 1
            if cluster.procs["mm-0"].poll() is not None:
                rounds_after_kill += 1
            elif loop.time() >= kill_at:
                cluster.kill_mm("mm-0", signal.SIGKILL)  # in the middle of the stream
            await asyncio.sleep(0.002)
        await asyncio.gather(*tasks)
        assert acked and failed, (len(acked), failed)

        # A torn write at the end of the active segment (what a crash mid-write leaves behind).
        segments = sorted((tmp_path / "mm-0" / "fixed-0-0").glob("*.log"))
        last = segments[-1]
        size_before = last.stat().st_size
        intact = last.read_bytes()
        with last.open("ab") as f:
            f.write(b"\x00\x00\x00\x00\x00\x00\x10\x00\x00\x00\x01\x00torn-tail-garbage")

        cluster.start_mm("mm-0")
        consumer = await Consumer.connect(cluster.bootstrap, "queue:crash", window=100_000)
        got: list[Message] = []
        acked_seqs = {s for s, _ in acked}
        missing = set(acked_seqs)
        while True:
            try:
                # The restarted MM first reads its log back (in the background) and a loaded machine
                # pauses for seconds: wait long while an acknowledged message is still to come; once
                # all came, 3 s of quiet means the rest (stored but not acknowledged) came too.
                m = await consumer.receive(timeout=30 if missing else 3)
            except TimeoutError:
                break
            assert isinstance(m, Message)
            got.append(m)
            missing.discard(int.from_bytes(m.value[:8], "big"))
        seqs = [int.from_bytes(m.value[:8], "big") for m in got]
        offsets = [m.offset for m in got]
        assert acked_seqs <= set(seqs), f"lost {len(acked_seqs - set(seqs))} acknowledged messages"
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
        assert seqs == sorted(seqs), "order broken"
        for s, off in acked:  # each acked message sits at the offset its ack named
            assert got[offsets.index(off)].value[:8] == s.to_bytes(8, "big")
        assert all(m.value[8:] == b"p" * 92 for m in got)  # nothing from the torn tail
        assert b"torn-tail-garbage" not in last.read_bytes()  # recovery truncated the torn tail
        assert last.read_bytes()[:size_before] == intact  # everything before it untouched
        await consumer.close()
        await producer.close()


async def test_producer_resends_across_an_mm_restart_without_loss_or_duplicates(tmp_path: Path) -> None:
    """kill -9 and restart of the MM while a producer streams: its unacknowledged batches are resent
    (same producer id and sequence) and every message ends up stored exactly once, in order."""
    cluster = LocalCluster(tmp_path, mms=1, fixed_per_mm=1, on_demand_per_mm=0)
    with cluster:
        producer = await Producer.connect(cluster.bootstrap, partition_type="fixed", linger_ms=1)
        total = 20000
        loop = asyncio.get_running_loop()

        async def stream() -> list[int]:
            offsets = []
            for start in range(0, total, 200):
                acks = await asyncio.gather(
                    *(producer.send("queue:resend", i.to_bytes(8, "big")) for i in range(start, start + 200))
                )
                offsets += [a.offset for a in acks]
                await asyncio.sleep(0.01)
            return offsets

        task = asyncio.create_task(stream())
        await asyncio.sleep(0.5)
        assert not task.done()  # the MM dies mid-stream
        cluster.kill_mm("mm-0", signal.SIGKILL)
        await asyncio.sleep(0.5)
        cluster.start_mm("mm-0")
        offsets = await asyncio.wait_for(task, 60)
        assert len(offsets) == total and offsets == sorted(offsets)
        consumer = await Consumer.connect(cluster.bootstrap, "queue:resend", window=100_000)
        seqs: list[int] = []
        deadline = loop.time() + 30
        while len(seqs) < total and loop.time() < deadline:
            m = await consumer.receive(timeout=10)
            assert isinstance(m, Message)
            seqs.append(int.from_bytes(m.value, "big"))
        assert seqs == list(range(total))  # nothing lost, nothing twice, in order
        with contextlib.suppress(TimeoutError):
            extra = await consumer.receive(timeout=1)
            raise AssertionError(f"duplicate delivered: {extra}")
        await consumer.close()
        await producer.close()
