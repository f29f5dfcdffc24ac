"""The operator's write of the assignment map before a round's status writes: when that write
fails, a status that would name a removed replica again waits."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any, cast

from hybridmq.api.assignment_map import MapEntry
from hybridmq.api.resources import PartitionStatus
from hybridmq.planner import Plan, UpdatePartitionStatus
from hybridmq_operator.assignment_map import MapTooLarge
from hybridmq_operator.handlers import partitions


def _status(in_sync: list[str]) -> PartitionStatus:
    return PartitionStatus.model_validate(
        {"state": "Active", "epoch": 4, "primary": "a", "replicas": ["a", "c"], "inSync": in_sync}
    )


class _Map:
    def __init__(self, entries: dict[str, MapEntry], fail: bool) -> None:
        self.entries = entries
        self.fail = fail
        self.written: list[dict[str, MapEntry]] = []

    def write(self, settings: Any, entries: dict[str, MapEntry]) -> None:
        if self.fail:
            raise MapTooLarge("too large")
        self.written.append(dict(entries))
        self.entries = dict(entries)


def _body(in_sync: list[str]) -> dict[str, Any]:
    return {
        "metadata": {"name": "p0", "uid": "u0", "resourceVersion": "102"},
        "status": _status(in_sync).model_dump(mode="json", by_alias=True),
    }


async def _commit(store: _Map) -> frozenset[str]:
    grown = Plan(
        changes=(UpdatePartitionStatus(name="p0", status=_status(["a", "c"]), reason="R", message=""),)
    )
    rec = SimpleNamespace(map=store, as_written={"p0": _body(["a"])})
    return await partitions._commit_primaries(
        cast(Any, rec), cast(Any, None), grown, logging.getLogger("test")
    )


async def test_a_grown_in_sync_set_waits_while_the_entry_that_removed_it_cannot_leave_the_map() -> None:
    removal = MapEntry.of("u0", _status(["a"]), "100")
    assert await _commit(_Map({"p0": removal}, fail=True)) == {"p0"}
    # Written: the entry is dropped first and nothing waits.
    store = _Map({"p0": removal}, fail=False)
    assert await _commit(store) == frozenset()
    assert store.written == [{}]
    # No entry in the way: a failed write holds nothing back.
    assert await _commit(_Map({}, fail=True)) == frozenset()


async def test_the_map_is_judged_against_the_partitions_as_written_not_as_the_map_has_them() -> None:
    """The map promoted a at epoch 4; the Partition as written is still at epoch 3. The round's plan
    (made from the map's view) drops c from the in-sync set at epoch 4: the entry it commits still
    raises the epoch of the Partition as written, and the promotion is not lost from the map."""
    promoted = MapEntry.of("u0", _status(["a", "c"]))
    store = _Map({"p0": promoted}, fail=False)
    behind = _body(["b", "a"])
    behind["status"]["epoch"] = 3
    narrower = Plan(
        changes=(UpdatePartitionStatus(name="p0", status=_status(["a"]), reason="R", message=""),)
    )
    rec = SimpleNamespace(map=store, as_written={"p0": behind})
    held = await partitions._commit_primaries(
        cast(Any, rec), cast(Any, None), narrower, logging.getLogger("t")
    )
    assert held == frozenset()
    (written,) = store.written
    assert written["p0"].resource_version == "" and written["p0"].status.epoch == 4
    assert written["p0"].status.in_sync == ["a"]
