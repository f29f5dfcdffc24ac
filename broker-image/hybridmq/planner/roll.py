"""Health-gated rolling restarts: which broker pod goes next, whether it may go now, why not.

The StatefulSets use ``updateStrategy: OnDelete``, so a new pod template (image, config, resources,
env, a restart request) changes nothing until the operator deletes a pod. This function decides,
from what the pods and Partitions say right now (level-based: an operator restarted mid-roll
decides the same again), one step at a time:

* MMs first, one at a time. Which MM goes next follows Strimzi's KafkaRoller: an outdated MM that
  is not Ready anyway goes first (if it is the only one down); otherwise the highest outdated MM
  whose loss keeps every partition it holds at its minInSync in-sync copies on the other MMs
  (capped at the other replicas: a partition of 2 copies and minInSync 2 still rolls, its copy is
  moved first). A lagging copy is no reason to wait: restarting the MM that holds it takes no
  in-sync copy away. When every outdated MM would take a partition below its minInSync, the roll
  waits (``WaitingForInSync``, naming those partitions).
* The next MM is *marked*: the partition planner treats it as stopping and moves its replicas
  away, make-before-break (primaries handed to an in-sync copy at ``epoch + 1``; each replica
  replaced and dropped only once the replacement is in sync). Only when no partition names it any
  more, every other MM is Ready and every partition in sync is its pod deleted, so no second MM is
  down meanwhile (the MMs that took its replicas may still be catching up). A new pod must be
  Ready (an MM is Ready once it caught up with what it holds) before the next MM is marked.
* A marked MM that runs the current spec again (the spec was reverted mid-roll) is unmarked, not
  restarted.
* Then CMs, once every MM pod is Ready again, one at a time: the next goes once every CM pod is
  Ready (clients reconnect to the others).
* A cluster with one MM cannot move its replicas anywhere: its pod is restarted as it is.
* An MM's restart goes only once it was decided for ``SETTLE_S`` in a row (``settle_restart``):
  the MM restarted before it may have taken the next one's copies empty, gone unready on them and
  caught up, and its pod reads not Ready up to a few probes after the Partitions counted those
  copies in sync. Restarted at once, the next MM went down while the pod still read so: two MMs
  unavailable at once for the PodDisruptionBudget.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from hybridmq.planner.state import natural_key

ROLE_MM = "mm"
ROLE_CM = "cm"

# Reasons of the ``Rolling`` condition.
DONE = "Done"
WAITING_FOR_STATEFULSET = "WaitingForStatefulSet"
WAITING_FOR_READY = "WaitingForReady"
WAITING_FOR_IN_SYNC = "WaitingForInSync"
MOVING_REPLICAS = "MovingReplicas"
RESTARTING = "Restarting"
UNMARKING = "Unmarking"

SHOWN = 5  # names listed in a message at most
# How long an MM restart stays decided before the pod is deleted: the readiness probe's two
# failures a second apart, and the pod status's way to the operator on a loaded machine.
SETTLE_S = 4.0


@dataclass(frozen=True)
class RollPod:
    """A broker pod as the roll sees it."""

    name: str
    role: str  # ROLE_MM | ROLE_CM
    revision: str | None  # its controller-revision-hash label
    ready: bool
    deleting: bool = False
    marked: bool = False  # an MM whose replicas are being moved off before its restart


@dataclass(frozen=True)
class RollPartition:
    name: str
    replicas: tuple[str, ...]
    in_sync: tuple[str, ...]
    min_in_sync: int = 1  # in-sync copies its primary needs to acknowledge a write

    @property
    def out_of_sync(self) -> tuple[str, ...]:
        return tuple(r for r in self.replicas if r not in self.in_sync)

    def held_below_min_by(self, pod: str) -> bool:
        """Losing ``pod`` would leave fewer in-sync copies than minInSync, capped at the other
        replicas (with nowhere else to be in sync, the copy is moved off before the restart)."""
        floor = min(self.min_in_sync, len(self.replicas) - 1)
        return pod in self.in_sync and len(self.in_sync) - 1 < floor


@dataclass(frozen=True)
class RoleTarget:
    """What a StatefulSet asks for: ``revision`` None while its controller has not observed the
    latest spec (its ``updateRevision`` is not to be trusted yet)."""

    replicas: int
    revision: str | None


@dataclass(frozen=True)
class RollInput:
    targets: Mapping[str, RoleTarget]  # by role
    pods: Sequence[RollPod]
    partitions: Sequence[RollPartition] = ()


@dataclass(frozen=True)
class RollDecision:
    rolling: bool  # the condition's status: some pod still runs an older revision
    reason: str
    message: str
    mark: str | None = None  # MM whose replicas to move off now
    unmark: str | None = None  # MM marked for an older revision that is current again
    delete: str | None = None  # pod to delete now
    pod: str | None = None  # the pod the roll is at
    role: str | None = None  # the role of ``delete``
    updated: Mapping[str, tuple[int, int]] = field(default_factory=dict)  # role -> (done, total)
    known: bool = True  # False: a StatefulSet's revision is not known yet; keep what was said


def _ordinal(name: str) -> int:
    tail = name.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else -1


def _shown(names: Sequence[str]) -> str:
    head = ", ".join(names[:SHOWN])
    return head + (f" and {len(names) - SHOWN} more" if len(names) > SHOWN else "")


def _progress(updated: Mapping[str, tuple[int, int]]) -> str:
    mm, cm = updated.get(ROLE_MM, (0, 0)), updated.get(ROLE_CM, (0, 0))
    return f"{mm[0]}/{mm[1]} MMs and {cm[0]}/{cm[1]} CMs updated"


def _moving(held: Sequence[str], pod: str, progress: str) -> str:
    return f"moving {len(held)} partition(s) off {pod} before its restart: {_shown(held)} ({progress})"


class _Role:
    def __init__(self, role: str, target: RoleTarget, pods: Sequence[RollPod]) -> None:
        self.role = role
        self.target = target
        # Pods with an ordinal at or above the desired count are being scaled away: not rolled.
        self.pods = sorted(
            (p for p in pods if p.role == role and _ordinal(p.name) < target.replicas),
            key=lambda p: natural_key(p.name),
        )
        self.missing = target.replicas - len(self.pods)
        self.outdated = [p for p in self.pods if p.revision != target.revision]
        self.down = [p for p in self.pods if p.deleting or not p.ready]

    @property
    def done(self) -> tuple[int, int]:
        return (len(self.pods) - len(self.outdated), self.target.replicas)

    def not_ready_message(self) -> str:
        names = [p.name for p in self.down]
        if self.missing > 0:
            names.append(f"{self.missing} {self.role.upper()} pod(s) not created yet")
        return f"waiting for {_shown(names)} to be Ready"

    def broken_outdated(self, partitions: Sequence[RollPartition]) -> RollPod | None:
        """The only pod down, of the old revision, and its loss keeps every partition at its
        minInSync: replace it now (it is not serving anyway)."""
        if self.missing > 0 or len(self.down) != 1:
            return None
        pod = self.down[0]
        if pod.deleting or pod.revision == self.target.revision or _held_by(pod.name, partitions):
            return None
        return pod


def _held_by(pod: str, partitions: Sequence[RollPartition]) -> list[str]:
    """The partitions ``pod``'s restart would take below their minInSync."""
    return sorted((p.name for p in partitions if p.held_below_min_by(pod)), key=natural_key)


