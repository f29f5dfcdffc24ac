"""The CM's routing: a partition's traffic goes to the primary the table names, at the table's
epoch, and only over a link that is up; otherwise the client's error says which case it is."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import pytest

from hybridmq.api.assignment import PartitionAssignment, PartitionType
from hybridmq.api.frames import ErrorCode
from hybridmq.broker.assignment_source import StaticAssignmentSource
from hybridmq.broker.routing import Routes, Unroutable


@dataclass
class FakeConn:
    closed: bool = False


@dataclass
class FakeLink:
    conn: FakeConn | None


def table(**primaries: tuple[str | None, int]) -> StaticAssignmentSource:
    return StaticAssignmentSource(
        [
            PartitionAssignment(
                name=name, type=PartitionType.FIXED, primary=mm, epoch=epoch, replicas=(mm or "mm-x",)
            )
            for name, (mm, epoch) in primaries.items()
        ]
    )


def routes(links: dict[str, FakeLink], **primaries: tuple[str | None, int]) -> Routes[Any]:
    return Routes(table(**primaries), cast(dict[str, Any], links))  # duck-typed connections


def test_primary_is_the_tables_with_its_epoch() -> None:
    up = FakeLink(FakeConn())
    r = routes({"mm-0": up, "mm-1": FakeLink(FakeConn())}, p0=("mm-0", 7))
    route = r.primary("p0")
    assert route.link is up and route.conn is up.conn and route.epoch == 7
    assert route.assignment is not None and route.assignment.name == "p0"


@pytest.mark.parametrize("link", [None, FakeLink(None), FakeLink(FakeConn(closed=True))])
def test_a_primary_whose_link_is_down_is_unavailable(link: FakeLink | None) -> None:
    links = {"mm-1": FakeLink(FakeConn())} | ({"mm-0": link} if link is not None else {})
    r = routes(links, p0=("mm-0", 3))
    with pytest.raises(Unroutable) as err:
        r.primary("p0")
    assert err.value.code == ErrorCode.MM_UNAVAILABLE and "p0" in err.value.msg
    assert not r.up("mm-0") and r.up("mm-1") and r.live() == ["mm-1"]


def test_no_primary_in_the_table_is_unavailable() -> None:
    r = routes({"mm-0": FakeLink(FakeConn())}, p0=(None, 3))
    with pytest.raises(Unroutable) as err:
        r.primary("p0")
    assert err.value.code == ErrorCode.MM_UNAVAILABLE


def test_unknown_partition() -> None:
    r = routes({"mm-0": FakeLink(FakeConn())}, p0=("mm-0", 1))
    with pytest.raises(Unroutable) as err:
        r.primary("nope")
    assert err.value.code == ErrorCode.UNKNOWN_PARTITION and "'nope'" in err.value.msg


def test_an_internal_log_goes_to_its_mm_at_epoch_zero() -> None:
    mm1 = FakeLink(FakeConn())
    r = routes({"mm-0": FakeLink(FakeConn()), "mm-1": mm1}, p0=("mm-0", 4))
    route = r.primary("_log.mm-1", internal_owner="mm-1")
    assert route.link is mm1 and route.epoch == 0 and route.assignment is None
    assert r.primary("p0", internal_owner="mm-1").epoch == 4  # a table entry wins


def test_the_table_and_the_links_are_read_live() -> None:
    links: dict[str, FakeLink] = {}
    source = table(p0=("mm-0", 1))
    r: Routes[Any] = Routes(source, cast(dict[str, Any], links))
    with pytest.raises(Unroutable):
        r.primary("p0")
    links["mm-0"] = FakeLink(FakeConn())  # the CM linked the MM after the routes were made
    assert r.primary("p0").epoch == 1
    links["mm-0"].conn = FakeConn(closed=True)
    assert r.open_conns() == [] and r.to("mm-0", 1) is None
