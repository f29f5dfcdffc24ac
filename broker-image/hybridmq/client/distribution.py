"""Which Connection Manager a client connects to, and moving on when one fails.

Two strategies, chosen by configuration:

* **de-centralized** (:class:`RoundRobin`): the client caches the broker table, goes round-robin over
  the ready CMs, and refreshes the table periodically and after every failed attempt, so a CM that
  disappears stops being chosen;
* **centralized** (:class:`Centralized`): the client asks the directory (served by every CM) for the
  next CM, which balances the application's connections over the cluster.

:func:`connect_with_failover` tries candidates until one connection succeeds, with a bounded number
of attempts, exponential back-off between rounds, and a :class:`NoBrokerAvailable` error naming every
address tried and why it failed. Transport is injected, so this module does no I/O of its own.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from hybridmq.api.assignment import BrokerEntry, BrokerRole

T = TypeVar("T")

TableFetcher = Callable[[], Awaitable[Sequence[BrokerEntry]]]


class NoBrokerAvailable(ConnectionError):
    """Every candidate CM refused or failed; ``attempts`` lists (address, error) in order."""

    def __init__(self, attempts: list[tuple[str, str]]) -> None:
        self.attempts = attempts
        tried = "; ".join(f"{addr}: {err}" for addr, err in attempts[-8:]) or "no CM in the broker table"
        super().__init__(f"no Connection Manager reachable after {len(attempts)} attempt(s) ({tried})")


class Strategy(Protocol):
    async def next_address(self) -> str:
        """The address (host:port) to try next."""
        ...

    async def failed(self, address: str) -> None:
        """``address`` could not be reached: forget it until the next refresh."""
        ...


@dataclass
class RoundRobin:
    """De-centralized distribution over a cached broker table."""

    fetch_table: TableFetcher
    seeds: Sequence[str] = ()
    refresh_interval_s: float = 30.0
    _table: list[str] = field(default_factory=list)
    _fetched_at: float = float("-inf")
    _position: int = -1
    _suspect: set[str] = field(default_factory=set)

    @property
    def table(self) -> list[str]:
        return list(self._table)

    async def refresh(self) -> None:
        try:
            entries = await self.fetch_table()
        except Exception:
            # Keep the cached table (or the seeds): a directory outage must not stop reconnects.
            entries = None
        if entries is not None:
            self._table = sorted(e.address for e in entries if e.role == BrokerRole.CM and e.ready)
            self._suspect.clear()
        elif not self._table:
            self._table = list(self.seeds)
        self._fetched_at = time.monotonic()

    async def next_address(self) -> str:
        if not self._table or time.monotonic() - self._fetched_at > self.refresh_interval_s:
            await self.refresh()
        candidates = [a for a in self._table if a not in self._suspect] or self._table or list(self.seeds)
        if not candidates:
            raise NoBrokerAvailable([])
        self._position = (self._position + 1) % len(candidates)
        return candidates[self._position]

    async def failed(self, address: str) -> None:
        self._suspect.add(address)
        await self.refresh()
        # A fresh table that still lists the address (its pod not yet marked unready) keeps it
        # suspect until the next round, so the retry goes elsewhere.
        self._suspect.add(address)


@dataclass
class Centralized:
    """Centralized distribution: the directory names the CM to use."""

    ask_directory: Callable[[], Awaitable[str]]
    fallback: RoundRobin

    async def next_address(self) -> str:
        try:
            return await self.ask_directory()
        except Exception:
            # The directory is served by every CM; if the one asked is gone, go round-robin.
            return await self.fallback.next_address()

    async def failed(self, address: str) -> None:
        await self.fallback.failed(address)


async def connect_with_failover(
    strategy: Strategy,
    connect: Callable[[str], Awaitable[T]],
    *,
    max_attempts: int = 12,
    initial_backoff_s: float = 0.05,
    max_backoff_s: float = 1.0,
    rng: random.Random | None = None,
) -> tuple[str, T]:
    """Connect to the first CM that accepts, moving on to the next one after each failure.

    Back-off applies only between rounds: when the next candidate already failed in this round.
    """
    attempts: list[tuple[str, str]] = []
    failed_this_round: set[str] = set()
    backoff = initial_backoff_s
    jitter = rng or random.Random()
    for _ in range(max_attempts):
        try:
            address = await strategy.next_address()
        except NoBrokerAvailable:
            address = ""
        if not address or address in failed_this_round:
            await asyncio.sleep(backoff * (0.5 + jitter.random()))
            backoff = min(max_backoff_s, backoff * 2)
            failed_this_round.clear()
            if not address:
                attempts.append(("-", "broker table is empty"))
                continue
        try:
            return address, await connect(address)
        except (OSError, TimeoutError, ConnectionError) as exc:
            attempts.append((address, f"{type(exc).__name__}: {exc}"))
            failed_this_round.add(address)
            await strategy.failed(address)
    raise NoBrokerAvailable(attempts)