def plan_roll(inp: RollInput) -> RollDecision:
    """The roll's next step (see the module docstring)."""
    roles = {r: _Role(r, t, inp.pods) for r, t in inp.targets.items()}
    updated = {r: x.done for r, x in roles.items()}
    if any(x.target.revision is None for x in roles.values()):
        return RollDecision(True, WAITING_FOR_STATEFULSET, "", updated=updated, known=False)
    mms, cms = roles.get(ROLE_MM), roles.get(ROLE_CM)
    if mms is not None:
        current = [p for p in mms.pods if p.marked and p.revision == mms.target.revision and not p.deleting]
        if current:
            pod = current[0].name
            message = f"{pod} runs the current spec again: it stays, unmarked ({_progress(updated)})"
            rolling = bool(mms.outdated or (cms is not None and cms.outdated))
            return RollDecision(rolling, UNMARKING, message, unmark=pod, pod=pod, updated=updated)
    if mms is not None and (mms.outdated or any(p.marked for p in mms.pods)):
        return _step_mm(mms, inp.partitions, updated)
    if cms is not None and cms.outdated:
        if mms is not None and (mms.down or mms.missing > 0):
            # The MMs' roll ends with the last new MM Ready: a CM restart meanwhile would add
            # client reconnects to its catch-up.
            behind = sorted((p.name for p in inp.partitions if p.out_of_sync), key=natural_key)
            return _while_down(mms, inp.partitions, behind, updated)
        return _step_cm(cms, updated)
    revisions = ", ".join(f"{r.upper()}s at {x.target.revision}" for r, x in sorted(roles.items()))
    return RollDecision(False, DONE, f"every broker pod runs the current spec ({revisions})", updated=updated)


def _restart(pod: str, role: str, message: str, updated: Mapping[str, tuple[int, int]]) -> RollDecision:
    return RollDecision(True, RESTARTING, message, delete=pod, pod=pod, role=role, updated=updated)


