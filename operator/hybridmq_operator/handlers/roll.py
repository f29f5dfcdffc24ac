"""Health-gated rolling restarts, within the reconcile round.

The StatefulSets update ``OnDelete``; each round this module reads the pods' revision
(``controller-revision-hash``) against their StatefulSet's ``updateRevision`` and the Partitions'
replica sets, asks the pure ``hybridmq.planner.roll.plan_roll`` for the next step and takes it:
mark the next MM (pod annotation ``hybridmq.io/roll: moving-replicas``, which makes the partition
planner move its replicas away), unmark one the spec no longer asks to restart, or delete a pod.
Nothing is kept in memory but what was last announced: an operator restarted mid-roll reads the
same pods and annotations and goes on.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping
from typing import Any, cast

import kopf

from hybridmq.planner import ClusterState
from hybridmq.planner.roll import (
    DONE,
    ROLE_CM,
    ROLE_MM,
    RoleTarget,
    RollDecision,
    RollInput,
    RollPartition,
    RollPod,
    plan_roll,
    settle_restart,
)
from hybridmq.planner.scaling import required_in_sync
from hybridmq_operator import kube, names, observe
from hybridmq_operator.settings import ClusterSettings

Body = Mapping[str, Any]


def role_target(sts: Body | None, replicas: int, keep_all: bool = False) -> RoleTarget:
    """The revision a StatefulSet wants its pods at (None until its controller observed its spec)
    and how many pods to roll: ``replicas``, the desired count (MMs above it are being evacuated
    by a scale-down), or every pod the StatefulSet keeps (``keep_all``: a refused scale-down)."""
    if sts is None:
        return RoleTarget(replicas, None)
    meta, spec, status = sts.get("metadata") or {}, sts.get("spec") or {}, sts.get("status") or {}
    observed = int(status.get("observedGeneration") or 0) >= int(meta.get("generation") or 0)
    revision = status.get("updateRevision") if observed else None
    kept = int(spec.get("replicas") or replicas)
    return RoleTarget(kept if keep_all else min(replicas, kept), str(revision) if revision else None)


def roll_pod(name: str, role: str, pod: Body) -> RollPod:
    meta = pod.get("metadata") or {}
    return RollPod(
        name=name,
        role=role,
        revision=(meta.get("labels") or {}).get(names.LABEL_REVISION),
        ready=observe.pod_ready(pod) and observe.pod_failure(pod) is None,
        deleting=bool(meta.get("deletionTimestamp")),
        marked=role == ROLE_MM and observe.marked_for_roll(pod),
    )


def roll_input(
    snapshot: observe.Snapshot,
    statefulsets: Iterable[Body],
    state: ClusterState,
    settings: ClusterSettings,
    scale_down_refused: bool = False,
) -> RollInput:
    by_name = {str((s.get("metadata") or {}).get("name")): s for s in statefulsets}
    targets = {
        role: role_target(
            by_name.get(names.statefulset_name(settings.name, role)),
            replicas,
            role == ROLE_MM and scale_down_refused,
        )
        for role, replicas in ((ROLE_MM, settings.mm_replicas), (ROLE_CM, settings.cm_replicas))
    }
    pods = [roll_pod(n, role, p) for role in (ROLE_MM, ROLE_CM) for n, p in snapshot.pods_of(role).items()]
    parts = [
        RollPartition(
            info.name,
            tuple(info.status.replicas),
            tuple(info.status.in_sync),
            required_in_sync(info.spec, state.spec),
        )
        for info in state.partitions
        if info.status is not None and not info.deleting
    ]
    return RollInput(targets=targets, pods=pods, partitions=parts)


def _pod_uid(snapshot: observe.Snapshot, name: str) -> str | None:
    pod = next((p for p in snapshot.pods if (p.get("metadata") or {}).get("name") == name), None)
    return str((pod or {}).get("metadata", {}).get("uid") or "") or None


def _annotate(namespace: str, pod: str, value: str | None, snapshot: observe.Snapshot) -> bool:
    """Set (None: remove) the roll mark on the pod the decision saw; False: gone or replaced."""
    # The uid makes the patch a precondition (409 on a successor of the same name).
    meta: dict[str, Any] = {"annotations": {names.ANNOTATION_ROLL: value}}
    uid = _pod_uid(snapshot, pod)
    if uid:
        meta["uid"] = uid
    try:
        kube.merge_patch("v1", "Pod", namespace, pod, {"metadata": meta})
    except kube.KubeError as exc:
        if exc.not_found or exc.conflict:
            return False
        raise
    return True


def take_step(namespace: str, decision: RollDecision, snapshot: observe.Snapshot) -> str | None:
    """Mark, unmark or delete as decided (only the pod the decision saw: a successor of the same
    name is left alone); what was done, for the Event."""
    if decision.mark is not None:
        marked = _annotate(namespace, decision.mark, names.ROLL_MOVING_REPLICAS, snapshot)
        return "RollMovingReplicas" if marked else None
    if decision.unmark is not None:
        return "RollUnmarked" if _annotate(namespace, decision.unmark, None, snapshot) else None
    uid = _pod_uid(snapshot, decision.delete) if decision.delete else None
    if decision.delete is not None and kube.delete("v1", "Pod", namespace, decision.delete, uid=uid):
        return "RollRestartingPod"
    return None


class RollReporter:
    """Events about the roll: each step taken, and each change of what it waits for; and since when
    an MM's restart is decided (``settle_restart``: kept in memory, a restarted operator waits
    the few seconds again)."""

    def __init__(self) -> None:
        self.last_reason: str | None = None
        self.restart_since: tuple[str, float] | None = None

    def report(self, ref: Mapping[str, Any], decision: RollDecision, step: str | None) -> None:
        body = kopf.Body(cast(kopf.RawBody, ref))
        first = self.last_reason is None
        if step is not None:
            kopf.event(body, type="Normal", reason=step, message=decision.message)
        elif decision.reason != self.last_reason and not (first and decision.reason == DONE):
            kopf.event(body, type="Normal", reason=f"Roll{decision.reason}", message=decision.message)
        self.last_reason = decision.reason


async def reconcile_roll(
    snapshot: observe.Snapshot,
    statefulsets: Iterable[Body],
    state: ClusterState,
    settings: ClusterSettings,
    reporter: RollReporter,
    ref: Mapping[str, Any],
    scale_down_refused: bool = False,
) -> RollDecision | None:
    """One step of the roll; the decision for the status (None: not known this round)."""
    decision = plan_roll(roll_input(snapshot, statefulsets, state, settings, scale_down_refused))
    if not decision.known:
        return None
    decision, reporter.restart_since = settle_restart(decision, reporter.restart_since, time.monotonic())
    step = None
    if decision.mark is not None or decision.unmark is not None or decision.delete is not None:
        step = await asyncio.to_thread(take_step, settings.namespace, decision, snapshot)
    reporter.report(ref, decision, step)
    return decision
