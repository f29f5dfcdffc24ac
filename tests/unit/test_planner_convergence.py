"""Convergence of the planner: after any history of cluster events, planning again and again with
no further external event reaches a fixed point within a bounded number of rounds.

A random history (MMs killed, SIGSTOPped, continued, revived, added, scaled down and removed,
gracefully stopped and restarted, unready, given failure domains; fixed partitions added) runs
against simulated brokers: the world below applies every plan, copies a new backup in a few rounds
(its own catch-up model, not the planner's), and lets each primary report its in-sync set at its
epoch, empty on-demand partitions, and the data each MM still stores. Then the external events stop
(optionally after healing every MM) and the planner must settle: no partition changes for a few
rounds, no table and broker state coming back (a loop), and, on a healthy cluster, every fixed
partition fully replicated and in sync on distinct MMs with primaries balanced within one.

Both entries are exercised: the operator's ``plan()`` with ``apply_changes`` and the local
controller's ``plan_assignments()``. The checks are this file's own; the planner only makes plans.
``HYBRIDMQ_MODEL_EXAMPLES`` sets the examples per entry (``make adversarial`` runs more).
"""

from __future__ import annotations

import os
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hybridmq.api.assignment import PartitionAssignment, PartitionType
from hybridmq.api.resources import BrokerClusterSpec
from hybridmq.planner import (
    ClusterState,
    MessageManager,
    MessageManagersEvacuated,
    PartitionInfo,
    Plan,
    ReplicaReport,
    apply_changes,
    plan,
    plan_assignments,
)

EXAMPLES = int(os.environ.get("HYBRIDMQ_MODEL_EXAMPLES", "100"))
START = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
# Rounds without any change (and no copy left to catch up) that count as a fixed point: longer than
# the on-demand retention the examples use, so a pending deletion is not mistaken for rest.
QUIET_ROUNDS = 4
MAX_CATCH_UP = 3  # rounds a new backup may take to catch up


@dataclass
class Broker:
    """One MM as the simulated world sees it."""

    name: str
    alive: bool = True  # process up, lease fresh
    silent: bool = False  # SIGSTOPped with a fresh lease: its old report stands, it copies nothing
    ready: bool = True
    leaving: bool = False
    stopping: bool = False
    domain: str | None = None

    @property
    def serving(self) -> bool:
        return self.alive and not self.silent


@dataclass(frozen=True)
class Row:
    """One partition as a plan left it, whichever entry made the plan."""

    name: str
    fixed: bool
    target: int
    primary: str | None
    replicas: tuple[str, ...]
    in_sync: tuple[str, ...]
    epoch: int
    deleting: bool = False
    written: str = ""  # everything the plan wrote about it (for telling a loop from progress)


@dataclass
class World:
    """The brokers: they follow every plan and copy new backups in a few rounds."""

    spec: BrokerClusterSpec
    brokers: dict[str, Broker]
    delays: random.Random
    now: datetime = START
    # (partition, MM) -> rounds before that copy has caught up (0: in sync).
    lag: dict[tuple[str, str], int] = field(default_factory=dict)
    last_reports: dict[str, ReplicaReport] = field(default_factory=dict)
    added: int = 0

    def catch_up(self) -> None:
        for (part, mm), left in self.lag.items():
            if left and self.brokers.get(mm, Broker(mm, alive=False)).serving:
                self.lag[(part, mm)] = left - 1

    def follow(self, rows: Sequence[Row]) -> None:
        """Apply a plan: a copy of a partition seen for the first time starts in sync (its log is
        empty everywhere), a new backup of an existing one catches up; dropped copies are deleted."""
        known = {part for part, _ in self.lag}
        wanted: set[tuple[str, str]] = set()
        for row in rows:
            if row.deleting:
                continue
            for mm in row.replicas:
                wanted.add((row.name, mm))
                if (row.name, mm) not in self.lag:
                    fresh = row.name not in known
                    self.lag[(row.name, mm)] = 0 if fresh else self.delays.randint(1, MAX_CATCH_UP)
        for copy in [c for c in self.lag if c not in wanted]:
            del self.lag[copy]
        self.now += timedelta(seconds=1)

    def report(self, row: Row) -> ReplicaReport | None:
        """The primary's report: its in-sync set at its epoch, and an empty partition (producers
        moved, backlog consumed) so that draining on-demand partitions get collected."""
        if row.primary is None or row.deleting:
            return None
        primary = self.brokers.get(row.primary)
        if primary is None or not primary.alive:
            return None
        if primary.silent:
            old = self.last_reports.get(row.name)
            return old if old is not None and old.reporter == row.primary else None
        in_sync = tuple(
            mm
            for mm in row.replicas
            if mm == row.primary
            or (self.lag.get((row.name, mm)) == 0 and self.brokers.get(mm, Broker(mm, alive=False)).serving)
        )
        report = ReplicaReport(reporter=row.primary, epoch=row.epoch, in_sync=in_sync)
        self.last_reports[row.name] = report
        return report

    def stored(self, mm: str) -> frozenset[str] | None:
        if not self.brokers[mm].serving:
            return None
        return frozenset(part for part, holder in self.lag if holder == mm)

    def quiescent(self) -> bool:
        """No copy on a serving MM is still catching up."""
        return not any(left and self.brokers[mm].serving for (_, mm), left in self.lag.items())

    def fingerprint(self, rows: Sequence[Row]) -> tuple[Any, ...]:
        return (tuple(sorted((r.name, r.written) for r in rows)), tuple(sorted(self.lag.items())))


