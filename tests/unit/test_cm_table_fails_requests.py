"""A CM fails the requests it relayed about a partition once the table says the MM no longer serves
it: when the primary moves, and when the partition leaves the table (a drained on-demand partition
deleted). Nothing else answers them while the CM's link to that MM stays up; failed, each producer
hears MM_UNAVAILABLE, resends, and moves on."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from hybridmq.api.assignment import PartitionAssignment, PartitionType
from hybridmq.broker.assignment_source import StaticAssignmentSource
from hybridmq.broker.cm.mm_links import MMLink
from hybridmq.broker.cm.server import CMConfig, ConnectionManager
from hybridmq.protocol.connection import ConnectionClosed


class LinkConnection:
    """The CM's connection to an MM, as far as relaying goes: each request waits for an answer."""

    def __init__(self) -> None:
        self.closed = False

    def request_nowait(self, frame: dict[str, Any]) -> asyncio.Future[Any]:
        return asyncio.get_running_loop().create_future()


def _on_demand(name: str, primary: str) -> PartitionAssignment:
    return PartitionAssignment(
        name=name, type=PartitionType.ON_DEMAND, primary=primary, replicas=(primary,), in_sync=(primary,)
    )


@pytest.mark.parametrize("change", ["deleted", "moved"])
async def test_requests_about_a_partition_the_mm_left_fail(change: str) -> None:
    source = StaticAssignmentSource([_on_demand("od-1", "mm-1"), _on_demand("od-2", "mm-1")])
    cm = ConnectionManager(CMConfig(name="cm-0", cluster_secret="s"), source)
    source.subscribe(cm._on_table)
    link = MMLink("mm-1", "127.0.0.1:1", "cm-0", "s", 1 << 20, lambda link, frame: None, _nothing)
    link.conn = LinkConnection()  # type: ignore[assignment]
    cm.links["mm-1"] = link
    source.update()  # the CM learns who leads what
    gone = link.request("od-1", {"t": 11, "p": "od-1"})
    kept = link.request("od-2", {"t": 11, "p": "od-2"})

    if change == "deleted":
        source.update([_on_demand("od-2", "mm-1")])
    else:
        source.update([_on_demand("od-1", "mm-2"), _on_demand("od-2", "mm-1")])

    assert gone.done() and isinstance(gone.exception(), ConnectionClosed), gone
    assert not kept.done(), "a request about a partition the MM still leads was failed"
    kept.cancel()


async def _nothing(link: MMLink) -> None:
    return None
