"""The directory's choice of CM, its application table, leases and the consumer's duplicate filter."""

from __future__ import annotations

import pytest

from hybridmq.api.assignment import BrokerEntry, BrokerRole
from hybridmq.broker.cm.directory import Directory, NoCMAvailable, Registration, count_sessions, pick_cm
from hybridmq.broker.cm.markers import MARKER_HEADER as BROKER_MARKER_HEADER
from hybridmq.client.affinity import MARKER_HEADER
from hybridmq.client.affinity_group import Leases, adopter
from hybridmq.client.directory import make_strategy
from hybridmq.client.distribution import Centralized, RoundRobin


def cm(name: str, ready: bool = True) -> BrokerEntry:
    return BrokerEntry(name=name, role=BrokerRole.CM, address=f"127.0.0.1:{name[-1]}000", ready=ready)


def test_pick_cm_fewest_then_name_within_registration() -> None:
    counts = {"cm-0": {"a": 2}, "cm-1": {"a": 1}, "cm-2": {"a": 1, "b": 9}}
    assert pick_cm("a", ["cm-0", "cm-1", "cm-2"], counts, None) == "cm-1"
    assert pick_cm("a", ["cm-0", "cm-2"], counts, Registration(cms=("cm-0",))) == "cm-0"
    with pytest.raises(NoCMAvailable):
        pick_cm("a", ["cm-0", "cm-1"], counts, Registration(max_per_cm=1))
    assert count_sessions(["a", "_directory", "a", "b"]) == {"a": 2, "b": 1}


async def test_directory_balances_with_pending_and_drops_dead_peers() -> None:
    local: dict[str, int] = {}
    peers = {"cm-1": {"x": 0}, "cm-2": {"x": 0}}
    alive = {"cm-1": True, "cm-2": True}

    async def fetch(peer: BrokerEntry) -> dict[str, int]:
        if not alive[peer.name]:
            raise OSError("refused")
        return dict(peers[peer.name])

    brokers = {n: cm(n) for n in ("cm-0", "cm-1", "cm-2")}
    d = Directory("cm-0", lambda: brokers, lambda: dict(local), fetch, ttl_s=60)
    chosen = [(await d.next_cm("x")).name for _ in range(3)]  # nobody connected yet: pending counts
    assert sorted(chosen) == ["cm-0", "cm-1", "cm-2"]
    for name in chosen:  # the clients connect
        if name == "cm-0":
            local["x"] = 1
            d.arrived("x")
        else:
            peers[name]["x"] = 1
    chosen = [(await d.next_cm("x")).name for _ in range(3)]
    assert sorted(chosen) == ["cm-0", "cm-1", "cm-2"]
    assert d.counts() == {"cm-0": {"x": 2}, "cm-1": {"x": 2}, "cm-2": {"x": 2}}  # 3 still pending
    peers["cm-1"]["x"] = peers["cm-2"]["x"] = 2  # they arrived: the peers' counts grew
    local["x"] = 2
    d.arrived("x")
    await d.refresh(force=True)
    assert d.counts() == {"cm-0": {"x": 2}, "cm-1": {"x": 2}, "cm-2": {"x": 2}}
    assert d._pending == []
    alive["cm-2"] = False
    await d.refresh(force=True)
    assert "cm-2" not in d.counts()
    assert [b["ready"] for b in d.broker_table() if b["name"] == "cm-2"] == [False]
    assert (await d.next_cm("x")).name in {"cm-0", "cm-1"}


def test_leases_and_adopter() -> None:
    leases = Leases(("a", "b", "c"), lease_s=1.0, started=0.0)
    leases.beat("a", 0.5)
    leases.beat("b", 0.9)
    assert leases.expire(1.2) == ["c"]
    assert leases.expire(1.4) == []
    assert leases.expire(1.6) == ["a"]
    assert leases.alive == ("b",)
    assert adopter("x", ["p", "q", "r"]) == adopter("x", ["r", "q", "p"])
    with pytest.raises(ValueError):
        adopter("x", ["x"])


def test_strategy_by_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HYBRIDMQ_DISTRIBUTION", raising=False)
    assert make_strategy("127.0.0.1:1") is None
    assert isinstance(make_strategy("127.0.0.1:1", "decentralized"), RoundRobin)
    monkeypatch.setenv("HYBRIDMQ_DISTRIBUTION", "centralized")
    assert isinstance(make_strategy("127.0.0.1:1"), Centralized)
    with pytest.raises(ValueError):
        make_strategy("127.0.0.1:1", "random")
    assert MARKER_HEADER == BROKER_MARKER_HEADER