@dataclass(frozen=True)
class Outcome:
    rows: tuple[Row, ...]
    changed: bool
    events: tuple[str, ...]
    safe_to_remove: frozenset[str]


def _events(result: Plan) -> tuple[str, ...]:
    return tuple(f"{e.reason}: {e.message}" for c in result.changes for e in getattr(c, "events", ()))


class Entry(Protocol):
    def round(self, world: World) -> Outcome: ...


class OperatorEntry:
    """The operator's path: ``plan(ClusterState)`` then ``apply_changes``."""

    def __init__(self) -> None:
        self.partitions: tuple[PartitionInfo, ...] = ()

    def rows(self) -> tuple[Row, ...]:
        out = []
        for p in self.partitions:
            s = p.status
            if s is None:
                continue
            out.append(
                Row(
                    p.name,
                    p.spec.type == PartitionType.FIXED,
                    p.spec.replicas,
                    s.primary,
                    tuple(s.replicas),
                    tuple(s.in_sync),
                    s.epoch,
                    p.deleting,
                    f"{p.deleting} {p.finalizers} {s.model_dump_json()}",
                )
            )
        return tuple(out)

    def round(self, world: World) -> Outcome:
        mms = tuple(
            MessageManager(
                name=b.name,
                alive=b.alive,
                ready=b.ready,
                leaving=b.leaving,
                stopping=b.stopping and b.alive,
                lost_reason=None if b.alive else "lease expired",
                stored=world.stored(b.name) if b.alive else None,
                domain=b.domain,
            )
            for b in world.brokers.values()
        )
        rows = {r.name: r for r in self.rows()}
        infos = tuple(
            replace(p, report=world.report(rows[p.name]) if p.name in rows else None) for p in self.partitions
        )
        state = ClusterState("conv", world.spec, mms, infos, world.now)
        result = plan(state)
        self.partitions = apply_changes(state, result.changes).partitions
        # A Partition written (MessageManagersEvacuated repeats while an MM waits for its removal).
        changed = any(not isinstance(c, MessageManagersEvacuated) for c in result.changes)
        return Outcome(self.rows(), changed, _events(result), result.safe_to_remove)


class LocalEntry:
    """``hybridmq local``'s path: ``plan_assignments`` over its table (no domains, no readiness)."""

    def __init__(self) -> None:
        self.table: tuple[PartitionAssignment, ...] = ()

    def rows(self, world: World) -> tuple[Row, ...]:
        targets = {
            PartitionType.FIXED: world.spec.partitions.fixed.replicas,
            PartitionType.ON_DEMAND: world.spec.partitions.on_demand.replicas,
        }
        return tuple(
            Row(
                a.name,
                a.type == PartitionType.FIXED,
                targets[a.type],
                a.primary,
                a.replicas,
                a.in_sync,
                a.epoch,
                written=a.model_dump_json(),
            )
            for a in self.table
        )

    def round(self, world: World) -> Outcome:
        live = [b.name for b in world.brokers.values() if b.alive]
        reports = {r.name: rep for r in self.rows(world) if (rep := world.report(r)) is not None}
        result = plan_assignments(
            self.table,
            live,
            cluster="conv",
            spec=world.spec,
            reports=reports,
            leaving=[b.name for b in world.brokers.values() if b.leaving],
            stopping=[b.name for b in world.brokers.values() if b.stopping],
            now=world.now,
        )
        changed = result.assignments != self.table or any(
            not isinstance(c, MessageManagersEvacuated) for c in result.plan.changes
        )
        self.table = result.assignments
        return Outcome(self.rows(world), changed, _events(result.plan), result.plan.safe_to_remove)


def run_round(entry: Entry, world: World) -> Outcome:
    world.catch_up()
    outcome = entry.round(world)
    world.follow(outcome.rows)
    return outcome


# ---- histories ---------------------------------------------------------------------------------

