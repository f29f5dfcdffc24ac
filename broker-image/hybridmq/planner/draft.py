"""The planner's working copy of each partition's status, and the read-only context of a round.

A ``Draft`` is mutated by the planning steps (failover, evacuation, placement, ...) and turned back
into a ``PartitionStatus`` at the end; only drafts whose status differs become changes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from hybridmq.api.resources import (
    PARTITION_FINALIZER,
    Condition,
    ConditionStatus,
    FailoverRecord,
    PartitionSpec,
    PartitionState,
    PartitionStatus,
    PartitionType,
    set_condition,
)
from hybridmq.planner.changes import PlanEvent
from hybridmq.planner.state import ClusterState, MessageManager, PartitionInfo, natural_key

__all__ = ["Context", "Draft"]


class Context:
    """Read-only facts of one planning round, precomputed once."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.cluster = state.cluster
        self.spec = state.spec
        self.now = state.now
        self.mms: dict[str, MessageManager] = {m.name: m for m in state.message_managers}
        self.alive: frozenset[str] = frozenset(m.name for m in state.message_managers if m.alive)
        self.leaving: frozenset[str] = frozenset(
            m.name for m in state.message_managers if m.alive and m.leaving
        )
        self.stopping: frozenset[str] = frozenset(
            m.name for m in state.message_managers if m.alive and m.stopping
        )
        # Replicas to move off: a scale-down's or a graceful stop's (the same make-before-break).
        self.moving_off: frozenset[str] = self.leaving | self.stopping
        # Alive, ready, not leaving: may receive new replicas. Natural order for determinism.
        self.eligible: tuple[str, ...] = tuple(
            sorted((m.name for m in state.message_managers if m.eligible), key=natural_key)
        )
        self.eligible_set = frozenset(self.eligible)
        self.domains: dict[str, str | None] = {m.name: m.domain for m in state.message_managers}

    def is_alive(self, mm: str) -> bool:
        return mm in self.alive

    def lost_reason(self, mm: str) -> str:
        info = self.mms.get(mm)
        if info is None:
            return "message manager no longer exists"
        return info.lost_reason or "message manager lost"

    def why_moving(self, mm: str) -> str:
        return "stopping" if mm in self.stopping else "scale-down"

    def lost_for_seconds(self, mm: str) -> float:
        info = self.mms.get(mm)
        if info is None or info.lost_since is None:
            return 0.0
        return max(0.0, (self.now - info.lost_since).total_seconds())

    def reported_offset(self, mm: str, partition: str) -> int | None:
        info = self.mms.get(mm)
        if info is None:
            return None
        return info.log_end_offsets.get(partition)


