"""MM incarnations, kept in the resources so that an operator restart forgets none of them.

An MM *process* is its pod (UID) plus its Lease's ``acquireTime``, which each new process writes
once (``hybridmq.broker.lease``). A restarted MM lost what it held in memory, so the partitions it
leads must move to the next epoch even if it comes back under the same name at once.

The operator records on each Lease the ``acquireTime`` it has accounted for (annotation
``hybridmq.io/accounted-incarnation``). A Lease whose ``acquireTime`` differs from that record
belongs to a process the operator has not seen yet: if a Partition still names that MM, the MM
counts as restarted (lost) until a round has applied the resulting failover, and only then is the
record updated. The record lives in the Lease, not in memory, so an MM restarted while the
operator was down is still noticed.

A Lease owned by another pod UID belongs to an earlier pod of the same name (a stale renewer of a
force-deleted pod may even re-create it): it says nothing about the current pod.

Pure functions; ``handlers/partitions.py`` writes the records.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from hybridmq.planner.state import PartitionInfo

Body = Mapping[str, Any]

ANNOTATION = "hybridmq.io/accounted-incarnation"

__all__ = [
    "ANNOTATION",
    "accounted",
    "acquired",
    "known",
    "own_lease",
    "referenced",
    "restarted",
    "stale_lease",
    "unrecorded",
]


def _meta(body: Body) -> Mapping[str, Any]:
    return body.get("metadata") or {}


def acquired(lease: Body) -> str | None:
    """The MM process behind a Lease (its ``acquireTime``), or None if it never wrote one."""
    value = (lease.get("spec") or {}).get("acquireTime")
    return str(value) if value else None


def accounted(lease: Body) -> str | None:
    """The incarnation the operator last accounted for on this Lease."""
    value = (_meta(lease).get("annotations") or {}).get(ANNOTATION)
    return str(value) if value else None


def _owner_uids(lease: Body) -> set[str]:
    refs = _meta(lease).get("ownerReferences") or []
    return {str(ref["uid"]) for ref in refs if ref.get("kind") == "Pod" and ref.get("uid")}


def own_lease(pod: Body | None, lease: Body | None) -> Body | None:
    """``lease`` if it belongs to ``pod`` (owned by its UID, or no UID to compare), else None."""
    if pod is None or lease is None:
        return None
    owners, uid = _owner_uids(lease), _meta(pod).get("uid")
    return lease if not owners or not uid or uid in owners else None


def stale_lease(pod: Body | None, lease: Body | None) -> bool:
    """The pod's name has a Lease, but an earlier pod of that name owns it: the pod was replaced."""
    return pod is not None and lease is not None and own_lease(pod, lease) is None


def referenced(partitions: Iterable[PartitionInfo]) -> frozenset[str]:
    """MMs named by a Partition's status (primary or replica): what a restart of them affects."""
    out: set[str] = set()
    for p in partitions:
        if p.status is not None:
            out.update(p.status.replicas)
            if p.status.primary:
                out.add(p.status.primary)
    return frozenset(out)


def known(lease: Body | None, recorded: Mapping[str, str] | None, name: str) -> bool:
    """Whether the operator has accounted for the process behind ``lease`` (the pod's own Lease;
    None: not seen yet). A Lease without ``acquireTime`` cannot show a restart: known."""
    if lease is None:
        return False
    inc = acquired(lease)
    return inc is None or inc in (accounted(lease), (recorded or {}).get(name))


def _own(pods: Mapping[str, Body], leases: Mapping[str, Body]) -> dict[str, Body]:
    return {name: lease for name, pod in pods.items() if (lease := own_lease(pod, leases.get(name)))}


def restarted(
    pods: Mapping[str, Body],
    leases: Mapping[str, Body],
    named: frozenset[str],
    recorded: Mapping[str, str] | None = None,
) -> frozenset[str]:
    """MMs named by a Partition whose Lease shows a process the operator has not accounted for.

    ``recorded``: what this operator wrote and the watch may not have delivered yet.
    """
    done = recorded or {}
    return frozenset(
        name
        for name, lease in _own(pods, leases).items()
        if name in named
        and (inc := acquired(lease)) is not None
        and inc not in (accounted(lease), done.get(name))
    )


def unrecorded(pods: Mapping[str, Body], leases: Mapping[str, Body]) -> dict[str, str]:
    """Lease name -> incarnation, for every pod's own Lease whose record is not up to date."""
    return {
        name: inc
        for name, lease in _own(pods, leases).items()
        if (inc := acquired(lease)) is not None and accounted(lease) != inc
    }
