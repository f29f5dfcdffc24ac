"""Transacted sessions on real ``hybridmq local`` processes: a transfer (one message consumed from
``queue:a``, one produced to ``topic:b`` and one to ``queue:c``, on partitions whose primaries are
three different MMs) takes effect whole or not at all; a rollback gives the consumed message back
to other consumers and its sends are never delivered; misuse gets clear errors.

The checks read what plain consumers receive (``Consumer``), not the session's own books."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from tx_workload import drain, spread

from hybridmq.client import ClientError, Consumer, Producer, Session, TransactionRolledBack
from hybridmq.local.runner import LocalCluster


@pytest.fixture(scope="module")
def three(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("tx"), mms=3, replicas=2, fixed=3, on_demand_per_mm=0) as c:
        c.wait_in_sync()
        yield c


async def test_a_transfer_commits_whole_and_a_rollback_gives_back_and_drops(three: LocalCluster) -> None:
    pa, pb, pc = spread(three)
    producer = await Producer.connect(three.bootstrap, partition_type="fixed", partition=pa)
    for i in range(2):
        await producer.send("queue:a1", f"m{i}".encode())
    watch_b = await Consumer.connect(three.bootstrap, "topic:b1")
    session = await Session.connect(three.bootstrap, transacted=True)
    source = await session.consumer("queue:a1")

    first = await session.receive(source, timeout=10)
    await session.send("topic:b1", b"b-" + first.value, partition=pb)
    await session.send("queue:c1", b"c-" + first.value, partition=pc)
    await session.commit()

    second = await session.receive(source, timeout=10)
    await session.send("topic:b1", b"b-" + second.value, partition=pb)
    await session.send("queue:c1", b"c-" + second.value, partition=pc)
    await session.rollback()  # second goes back; its sends are dropped
    await source.close()  # another consumer takes it

    other = await Consumer.connect(three.bootstrap, "queue:a1", auto_ack=False)
    again = await other.receive(timeout=10)
    # (the rollback's NACK may have handed it to ``source`` again before it closed: 2 or 3)
    assert again.value == second.value and again.redelivered and again.delivery_count >= 2
    other.ack(again)
    await other.commit()
    watch_c = await Consumer.connect(three.bootstrap, "queue:c1")
    assert await drain(watch_c) == ["c-" + first.value.decode()]
    assert await drain(watch_b) == ["b-" + first.value.decode()]
    assert await drain(other) == []  # first was acknowledged by the commit
    for c in (watch_b, watch_c, other):
        await c.close()
    await producer.close()
    await session.close()


async def test_misuse_is_refused_clearly_and_loses_nothing(three: LocalCluster) -> None:
    pa, _, _ = spread(three)
    plain = await Session.connect(three.bootstrap)
    with pytest.raises(ClientError, match=r"commit\(\) on a non-transacted session"):
        await plain.commit()
    await plain.send("queue:plain1", b"at once", partition=pa)  # a transaction of one
    check = await Consumer.connect(three.bootstrap, "queue:plain1")
    assert await drain(check) == ["at once"]
    await check.close()
    await plain.close()

    small = await Session.connect(three.bootstrap, transacted=True, max_records=2)
    await small.send("queue:lim1", b"1", partition=pa)
    await small.send("queue:lim1", b"2", partition=pa)
    with pytest.raises(ClientError, match="at most 2 messages"):
        await small.send("queue:lim1", b"3", partition=pa)
    await small.commit()  # what it held is kept
    check = await Consumer.connect(three.bootstrap, "queue:lim1")
    assert await drain(check) == ["1", "2"]
    await check.close()

    # A commit the broker refuses: the session says so until it is rolled back.
    await small.send("queue:lim1", b"lost", partition="no-such-partition")
    with pytest.raises(ClientError, match="no partition 'no-such-partition'"):
        await small.commit()
    with pytest.raises(ClientError, match=r"the last commit failed .* call rollback\(\)"):
        await small.send("queue:lim1", b"4", partition=pa)
    await small.rollback()
    await small.send("queue:lim1", b"4", partition=pa)
    await small.commit()
    check = await Consumer.connect(three.bootstrap, "queue:lim1")
    assert await drain(check) == ["4"]
    await check.close()
    with pytest.raises(ClientError, match="reserved"):
        await small.send("queue:_x", b"5", partition=pa)
        await small.commit()
    await small.close()
    with pytest.raises(ValueError, match="max_records must be"):
        await Session.connect(three.bootstrap, transacted=True, max_records=0)


async def test_a_commit_that_a_participant_refuses_rolls_back_everywhere(three: LocalCluster) -> None:
    """One participant refuses the prepare (the consumed message is no longer outstanding): the
    others, prepared already, roll back; nothing is delivered, the message comes again."""
    pa, pb, pc = spread(three)
    producer = await Producer.connect(three.bootstrap, partition_type="fixed", partition=pa)
    await producer.send("queue:a2", b"only")
    session = await Session.connect(three.bootstrap, transacted=True)
    source = await session.consumer("queue:a2")
    msg = await session.receive(source, timeout=10)
    await session.send("topic:b2", b"b", partition=pb)
    await session.send("queue:c2", b"c", partition=pc)
    source.nack(msg)  # given back behind the session's back: not outstanding any more
    await asyncio.sleep(0.3)
    with pytest.raises(TransactionRolledBack):
        await session.commit()
    await session.rollback()
    watch_c = await Consumer.connect(three.bootstrap, "queue:c2")
    assert await drain(watch_c) == []
    again = await session.receive(source, timeout=10)
    assert again.value == b"only" and again.redelivered
    await session.commit()
    await watch_c.close()
    await producer.close()
    await session.close()


async def test_one_partition_commits_in_one_phase_with_what_it_consumed(three: LocalCluster) -> None:
    """Consume and produce on one partition (one-phase): the consumed message is acknowledged
    with the commit, the produced ones appear once, a rolled back one never."""
    pa, _, _ = spread(three)
    producer = await Producer.connect(three.bootstrap, partition_type="fixed", partition=pa)
    await producer.send("queue:in3", b"job")
    session = await Session.connect(three.bootstrap, transacted=True)
    source = await session.consumer("queue:in3")
    job = await session.receive(source, timeout=10)
    await session.send("queue:out3", b"dropped", partition=pa)
    await session.rollback()
    job = await session.receive(source, timeout=10)
    assert job.redelivered
    await session.send("queue:out3", b"done-1", partition=pa)
    await session.send("queue:out3", b"done-2", partition=pa)
    await session.commit()
    await source.close()
    out = await Consumer.connect(three.bootstrap, "queue:out3")
    assert await drain(out) == ["done-1", "done-2"]
    rest = await Consumer.connect(three.bootstrap, "queue:in3")
    assert await drain(rest) == []
    for c in (out, rest):
        await c.close()
    await producer.close()
    await session.close()


async def test_transact_runs_the_work_again_after_a_rollback(three: LocalCluster) -> None:
    pa, pb, _ = spread(three)
    producer = await Producer.connect(three.bootstrap, partition_type="fixed", partition=pa)
    await producer.send("queue:a5", b"job")
    session = await Session.connect(three.bootstrap, transacted=True)
    source = await session.consumer("queue:a5")
    runs: list[int] = []

    async def work(s: Session) -> str:
        msg = await s.receive(source, timeout=10)
        runs.append(msg.delivery_count)
        await s.send("queue:b5", b"done-" + msg.value, partition=pb)
        if len(runs) == 1:  # the first run loses its message: its commit is rolled back
            source.nack(msg)
            await asyncio.sleep(0.3)
        return msg.value.decode()

    assert await session.transact(work) == "job"
    assert len(runs) == 2 and runs[1] > runs[0]
    out = await Consumer.connect(three.bootstrap, "queue:b5")
    assert await drain(out) == ["done-job"]
    await out.close()
    await producer.close()
    await session.close()


async def test_a_transaction_consumes_from_topic_subscriptions(three: LocalCluster) -> None:
    """A durable subscription and a subscription of the session's own: a commit acknowledges
    what was received (a later subscriber of the durable gets nothing), a rollback gives it back
    to the same subscription, flagged."""
    pa, pb, _ = spread(three)
    session = await Session.connect(three.bootstrap, transacted=True)
    durable = await session.consumer("topic:t7", durable="d7")
    own = await session.consumer("topic:t7")
    producer = await Producer.connect(three.bootstrap, partition_type="fixed", partition=pa)
    for v in (b"m0", b"m1"):
        await producer.send("topic:t7", v)

    first = await session.receive(durable, timeout=10)
    also = await session.receive(own, timeout=10)
    assert first.value == also.value == b"m0"
    await session.send("queue:o7", b"o-m0", partition=pb)
    await session.commit()

    second = await session.receive(durable, timeout=10)
    await session.send("queue:o7", b"dropped", partition=pb)
    await session.rollback()
    again = await session.receive(durable, timeout=10)
    assert again.value == second.value == b"m1" and again.redelivered
    await session.send("queue:o7", b"o-m1", partition=pb)
    await session.commit()
    await durable.close()

    out = await Consumer.connect(three.bootstrap, "queue:o7")
    assert await drain(out) == ["o-m0", "o-m1"]
    later = await Consumer.connect(three.bootstrap, "topic:t7", durable="d7")
    assert await drain(later) == []  # both acknowledged by their commits
    for c in (out, later):
        await c.close()
    await producer.close()
    await session.close()
