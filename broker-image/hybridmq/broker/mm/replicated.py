"""``ReplicatedMessageManager``: the MM server with replication wired in.

It is the MM of ``hybridmq.broker.mm.server`` whose partitions are managed by a
``ReplicaManager`` (primary or backup per partition, as the assignment says) instead of being
opened only where this MM is primary; REPLICA_* frames from backups go to the replica manager;
``stats()`` shows each replica's role, epoch, high watermark and in-sync set. ``liveness`` (the
controller heartbeat in broker-only mode) is started after the assignment source, so a primary
accepts writes only once its lease is valid.
"""

from __future__ import annotations

from typing import Any

from hybridmq.broker.assignment_source import AssignmentSource
from hybridmq.broker.mm.replica_manager import Liveness, ReplicaManager, lease_valid
from hybridmq.broker.mm.replica_transport import REPLICA_FRAMES
from hybridmq.broker.mm.server import MessageManager, MMConfig
from hybridmq.protocol import Connection


class ReplicatedMessageManager(MessageManager):
    def __init__(
        self, config: MMConfig, source: AssignmentSource, liveness: Liveness | None = None, **options: Any
    ) -> None:
        super().__init__(config, source)
        self.replica_manager = ReplicaManager(self, liveness=liveness, **options)
        self.liveness = liveness

    async def start(self) -> None:
        await super().start()
        self.replica_manager.start()
        start = getattr(self.liveness, "start", None)
        if start is not None:
            await start()

    async def stop(self) -> None:
        stop = getattr(self.liveness, "stop", None)
        if stop is not None:
            await stop()
        await self.replica_manager.stop()
        await super().stop()

    def _sync_partitions(self) -> None:
        # Called by the base class on every assignment change (and once at start).
        manager = getattr(self, "replica_manager", None)
        if manager is not None:
            manager.changed()

    def _handle(self, conn: Connection, frame: dict[str, Any]) -> None:
        if frame.get("t") in REPLICA_FRAMES:
            self.replica_manager.handle(conn, frame)
            return
        super()._handle(conn, frame)

    def stats(self) -> dict[str, Any]:
        out = super().stats()
        out["replicas"] = self.replica_manager.stats()
        if self.liveness is not None:
            out["lease_valid"] = lease_valid(self.liveness)
        return out


def kubernetes_mm(config: MMConfig, source: AssignmentSource) -> ReplicatedMessageManager:
    """The replicated MM in a pod: its lease is the ``coordination.k8s.io`` Lease renewed by
    ``hybridmq.broker.lease`` (carrying the replica report), when the pod's env configures one.
    Not wired into ``hybridmq mm`` yet (``--controller`` is): call it where the Kubernetes
    ``AssignmentSource`` is built."""
    from hybridmq.broker.lease import renewer_from_env

    mm = ReplicatedMessageManager(config, source)
    renewer = renewer_from_env(report=mm.replica_manager.report)
    mm.liveness = renewer
    mm.replica_manager.liveness = renewer
    return mm
