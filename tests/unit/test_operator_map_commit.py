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
    rec = SimpleNamespace(map=store)
    return await partitions._commit_primaries(
        cast(Any, rec), cast(Any, None), grown, {"p0": _body(["a"])}, logging.getLogger("test")
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
