"""kill -9 of an on-demand partition's primary under load: its producers move exactly once, in order.

The producers whose partition the victim leads are refused by it (Draining) and move to another
on-demand partition. Before resending they ask the old partition's new primary (the replica that
took it over) which of their in-flight batches it already stores (FETCH_META ``pids``, from the
replicated producer-sequence table) and complete those as acknowledged. Checked over every
partition with ``Fetcher`` (what the audit reads): no acknowledged message lost, none stored twice
(by value and by ``(producer id, sequence)``), per-producer order by sequence within each partition.
"""

from __future__ import annotations

import asyncio
import signal
from collections import defaultdict
from pathlib import Path

import pytest
from failover_workload import ProducerLoad, stop_all, until

from hybridmq.api.assignment import PartitionState
from hybridmq.client import Fetcher, Producer
from hybridmq.local.runner import LocalCluster
from reading import read_batches

DEST = "queue:move"  # no consumer: the draining partition keeps a backlog and stays readable


async def _read_all(cluster: LocalCluster) -> dict[str, list[tuple[int, str, str, int]]]:
    """Per partition: (offset, value, producer id, sequence) of every stored record of DEST."""
    fetcher = await Fetcher.connect(cluster.bootstrap, retry_s=30)
    try:
        # wait until every partition's high watermark covers its log (the taken-over partition's
        # in-sync set shrinks to the survivor first)
        for _ in range(150):
            metas = await fetcher.partitions()
            if all(m.end_offset >= m.log_end_offset for m in metas):
                break
            await asyncio.sleep(0.1)
        out: dict[str, list[tuple[int, str, str, int]]] = {}
        for meta in metas:
            rows: list[tuple[int, str, str, int]] = []
            async for b, skip in read_batches(fetcher, meta):
                if b.control or b.destination != DEST:
                    continue
                for i in range(skip, len(b.records)):
                    seq = b.sequence(i)
                    value = bytes(b.records[i][0]).decode()
                    rows.append((b.base_offset + i, value, str(b.producer), -1 if seq is None else seq))
            out[meta.name] = rows
        return out
    finally:
        await fetcher.close()


async def _close(producer: Producer) -> None:
    """``close()`` waits for every outstanding send: bounded here, so that a send that never
    completes fails the test with the producer's state instead of hanging until pytest's timeout."""
    try:
        async with asyncio.timeout(60):
            await producer.close()
    except TimeoutError:
        sender, move = producer._sender, producer._move  # diagnostics only: the client's own state
        state = {
            "partition": sender.partition,
            "outstanding": len(sender.outstanding),
            "last sent to": sorted(set(sender.chains.values())),
            "held": None if sender.held is None else len(sender.held),
            "after_ack": len(sender._after_ack),
            "reconnect_parked": len(sender._reconnect_parked),
            "move parked": {k: len(v) for k, v in move._parked.items()} if move else None,
            "move tasks": sorted(move._tasks) if move else None,
        }
        raise AssertionError(f"close() still waiting after 60 s: {state}") from None


# Alone: 4 s a run on a quiet machine, 70 s beside the suite, where the killed MM's partitions
# outlasted the fetcher's wait for their offsets.
@pytest.mark.solo
@pytest.mark.parametrize("run", range(3))
async def test_on_demand_move_is_exactly_once_and_ordered(tmp_path: Path, run: int) -> None:
    cluster = LocalCluster(tmp_path, mms=3, replicas=2, fixed=0, on_demand_per_mm=1, log_level="INFO")
    with cluster:
        table = cluster.table()
        loads: list[ProducerLoad] = []
        for i in range(6):  # round robin over the 3 on-demand partitions: 2 producers on each
            p = await Producer.connect(
                cluster.bootstrap, partition_type="on-demand", linger_ms=1, send_log=tmp_path / f"p{i}.csv"
            )
            loads.append(ProducerLoad(f"od{i}", p))
        victim_partition = loads[run % len(loads)].producer.partition
        victim = table[victim_partition].primary
        assert victim is not None
        movers = [ld for ld in loads if ld.producer.partition == victim_partition]
        stop = asyncio.Event()
        producing = [asyncio.create_task(ld.run(DEST, stop, window=40, pause=0.002)) for ld in loads]
        loop = asyncio.get_running_loop()
        await asyncio.sleep(1.0 + 0.3 * run)
        killed_at = loop.time()
        cluster.kill_mm(victim, signal.SIGKILL)
        await until(
            lambda: cluster.table()[victim_partition].state == PartitionState.DRAINING, 10, "the takeover"
        )
        await until(lambda: all(ld.producer.partition != victim_partition for ld in movers), 10, "the move")
        await asyncio.sleep(1.5)
        await stop_all(stop, producing)
        for ld in loads:
            await _close(ld.producer)
        for ld in loads:
            assert not ld.failed, (ld.name, ld.failed[:3])
            assert ld.acked_after(killed_at + 0.1) > 0, f"{ld.name} acked nothing after the kill"

        stored = await _read_all(cluster)
        assert victim_partition in stored, "the draining partition went away before the check"
        positions: dict[str, list[tuple[str, int]]] = defaultdict(list)
        ids: dict[tuple[str, int], list[tuple[str, int]]] = defaultdict(list)
        for partition, rows in stored.items():
            by_name: dict[str, list[int]] = defaultdict(list)
            for offset, value, producer, seq in sorted(rows):
                positions[value].append((partition, offset))
                ids[(producer, seq)].append((partition, offset))
                name, _, n = value.rpartition(":")
                by_name[name].append(int(n))
            for name, seqs in by_name.items():
                assert seqs == sorted(seqs), f"order broken for {name} on {partition}: {seqs[:50]}"

        dups = {v: p for v, p in positions.items() if len(p) > 1}
        assert not dups, f"{len(dups)} messages stored twice, e.g. {list(dups.items())[:3]}"
        id_dups = {k: p for k, p in ids.items() if len(p) > 1}
        assert not id_dups, f"{len(id_dups)} (producer, sequence) stored twice: {list(id_dups.items())[:3]}"

        lost = [f"{ld.name}:{s}" for ld in loads for s in ld.acked if f"{ld.name}:{s}" not in positions]
        assert not lost, f"{len(lost)} acknowledged messages lost, e.g. {lost[:5]}"
        wrong = [
            (f"{ld.name}:{s}", a, positions[f"{ld.name}:{s}"])
            for ld in loads
            for s, a in ld.acked.items()
            if a[1] >= 0 and positions[f"{ld.name}:{s}"] != [a]
        ]
        assert not wrong, f"acknowledgements naming another position: {wrong[:5]}"
        # The send logs (what the audit checks) name only stored (producer id, sequence) pairs.
        logged = {
            (key, int(seq))
            for i in range(len(loads))
            for key, seq in (line.split(",") for line in (tmp_path / f"p{i}.csv").read_text().splitlines())
        }
        assert len(logged) == sum(len(ld.acked) for ld in loads)
        assert logged <= set(ids), f"send-log lines not stored: {sorted(logged - set(ids))[:5]}"
