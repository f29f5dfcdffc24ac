"""Connection distribution through real processes: 3 CMs, centralized and de-centralized."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest

from hybridmq.client.connection import ClientError, connect
from hybridmq.client.directory import DirectoryClient, make_strategy
from hybridmq.client.distribution import RoundRobin
from hybridmq.local.runner import LocalCluster
from hybridmq.protocol import Connection


@pytest.fixture(scope="module")
def cms3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    d = tmp_path_factory.mktemp("dist")
    registrations = d / "directory.json"
    registrations.write_text(
        json.dumps({"applications": {"pinned": {"cms": ["cm-1"]}, "capped": {"max_per_cm": 1}}})
    )
    c = LocalCluster(
        d / "run",
        mms=1,
        cms=3,
        fixed_per_mm=1,
        on_demand_per_mm=1,
        cm_args=["--directory-config", str(registrations)],
    )
    with c:
        yield c


async def open_many(cluster: LocalCluster, app: str, n: int, mode: str) -> list[tuple[Connection, str]]:
    strategy = make_strategy(cluster.bootstraps, mode, app=app)
    out = []
    for _ in range(n):
        conn, hello = await connect(cluster.bootstraps, app=app, strategy=strategy)
        out.append((conn, str(hello["node"])))
    return out


def close_all(conns: list[tuple[Connection, str]]) -> None:
    for conn, _ in conns:
        conn.close()


async def test_centralized_spreads_connections_evenly(cms3: LocalCluster) -> None:
    conns = await open_many(cms3, "spread", 10, "centralized")
    try:
        per_cm = {c: sum(1 for _, node in conns if node == c) for c in cms3.cm_names}
        assert max(per_cm.values()) - min(per_cm.values()) <= 1, per_cm
        # The application table is the union of every CM's sessions, whichever CM answers.
        for cm in cms3.cm_names:
            table = await DirectoryClient(f"127.0.0.1:{cms3.cm_ports[cm]}").applications()
            assert {c: apps.get("spread", 0) for c, apps in table.items()} == per_cm
    finally:
        close_all(conns)


async def test_centralized_is_consistent_whichever_cm_answers(cms3: LocalCluster) -> None:
    nodes = []
    conns = []
    for i in range(9):
        asker = DirectoryClient(f"127.0.0.1:{cms3.cm_ports[cms3.cm_names[i % 3]]}")
        conn, hello = await connect(await asker.next_cm("any-cm"), app="any-cm")
        conns.append(conn)
        nodes.append(str(hello["node"]))
    for conn in conns:
        conn.close()
    assert sorted(nodes.count(c) for c in cms3.cm_names) == [3, 3, 3]


async def test_static_registration_pins_and_caps(cms3: LocalCluster) -> None:
    pinned = await open_many(cms3, "pinned", 3, "centralized")
    capped = await open_many(cms3, "capped", 3, "centralized")
    try:
        assert {node for _, node in pinned} == {"cm-1"}
        assert sorted(node for _, node in capped) == ["cm-0", "cm-1", "cm-2"]
        with pytest.raises(ClientError, match="no CM available"):
            await DirectoryClient(cms3.bootstraps).next_cm("capped")
    finally:
        close_all(pinned + capped)


async def test_decentralized_refreshes_and_stops_choosing_a_dead_cm(cms3: LocalCluster) -> None:
    strategy = make_strategy(cms3.bootstraps, "round-robin", app="rr")
    assert isinstance(strategy, RoundRobin)
    before = await open_many_with(cms3, strategy, 6)
    assert sorted({node for _, node in before}) == ["cm-0", "cm-1", "cm-2"]
    close_all(before)
    cms3.kill_cm("cm-2")
    after = await open_many_with(cms3, strategy, 9)
    try:
        assert {node for _, node in after} == {"cm-0", "cm-1"}
        await asyncio.sleep(0.3)  # past the directory's peer cache
        await strategy.refresh()
        assert sorted(strategy.table) == sorted(f"127.0.0.1:{cms3.cm_ports[c]}" for c in ("cm-0", "cm-1"))
        # centralized distribution leaves the dead CM out as well
        central = await open_many(cms3, "after-kill", 4, "centralized")
        assert {node for _, node in central} == {"cm-0", "cm-1"}
        close_all(central)
    finally:
        close_all(after)


async def open_many_with(cluster: LocalCluster, strategy: RoundRobin, n: int) -> list[tuple[Connection, str]]:
    out = []
    for _ in range(n):
        conn, hello = await connect(cluster.bootstraps, app="rr", strategy=strategy)
        out.append((conn, str(hello["node"])))
    return out
