"""What tests do with a consumer, written once: take ``n`` messages, or everything until it goes quiet.

Importable from every test directory (``tests/`` is on the path through its conftest)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from hybridmq.client import Consumer, Message


async def receive_n(consumer: Consumer, n: int, timeout: float = 10.0) -> list[Message]:  # noqa: ASYNC109
    """The next ``n`` messages; ``TimeoutError`` when one takes longer than ``timeout``."""
    got: list[Message] = []
    while len(got) < n:
        msg = await consumer.receive(timeout=timeout)
        assert isinstance(msg, Message), f"expected a message, got {msg!r}"
        got.append(msg)
    return got


async def receive_until_quiet(
    consumer: Consumer, quiet_s: float, each: Callable[[Message], Awaitable[None] | None] | None = None
) -> list[Message]:
    """Every message until none came for ``quiet_s``; ``each`` (e.g. acknowledge, and wait for
    the confirmation) runs on each one as it comes."""
    got: list[Message] = []
    while True:
        try:
            msg = await consumer.receive(timeout=quiet_s)
        except TimeoutError:
            return got
        assert isinstance(msg, Message), f"expected a message, got {msg!r}"
        got.append(msg)
        if each is not None:
            done = each(msg)
            if done is not None:
                await done
