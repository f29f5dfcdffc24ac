"""What the MM hands to consumers is only what is committed: ``batch_at`` never answers with a
batch past the visible end, whether it finds it in the recent-batch cache or reads it from disk.

It once did when the offset asked for was a control record (cursor snapshot) just below the
visible end and the next data batch was appended but not yet replicated: a consumer got a record
that was not committed, and when that record was given back (its CM hung) it was taken for
deleted, acknowledged unseen and lost. Checked here against a list of the appended batches."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgpack
import pytest
from host_wire import Wire, decoded, partition_host, store, store_control, until
from hypothesis import given, settings
from hypothesis import strategies as st

from hybridmq.api.frames import FrameType
from hybridmq.broker.destinations.delivery import ConsumerLink
from hybridmq.broker.log.config import LogConfig
from hybridmq.broker.log.control import CursorCommit
from hybridmq.broker.mm.storage import PartitionStorage

# each step appends one batch: a data batch of n records, or a control batch
steps = st.lists(st.one_of(st.integers(1, 3), st.just("control")), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(steps=steps, visible_batches=st.integers(0, 12), cache_bytes=st.sampled_from([1, 1 << 20]))
def test_batch_at_answers_only_with_visible_batches(
    tmp_path_factory: pytest.TempPathFactory, steps: list[int | str], visible_batches: int, cache_bytes: int
) -> None:
    path = tmp_path_factory.mktemp("p")
    storage = PartitionStorage.open(path, LogConfig(fsync="never"), cache_bytes=cache_bytes)
    try:
        appended: list[tuple[int, int, bool]] = []  # (base, next offset, control)
        for step in steps:
            base = storage.end_offset
            if step == "control":
                store_control(storage, [CursorCommit("q:x", base)])
            else:
                store(storage, "topic:t", int(step), msgpack.packb([[b"v"]] * int(step)))
            appended.append((base, storage.end_offset, step == "control"))
        # the visible end lies at a batch boundary: what a commit covers
        visible = appended[min(visible_batches, len(appended)) - 1][1] if visible_batches else 0
        storage.visible_end = visible
        for offset in range(storage.end_offset + 1):
            batch = storage.batch_at(offset)
            # control batches (cursors) may be passed over: readers skip them anyway
            data = [(b, e) for b, e, control in appended if e > offset and e <= visible and not control]
            if batch is None:
                assert not data, f"offset {offset}: the visible batch {data[0]} was not found"
                continue
            assert batch.next_offset <= visible, (
                f"offset {offset}: got the batch {batch.base}..{batch.next_offset - 1}, "
                f"past the visible end {visible}"
            )
            assert batch.next_offset > offset
            skipped = [(b, e) for b, e in data if b < batch.base]
            assert not skipped, f"offset {offset}: the data batch {skipped[0]} was passed over"
    finally:
        storage.close()


async def test_a_record_not_committed_is_neither_delivered_nor_lost_when_given_back(tmp_path: Path) -> None:
    """A durable subscriber's CM hangs and its consumer subscribes again through another CM while
    the next record, behind a cursor snapshot, is appended but not committed yet."""
    host = partition_host(tmp_path)
    host.start()
    producer, hung, fresh = Wire(), Wire(), Wire()
    first = ConsumerLink(hung, "old", window=100, window_bytes=1 << 20)
    second = ConsumerLink(fresh, "new", window=100, window_bytes=1 << 20)
    try:
        host.attach(first, "topic:t", "exact", "sub")
        frame = decoded(
            {"t": FrameType.PRODUCE, "c": 1, "p": "p0", "d": "topic:t", "n": 1, "b": msgpack.packb([[b"a"]])}
        )
        host.enqueue_produce(producer, frame)
        await until(lambda: producer.frames, "the first record acknowledged")
        host.pump()
        await until(lambda: hung.deliveries(), "the first record delivered")
        assert host.ack(first, int(hung.deliveries()[0]["o"]), attempt=1)
        await until(lambda: host.storage.visible_end == host.storage.end_offset, "the cursor committed")
        assert host.storage.batch_at(host.storage.visible_end - 1).control  # type: ignore[union-attr]

        # the next record is in the log, its replication (commit) still under way
        store(host.storage, "topic:t", 1, msgpack.packb([[b"b"]]))
        host.pump()
        await asyncio.sleep(0.05)
        assert len(hung.deliveries()) == 1, "a record was handed out before it was committed"

        host.attach(second, "topic:t", "exact", "sub")  # the consumer is back through another CM
        host.pump()
        await host.commit(host.storage.end_offset)  # the record is committed now
        host.pump()
        await until(lambda: fresh.deliveries(), "the record delivered once committed")
        assert [msgpack.unpackb(f["b"])[0][0] for f in fresh.deliveries()] == [b"b"]
    finally:
        await host.stop()
        host.storage.close()
