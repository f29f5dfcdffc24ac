"""``BacklogGate``: a partition's producer credit, closed while the backlog is above a limit."""

from __future__ import annotations

import asyncio


class BacklogGate:
    def __init__(self, max_backlog: int) -> None:
        self.max_backlog = max_backlog  # records; 0 = unlimited
        self._open = asyncio.Event()
        self._open.set()

    @property
    def blocked(self) -> bool:
        return not self._open.is_set()

    def update(self, backlog: int) -> bool:
        """Open or close the gate for the current backlog; returns True when it is open."""
        if self.max_backlog > 0 and backlog > self.max_backlog:
            self._open.clear()
            return False
        self._open.set()
        return True

    async def wait(self) -> None:
        await self._open.wait()
