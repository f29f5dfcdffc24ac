"""The failover story: observations in (pods, partitions, producer acks), a timeline out.

`Timeline` holds the events with their times relative to the kill. `FailoverTracker` is armed with
the victim (the primary MM of a fixed partition) just before the pod is deleted and turns what the
watches and the producers report into the milestones of the story:

    pod lost -> Partition status updated (epoch+1, new primary) -> producers resumed
             -> on-demand partition drained -> garbage collected

`missing()` lists the milestones that did not happen: the demo fails with them rather than
pretending. Every method is thread-safe (watch threads, load thread, main thread).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from hybridmq_demo.state import DemoState, PartitionRow, PodRow

FIXED = "fixed"
ON_DEMAND = "on-demand"


@dataclass(frozen=True)
class Event:
    at: float  # time.monotonic()
    kind: str  # kill | lost | status | resumed | drained | gc | info | error
    text: str


class Timeline:
    def __init__(self, state: DemoState) -> None:
        self.state = state
        self.kill_at: float | None = None
        self.events: list[Event] = []
        self._lock = threading.Lock()

    def rel(self, at: float) -> str:
        if self.kill_at is None:
            return "      -"
        return f"{at - self.kill_at:+7.2f}s"

    def add(self, kind: str, text: str, at: float | None = None) -> Event:
        event = Event(time.monotonic() if at is None else at, kind, text)
        with self._lock:
            self.events.append(event)
            self.events.sort(key=lambda e: e.at)
        self.state.emit(f"timeline {self.rel(event.at)}  {text}")
        return event

    def snapshot(self) -> list[Event]:
        with self._lock:
            return list(self.events)


@dataclass
class _Producer:
    type: str
    partition: str
    affected: bool = False
    last_ack_before: float | None = None
    resumed_at: float | None = None
    errors: int = 0


@dataclass
class _Story:
    victim: str
    victim_uid: str
    fixed: dict[str, int]  # fixed partition -> epoch at the kill (victim was its primary)
    on_demand: set[str]  # on-demand partitions whose primary was the victim
    lost_at: float | None = None
    updated: dict[str, float] = field(default_factory=dict)
    drained: dict[str, float] = field(default_factory=dict)
    collected: dict[str, float] = field(default_factory=dict)
    replacement_ready: bool = False
    back_in_sync: set[str] = field(default_factory=set)


class FailoverTracker:
    def __init__(self, state: DemoState, timeline: Timeline) -> None:
        self.state = state
        self.timeline = timeline
        self._lock = threading.RLock()
        self._story: _Story | None = None
        self._producers: dict[str, _Producer] = {}
        self._known_partitions: set[str] = set()

    # ---------------------------------------------------------------------------------- setup
    def register_producer(self, name: str, type_: str, partition: str) -> None:
        with self._lock:
            self._producers[name] = _Producer(type_, partition)

    def arm(self, victim: str, victim_uid: str) -> _Story:
        """Record what the victim leads (from the current partitions) and which producers it hits."""
        partitions = self.state.all_partitions()
        with self._lock:
            fixed = {p.name: p.epoch for p in partitions if p.type == FIXED and p.primary == victim}
            on_demand = {p.name for p in partitions if p.type == ON_DEMAND and p.primary == victim}
            self._known_partitions = {p.name for p in partitions}
            story = _Story(victim, victim_uid, fixed, on_demand)
            self._story = story
            for producer in self._producers.values():
                producer.affected = producer.partition in fixed or producer.partition in on_demand
            return story

    def mark_kill(self, text: str) -> None:
        now = time.monotonic()
        self.timeline.kill_at = now
        self.timeline.add("kill", text, now)

    @property
    def armed(self) -> bool:
        return self._story is not None

    @property
    def victim(self) -> str | None:
        return self._story.victim if self._story else None

    def victim_on_demand(self) -> set[str]:
        """On-demand partitions whose primary was the victim (empty before `arm`)."""
        return set(self._story.on_demand) if self._story else set()

    def affected_producers(self) -> list[str]:
        with self._lock:
            return sorted(n for n, p in self._producers.items() if p.affected)

    # ---------------------------------------------------------------------------- observations
    def on_pod(self, row: PodRow, uid: str) -> None:
        story = self._story
        if story is None or row.name != story.victim:
            return
        with self._lock:
            if uid == story.victim_uid and row.deleting and story.lost_at is None:
                story.lost_at = time.monotonic()
                self.timeline.add("lost", f"pod lost: {row.name} is terminating (deletion observed)")
            elif uid != story.victim_uid and row.ready and not story.replacement_ready:
                story.replacement_ready = True
                self.timeline.add("info", f"replacement pod {row.name} Ready (rejoins as a backup)")

    def on_pod_deleted(self, name: str, uid: str) -> None:
        story = self._story
        if story is None or name != story.victim or uid != story.victim_uid:
            return
        with self._lock:
            if story.lost_at is None:
                story.lost_at = time.monotonic()
                self.timeline.add("lost", f"pod lost: {name} deleted")
            else:
                self.timeline.add("info", f"pod {name} gone (process stopped, object removed)")

    def on_partition(self, row: PartitionRow, old: PartitionRow | None) -> None:
        story = self._story
        if story is None:
            return
        with self._lock:
            if row.name in story.fixed:
                self._fixed_update(story, row)
            elif row.name in story.on_demand:
                self._on_demand_update(story, row, old)
            elif row.name not in self._known_partitions and row.type == ON_DEMAND:
                self._known_partitions.add(row.name)
                self.timeline.add(
                    "info", f"new on-demand partition {row.name} (primary {row.primary or 'pending'})"
                )

    def _fixed_update(self, story: _Story, row: PartitionRow) -> None:
        epoch0 = story.fixed[row.name]
        if (
            row.name not in story.updated
            and row.epoch > epoch0
            and row.primary not in (None, "", story.victim)
        ):
            story.updated[row.name] = time.monotonic()
            self.timeline.add(
                "status",
                f"Partition {row.name} status updated: epoch {epoch0}->{row.epoch},"
                f" primary {story.victim}->{row.primary} ({row.state})",
            )
        if (
            row.name in story.updated
            and row.name not in story.back_in_sync
            and len(row.in_sync) >= row.spec_replicas
        ):
            story.back_in_sync.add(row.name)
            self.timeline.add(
                "info", f"{row.name} back to {len(row.in_sync)} in-sync replicas ({', '.join(row.in_sync)})"
            )

    def _on_demand_update(self, story: _Story, row: PartitionRow, old: PartitionRow | None) -> None:
        if old is not None and (old.state, old.primary) != (row.state, row.primary):
            moved = (
                f", primary {old.primary or '-'}->{row.primary or '-'}" if old.primary != row.primary else ""
            )
            self.timeline.add(
                "info", f"on-demand {row.name}: {old.state}->{row.state}{moved} (backlog {row.backlog})"
            )
        if row.drained and row.name not in story.drained:
            story.drained[row.name] = time.monotonic()
            self.timeline.add("drained", f"on-demand partition {row.name} drained ({row.drain_status()})")

    def on_partition_deleted(self, name: str) -> None:
        story = self._story
        if story is None or name not in story.on_demand:
            return
        with self._lock:
            if name not in story.collected:
                story.collected[name] = time.monotonic()
                self.timeline.add("gc", f"on-demand partition {name} garbage collected (Partition deleted)")

    def on_ack(self, producer: str, partition: str, at: float) -> None:
        """An acknowledged send round of `producer` on `partition` at `at` (monotonic).

        An affected producer has resumed at its first ack after the kill that comes from the new
        placement: on a fixed victim partition only once its new epoch was observed (acks in
        between come from the old primary, still finishing in-flight work), for an on-demand
        producer on any partition but the victim's."""
        kind, message = "", ""
        with self._lock:
            p = self._producers.get(producer)
            story, kill_at = self._story, self.timeline.kill_at
            if p is None:
                return
            if story is None or kill_at is None or at < kill_at or not p.affected or p.resumed_at is not None:
                if p.resumed_at is None:
                    p.last_ack_before = at
                p.partition = partition
                return
            if self._old_placement(story, partition, at):
                # In-flight work the old primary finished while shutting down: not a resumption.
                p.last_ack_before = at
            else:
                stall = at - (p.last_ack_before or kill_at)
                p.resumed_at = at
                before, p.partition = p.partition, partition
                row = self.state.partition(partition)
                epoch = f", epoch {row.epoch}" if row else ""
                where = "same partition" if partition == before else f"moved from {before}"
                kind, message = (
                    "resumed",
                    f"producer {producer} resumed: first ack on {partition} ({where}{epoch}),"
                    f" stalled {stall:.2f}s",
                )
        if message:
            self.timeline.add(kind, message, at)

    @staticmethod
    def _old_placement(story: _Story, partition: str, at: float) -> bool:
        if partition in story.on_demand:
            return True
        if partition in story.fixed:
            updated = story.updated.get(partition)
            return updated is None or at < updated
        return False

    def on_producer_error(self, producer: str, error: str) -> None:
        with self._lock:
            p = self._producers.get(producer)
            if p is None:
                return
            p.errors += 1
            first = p.errors == 1
        if first:
            self.timeline.add("error", f"producer {producer}: send failed: {error}")

    def note(self, text: str) -> None:
        self.timeline.add("info", text)

    # ------------------------------------------------------------------------------- verdicts
    def status_updated(self) -> bool:
        story = self._story
        return story is not None and bool(story.fixed) and set(story.updated) == set(story.fixed)

    def producers_resumed(self) -> bool:
        with self._lock:
            return all(p.resumed_at is not None for p in self._producers.values() if p.affected)

    def on_demand_done(self) -> bool:
        story = self._story
        return story is not None and set(story.collected) == story.on_demand

    def missing(self) -> list[str]:
        """Milestones of the story that have not happened (empty: the whole story was seen)."""
        story = self._story
        if story is None:
            return ["no pod was killed"]
        out: list[str] = []
        if story.lost_at is None:
            out.append(f"pod {story.victim} was never seen terminating or deleted")
        if not story.fixed:
            out.append(f"{story.victim} led no fixed partition at the kill")
        for name, epoch in sorted(story.fixed.items()):
            if name not in story.updated:
                row = self.state.partition(name)
                now = f"epoch {row.epoch}, primary {row.primary or '-'}, {row.state}" if row else "gone"
                out.append(f"Partition {name} status never moved past epoch {epoch} on a new primary ({now})")
        with self._lock:
            stuck = sorted(n for n, p in self._producers.items() if p.affected and p.resumed_at is None)
        if stuck:
            out.append(f"producers never resumed after the kill: {', '.join(stuck)}")
        for name in sorted(story.on_demand):
            if name not in story.drained and name not in story.collected:
                row = self.state.partition(name)
                now = row.drain_status() if row else "gone"
                out.append(f"on-demand partition {name} was not seen drained ({now})")
            elif name not in story.collected:
                row = self.state.partition(name)
                now = row.drain_status() if row else "gone"
                out.append(f"on-demand partition {name} was not garbage collected ({now})")
        return out

    def summary(self) -> str:
        story = self._story
        if story is None or self.timeline.kill_at is None:
            return "no failover"
        k = self.timeline.kill_at
        parts = [f"victim={story.victim}"]
        if story.updated:
            parts.append(f"status_updated={max(story.updated.values()) - k:.2f}s")
        with self._lock:
            resumed = [p.resumed_at for p in self._producers.values() if p.affected and p.resumed_at]
        if resumed:
            parts.append(f"producers_resumed={max(resumed) - k:.2f}s")
        if story.collected:
            parts.append(f"on_demand_collected={max(story.collected.values()) - k:.2f}s")
        return " ".join(parts)