@dataclass(slots=True)
class Draft:
    """Mutable status of one partition during a round."""

    name: str
    spec: PartitionSpec
    original: PartitionStatus | None
    deleting: bool
    finalizers: tuple[str, ...]
    generation: int | None
    state: PartitionState
    epoch: int
    primary: str | None
    replicas: list[str]
    in_sync: list[str]
    accept_writes: bool
    replica_offsets: dict[str, int]
    log_end_offset: int
    committed_offset: int
    backlog: int
    producers: int
    reader_lag: int
    drained_since: datetime | None
    reported_epoch: int | None
    last_failover: FailoverRecord | None
    conditions: list[Condition]
    events: list[PlanEvent] = field(default_factory=list)
    created: bool = False

    @classmethod
    def from_info(cls, info: PartitionInfo) -> Draft:
        st = info.status or PartitionStatus()
        return cls(
            name=info.name,
            spec=info.spec,
            original=info.status,
            deleting=info.deleting,
            finalizers=info.finalizers,
            generation=info.generation,
            state=st.state,
            epoch=st.epoch,
            primary=st.primary,
            replicas=list(st.replicas),
            in_sync=[r for r in st.in_sync if r in st.replicas],
            accept_writes=st.accept_writes,
            replica_offsets=dict(st.replica_offsets),
            log_end_offset=st.log_end_offset,
            committed_offset=st.committed_offset,
            backlog=st.backlog,
            producers=st.producers,
            reader_lag=st.reader_lag,
            drained_since=st.drained_since,
            reported_epoch=st.reported_epoch,
            last_failover=st.last_failover,
            conditions=list(st.conditions),
        )

    @classmethod
    def new(cls, name: str, spec: PartitionSpec) -> Draft:
        return cls(
            name=name,
            spec=spec,
            original=None,
            deleting=False,
            finalizers=(PARTITION_FINALIZER,),
            generation=1,  # what the API server gives a new object
            state=PartitionState.PENDING,
            epoch=0,
            primary=None,
            replicas=[],
            in_sync=[],
            accept_writes=True,
            replica_offsets={},
            log_end_offset=0,
            committed_offset=0,
            backlog=0,
            producers=0,
            reader_lag=0,
            drained_since=None,
            reported_epoch=None,
            last_failover=None,
            conditions=[],
            created=True,
        )

    # ---- queries -------------------------------------------------------------------------------

    @property
    def type(self) -> PartitionType:
        return self.spec.type

    @property
    def target(self) -> int:
        return self.spec.replicas

    @property
    def is_on_demand(self) -> bool:
        return self.spec.type == PartitionType.ON_DEMAND

    @property
    def placed(self) -> bool:
        return bool(self.replicas)

    @property
    def draining(self) -> bool:
        return self.state in (PartitionState.DRAINING, PartitionState.DRAINED)

    def rank(self, mm: str) -> int:
        return self.replicas.index(mm)

    def offset_of(self, mm: str) -> int:
        return self.replica_offsets.get(mm, -1)

    # ---- edits ---------------------------------------------------------------------------------

    def event(self, reason: str, message: str, warning: bool = False) -> None:
        self.events.append(PlanEvent(reason, message, warning))

    def drop(self, mm: str) -> None:
        """Remove ``mm`` from the replica set (not the primary)."""
        if mm in self.replicas:
            self.replicas.remove(mm)
        if mm in self.in_sync:
            self.in_sync.remove(mm)
        self.replica_offsets.pop(mm, None)

    def promote(self, mm: str) -> None:
        """Make ``mm`` (an in-sync replica) primary at the next epoch; rank 0 in the replica list."""
        if mm not in self.in_sync:
            raise ValueError(f"{self.name}: refusing to promote {mm}, which is not in sync")
        self.primary = mm
        self.epoch += 1
        self.replicas.remove(mm)
        self.replicas.insert(0, mm)
        self.in_sync.remove(mm)
        self.in_sync.insert(0, mm)

    # ---- output --------------------------------------------------------------------------------

    def to_status(self, now: datetime) -> PartitionStatus:
        conditions = self._conditions(now)
        return PartitionStatus(
            state=self.state,
            epoch=self.epoch,
            primary=self.primary,
            replicas=list(self.replicas),
            in_sync=[r for r in self.replicas if r in self.in_sync],
            accept_writes=self.accept_writes,
            replica_offsets={r: o for r, o in self.replica_offsets.items() if r in self.replicas},
            log_end_offset=self.log_end_offset,
            committed_offset=self.committed_offset,
            backlog=self.backlog,
            producers=self.producers,
            reader_lag=self.reader_lag,
            drained_since=self.drained_since,
            reported_epoch=self.reported_epoch,
            last_failover=self.last_failover,
            observed_generation=self.generation
            if self.generation is not None
            else (self.original.observed_generation if self.original else None),
            conditions=conditions,
        )

    def _conditions(self, now: datetime) -> list[Condition]:
        conds = self.conditions
        if self.primary is not None and self.state in (
            PartitionState.ACTIVE,
            PartitionState.DRAINING,
            PartitionState.MIGRATING,
        ):
            ready, reason = True, self.state.value
            message = f"primary {self.primary} at epoch {self.epoch}"
        elif self.state == PartitionState.DRAINED:
            ready, reason, message = False, "Drained", "drained; waiting for deletion"
        elif not self.replicas:
            ready, reason, message = False, "Unplaced", "no message manager available for a replica"
        else:
            ready, reason = False, "NoPrimary"
            message = "no in-sync replica is alive; waiting for one to return"
        conds = set_condition(conds, "Ready", ready, reason, message, now, self.generation)
        wanted = 1 if self.draining else self.target
        short = len(self.in_sync) < wanted
        conds = set_condition(
            conds,
            "UnderReplicated",
            ConditionStatus.TRUE if short else ConditionStatus.FALSE,
            "InSyncBelowReplicas" if short else "AllInSync",
            f"{len(self.in_sync)} of {wanted} replicas in sync",
            now,
            self.generation,
        )
        return conds
