"""An MM's readiness means "caught up": a restarted MM (it comes back empty, so Ready) given backups
of partitions with a backlog is not Ready until the controller counts those copies in sync, then
Ready.

2 MMs with the local controller, 2 fixed partitions with 2 replicas (minInSync 1, so writes go on
while one MM is down). mm-1 is killed, 12 MB go to one partition meanwhile, mm-1 is started again
and the controller makes it a backup of both. Over loopback 12 MB catch up in well under one
poll, so the primary mm-0 is held stopped (SIGSTOP, for less than its lease) from just before
mm-1's start until mm-1 has been seen behind for a while: the copy cannot catch up in that window,
whatever the machine's speed. The test polls mm-1's ``/readyz`` between two reads of the
controller's table and checks what a probe user would: while the table says mm-1 holds a copy that
is not in sync, ``/readyz`` answers 503; once every copy is in sync, 200.
"""

from __future__ import annotations

import asyncio
import signal
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from hybridmq.api.resources import BrokerClusterSpec
from hybridmq.client import Producer
from hybridmq.local.runner import LocalCluster

SPEC = BrokerClusterSpec.model_validate(
    {
        "partitions": {
            "fixed": {"count": 2, "replicas": 2, "minInSync": 1},
            "onDemand": {"perMessageManager": 0},
        }
    }
)
PAYLOAD = b"r" * 60_000
# The controller's table can be newer than the one mm-1 answers from by a round trip: a 200 counts
# against readiness only when the table showed the copy behind for longer than that.
SETTLE_S = 1.0
# Long enough that the primary, held stopped while mm-1 starts (seconds on a loaded machine), keeps
# its lease (the local controller's default is 1 s).
LEASE_S = 16.0
# How long mm-1 is observed behind while the primary is held stopped.
HELD_BEHIND_S = 2.5


def readyz(cluster: LocalCluster, name: str) -> int | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{cluster.mm_http[name]}/readyz", timeout=5) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return None  # not listening yet


def behind(cluster: LocalCluster, name: str) -> list[str]:
    """Partitions naming ``name`` as a backup the controller does not count in sync."""
    return sorted(
        p
        for p, a in cluster.table().items()
        if name in a.replicas and a.primary != name and name not in a.in_sync
    )


# Alone: it needs a window (mm-0 stopped for less than its lease) in which the table shows mm-1
# behind; beside the suite, one sample of the table could outlast that window (5 s alone).
@pytest.mark.solo
async def test_a_restarted_mm_is_ready_only_once_its_copies_are_in_sync(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, mms=2, replicas=2, spec=SPEC, on_demand_per_mm=0, lease_s=LEASE_S)
    with cluster:
        await asyncio.to_thread(cluster.wait_in_sync, 60)
        assert readyz(cluster, "mm-1") == 200
        await asyncio.to_thread(cluster.kill_mm, "mm-1")
        await asyncio.to_thread(
            cluster.wait_until,
            lambda: all(a.replicas == ("mm-0",) for a in cluster.table().values()),
            LEASE_S + 30,
            "mm-1 dropped from every partition",
        )
        producer = await Producer.connect(
            cluster.bootstrap, partition_type="fixed", partition="local-fixed-0"
        )
        for _ in range(10):
            await asyncio.gather(*(producer.send("queue:ready", PAYLOAD) for _ in range(20)))
        await producer.close()

        await asyncio.to_thread(cluster.kill_mm, "mm-0", signal.SIGSTOP)
        held_since = time.monotonic()
        held = True
        await asyncio.to_thread(cluster.start_mm, "mm-1", False)
        try:
            samples: list[tuple[float, int | None, list[str]]] = []
            lag_since: float | None = None
            wrong: list[tuple[float, list[str]]] = []
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                before = await asyncio.to_thread(behind, cluster, "mm-1")
                now = time.monotonic()
                code = await asyncio.to_thread(readyz, cluster, "mm-1")
                after = await asyncio.to_thread(behind, cluster, "mm-1")
                # Since when the table has shown mm-1 behind without a break (None: it does not now).
                lag_since = (lag_since or now) if before and after else None
                if code == 200 and lag_since is not None and now - lag_since > SETTLE_S:
                    wrong.append((now, after))
                samples.append((now, code, after))
                seen_behind = [t for t, _, lag in samples if lag]
                if held and (
                    (seen_behind and now - seen_behind[0] > HELD_BEHIND_S) or now - held_since > LEASE_S / 2
                ):
                    await asyncio.to_thread(cluster.kill_mm, "mm-0", signal.SIGCONT)
                    held = False
                named = all("mm-1" in a.replicas for a in cluster.table().values())
                if code == 200 and named and not after:
                    break
                await asyncio.sleep(0.05)
        finally:
            if held:  # a stopped process would not stop when the cluster does
                cluster.kill_mm("mm-0", signal.SIGCONT)

        lagging_seen = [s for s in samples if s[2]]
        assert lagging_seen, "mm-1 was never a backup behind: nothing was checked"
        assert lagging_seen[-1][0] - lagging_seen[0][0] > SETTLE_S, "behind too briefly to check"
        assert any(code == 503 for _, code, lag in samples if lag), "never not-ready while behind"
        assert not wrong, f"/readyz said ready while the table had mm-1 behind on {wrong[:3]}"
        assert samples[-1][1] == 200 and not samples[-1][2], samples[-5:]
