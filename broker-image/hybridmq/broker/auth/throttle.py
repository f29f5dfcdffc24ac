"""Bounds the CPU that client authentication may take on a CM.

A PBKDF2 verification costs milliseconds of CPU by design; a flood of wrong passwords would
otherwise buy that much broker CPU per connection. The gate answers cached verifications at once,
runs at most ``concurrency`` full verifications at a time (off the event loop), lets at most
``max_waiting`` HELLOs queue for one and refuses the rest with ``AuthBusy`` (the client may retry),
and answers a failed authentication only after ``failure_delay_s``, which costs no CPU and slows
guessing on one connection.
"""

from __future__ import annotations

import asyncio

from hybridmq.broker.auth.credentials import CredentialStore


class AuthBusy(Exception):
    """Too many authentications are waiting; nothing was checked."""


class AuthGate:
    def __init__(
        self,
        store: CredentialStore,
        concurrency: int = 1,
        max_waiting: int = 64,
        failure_delay_s: float = 0.5,
    ) -> None:
        if concurrency < 1 or max_waiting < 0 or failure_delay_s < 0:
            raise ValueError("auth gate: concurrency >= 1, max_waiting >= 0, failure_delay_s >= 0")
        self.store = store
        self.max_waiting = max_waiting
        self.failure_delay_s = failure_delay_s
        self._slots = asyncio.Semaphore(concurrency)
        self._waiting = 0
        self.refused_busy = 0

    async def authenticate(self, user: str | None, password: str | None) -> bool:
        """True or False like ``CredentialStore.authenticate``; raises ``AuthBusy`` when full."""
        known = self.store.cached(user, password)
        if known is not None:
            return known
        if self._waiting >= self.max_waiting:
            self.refused_busy += 1
            raise AuthBusy(f"{self._waiting} authentications waiting")
        self._waiting += 1
        try:
            async with self._slots:
                ok = await asyncio.get_running_loop().run_in_executor(
                    None, self.store.authenticate, user, password
                )
        finally:
            self._waiting -= 1
        if not ok:
            await asyncio.sleep(self.failure_delay_s)
        return ok
