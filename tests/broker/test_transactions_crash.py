"""Transfers stay all-or-nothing when their CM is killed -9 mid-commit (participant MMs killed at
each step: ``test_transactions_participants.py``).

Each transfer (``tx_workload``) consumes one message of ``queue:a`` and produces records to
``topic:b`` and ``queue:c`` / ``topic:d``, three partitions led by three different MMs, so every
commit is two-phase. The CM pauses its first commit at a protocol step (``HYBRIDMQ_TX_PAUSE``, a
test-only hook), the test kills it there and starts it again. The transfer loop rolls back and
does the work again whenever a commit is rolled back.

The judge reads the partitions' logs by offset (``Fetcher``), not the session's books: every
message of ``queue:a`` ends up transferred exactly once (one record each in ``topic:b``,
``queue:c`` and ``topic:d``, no partial transfer, no duplicate), exactly the transfers whose
commit returned; ``queue:a`` is left empty.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from pathlib import Path

import pytest
from failover_workload import until
from tx_workload import judge, paused_cluster, send_to_a, spread, stored, transfer_all

from hybridmq.client import Consumer, Producer, Session, TransactionRolledBack

N = 12


@pytest.mark.parametrize("step", ["before-prepare", "after-ready", "after-decision", "after-complete"])
async def test_a_transfer_is_all_or_nothing_under_kill_9_of_its_cm(
    step: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with paused_cluster(tmp_path, monkeypatch, step) as (cluster, pause_file):
        pa, pb, pc = spread(cluster)
        sent = await send_to_a(cluster, pa, N)
        committed: list[str] = []
        work = asyncio.create_task(transfer_all(cluster, pb, pc, committed, N, 120))
        await until(pause_file.exists, 30, f"the CM to pause {step}")
        cluster.kill_cm("cm-0", signal.SIGKILL)
        monkeypatch.delenv("HYBRIDMQ_TX_PAUSE")  # the CM started again does not pause
        cluster.start_cm("cm-0")
        pause_file.unlink()  # (its replacement resolves)
        await work
        await judge(cluster, pb, pc, sent, committed)


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
