"""Builds the broker processes of a pod run by the operator (``HYBRIDMQ_ASSIGNMENT_SOURCE=kubernetes``).

The Kubernetes counterpart of ``hybridmq.local.wiring``:

* the MM is a ``ReplicatedMessageManager`` (primary or backup per partition, follower fetch between
  MMs, in-sync set, high watermark, epoch fencing) whose assignments come from
  ``KubeAssignmentSource`` (Partition resources; the peers' addresses from the BrokerCluster's
  broker table) and whose lease is ``Lease/<pod>`` renewed by ``LeaseRenewer``. Each renewal
  carries the ``MMReport`` built from the replica manager's real state (every partition held on
  disk: role, epoch, log end offset; from a primary its in-sync set, high watermark, backlog), so
  the operator sees in-sync sets and can promote the longest in-sync log. ``on_lost`` fences
  every write; ``on_renewed`` lifts the fence, after a loss only once a fresh listing of the
  Partitions has been applied and reconciled (an MM that was frozen past its lease learns of the
  newer epochs before it may write again); a clean stop fences, then releases the Lease
  (``stop(release=True)``) so the operator fails over at once.
* a janitor deletes the data of partitions this MM no longer holds (deleted Partitions, replicas
  moved elsewhere, leftovers of an earlier incarnation), so the operator can release the
  Partitions' finalizers (it does once no live MM reports them).
* the CM is a ``FailoverConnectionManager`` on ``KubeAssignmentSource`` that also follows MMs to
  their new pod IP: a restarted MM pod keeps its name but not its address, so when the broker
  table gives an MM a new address the CM replaces its link to it (the new link replays the
  subscriptions; requests pending on the old one fail and are resent).

The broker package never imports ``hybridmq_operator``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from hybridmq.api.assignment import BrokerRole
from hybridmq.api.lease_report import MMReport, PartitionReport
from hybridmq.broker.cm.failover import FailoverConnectionManager
from hybridmq.broker.kube_source import KubeAssignmentSource, source_from_env
from hybridmq.broker.lease import LeaseRenewer, renewer_from_env
from hybridmq.broker.mm.replicated import ReplicatedMessageManager
from hybridmq.broker.mm.server import MMConfig

LOG = logging.getLogger(__name__)


def kube_enabled(environ: Mapping[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    return env.get("HYBRIDMQ_ASSIGNMENT_SOURCE") == "kubernetes" and bool(env.get("HYBRIDMQ_CLUSTER"))


class KubeLease:
    """The MM's ``Liveness`` (see ``replica_manager``) on top of a ``LeaseRenewer``.

    ``valid`` is the renewer's deadline unless the MM fenced its writes (lease lost, or stopping);
    ``trigger()`` sends the next renewal (and so the report: an in-sync change) at once.
    """

    def __init__(self, renewer: LeaseRenewer | None) -> None:
        self.renewer = renewer
        self.fenced = False
        self._kick: asyncio.Task[bool] | None = None

    @property
    def valid(self) -> bool:
        if self.fenced:
            return False
        return True if self.renewer is None else self.renewer.valid

    def remaining_s(self) -> float:
        if self.fenced:
            return 0.0
        return float("inf") if self.renewer is None else self.renewer.remaining_s()

    def fence_writes(self) -> None:
        if not self.fenced:
            LOG.warning("lease lost: writes fenced until it is renewed")
        self.fenced = True

    def unfence_writes(self) -> None:
        if self.fenced:
            LOG.info("lease renewed: writes accepted again")
        self.fenced = False

    def trigger(self) -> None:
        if self.renewer is None or (self._kick is not None and not self._kick.done()):
            return
        try:
            self._kick = asyncio.get_running_loop().create_task(self.renewer.renew_once())
        except RuntimeError:
            pass

    async def start(self) -> None:
        if self.renewer is not None:
            await self.renewer.start()

    async def stop(self) -> None:
        # Fence first: nothing may be acknowledged once the operator may promote another replica.
        self.fenced = True
        if self._kick is not None:
            self._kick.cancel()
        if self.renewer is not None:
            await self.renewer.stop(release=True)


class KubeMessageManager(ReplicatedMessageManager):
    """The replicated MM with its Lease, its report and the data janitor."""

    lease: KubeLease

    def __init__(self, config: MMConfig, source: KubeAssignmentSource, **options: Any) -> None:
        super().__init__(config, source, **options)
        self.kube_source = source
        self._janitor: asyncio.Task[None] | None = None
        self._unfencing: asyncio.Task[None] | None = None
        self._lost_once = False
        self.dropped: list[str] = []

    # -- lease callbacks ------------------------------------------------------------------------
    def fence_writes(self) -> None:
        self._lost_once = True
        self.lease.fence_writes()
        self.wake()

    def unfence_writes(self) -> None:
        if not self._lost_once:  # the first renewal: the source's listing is current
            self.lease.unfence_writes()
            self.wake()
            return
        if self._unfencing is None or self._unfencing.done():
            self._unfencing = asyncio.get_running_loop().create_task(self._unfence_after_relist())

    async def _unfence_after_relist(self) -> None:
        """After a lost lease: apply a fresh Partition listing, let the replicas follow it, then
        accept writes again (while the lease is still valid)."""
        from kubernetes import client

        from hybridmq.api.resources import GROUP, VERSION

        src = self.kube_source
        while True:
            try:
                api = client.CustomObjectsApi(src._api_client)
                listing = await asyncio.to_thread(
                    api.list_namespaced_custom_object,
                    GROUP,
                    VERSION,
                    src.namespace,
                    "partitions",
                    _request_timeout=5,
                )
                items = list(cast(dict[str, Any], listing).get("items", []))
                src.apply_listing("partitions", items)
                self.replica_manager.changed()
                for _ in range(250):  # the reconcile of the new table (up to ~5 s)
                    await asyncio.sleep(0.02)
                    if self.replica_manager.step == "idle" and not self.replica_manager._dirty.is_set():
                        break
                if self.lease.renewer is None or self.lease.renewer.valid:
                    self.lease.unfence_writes()
                    self.wake()
                return
            except Exception as exc:
                LOG.warning("relisting Partitions before writing again failed: %s", exc)
                await asyncio.sleep(0.5)

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        await super().start()
        self._janitor = asyncio.create_task(self._janitor_loop())

    async def stop(self) -> None:
        for task in (self._janitor, self._unfencing):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        await super().stop()

    # -- what the operator reads ----------------------------------------------------------------
    def report(self) -> dict[str, Any]:
        """``MMReport`` of everything on this MM's volume (held replicas plus data not dropped yet)."""
        report = MMReport.model_validate(self.replica_manager.report())
        for name in self._on_disk():
            if name not in report.partitions:
                report.partitions[name] = PartitionReport(role="backup", epoch=0, log_end_offset=0)
        return report.model_dump(mode="json")

    def stats(self) -> dict[str, Any]:
        out = super().stats()
        out["lease"] = {
            "valid": self.lease.valid,
            "fenced": self.lease.fenced,
            "remaining_s": round(self.lease.remaining_s(), 3),
            "renewals": self.lease.renewer.renewals if self.lease.renewer is not None else None,
        }
        out["dropped"] = self.dropped[-20:]
        return out

    # -- data of partitions no longer held -------------------------------------------------------
    def _on_disk(self) -> list[str]:
        root: Path = self.config.data_dir
        prefix = f"{self.kube_source.cluster}-"
        try:
            return sorted(p.name for p in root.iterdir() if p.is_dir() and p.name.startswith(prefix))
        except FileNotFoundError:
            return []

    def _synced(self) -> bool:
        events = getattr(self.kube_source, "_synced", {})
        return bool(events) and all(e.is_set() for e in events.values())

    def drop_unheld(self) -> list[str]:
        """Delete the directories of partitions that are neither held nor assigned to this MM."""
        if not self._synced() or self.replica_manager.step != "idle":
            return []
        table = self.source.partitions()
        me = self.config.name
        dropped = []
        for name in self._on_disk():
            if name in self.replica_manager.replicas or name in self.hosts:
                continue
            a = table.get(name)
            if a is not None and me in a.replicas:
                continue  # the replica manager is about to take it
            shutil.rmtree(self.config.data_dir / name, ignore_errors=True)
            dropped.append(name)
            LOG.info("%s: not held here any more; data deleted", name)
        self.dropped.extend(dropped)
        return dropped

    async def _janitor_loop(self, interval_s: float = 1.0) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                if self.drop_unheld():
                    self.lease.trigger()
            except Exception:
                LOG.exception("dropping the data of unheld partitions failed")


