"""The backlog an MM reports (Partition status, ``kubectl get hpart``) counts user messages only:
the cursor snapshots the MM writes into the same log take offsets but are no messages."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from host_wire import store, store_control

from hybridmq.broker.log.config import LogConfig
from hybridmq.broker.log.control import CursorCommit
from hybridmq.broker.mm.replica_manager import visible_backlog
from hybridmq.broker.mm.storage import PartitionStorage


@dataclass
class Cursor:
    low: int

    def lw(self) -> int:
        return self.low


@dataclass
class Host:
    storage: PartitionStorage
    states: dict[str, Cursor] = field(default_factory=dict)


def test_backlog_counts_messages_not_cursor_records(tmp_path: Path) -> None:
    storage = PartitionStorage.open(tmp_path / "p", LogConfig(fsync="never"))
    starts = []
    for i in range(20):  # 200 messages in batches of 10, a cursor snapshot after each few batches
        starts.append(storage.end_offset)
        store(storage, "queue:q", 10, b"x" * 10)
        if i % 3 == 2:
            store_control(storage, [CursorCommit(subscription="q:queue:q", offset=0)])
    storage.visible_end = storage.end_offset
    assert storage.end_offset > 200  # offsets count the control records too
    host = Host(storage, {"q:queue:q": Cursor(0)})
    assert visible_backlog(host) == 200  # type: ignore[arg-type]
    # The first 10 batches consumed: 100 messages left, whatever cursor records sit among them.
    host.states["q:queue:q"] = Cursor(starts[10])
    assert visible_backlog(host) == 100  # type: ignore[arg-type]
    storage.close()

    # After a restart (or a promotion) the MM finds the cursor records again by scanning the log.
    reopened = PartitionStorage.open(tmp_path / "p", LogConfig(fsync="never"))
    for batch in reopened.scan(0):
        if batch.control:
            reopened.note_control(batch.base, batch.n)
    reopened.visible_end = reopened.end_offset
    assert visible_backlog(Host(reopened, {"q:queue:q": Cursor(0)})) == 200  # type: ignore[arg-type]
    reopened.close()
