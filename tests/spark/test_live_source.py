"""LiveClusterSource against a stand-in for the fetch API it expects from ``hybridmq.client``."""

from typing import Any

import pyarrow as pa
import pytest

import hybridmq.client as client
from hybridmq.client import ClientError
from hybridmq.spark.live import UNKNOWN_PARTITION, CommittedEndBehindError, LiveClusterSource
from hybridmq.spark.schema import COLUMNS, ROW_SCHEMA
from hybridmq.spark.source import PartitionGoneError, PartitionInfo


class FakeFetcher:
    """Two batches on "fixed-0" (a control batch between them); nothing else exists."""

    batches: list[dict[str, Any]] = [
        {"base_offset": 0, "count": 3, "destination": "queue:o", "producer_id": "7", "producer_epoch": 0,
         "base_sequence": 0, "control": False,
         "records": [[b"a", b"k", {"h": 1, "b": b"\x00", "n": None}, 1_780_000_000_000],
                     [b"b", None, None, 1_780_000_000_001],
                     [b"c", "s", {}, 1_780_000_000_002]]},
        {"base_offset": 3, "count": 1, "control": True, "records": []},
        {"base_offset": 4, "count": 2, "destination": "queue:o", "producer_id": "7", "producer_epoch": 1,
         "base_sequence": 0, "control": False,
         "records": [[b"d", None, {"t": "text", "f": 1.5}, 1_780_000_000_003],
                     [b"e", None, None, 1_780_000_000_004]]},
    ]  # fmt: skip

    @classmethod
    async def connect(cls, bootstrap: str, **kwargs: Any) -> "FakeFetcher":
        return cls()

    async def partitions(self) -> list[dict[str, Any]]:
        return [{"name": "fixed-0", "type": "fixed", "start_offset": 0, "end_offset": 6}]

    async def fetch(self, partition: str, offset: int, *, max_offset: int, max_bytes: int) -> dict[str, Any]:
        if partition != "fixed-0":
            raise ClientError(UNKNOWN_PARTITION, partition)
        return {"batches": [b for b in self.batches if b["base_offset"] + b["count"] > offset]}

    async def close(self) -> None:
        pass


@pytest.fixture
def fake_fetch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client, "Fetcher", FakeFetcher, raising=False)


def test_reads_ranges_into_the_row_schema(fake_fetch: None) -> None:
    source = LiveClusterSource("127.0.0.1:1")
    assert source.list_partitions() == [PartitionInfo("fixed-0", "fixed", 0, 6)]
    table = pa.Table.from_batches(list(source.read_range("fixed-0", 1, 6, COLUMNS)))
    assert table.schema.equals(ROW_SCHEMA)
    rows = table.to_pylist()
    assert [r["offset"] for r in rows] == [1, 2, 4, 5]
    assert [(r["producer_id"], r["sequence"]) for r in rows] == [("7", 1), ("7", 2), ("7.1", 0), ("7.1", 1)]
    assert rows[1]["key"] == b"s" and rows[1]["headers"] is None and rows[0]["partition_type"] == "fixed"
    # header values are bytes as a Kafka client sends them, not Python reprs
    assert rows[2]["headers"] == [{"key": "t", "value": b"text"}, {"key": "f", "value": b"1.5"}]
    first = pa.Table.from_batches(list(source.read_range("fixed-0", 0, 1, ["headers"]))).to_pylist()[0]
    assert first["headers"] == [
        {"key": "h", "value": b"1"}, {"key": "b", "value": b"\x00"}, {"key": "n", "value": None}
    ]  # fmt: skip


def test_unknown_partition_is_gone(fake_fetch: None) -> None:
    with pytest.raises(PartitionGoneError):
        list(LiveClusterSource("127.0.0.1:1").read_range("od-9", 0, 5, COLUMNS))


class LateFetcher(FakeFetcher):
    """Serves nothing at or past offset 4 for the first ``empty_answers`` fetches there, as a new
    primary does until it learns the committed end again (then ``end_offset`` is 4)."""

    empty_answers = 3
    answered = 0

    async def fetch(self, partition: str, offset: int, *, max_offset: int, max_bytes: int) -> dict[str, Any]:
        if offset >= 4 and LateFetcher.answered < self.empty_answers:
            LateFetcher.answered += 1
            return {"batches": [], "end_offset": 4}
        below = [b for b in self.batches if b["base_offset"] + b["count"] > offset and b["base_offset"] < 4]
        return {"batches": below if offset < 4 else [b for b in self.batches if b["base_offset"] >= 4]}


def test_a_range_whose_end_is_briefly_not_committed_is_read_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """A range planned up to 6 meets a primary whose committed end is 4 for a while: the read waits
    and returns all of it (before, it returned offsets 0-2 and the stream went on past 6)."""
    LateFetcher.answered = 0
    monkeypatch.setattr(client, "Fetcher", LateFetcher, raising=False)
    rows = pa.Table.from_batches(list(LiveClusterSource("127.0.0.1:1").read_range("fixed-0", 0, 6, COLUMNS)))
    assert rows.column("offset").to_pylist() == [0, 1, 2, 4, 5]
    assert LateFetcher.answered == 3


def test_a_range_whose_end_stays_uncommitted_fails_the_read(monkeypatch: pytest.MonkeyPatch) -> None:
    LateFetcher.answered = 0
    monkeypatch.setattr(LateFetcher, "empty_answers", 10**9)
    monkeypatch.setattr(client, "Fetcher", LateFetcher, raising=False)
    with pytest.raises(CommittedEndBehindError, match=r"\[4, 6\).*committed end is 4"):
        list(LiveClusterSource("127.0.0.1:1", timeout=1.0).read_range("fixed-0", 0, 6, COLUMNS))
