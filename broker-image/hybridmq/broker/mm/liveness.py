"""What an MM's writes depend on besides its assignments: its lease, handed to the MM's constructor.

A primary accepts and acknowledges writes only while ``valid()``; whoever can fail the MM over (the
operator through a Kubernetes Lease, the local controller through heartbeats) must see this lease
lapse before it promotes another replica. The MM calls ``start(holder)`` once it serves, and the
lease carries ``holder.report()`` (the ``MMReport``) to that controller. Three kinds exist:

* ``NoLease`` (below): static assignments, nobody fails this MM over, always valid;
* ``hybridmq.local.heartbeat.Heartbeat``: the local controller's heartbeat;
* ``hybridmq.broker.kube_wiring.KubeLease``: ``Lease/<pod>``, renewed with the report.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol


class LeaseHolder(Protocol):
    """What the MM offers its lease."""

    @property
    def name(self) -> str: ...

    @property
    def data_dir(self) -> Path: ...

    def report(self) -> dict[str, Any]:
        """The ``MMReport`` of every replica this MM holds."""
        ...

    def held(self) -> set[str]:
        """The partitions this MM holds a replica or a host of."""
        ...

    def settled(self) -> bool:
        """Its replicas follow the latest table (no reconcile pending or running)."""
        ...

    async def resync(self) -> None:
        """Apply a fresh table from the source and let the replicas follow it."""
        ...

    def wake(self) -> None: ...


class Liveness(Protocol):
    #: A controller reads the report and commits the in-sync changes this MM proposes (without
    #: one an in-sync change takes effect at once).
    commits_in_sync: bool

    def valid(self) -> bool:
        """Writes may be accepted and acknowledged now."""
        ...

    def catching_up(self) -> bool:
        """Not valid only until this MM applies a table it is about to receive."""
        ...

    def trigger(self) -> None:
        """Send the next renewal (and so the report: an in-sync change) at once."""
        ...

    async def start(self, holder: LeaseHolder) -> None: ...

    async def stop(self) -> None: ...

    def stats(self) -> dict[str, Any]: ...


class NoLease:
    """Static assignments: no controller, nobody to fail this MM over; always valid."""

    commits_in_sync = False

    def valid(self) -> bool:
        return True

    def catching_up(self) -> bool:
        return False

    def trigger(self) -> None:
        pass

    async def start(self, holder: LeaseHolder) -> None:
        pass

    async def stop(self) -> None:
        pass

    def stats(self) -> dict[str, Any]:
        return {"valid": True, "kind": "none"}
