"""An MM that takes over a long partition keeps its lease while it reads the log back.

Becoming primary means reading the whole log back (queue cursors, delivery counts). On a long log
that took seconds on the MM's event loop, so its heartbeats stopped, the controller declared it lost
and failed its partitions over, and the next promotion blocked it again: a failover storm that kept
a loaded cluster out of sync for minutes. Here every MM starts with a long partition log already on
disk; none of them may be declared lost.
"""

from __future__ import annotations

import shutil
import signal
import time
from pathlib import Path

from hybridmq.broker.destinations.batch_payload import pack_payload
from hybridmq.broker.log.config import LogConfig
from hybridmq.broker.mm.storage import PartitionStorage
from hybridmq.local.runner import LocalCluster

PARTITION = "local-fixed-0"
BATCHES = 100_000  # seconds of reading back on this machine (~25 MB)


def _long_log(directory: Path) -> int:
    storage = PartitionStorage.open(directory, LogConfig(fsync="never"))
    for i in range(BATCHES):
        storage.log.append(pack_payload("queue:long", 0, 0, None, i.to_bytes(4, "big") * 50), 1, 0)
    end = storage.end_offset
    storage.close()
    return end


def _wait_in_sync(cluster: LocalCluster, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        a = cluster.table()[PARTITION]
        if a.primary is not None and set(a.in_sync) == set(a.replicas) and len(a.replicas) == 2:
            return
        time.sleep(0.2)
    raise AssertionError(f"{PARTITION} not whole again within {timeout} s: {cluster.table()[PARTITION]}")


def test_taking_over_a_long_log_keeps_the_lease(tmp_path: Path) -> None:
    template = tmp_path / "template"
    end = _long_log(template)
    # A 3 s lease: reading the log back on the loop (the defect) blocked it for seconds, while at suite load
    # (load average 20 on the 2 cores) a 1 s lease lapsed now and then with nothing blocking.
    cluster = LocalCluster(
        tmp_path / "run", mms=2, replicas=2, fixed=1, on_demand_per_mm=0, log_level="INFO", lease_s=3.0
    )
    for mm in cluster.mm_names:
        shutil.copytree(template, tmp_path / "run" / mm / PARTITION)
    with cluster:
        _wait_in_sync(cluster, 60)
        old = cluster.table()[PARTITION].primary
        assert old is not None
        heir = next(m for m in cluster.mm_names if m != old)
        seen = len(cluster.state()["events"])
        cluster.kill_mm(old, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while cluster.table()[PARTITION].primary != heir and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(5.0)  # the heir reads the long log back meanwhile
        cluster.start_mm(old)
        _wait_in_sync(cluster, 60)
        state = cluster.state()
        lost = [e["message"] for e in state["events"][seen:] if e["reason"] == "MessageManagerLost"]
        assert not [m for m in lost if m.startswith(heir)], f"{heir} lost its lease taking over: {lost}"
        assert cluster.table()[PARTITION].primary == heir
        reported = state["reports"][heir]["partitions"][PARTITION]
        assert reported["logEndOffset"] >= end, "the long log was not kept"
