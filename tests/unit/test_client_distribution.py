"""Connection distribution: round-robin over the broker table, failover to the next CM."""

from __future__ import annotations

from collections import Counter

import pytest

from hybridmq.api.assignment import BrokerEntry, BrokerRole
from hybridmq.client.distribution import (
    Centralized,
    NoBrokerAvailable,
    RoundRobin,
    connect_with_failover,
)


def cm(i: int, ready: bool = True) -> BrokerEntry:
    return BrokerEntry(name=f"cm-{i}", role=BrokerRole.CM, address=f"127.0.0.{i + 1}:7000", ready=ready)


class Table:
    def __init__(self, entries: list[BrokerEntry]) -> None:
        self.entries = entries
        self.fetches = 0

    async def __call__(self) -> list[BrokerEntry]:
        self.fetches += 1
        return list(self.entries)


async def test_round_robin_spreads_evenly_and_skips_mms_and_unready() -> None:
    table = Table([cm(0), cm(1), cm(2), cm(3, ready=False)])
    table.entries.append(BrokerEntry(name="mm-0", role=BrokerRole.MM, address="127.0.0.9:7100"))
    rr = RoundRobin(table)
    picks = Counter([await rr.next_address() for _ in range(30)])
    assert set(picks) == {"127.0.0.1:7000", "127.0.0.2:7000", "127.0.0.3:7000"}
    assert max(picks.values()) - min(picks.values()) <= 1


async def test_round_robin_refreshes_after_a_failure_and_stops_choosing_a_gone_cm() -> None:
    table = Table([cm(0), cm(1), cm(2)])
    rr = RoundRobin(table, refresh_interval_s=3600)
    await rr.next_address()
    fetches = table.fetches
    table.entries = [cm(0), cm(2)]  # cm-1 disappeared from the broker table
    await rr.failed("127.0.0.2:7000")
    assert table.fetches == fetches + 1
    picks = {await rr.next_address() for _ in range(10)}
    assert picks == {"127.0.0.1:7000", "127.0.0.3:7000"}


async def test_failover_moves_on_to_the_next_cm() -> None:
    table = Table([cm(0), cm(1), cm(2)])
    dead = {"127.0.0.1:7000", "127.0.0.2:7000"}
    tried: list[str] = []

    async def connect(address: str) -> str:
        tried.append(address)
        if address in dead:
            raise ConnectionRefusedError(f"refused by {address}")
        return f"session@{address}"

    address, session = await connect_with_failover(RoundRobin(table), connect, initial_backoff_s=0.001)
    assert address == "127.0.0.3:7000" and session == "session@127.0.0.3:7000"
    assert tried[-1] == "127.0.0.3:7000" and len(tried) <= 3


async def test_clear_error_when_no_cm_is_reachable() -> None:
    async def connect(address: str) -> None:
        raise ConnectionRefusedError("connection refused")

    with pytest.raises(NoBrokerAvailable) as err:
        await connect_with_failover(
            RoundRobin(Table([cm(0), cm(1)])), connect, max_attempts=5, initial_backoff_s=0.001
        )
    assert len(err.value.attempts) == 5
    assert "no Connection Manager reachable after 5 attempt(s)" in str(err.value)
    assert "127.0.0.1:7000: ConnectionRefusedError" in str(err.value)


async def test_centralized_asks_the_directory_and_falls_back_when_it_is_down() -> None:
    answers = iter(["127.0.0.2:7000"])

    async def ask() -> str:
        try:
            return next(answers)
        except StopIteration:
            raise ConnectionRefusedError("directory down") from None

    strategy = Centralized(ask, RoundRobin(Table([cm(0)])))
    assert await strategy.next_address() == "127.0.0.2:7000"
    assert await strategy.next_address() == "127.0.0.1:7000"
