"""What the demo knows right now: pods, partitions, producers, rates, the current step and a log.

Written by the watch threads, the load thread and the main thread; read by the view. One lock
guards everything; readers take a `snapshot()` (plain copies) so rendering never holds it long.
Every change worth a line in a CI log goes through `emit()`, which the headless view prints.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace

Listener = Callable[[float, str], None]


@dataclass(frozen=True)
class PodRow:
    name: str
    role: str
    ip: str
    phase: str
    ready: bool
    restarts: int
    deleting: bool = False
    reason: str = ""  # waiting/terminated reason, e.g. CrashLoopBackOff

    def describe(self) -> str:
        state = "deleting" if self.deleting else self.phase
        extra = f" ({self.reason})" if self.reason else ""
        return (
            f"pod {self.name} [{self.role}] {state}{extra} ready={self.ready} ip={self.ip or '-'}"
            f" restarts={self.restarts}"
        )


@dataclass(frozen=True)
class PartitionRow:
    name: str
    type: str
    state: str
    primary: str
    epoch: int
    backlog: int
    in_sync: tuple[str, ...]
    replicas: tuple[str, ...]
    spec_replicas: int
    accept_writes: bool = True
    deleting: bool = False
    producers: int = 0
    reported_epoch: int | None = None  # epoch of the primary's report that backlog comes from

    def describe(self) -> str:
        return (
            f"partition {self.name} [{self.type}] {self.state}{' (deleting)' if self.deleting else ''}"
            f" primary={self.primary or '-'} epoch={self.epoch} backlog={self.backlog}"
            f" in-sync={','.join(self.in_sync) or '-'}"
        )

    def drain_status(self) -> str:
        reported = "no report" if self.reported_epoch is None else f"reported at epoch {self.reported_epoch}"
        return f"{self.state}, backlog {self.backlog} ({reported}), producers {self.producers}"

    @property
    def drained(self) -> bool:
        """Drained, or Draining with a zero backlog reported by the current primary."""
        fresh = self.reported_epoch is not None and self.reported_epoch >= self.epoch
        return self.state == "Drained" or (self.state == "Draining" and self.backlog == 0 and fresh)

    def salient(self) -> tuple[object, ...]:
        """The fields whose change deserves a log line (backlog alone does not)."""
        return (self.state, self.primary, self.epoch, self.in_sync, self.replicas, self.deleting)


@dataclass(frozen=True)
class ProducerRow:
    name: str
    type: str
    partition: str = "-"
    acked: int = 0
    errors: int = 0
    status: str = "starting"
    last_ack: float = 0.0  # monotonic


class RateMeter:
    """A cumulative counter and its rate over the last `window` seconds (sampled by `sample()`)."""

    def __init__(self, window: float = 2.0) -> None:
        self.window = window
        self.total = 0
        self._samples: deque[tuple[float, int]] = deque()

    def add(self, n: int = 1) -> None:
        self.total += n

    def sample(self, now: float) -> float:
        self._samples.append((now, self.total))
        while len(self._samples) > 2 and now - self._samples[1][0] >= self.window:
            self._samples.popleft()
        t0, n0 = self._samples[0]
        return (self.total - n0) / (now - t0) if now > t0 else 0.0


@dataclass
class Snapshot:
    step: str
    step_elapsed: float
    elapsed: float
    node: str
    pods: list[PodRow]
    partitions: list[PartitionRow]
    producers: list[ProducerRow]
    produce_rate: float
    consume_rate: float
    acked: int
    consumed: int
    log: list[tuple[float, str]]
    progress: str


@dataclass
class DemoState:
    started: float = field(default_factory=time.monotonic)
    step: str = "starting"
    step_started: float = field(default_factory=time.monotonic)
    progress: str = ""
    node: str = "-"
    pods: dict[str, PodRow] = field(default_factory=dict)
    partitions: dict[str, PartitionRow] = field(default_factory=dict)
    #: partition name -> type, kept after the partition is gone (the audit needs it)
    partition_types: dict[str, str] = field(default_factory=dict)
    producers: dict[str, ProducerRow] = field(default_factory=dict)
    produced: RateMeter = field(default_factory=RateMeter)
    consumed: RateMeter = field(default_factory=RateMeter)
    log: deque[tuple[float, str]] = field(default_factory=lambda: deque(maxlen=200))
    listeners: list[Listener] = field(default_factory=list)
    lock: threading.RLock = field(default_factory=threading.RLock)

    # ------------------------------------------------------------------------------ steps & log
    def emit(self, message: str) -> None:
        """A line for the log panel (Live) or stdout (headless)."""
        now = time.monotonic()
        with self.lock:
            self.log.append((now, message))
            listeners = list(self.listeners)
        for listener in listeners:
            listener(now, message)

    def set_step(self, step: str) -> None:
        with self.lock:
            self.step = step
            self.step_started = time.monotonic()
            self.progress = ""
        self.emit(f"== {step}")

    def set_progress(self, text: str) -> None:
        """The current step's progress (shown live; not logged, so it may change often)."""
        with self.lock:
            self.progress = text

    def set_node(self, text: str) -> None:
        with self.lock:
            changed = text != self.node
            self.node = text
        if changed:
            self.emit(f"node {text}")

    # ----------------------------------------------------------------------------- kube objects
    def upsert_pod(self, row: PodRow) -> PodRow | None:
        """Store `row`; returns the previous row. Logs the change when something visible changed."""
        with self.lock:
            old = self.pods.get(row.name)
            self.pods[row.name] = row
        if old != row:
            self.emit(row.describe())
        return old

    def remove_pod(self, name: str) -> PodRow | None:
        with self.lock:
            old = self.pods.pop(name, None)
        if old is not None:
            self.emit(f"pod {name} deleted")
        return old

    def upsert_partition(self, row: PartitionRow) -> PartitionRow | None:
        with self.lock:
            old = self.partitions.get(row.name)
            self.partitions[row.name] = row
            self.partition_types[row.name] = row.type
        if old is None or old.salient() != row.salient():
            self.emit(row.describe())
        return old

    def remove_partition(self, name: str) -> PartitionRow | None:
        with self.lock:
            old = self.partitions.pop(name, None)
        if old is not None:
            self.emit(f"partition {name} deleted")
        return old

    # -------------------------------------------------------------------------------- producers
    def update_producer(self, name: str, **changes: object) -> ProducerRow:
        with self.lock:
            row = self.producers.get(name) or ProducerRow(name=name, type=str(changes.get("type", "?")))
            row = replace(row, **changes)  # type: ignore[arg-type]
            self.producers[name] = row
            return row

    def record_acks(self, name: str, partition: str, n: int, now: float) -> None:
        with self.lock:
            row = self.producers.get(name)
            if row is not None:
                self.producers[name] = replace(
                    row, acked=row.acked + n, partition=partition, last_ack=now, status="producing"
                )
            self.produced.add(n)

    def record_consumed(self, n: int) -> None:
        with self.lock:
            self.consumed.add(n)

    # --------------------------------------------------------------------------------- reading
    def snapshot(self) -> Snapshot:
        now = time.monotonic()
        with self.lock:
            return Snapshot(
                step=self.step,
                step_elapsed=now - self.step_started,
                elapsed=now - self.started,
                node=self.node,
                pods=sorted(self.pods.values(), key=lambda p: (p.role, p.name)),
                partitions=sorted(self.partitions.values(), key=lambda p: (p.type != "fixed", p.name)),
                producers=sorted(self.producers.values(), key=lambda p: p.name),
                produce_rate=self.produced.sample(now),
                consume_rate=self.consumed.sample(now),
                acked=self.produced.total,
                consumed=self.consumed.total,
                log=list(self.log),
                progress=self.progress,
            )

    def partition(self, name: str) -> PartitionRow | None:
        with self.lock:
            return self.partitions.get(name)

    def all_partitions(self) -> list[PartitionRow]:
        with self.lock:
            return list(self.partitions.values())

    def all_pods(self) -> list[PodRow]:
        with self.lock:
            return list(self.pods.values())
