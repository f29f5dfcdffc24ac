"""Property test of replication safety: random produces, network cuts and failovers (the operator's
rule: promote the in-sync replica with the longest log) never lose an acknowledged record, and the
replicas converge to identical logs."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hybridmq.broker.log import LogConfig, LogError, PartitionLog
from hybridmq.broker.replication import BackupFetcher, LocalTransport, PartitionPrimary, ReplicationError

CFG = LogConfig(fsync="group", segment_bytes=8 * 1024)
REPLICAS = ("a", "b", "c")

operation = st.one_of(
    st.tuples(st.just("produce"), st.integers(1, 6)),
    st.tuples(st.just("cut"), st.sampled_from(REPLICAS)),
    st.tuples(st.just("heal"), st.sampled_from(REPLICAS)),
    st.tuples(st.just("failover"), st.just("")),
)


class Sim:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.logs = {r: PartitionLog.open(root / r, CFG) for r in REPLICAS}
        self.epoch = 1
        self.cut: set[str] = set()
        self.acked: dict[int, bytes] = {}
        self.counter = 0
        self.primary_id = "a"
        self.primary = self._make_primary("a", REPLICAS)
        self.maintenance = asyncio.create_task(self.primary.run_maintenance(0.01))
        self.fetchers: dict[str, tuple[BackupFetcher, LocalTransport, asyncio.Task[None]]] = {}
        for replica in REPLICAS[1:]:
            self._follow(replica)

    def _make_primary(self, replica: str, in_sync: tuple[str, ...]) -> PartitionPrimary:
        return PartitionPrimary(
            self.logs[replica],
            partition="p",
            replica_id=replica,
            epoch=self.epoch,
            replicas=REPLICAS,
            in_sync=in_sync,
            min_in_sync=2,
            lag_time_ms=80,
        )

    def _follow(self, replica: str) -> None:
        transport = LocalTransport(self.primary)
        transport.connected = replica not in self.cut
        fetcher = BackupFetcher(
            self.logs[replica],
            partition="p",
            replica_id=replica,
            epoch=self.epoch,
            transport=transport,
            max_wait_ms=10,
            retry_backoff_ms=5,
        )
        self.fetchers[replica] = (fetcher, transport, asyncio.create_task(fetcher.run()))

    async def produce(self, n: int) -> None:
        async def one() -> None:
            self.counter += 1
            payload = f"m{self.counter}".encode()
            try:
                result = await asyncio.wait_for(self.primary.produce(payload, 1, epoch=self.epoch), 0.3)
            except (ReplicationError, LogError, TimeoutError):
                return
            self.acked[result.base_offset] = payload

        await asyncio.gather(*(one() for _ in range(n)))

    def set_cut(self, replica: str, cut: bool) -> None:
        if cut:
            self.cut.add(replica)
        else:
            self.cut.discard(replica)
        if replica in self.fetchers:
            self.fetchers[replica][1].connected = not cut

    async def failover(self) -> None:
        candidates = [r for r in self.primary.in_sync if r != self.primary_id]
        if not candidates:
            return  # no in-sync backup: the operator would not promote (no unclean election)
        new = max(candidates, key=lambda r: (self.logs[r].log_end_offset, -REPLICAS.index(r)))
        in_sync = tuple(sorted(self.primary.in_sync - {self.primary_id}))
        for fetcher, _, task in self.fetchers.values():
            await fetcher.stop()
            await task
        self.fetchers.clear()
        self.primary.close()
        await self.maintenance
        old = self.primary_id
        # The old primary crashes; its log is reopened from disk when it comes back.
        await self.logs[old].aclose()
        self.logs[old] = PartitionLog.open(self.root / old, CFG)
        self.epoch += 1
        self.primary_id = new
        self.primary = self._make_primary(new, in_sync)
        self.maintenance = asyncio.create_task(self.primary.run_maintenance(0.01))
        for replica in REPLICAS:
            if replica != new:
                self._follow(replica)

    async def settle(self) -> None:
        for replica in list(self.cut):
            self.set_cut(replica, False)
        leo = self.primary.log.log_end_offset
        for _ in range(1000):
            if all(self.logs[r].log_end_offset == leo for r in REPLICAS):
                break
            await asyncio.sleep(0.005)

    async def close(self) -> None:
        for fetcher, _, task in self.fetchers.values():
            await fetcher.stop()
            await task
        self.primary.close()
        await self.maintenance
        for log in self.logs.values():
            await log.aclose()


def contents(log: PartitionLog) -> list[tuple[int, int, bytes]]:
    return [(h.base_offset, h.epoch, bytes(p)) for h, p in log.iter_batches()]


async def scenario(root: Path, ops: list[tuple[str, object]]) -> None:
    sim = Sim(root)
    try:
        for op, arg in ops:
            if op == "produce":
                assert isinstance(arg, int)
                await sim.produce(arg)
            elif op == "cut":
                sim.set_cut(str(arg), True)
            elif op == "heal":
                sim.set_cut(str(arg), False)
            else:
                await sim.failover()
        await sim.settle()
        reference = contents(sim.primary.log)
        got = {base: payload for base, _, payload in reference}
        for base, payload in sim.acked.items():
            assert got.get(base) == payload, f"acknowledged record at {base} lost"
        for replica in REPLICAS:
            assert contents(sim.logs[replica]) == reference, f"{replica} diverges"
    finally:
        await sim.close()


@settings(
    max_examples=int(os.environ.get("HMQ_REPL_PROP_EXAMPLES", "25")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(ops=st.lists(operation, min_size=1, max_size=10))
def test_acknowledged_records_survive_failovers(ops: list[tuple[str, object]]) -> None:
    root = Path(tempfile.mkdtemp(prefix="hmq-repl-prop-"))
    try:
        asyncio.run(scenario(root, ops))
    finally:
        shutil.rmtree(root, ignore_errors=True)