KINDS = ("kill", "revive", "sigstop", "sigcont", "add", "leave", "stay", "remove", "term", "restart", "grow")
OPERATOR_KINDS = (*KINDS, "unready", "ready", "zone")
ZONES = ("a", "b", "c", None)


def histories(kinds: Sequence[str]) -> st.SearchStrategy[list[tuple[str, int, int]]]:
    """(event, which MM, planning rounds after it)."""
    event = st.tuples(st.sampled_from(kinds), st.integers(0, 7), st.integers(0, 3))
    return st.lists(event, max_size=14)


@dataclass(frozen=True)
class Setup:
    """A cluster's start, small enough to read in a failing example."""

    fixed: int
    replicas: int
    min_in_sync: int
    on_demand_per_mm: int
    on_demand_replicas: int
    retention_s: int
    domains: tuple[str | None, ...]  # one per MM
    seed: int  # the catch-up delays

    def world(self) -> World:
        spec = BrokerClusterSpec.model_validate(
            {
                "partitions": {
                    "fixed": {"count": self.fixed, "replicas": self.replicas, "minInSync": self.min_in_sync},
                    "onDemand": {
                        "perMessageManager": self.on_demand_per_mm,
                        "replicas": self.on_demand_replicas,
                        "retentionAfterDrainSeconds": self.retention_s,
                    },
                }
            }
        )
        brokers = {f"mm-{i}": Broker(f"mm-{i}", domain=d) for i, d in enumerate(self.domains)}
        return World(spec, brokers, random.Random(self.seed))


@st.composite
def setups(draw: Any, zones: bool) -> Setup:
    replicas = draw(st.integers(1, 3))
    domain = st.sampled_from(ZONES) if zones else st.none()
    return Setup(
        fixed=draw(st.integers(0, 8)),
        replicas=replicas,
        min_in_sync=draw(st.integers(1, replicas)),
        on_demand_per_mm=draw(st.integers(0, 1)),
        on_demand_replicas=draw(st.integers(1, 2)),
        retention_s=draw(st.sampled_from([0, 2])),
        domains=tuple(draw(st.lists(domain, min_size=1, max_size=5))),
        seed=draw(st.integers(0, 2**32)),
    )


def _pick(world: World, index: int) -> Broker | None:
    names = sorted(world.brokers)
    return world.brokers[names[index % len(names)]] if names else None


