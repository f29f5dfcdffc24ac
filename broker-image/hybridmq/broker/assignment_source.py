"""Where a broker learns partition placement and the broker table.

``AssignmentSource`` is the seam between the broker and whoever decides placement (the operator in
Kubernetes, the local controller in broker-only mode). ``StaticAssignmentSource`` holds them in
memory (optionally loaded from a JSON file: ``{"brokers": [BrokerEntry...], "partitions":
[PartitionAssignment...]}``) and notifies subscribers when ``update`` replaces them.
"""

from __future__ import annotations

import abc
import asyncio
import json
from collections.abc import Callable, Iterable
from pathlib import Path

from hybridmq.api.assignment import BrokerEntry, BrokerRole, PartitionAssignment, PartitionType

Listener = Callable[[], None]


class AssignmentSource(abc.ABC):
    def __init__(self) -> None:
        self._listeners: list[Listener] = []

    @abc.abstractmethod
    def partitions(self) -> dict[str, PartitionAssignment]: ...

    @abc.abstractmethod
    def brokers(self) -> dict[str, BrokerEntry]: ...

    def synced(self) -> bool:
        """The table is the decider's: its first listing arrived (a static table always is)."""
        return True

    async def start(self) -> None:  # noqa: B027 - optional hook
        """Begin watching (no-op for static sources)."""

    async def stop(self) -> None:  # noqa: B027 - optional hook
        """Stop watching."""

    async def refresh(self) -> None:  # noqa: B027 - optional hook
        """Read the whole table again now, not from a watch that may have missed changes (a
        lease-holder back from a lost lease must not act on an old table)."""

    def subscribe(self, listener: Listener) -> None:
        """Call ``listener()`` after every change."""
        self._listeners.append(listener)

    def _notify(self) -> None:
        for listener in list(self._listeners):
            listener()

    # -- convenience views ---------------------------------------------------------------------
    def primary_of(self, partition: str) -> str | None:
        a = self.partitions().get(partition)
        return a.primary if a else None

    def led_by(self, broker: str) -> list[PartitionAssignment]:
        return [a for a in self.partitions().values() if a.primary == broker]

    def message_managers(self) -> list[BrokerEntry]:
        return [b for b in self.brokers().values() if b.role == BrokerRole.MM]

    def writable(self, ptype: PartitionType) -> list[PartitionAssignment]:
        return sorted(
            (a for a in self.partitions().values() if a.type == ptype and a.writable), key=lambda a: a.name
        )


class StaticAssignmentSource(AssignmentSource):
    def __init__(
        self, partitions: Iterable[PartitionAssignment] = (), brokers: Iterable[BrokerEntry] = ()
    ) -> None:
        super().__init__()
        self._partitions = {p.name: p for p in partitions}
        self._brokers = {b.name: b for b in brokers}

    def partitions(self) -> dict[str, PartitionAssignment]:
        return self._partitions

    def brokers(self) -> dict[str, BrokerEntry]:
        return self._brokers

    def update(
        self,
        partitions: Iterable[PartitionAssignment] | None = None,
        brokers: Iterable[BrokerEntry] | None = None,
    ) -> None:
        if partitions is not None:
            self._partitions = {p.name: p for p in partitions}
        if brokers is not None:
            self._brokers = {b.name: b for b in brokers}
        self._notify()

    def to_json(self) -> str:
        return json.dumps(
            {
                "brokers": [b.model_dump(mode="json") for b in self._brokers.values()],
                "partitions": [p.model_dump(mode="json") for p in self._partitions.values()],
            },
            indent=1,
        )

    @classmethod
    def from_json(cls, text: str) -> StaticAssignmentSource:
        data = json.loads(text)
        return cls(
            [PartitionAssignment.model_validate(p) for p in data.get("partitions", [])],
            [BrokerEntry.model_validate(b) for b in data.get("brokers", [])],
        )

    @classmethod
    def from_file(cls, path: str | Path) -> StaticAssignmentSource:
        return cls.from_json(Path(path).read_text())


class FileAssignmentSource(StaticAssignmentSource):
    """A static source that re-reads its JSON file when it changes (used by ``hybridmq local``)."""

    def __init__(self, path: str | Path, poll_s: float = 0.5) -> None:
        src = StaticAssignmentSource.from_file(path)
        super().__init__(src.partitions().values(), src.brokers().values())
        self.path = Path(path)
        self.poll_s = poll_s
        self._mtime = self.path.stat().st_mtime_ns
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._watch())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.poll_s)
            try:
                mtime = self.path.stat().st_mtime_ns
                if mtime != self._mtime:
                    self._mtime = mtime
                    src = StaticAssignmentSource.from_file(self.path)
                    self.update(src.partitions().values(), src.brokers().values())
            except (OSError, ValueError):
                continue
