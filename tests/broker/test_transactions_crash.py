"""Transfers stay all-or-nothing when a CM or a participant MM is killed -9 mid-commit.

Each transfer consumes one message of ``queue:a`` and produces one record to ``topic:b`` and one
to ``queue:c``, three partitions led by three different MMs, so every commit is two-phase. The
CM pauses its first commit at a protocol step (``HYBRIDMQ_TX_PAUSE``, a test-only hook), the
test kills a process there and lets the CM go on. The transfer loop rolls back and does the work
again whenever a commit is rolled back.

The judge reads the partitions' logs by offset (``Fetcher``), not the session's books: every
message of ``queue:a`` ends up transferred exactly once (one record in ``topic:b`` and one in
``queue:c`` each, no partial transfer, no duplicate), exactly the transfers whose commit returned;
``queue:a`` is left empty.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from pathlib import Path

import pytest
from failover_workload import until
from tx_workload import paused_cluster, spread, stored

from hybridmq.client import ClientError, Consumer, Producer, Session, TransactionRolledBack
from hybridmq.local.runner import LocalCluster

N = 12


async def transfer_all(
    cluster: LocalCluster, pb: str, pc: str, committed: list[str], within_s: float
) -> None:
    """Transfer messages of ``queue:a`` until ``N`` were committed."""
    session = await Session.connect(cluster.bootstrap, transacted=True, give_up_after_s=60)
    source: Consumer | None = None
    deadline = time.monotonic() + within_s
    while len(committed) < N and time.monotonic() < deadline:
        try:
            if source is None:
                source = await session.consumer("queue:a")
            msg = await session.receive(source, timeout=1)
        except TimeoutError:
            continue
        except Exception:  # its CM went away: a new consumer once one is back
            source = None
            await asyncio.sleep(0.2)
            continue
        v = msg.value.decode()
        try:
            await session.send("topic:b", f"b-{v}".encode(), partition=pb)
            await session.send("queue:c", f"c-{v}".encode(), partition=pc)
            await session.commit()
        except ClientError:  # rolled back (or refused): nothing of it happened; again
            await session.rollback()
            with contextlib.suppress(Exception):
                await source.close()
            source = None
            continue
        committed.append(v)
    await session.close()


SCENARIOS = [
    ("before-prepare", "cm"),
    ("after-ready", "cm"),
    ("after-decision", "cm"),
    ("after-complete", "cm"),
    ("after-ready", "coordinator-mm"),  # the prepared coordinator partition's primary
    ("after-decision", "participant-mm"),  # a participant not told COMMIT_FINAL yet
]


@pytest.mark.parametrize(("step", "victim"), SCENARIOS)
async def test_a_transfer_is_all_or_nothing_under_kill_9(
    step: str, victim: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with paused_cluster(tmp_path, monkeypatch, step) as (cluster, pause_file):
        pa, pb, pc = spread(cluster)
        producer = await Producer.connect(cluster.bootstrap, partition_type="fixed", partition=pa)
        sent = [f"t{i}" for i in range(N)]
        for v in sent:
            await producer.send("queue:a", v.encode())
        await producer.close()
        committed: list[str] = []
        work = asyncio.create_task(transfer_all(cluster, pb, pc, committed, 120))
        await until(pause_file.exists, 30, f"the CM to pause {step}")
        if victim == "cm":
            cluster.kill_cm("cm-0", signal.SIGKILL)
            monkeypatch.delenv("HYBRIDMQ_TX_PAUSE")  # the CM started again does not pause
            cluster.start_cm("cm-0")
        else:
            partition = pa if victim == "coordinator-mm" else pc
            before = cluster.table()[partition]
            cluster.kill_mm(before.primary or "", signal.SIGKILL)
            await until(lambda: cluster.table()[partition].epoch > before.epoch, 30, "the failover")
        pause_file.unlink()  # the CM goes on (a killed one: its replacement resolves)
        await work
        assert sorted(committed) == sorted(sent), (committed, sent)

        in_b = await stored(cluster, pb, "topic:b")
        in_c = await stored(cluster, pc, "queue:c")
        assert sorted(in_b) == sorted(f"b-{v}" for v in sent), in_b
        assert sorted(in_c) == sorted(f"c-{v}" for v in sent), in_c
        left = await Consumer.connect(cluster.bootstrap, "queue:a")
        with pytest.raises(TimeoutError):
            extra = await left.receive(timeout=3)
            raise AssertionError(f"{extra.value!r} left in queue:a after its transfer committed")
        await left.close()


@pytest.mark.parametrize(("step", "committed"), [("after-ready", False), ("after-decision", True)])
async def test_a_dead_cms_transaction_is_resolved_without_its_client(
    step: str, committed: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CM and its client are both gone: the restarted CM's resolver rolls the transaction back
    (no decision yet: its consumed message comes again) or completes it (decided: its records
    appear, its message is consumed)."""
    with paused_cluster(tmp_path, monkeypatch, step) as (cluster, pause_file):
        pa, pb, pc = spread(cluster)
        producer = await Producer.connect(cluster.bootstrap, partition_type="fixed", partition=pa)
        await producer.send("queue:a", b"t0")
        await producer.close()
        session = await Session.connect(cluster.bootstrap, transacted=True, reconnect=False)
        source = await session.consumer("queue:a")
        msg = await session.receive(source, timeout=10)
        await session.send("topic:b", b"b-t0", partition=pb)
        await session.send("queue:c", b"c-t0", partition=pc)
        commit = asyncio.create_task(session.commit())
        await until(pause_file.exists, 30, f"the CM to pause {step}")
        cluster.kill_cm("cm-0", signal.SIGKILL)
        commit.cancel()  # the client is gone too: nobody asks for the outcome
        with contextlib.suppress(BaseException):
            await commit
        await session.close()
        monkeypatch.delenv("HYBRIDMQ_TX_PAUSE")
        cluster.start_cm("cm-0")
        pause_file.unlink()

        if committed:

            async def transferred() -> bool:
                b, c = await stored(cluster, pb, "topic:b"), await stored(cluster, pc, "queue:c")
                assert len(b) <= 1 and len(c) <= 1, (b, c)
                return b == ["b-t0"] and c == ["c-t0"]

            for _ in range(60):
                if await transferred():
                    break
                await asyncio.sleep(0.5)
            else:
                raise AssertionError("the decided transaction was not completed")
            left = await Consumer.connect(cluster.bootstrap, "queue:a")
            with pytest.raises(TimeoutError):
                extra = await left.receive(timeout=3)
                raise AssertionError(f"{extra.value!r} left in queue:a after its transfer committed")
        else:
            left = await Consumer.connect(cluster.bootstrap, "queue:a")
            again = await left.receive(timeout=30)
            assert again.value == msg.value and again.redelivered
            assert await stored(cluster, pb, "topic:b") == []
            assert await stored(cluster, pc, "queue:c") == []
        await left.close()


