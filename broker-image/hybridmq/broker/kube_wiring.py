"""The lease of an MM in a pod run by the operator (``HYBRIDMQ_ASSIGNMENT_SOURCE=kubernetes``).

``KubeLease`` is the MM's ``Liveness`` (``mm/liveness.py``) in Kubernetes: ``Lease/<pod>`` renewed
by ``LeaseRenewer``. Each renewal carries the ``MMReport`` built from the replica manager's real
state (every partition held on disk: role, epoch, log end offset; from a primary its in-sync set,
high watermark, backlog), so the operator sees in-sync sets and can promote the longest in-sync
log. A lost lease fences every write; a renewal lifts the fence, after a loss only once a fresh
listing of the Partitions has been applied and reconciled (an MM that was frozen past its lease
learns of the newer epochs before it may write again); a clean stop fences, then releases the
Lease (``stop(release=True)``) so the operator fails over at once.

What the report says is on the volume is also what the operator waits for before it releases a
deleted Partition's finalizer, so the lease keeps the volume and the report in step: a janitor
deletes the data of partitions this MM no longer holds (deleted Partitions, replicas moved
elsewhere, leftovers of an earlier incarnation), and until then reports them.

The MM and the CM of a pod are built in ``hybridmq.cli.compose``. The broker package never imports
``hybridmq_operator``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
from collections.abc import Mapping
from typing import Any

from hybridmq.api.lease_report import MMReport, PartitionReport
from hybridmq.broker.kube_source import KubeAssignmentSource
from hybridmq.broker.lease import LeaseRenewer, renewer_from_env
from hybridmq.broker.mm.liveness import LeaseHolder

LOG = logging.getLogger(__name__)


def kube_enabled(environ: Mapping[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    return env.get("HYBRIDMQ_ASSIGNMENT_SOURCE") == "kubernetes" and bool(env.get("HYBRIDMQ_CLUSTER"))


class KubeLease:
    """``valid()`` is the renewer's deadline unless writes are fenced (lease lost, or stopping);
    ``trigger()`` sends the next renewal (and so the report: an in-sync change) at once."""

    commits_in_sync = True

    def __init__(self, source: KubeAssignmentSource, renewer: LeaseRenewer | None = None) -> None:
        self.source = source
        self.renewer = renewer
        self.fenced = False
        self.dropped: list[str] = []
        self.holder: LeaseHolder | None = None
        self._lost_once = False
        self._kick: asyncio.Task[bool] | None = None
        self._unfencing: asyncio.Task[None] | None = None
        self._janitor: asyncio.Task[None] | None = None

    @classmethod
    def from_env(cls, source: KubeAssignmentSource, environ: Mapping[str, str] | None = None) -> KubeLease:
        lease = cls(source)
        lease.renewer = renewer_from_env(
            report=lease.report, on_lost=lease.on_lost, on_renewed=lease.on_renewed, environ=environ
        )
        if lease.renewer is None:
            LOG.warning("no Lease (not in a pod?): the MM acknowledges writes without a lease")
        return lease

    # -- Liveness --------------------------------------------------------------------------------
    def valid(self) -> bool:
        if self.fenced:
            return False
        return True if self.renewer is None else self.renewer.valid

    def catching_up(self) -> bool:
        return False

    def remaining_s(self) -> float:
        if self.fenced:
            return 0.0
        return float("inf") if self.renewer is None else self.renewer.remaining_s()

    def trigger(self) -> None:
        if self.renewer is None or (self._kick is not None and not self._kick.done()):
            return
        try:
            self._kick = asyncio.get_running_loop().create_task(self.renewer.renew_once())
        except RuntimeError:
            pass

    async def start(self, holder: LeaseHolder) -> None:
        self.holder = holder
        if self.renewer is not None:
            await self.renewer.start()
        self._janitor = asyncio.create_task(self._janitor_loop())

    async def stop(self) -> None:
        # Fence first: nothing may be acknowledged once the operator may promote another replica.
        self.fenced = True
        for task in (self._janitor, self._unfencing, self._kick):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        if self.renewer is not None:
            await self.renewer.stop(release=True)

    def stats(self) -> dict[str, Any]:
        return {
            "valid": self.valid(),
            "fenced": self.fenced,
            "remaining_s": round(self.remaining_s(), 3),
            "renewals": self.renewer.renewals if self.renewer is not None else None,
            "dropped": self.dropped[-20:],
        }

    # -- the renewer's callbacks -------------------------------------------------------------------
    def on_lost(self) -> None:
        self._lost_once = True
        self.fence_writes()

    def on_renewed(self) -> None:
        if not self._lost_once:  # the first renewal: the source's listing is current
            self.unfence_writes()
            return
        if self._unfencing is None or self._unfencing.done():
            self._unfencing = asyncio.get_running_loop().create_task(self._unfence_after_relist())

    def fence_writes(self) -> None:
        if not self.fenced:
            LOG.warning("lease lost: writes fenced until it is renewed")
        self.fenced = True
        if self.holder is not None:
            self.holder.wake()

    def unfence_writes(self) -> None:
        if self.fenced:
            LOG.info("lease renewed: writes accepted again")
        self.fenced = False
        if self.holder is not None:
            self.holder.wake()

    async def _unfence_after_relist(self) -> None:
        """After a lost lease: apply a fresh Partition listing, let the replicas follow it, then
        accept writes again (while the lease is still valid)."""
        while True:
            try:
                if self.holder is not None:
                    await self.holder.resync()
                else:
                    await self.source.refresh()
            except Exception as exc:
                LOG.warning("relisting Partitions before writing again failed: %s", exc)
                await asyncio.sleep(0.5)
                continue
            if self.renewer is None or self.renewer.valid:
                self.unfence_writes()
            return

    # -- what the operator reads ----------------------------------------------------------------
    def report(self) -> dict[str, Any]:
        """``MMReport`` of everything on this MM's volume (held replicas plus data not dropped yet)."""
        report = MMReport.model_validate(self.holder.report() if self.holder is not None else {})
        for name in self._on_disk():
            if name not in report.partitions:
                report.partitions[name] = PartitionReport(role="backup", epoch=0, log_end_offset=0)
        return report.model_dump(mode="json")

    # -- data of partitions no longer held -------------------------------------------------------
    def _on_disk(self) -> list[str]:
        if self.holder is None:
            return []
        prefix = f"{self.source.cluster}-"
        try:
            return sorted(
                p.name for p in self.holder.data_dir.iterdir() if p.is_dir() and p.name.startswith(prefix)
            )
        except FileNotFoundError:
            return []

    def drop_unheld(self) -> list[str]:
        """Delete the directories of partitions that are neither held nor assigned to this MM."""
        holder = self.holder
        if holder is None or not self.source.synced() or not holder.settled():
            return []
        table = self.source.partitions()
        held = holder.held()
        dropped = []
        for name in self._on_disk():
            if name in held:
                continue
            a = table.get(name)
            if a is not None and holder.name in a.replicas:
                continue  # the replica manager is about to take it
            shutil.rmtree(holder.data_dir / name, ignore_errors=True)
            dropped.append(name)
            LOG.info("%s: not held here any more; data deleted", name)
        self.dropped.extend(dropped)
        return dropped

    async def _janitor_loop(self, interval_s: float = 1.0) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                if self.drop_unheld():
                    self.trigger()
            except Exception:
                LOG.exception("dropping the data of unheld partitions failed")
