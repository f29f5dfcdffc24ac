"""``within``: an awaitable bounded by a timeout, without ``asyncio.wait_for``.

On Python 3.11 ``wait_for`` loses a cancellation that arrives in the loop iteration its inner
awaitable finishes in: it returns (or raises) the inner result instead, and a loop around it goes
on for ever although the event loop is shutting down. ``asyncio.timeout`` cancels the awaiting
task itself and counts cancellations, so an outer one always wins. The product uses
``async with asyncio.timeout(...)`` directly; this is for the places that need an awaitable
(``asyncio.gather`` of bounded requests, ``asyncio.run`` of a bounded coroutine).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def within(aw: Awaitable[T], timeout_s: float | None) -> T:
    """``await aw``, raising ``TimeoutError`` after ``timeout_s`` seconds (None: no limit)."""
    async with asyncio.timeout(timeout_s):
        return await aw