class KubeConnectionManager(FailoverConnectionManager):
    """The CM of a pod: relinks to an MM whose address changed in the broker table."""

    _retired: set[asyncio.Task[None]]

    def _sync_links(self) -> None:
        if not hasattr(self, "_retired"):
            self._retired = set()
        for b in self.source.brokers().values():
            link = self.links.get(b.name)
            if b.role != BrokerRole.MM or link is None or link.address == b.address:
                continue
            LOG.info("mm %s moved from %s to %s: relinking", b.name, link.address, b.address)
            del self.links[b.name]
            task = asyncio.get_running_loop().create_task(link.stop())
            self._retired.add(task)
            task.add_done_callback(self._retired.discard)
        super()._sync_links()


def kube_mm(config: MMConfig, environ: Mapping[str, str] | None = None, **options: Any) -> KubeMessageManager:
    """The replicated MM of a pod: Kubernetes assignments, Lease liveness with the MM report."""
    source = source_from_env(environ)
    if source is None:
        raise RuntimeError("kube_mm needs HYBRIDMQ_ASSIGNMENT_SOURCE=kubernetes and HYBRIDMQ_CLUSTER")
    mm = KubeMessageManager(config, source, **options)
    renewer = renewer_from_env(
        report=mm.report, on_lost=mm.fence_writes, on_renewed=mm.unfence_writes, environ=environ
    )
    if renewer is None:
        LOG.warning("no Lease (not in a pod?): the MM acknowledges writes without a lease")
    mm.lease = KubeLease(renewer)
    mm.liveness = mm.lease
    mm.replica_manager.liveness = mm.lease
    return mm


def kube_cm(config: Any, *args: Any, environ: Mapping[str, str] | None = None) -> KubeConnectionManager:
    """The CM of a pod: Kubernetes assignments, fast re-routing when a primary moves, MMs followed
    to their new pod IPs."""
    source = source_from_env(environ)
    if source is None:
        raise RuntimeError("kube_cm needs HYBRIDMQ_ASSIGNMENT_SOURCE=kubernetes and HYBRIDMQ_CLUSTER")
    return KubeConnectionManager(config, source, *args)
