"""The directory every CM serves: broker table, application table, "which CM next".

* **Broker table**: the BrokerCluster broker table (from the ``AssignmentSource``), with each CM's
  ``ready`` overridden by what this CM last saw of it (a peer that does not answer is not ready), so
  de-centralized clients stop choosing a CM that disappeared.
* **Application table**: which application holds how many sessions on which CM, the union of every
  CM's own sessions. The answering CM asks its peers (their ``/admin`` over HTTP, which lists their
  sessions per application) and adds the assignments it made that have not arrived yet (``pending``:
  until the CM's count grows, or ``pending_ttl_s``), so consecutive
  "next CM" answers stay balanced even before clients connect. Table requests use answers up to
  ``ttl_s`` old; a "next CM" request waits for a read that started after it arrived (concurrent
  requests share one read), so answers are consistent whichever CM is asked.
  Applications register dynamically (the ``app`` of HELLO) or statically (a JSON file:
  ``{"applications": {"billing": {"cms": ["cm-1", "cm-2"], "max_per_cm": 100}}}`` restricts an
  application to some CMs and caps its sessions per CM).
* **Next CM** (centralized distribution): among the live CMs the application may use, the one with
  the fewest of its sessions (ties: by name), skipping CMs at their cap.

Applications whose name starts with ``_`` (the clients' own directory look-ups) are not counted.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hybridmq.api.assignment import BrokerEntry, BrokerRole
from hybridmq.protocol.tls import BrokerTls

PeerFetcher = Callable[[BrokerEntry], Awaitable[dict[str, int]]]


@dataclass(frozen=True)
class Registration:
    """Static registration of one application: allowed CMs (empty: any) and a per-CM cap."""

    cms: tuple[str, ...] = ()
    max_per_cm: int | None = None


def load_registrations(path: str | Path | None) -> dict[str, Registration]:
    if not path:
        return {}
    raw = json.loads(Path(path).read_text())
    apps = raw.get("applications", raw) if isinstance(raw, dict) else {}
    out: dict[str, Registration] = {}
    for app, spec in apps.items():
        cap = spec.get("max_per_cm")
        out[str(app)] = Registration(tuple(spec.get("cms") or ()), int(cap) if cap is not None else None)
    return out


class NoCMAvailable(LookupError):
    pass


def pick_cm(
    app: str, live: list[str], counts: dict[str, dict[str, int]], registration: Registration | None
) -> str:
    """The live CM with the fewest sessions of ``app`` (ties by name), within its registration."""
    reg = registration or Registration()
    allowed = [c for c in sorted(live) if not reg.cms or c in reg.cms]
    load = {c: counts.get(c, {}).get(app, 0) for c in allowed}
    if reg.max_per_cm is not None:
        allowed = [c for c in allowed if load[c] < reg.max_per_cm]
    if not allowed:
        raise NoCMAvailable(f"no CM available for application {app!r}")
    return min(allowed, key=lambda c: (load[c], c))


def count_sessions(apps: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for app in apps:
        if not app.startswith("_"):
            out[app] = out.get(app, 0) + 1
    return out


@dataclass
class Directory:
    """One CM's view of the cluster-wide directory."""

    name: str
    brokers: Callable[[], dict[str, BrokerEntry]]
    local_counts: Callable[[], dict[str, int]]
    fetch_peer: PeerFetcher
    registrations: dict[str, Registration] = field(default_factory=dict)
    ttl_s: float = 0.25
    pending_ttl_s: float = 3.0
    _peer_counts: dict[str, dict[str, int]] = field(default_factory=dict)
    _peer_alive: dict[str, bool] = field(default_factory=dict)
    _fetched_at: float = float("-inf")
    _pending: list[tuple[float, str, str]] = field(default_factory=list)  # (when, cm, app)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def _cms(self) -> list[BrokerEntry]:
        return [b for b in self.brokers().values() if b.role == BrokerRole.CM]

    async def refresh(self, force: bool = False, newer_than: float | None = None) -> None:
        """Re-read the peers when the cache is older than ``ttl_s`` (``force``: always; ``newer_than``:
        unless a read started after that time, so concurrent requests share one read)."""
        async with self._lock:
            if newer_than is not None:
                if self._fetched_at >= newer_than:
                    return
            elif not force and time.monotonic() - self._fetched_at < self.ttl_s:
                return
            peers = [b for b in self._cms() if b.name != self.name]
            started = time.monotonic()
            results = await asyncio.gather(*(self.fetch_peer(b) for b in peers), return_exceptions=True)
            for b, r in zip(peers, results, strict=True):
                self._peer_alive[b.name] = not isinstance(r, BaseException)
                new = r if isinstance(r, dict) else {}
                self._settle(b.name, self._peer_counts.get(b.name, {}), new)
                self._peer_counts[b.name] = new
            self._fetched_at = started

    def _settle(self, cm: str, old: dict[str, int], new: dict[str, int]) -> None:
        """A peer's sessions of an application grew by ``d``: its ``d`` oldest pending ones arrived."""
        for app in {a for _, c, a in self._pending if c == cm}:
            grew = new.get(app, 0) - old.get(app, 0)
            for i in [i for i, (_, c, a) in enumerate(self._pending) if c == cm and a == app][:grew][::-1]:
                del self._pending[i]

    def alive(self, cm: str) -> bool:
        return cm == self.name or self._peer_alive.get(cm, True)

    def counts(self) -> dict[str, dict[str, int]]:
        """The application table: ``{cm: {app: sessions}}`` (live CMs only) plus pending assignments."""
        now = time.monotonic()
        self._pending = [p for p in self._pending if now - p[0] < self.pending_ttl_s]
        table: dict[str, dict[str, int]] = {}
        for b in self._cms():
            if not self.alive(b.name):
                continue
            base = self.local_counts() if b.name == self.name else self._peer_counts.get(b.name, {})
            table[b.name] = dict(base)
        for _, cm, app in self._pending:
            # Sent there, not arrived yet (or arrived after the peer's last report).
            if cm in table:
                table[cm][app] = table[cm].get(app, 0) + 1
        return table

    def arrived(self, app: str) -> None:
        """A session of ``app`` connected to this CM: it no longer needs counting as pending."""
        for i, (_, cm, a) in enumerate(self._pending):
            if cm == self.name and a == app:
                del self._pending[i]
                return

    def broker_table(self) -> list[dict[str, Any]]:
        rows = []
        for b in self.brokers().values():
            row = b.model_dump(mode="json")
            if b.role == BrokerRole.CM:
                row["ready"] = bool(b.ready and self.alive(b.name))
            rows.append(row)
        return rows

    async def next_cm(self, app: str) -> BrokerEntry:
        # Fresh counts for every choice (whichever CM answers, the table is the current union).
        await self.refresh(newer_than=time.monotonic())
        cms = {b.name: b for b in self._cms() if b.ready and self.alive(b.name)}
        counts = self.counts()
        choice = pick_cm(app, list(cms), counts, self.registrations.get(app))
        self._pending.append((time.monotonic(), choice, app))
        return cms[choice]


def http_peer_fetcher(timeout_s: float = 0.5, tls: BrokerTls | None = None) -> PeerFetcher:
    """Read a peer CM's sessions per application from its ``/admin`` (``applications``); over
    HTTPS, presenting this CM's certificate, when the CMs have ``tls``."""
    import aiohttp

    session: aiohttp.ClientSession | None = None

    async def fetch(peer: BrokerEntry) -> dict[str, int]:
        nonlocal session
        if not peer.http_address:
            raise LookupError(f"{peer.name} has no http address")
        if session is None or session.closed:
            session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s))
        scheme, ssl = ("https", tls.client()) if tls is not None else ("http", None)
        async with session.get(f"{scheme}://{peer.http_address}/admin", ssl=ssl or True) as resp:
            resp.raise_for_status()
            data = await resp.json()
        return {str(k): int(v) for k, v in (data.get("applications") or {}).items()}

    return fetch