async def test_a_cm_refuses_more_open_transactions_than_its_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With one transaction committing (held at its first step) and a limit of one, another
    session's commit is refused at once, nothing of it done; it commits once the first is done."""
    with paused_cluster(tmp_path, monkeypatch, "before-prepare", replicas=2, HYBRIDMQ_TX_MAX_OPEN="1") as (
        cluster,
        pause_file,
    ):
        pa, pb, _ = spread(cluster)
        first = await Session.connect(cluster.bootstrap, transacted=True)
        await first.send("queue:lim", b"first", partition=pa)
        await first.send("queue:lim", b"first", partition=pb)
        held = asyncio.create_task(first.commit())
        await until(pause_file.exists, 30, "the first commit to pause")
        second = await Session.connect(cluster.bootstrap, transacted=True)
        await second.send("queue:lim", b"second", partition=pa)
        with pytest.raises(TransactionRolledBack, match="too many transactions committing on this CM"):
            await second.commit()
        pause_file.unlink()
        await held
        await second.rollback()
        await second.send("queue:lim", b"second", partition=pa)
        await second.commit()
        values = sorted((await stored(cluster, pa, "queue:lim")) + (await stored(cluster, pb, "queue:lim")))
        assert values == ["first", "first", "second"]
        await first.close()
        await second.close()