def settle_restart(
    decision: RollDecision, since: tuple[str, float] | None, now: float, settle_s: float = SETTLE_S
) -> tuple[RollDecision, tuple[str, float] | None]:
    """``decision`` with an MM's restart held until it was decided for ``settle_s`` in a row (see
    the module docstring), and the (pod, first decided at) to pass in next round."""
    if decision.delete is None or decision.role != ROLE_MM:
        return decision, None
    if since is None or since[0] != decision.delete:
        since = (decision.delete, now)
    left = settle_s - (now - since[1])
    if left <= 0:
        return decision, since
    message = f"{decision.message}; in {left:.0f} s, once the other MMs' readiness has settled"
    return replace(decision, delete=None, message=message), since


def _while_down(
    role: _Role,
    partitions: Sequence[RollPartition],
    behind: Sequence[str],
    updated: Mapping[str, tuple[int, int]],
) -> RollDecision:
    """A pod of the role is down or missing: wait for it, unless it is an outdated pod that cannot
    come up on the old spec and whose loss keeps every partition at its minInSync (then replace
    it)."""
    progress = _progress(updated)
    broken = role.broken_outdated(partitions)
    if broken is not None:
        message = f"replacing {broken.name}, not Ready on the old spec ({progress})"
        return _restart(broken.name, role.role, message, updated)
    pod = role.down[0].name if role.down else None
    if behind:
        message = f"partitions not in sync: {_shown(behind)}; {role.not_ready_message()} ({progress})"
        return RollDecision(True, WAITING_FOR_IN_SYNC, message, pod=pod, updated=updated)
    message = f"{role.not_ready_message()} ({progress})"
    return RollDecision(True, WAITING_FOR_READY, message, pod=pod, updated=updated)


def _step_mm(
    mms: _Role, partitions: Sequence[RollPartition], updated: Mapping[str, tuple[int, int]]
) -> RollDecision:
    progress = _progress(updated)
    named: dict[str, list[str]] = {}
    for p in partitions:
        for r in p.replicas:
            named.setdefault(r, []).append(p.name)
    marked = next((p for p in mms.pods if p.marked and not p.deleting), None)
    if marked is not None and named.get(marked.name):
        message = _moving(sorted(named[marked.name], key=natural_key), marked.name, progress)
        return RollDecision(True, MOVING_REPLICAS, message, pod=marked.name, updated=updated)
    behind = sorted((p.name for p in partitions if p.out_of_sync), key=natural_key)
    lagging = sorted({r for p in partitions for r in p.out_of_sync}, key=natural_key)
    if mms.down or mms.missing > 0:
        return _while_down(mms, partitions, behind, updated)
    if marked is not None:
        # Emptied: it goes once every partition is in sync (the MMs that took its replicas may
        # still be catching up; deleting it then would make two MMs unavailable at once).
        if behind:
            message = (
                f"partitions not in sync: {_shown(behind)} (copies behind on {_shown(lagging)}) "
                f"before {marked.name}'s restart ({progress})"
            )
            return RollDecision(True, WAITING_FOR_IN_SYNC, message, pod=marked.name, updated=updated)
        return _restart(marked.name, ROLE_MM, f"restarting {marked.name} ({progress})", updated)
    holding = {p.name: _held_by(p.name, partitions) for p in mms.outdated}
    free = [p for p in mms.outdated if not holding[p.name] or len(mms.pods) == 1]
    if not free:
        held = sorted({n for names in holding.values() for n in names}, key=natural_key)
        message = (
            f"partitions at their minInSync: {_shown(held)} (copies behind on {_shown(lagging)}); "
            f"restarting {_shown(sorted(holding, key=natural_key))} would take them below ({progress})"
        )
        return RollDecision(True, WAITING_FOR_IN_SYNC, message, updated=updated)
    nxt = max(free, key=lambda p: natural_key(p.name))
    if not named.get(nxt.name) or len(mms.pods) == 1:
        return _restart(nxt.name, ROLE_MM, f"restarting {nxt.name} ({progress})", updated)
    message = _moving(sorted(named[nxt.name], key=natural_key), nxt.name, progress)
    return RollDecision(True, MOVING_REPLICAS, message, mark=nxt.name, pod=nxt.name, updated=updated)


def _step_cm(cms: _Role, updated: Mapping[str, tuple[int, int]]) -> RollDecision:
    if cms.down or cms.missing > 0:
        return _while_down(cms, (), (), updated)
    nxt = max(cms.outdated, key=lambda p: natural_key(p.name))
    return _restart(nxt.name, ROLE_CM, f"restarting {nxt.name} ({_progress(updated)})", updated)
