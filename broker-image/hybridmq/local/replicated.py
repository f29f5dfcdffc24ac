"""``ReplicatedLocalCluster``: ``LocalCluster`` with replication and failover.

1 CM + N MMs as real subprocesses, started with ``--controller URL``: the in-process
``LocalController`` (this process, its own thread) plans the partitions with the operator's pure
planner (``partitions.fixed.count``/``replicas``, ``onDemand.perMessageManager``), pushes the table,
takes the MMs' heartbeats (1 s lease) and fails partitions over when one lapses. ``kill_mm(name,
sig)`` / ``start_mm(name)`` drive the processes (also through the controller's HTTP API:
``POST /kill/mm-1?signal=KILL``), and ``<dir>/controller.json`` names the controller URL for
``hybridmq local kill mm-1``.
"""

from __future__ import annotations

import json
import signal
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hybridmq.api.assignment import PartitionAssignment, PartitionType
from hybridmq.api.resources import BrokerClusterSpec
from hybridmq.local import runner
from hybridmq.local.controller import LocalController
from hybridmq.local.runner import LocalCluster, free_port
from hybridmq.local.runner import wait_port as _wait_port

SIGNALS = {"KILL": signal.SIGKILL, "TERM": signal.SIGTERM, "STOP": signal.SIGSTOP, "CONT": signal.SIGCONT}


def cluster_spec(
    *,
    fixed: int,
    replicas: int,
    on_demand_per_mm: int,
    on_demand_replicas: int | None = None,
    retention_after_drain: int = 300,
) -> BrokerClusterSpec:
    return BrokerClusterSpec.model_validate(
        {
            "partitions": {
                "fixed": {"count": fixed, "replicas": replicas, "minInSync": min(2, replicas)},
                "onDemand": {
                    "perMessageManager": on_demand_per_mm,
                    "replicas": on_demand_replicas or replicas,
                    "retentionAfterDrainSeconds": retention_after_drain,
                },
            }
        }
    )


class ReplicatedLocalCluster(LocalCluster):
    def __init__(
        self,
        directory: Path,
        *,
        mms: int = 3,
        replicas: int = 2,
        fixed: int | None = None,
        on_demand_per_mm: int = 1,
        retention_after_drain: int = 300,
        lease_s: float = 1.0,
        spec: BrokerClusterSpec | None = None,
        mm_args: list[str] | None = None,
        cm_args: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        self.controller_port = free_port()
        url = f"http://127.0.0.1:{self.controller_port}"
        super().__init__(
            directory,
            mms=mms,
            fixed_per_mm=0,
            on_demand_per_mm=0,
            mm_args=["--controller", url, *(mm_args or [])],
            cm_args=["--controller", url, *(cm_args or [])],
            **kwargs,
        )
        self.spec = spec or cluster_spec(
            fixed=fixed if fixed is not None else mms,
            replicas=replicas,
            on_demand_per_mm=on_demand_per_mm,
            retention_after_drain=retention_after_drain,
        )
        self.controller = LocalController(
            self.mm_names,
            list(self.source.brokers().values()),
            spec=self.spec,
            lease_s=lease_s,
            port=self.controller_port,
            on_signal=lambda name, sig: self.kill_mm(name, SIGNALS[sig]),
            on_start=self.start_mm,
            secret=self.cluster_secret,
        )

    @property
    def controller_url(self) -> str:
        return self.controller.url

    def start(self) -> ReplicatedLocalCluster:
        self.controller.start()
        (self.dir / "controller.json").write_text(json.dumps({"url": self.controller.url}))
        try:
            self._start_processes()
            self.wait_in_sync()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_processes(self) -> None:
        """Spawn every MM, then wait for their ports (they start in parallel), then the CM.

        Spawned from this thread: the children get SIGTERM when the thread that forked them ends
        (``PR_SET_PDEATHSIG``), so no helper threads here.
        """
        try:
            runner.wait_port = lambda port, timeout=20.0: None
            for name in self.mm_names:
                self.start_mm(name)
        finally:
            runner.wait_port = _wait_port
        for name in self.mm_names:
            _wait_port(self.mm_ports[name])
        for cm in self.cm_names:
            self.start_cm(cm)
        self.wait_linked()

    def stop(self) -> None:
        self.controller.stop()  # first: no failover storm while the brokers go away
        for proc in self.procs.values():  # a stopped process cannot handle SIGTERM
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
        super().stop()

    def __enter__(self) -> ReplicatedLocalCluster:
        return self.start()

    # -- views -----------------------------------------------------------------------------------
    def table(self) -> dict[str, PartitionAssignment]:
        table: tuple[PartitionAssignment, ...] = self.controller.call(lambda: self.controller.assignments)
        return {a.name: a for a in table}

    def partitions(self, ptype: PartitionType | None = None) -> list[PartitionAssignment]:
        return [a for a in self.table().values() if ptype is None or a.type == ptype]

    def state(self) -> dict[str, Any]:
        return self.controller.snapshot()

    def wait(self) -> None:
        """Serve until interrupted (an MM killed on purpose does not end the cluster)."""
        while True:
            time.sleep(0.5)

    def mm_stats(self, name: str) -> dict[str, Any]:
        """The MM's own ``/admin`` stats (roles, epochs, high watermarks, delivery states)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.mm_http[name]}/admin", timeout=5) as r:
            return dict(json.loads(r.read()))

    def wait_until(self, predicate: Callable[[], bool], timeout: float = 20.0, what: str = "") -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.05)
        raise TimeoutError(f"timed out waiting for {what or predicate}")

    def wait_in_sync(self, timeout: float = 30.0) -> None:
        """Every partition has a primary and all its replicas in sync, and every MM heartbeats."""

        def ok() -> bool:
            st = self.state()
            running = {n for n, p in self.procs.items() if n in self.mm_ports and p.poll() is None}
            if not running <= set(st["live"]) or not running <= set(st["last_seen_s"]):
                return False
            return all(
                a["primary"] is not None and set(a["in_sync"]) == set(a["replicas"])
                for a in st["partitions"]
                if a["state"] != "Draining"
            )

        self.wait_until(ok, timeout, "every partition fully in sync")