def apply_event(world: World, kind: str, index: int, last: Outcome | None) -> None:
    """One external event (anything but the planner's own doing)."""
    if kind == "add":
        world.added += 1
        name = f"mm-x{world.added}"
        world.brokers[name] = Broker(
            name, domain=ZONES[index % len(ZONES)] if any(b.domain for b in world.brokers.values()) else None
        )
        return
    if kind == "remove":  # the StatefulSet scaled down: the evacuated MMs that still leave go
        gone = last.safe_to_remove if last else frozenset()
        for name in [n for n in gone if n in world.brokers and world.brokers[n].leaving]:
            del world.brokers[name]
        return
    if kind == "grow":
        fixed = world.spec.partitions.fixed
        world.spec = world.spec.model_copy(
            update={
                "partitions": world.spec.partitions.model_copy(
                    update={"fixed": fixed.model_copy(update={"count": fixed.count + 1})}
                )
            }
        )
        return
    b = _pick(world, index)
    if b is None:
        return
    if kind == "kill":  # crash, pod deleted, or a SIGSTOP that outlived the lease
        b.alive, b.silent = False, False
    elif kind == "revive":  # back with its disk: its copies resume where they were
        b.alive = True
    elif kind == "sigstop":
        b.silent = True
        for copy in [c for c in world.lag if c[1] == b.name]:
            world.lag[copy] = max(world.lag[copy], 1)  # it falls behind while stopped
    elif kind == "sigcont":
        b.silent = False
    elif kind == "leave":
        b.leaving = True
    elif kind == "stay":
        b.leaving = False
    elif kind == "term":  # SIGTERM: graceful handoff
        b.stopping = True
    elif kind == "restart":  # a new process on the same disk: it re-syncs what it holds
        b.stopping, b.silent, b.alive = False, False, True
        for copy in [c for c in world.lag if c[1] == b.name]:
            world.lag[copy] = world.delays.randint(1, MAX_CATCH_UP)
    elif kind == "unready":
        b.ready = False
    elif kind == "ready":
        b.ready = True
    elif kind == "zone":
        b.domain = ZONES[(index // 8) % len(ZONES)] if b.domain is None else None
    else:
        raise AssertionError(kind)


def heal(world: World) -> None:
    for b in world.brokers.values():
        b.alive, b.silent, b.ready, b.leaving, b.stopping = True, False, True, False, False


# ---- the property ------------------------------------------------------------------------------


def round_bound(world: World) -> int:
    """Rounds the planner may take to settle: a paced step (a catch-up, then the report that
    confirms it) per partition and per MM, plus slack. Runs of thousands of examples settle
    within half of it."""
    parts = world.spec.partitions
    partitions = parts.fixed.count + len(world.brokers) * (parts.on_demand.per_message_manager + 1)
    return 10 + (MAX_CATCH_UP + 2) * (partitions + len(world.brokers))


def settle(entry: Entry, world: World) -> tuple[Outcome, int]:
    """Plan with no external event until QUIET_ROUNDS rounds change nothing; fail on a loop or when
    the bound passes. Returns the last outcome and the rounds it took."""
    bound = round_bound(world)
    seen: dict[tuple[Any, ...], int] = {}
    recent: list[tuple[str, ...]] = []
    quiet = 0
    for n in range(bound):
        outcome = run_round(entry, world)
        recent = [*recent[-5:], outcome.events]
        quiet = 0 if outcome.changed or not world.quiescent() else quiet + 1
        if quiet >= QUIET_ROUNDS:
            return outcome, n + 1
        if outcome.changed:
            key = world.fingerprint(outcome.rows)
            assert key not in seen, (
                f"livelock: the same table and broker state came back after {n - seen[key]} rounds; "
                f"last events: {recent}"
            )
            seen[key] = n
    raise AssertionError(f"no fixed point within {bound} rounds; last events: {recent}")


def check_rest(rows: Sequence[Row], world: World, healed: bool) -> None:
    """What a cluster at rest looks like, by this file's own reckoning."""
    for r in rows:
        if r.deleting:
            continue
        assert len(set(r.replicas)) == len(r.replicas), f"{r.name}: two copies on one MM: {r.replicas}"
        assert set(r.replicas) <= set(world.brokers), f"{r.name}: a copy on a removed MM: {r.replicas}"
        report = world.report(r)
        if report is not None and report.epoch == r.epoch:
            # At rest the table says what the brokers say (else a move keeps undoing itself unseen).
            told = set(report.in_sync) & set(r.replicas)
            assert set(r.in_sync) == told, f"{r.name}: table {r.in_sync}, brokers {report.in_sync}"
    if not healed:
        return
    mms = sorted(world.brokers)
    fixed = [r for r in rows if r.fixed and not r.deleting]
    assert len(fixed) >= world.spec.partitions.fixed.count
    for r in fixed:
        want = min(r.target, len(mms))
        assert r.primary is not None, f"{r.name}: no primary on a healthy cluster"
        assert len(r.replicas) == want, f"{r.name}: {len(r.replicas)} copies, wanted {want}: {r.replicas}"
        assert set(r.in_sync) == set(r.replicas), f"{r.name}: {r.in_sync} of {r.replicas} in sync at rest"
        assert all(world.lag.get((r.name, mm)) == 0 for mm in r.replicas), f"{r.name}: a copy still behind"
    if len(mms) < world.spec.partitions.fixed.replicas:
        return  # failed-over partitions stay Migrating, waiting for an MM to add: nothing is balanced
    led = Counter({mm: 0 for mm in mms} | Counter(r.primary for r in fixed))
    assert max(led.values(), default=0) - min(led.values(), default=0) <= 1, f"primaries not balanced: {led}"
    domains = {b.name: b.domain for b in world.brokers.values()}
    if all(domains.values()):
        for r in fixed:
            used = [domains[mm] for mm in r.replicas]
            if len(set(domains.values())) >= len(r.replicas):
                assert len(set(used)) == len(used), f"{r.name}: replicas share a failure domain: {used}"


def run_history(entry: Entry, world: World, history: Sequence[tuple[str, int, int]], healed: bool) -> None:
    last = run_round(entry, world)
    for kind, index, rounds in history:
        apply_event(world, kind, index, last)
        for _ in range(rounds):
            last = run_round(entry, world)
    if healed:
        heal(world)
    outcome, _ = settle(entry, world)
    check_rest(outcome.rows, world, healed)


SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(setups(zones=True), histories(OPERATOR_KINDS), st.booleans())
def test_the_operators_planning_converges(
    setup: Setup, history: list[tuple[str, int, int]], healed: bool
) -> None:
    run_history(OperatorEntry(), setup.world(), history, healed)


@SETTINGS
@given(setups(zones=False), histories(KINDS), st.booleans())
def test_the_local_controllers_planning_converges(
    setup: Setup, history: list[tuple[str, int, int]], healed: bool
) -> None:
    run_history(LocalEntry(), setup.world(), history, healed)
