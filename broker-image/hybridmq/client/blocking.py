"""Blocking wrappers: the asyncio client on a private event loop in a daemon thread."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from hybridmq.client.consumer import Consumer, StreamMessage
from hybridmq.client.message import Ack, Message
from hybridmq.client.producer import Producer
from hybridmq.client.tx_session import Session

T = TypeVar("T")


class _LoopThread:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="hybridmq-client")
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


class BlockingProducer:
    def __init__(self, bootstrap: str | list[str] | None = None, **kwargs: Any) -> None:
        self._lt = _LoopThread()
        self._p: Producer = self._lt.run(Producer.connect(bootstrap, **kwargs))

    @property
    def partition(self) -> str:
        return self._p.partition

    @property
    def is_blocked(self) -> bool:
        return self._p.is_blocked

    def send(self, dest: str, value: bytes, **kwargs: Any) -> Ack:
        return self._lt.run(self._p.send(dest, value, **kwargs))

    def try_send(self, dest: str, value: bytes, **kwargs: Any) -> bool:
        async def attempt() -> bool:
            return self._p.try_send(dest, value, **kwargs)

        return self._lt.run(attempt())

    def flush(self) -> None:
        self._lt.run(self._p.flush())

    def close(self) -> None:
        try:
            self._lt.run(self._p.close(), 30)
        finally:
            self._lt.stop()

    def __enter__(self) -> BlockingProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class BlockingConsumer:
    def __init__(self, bootstrap: str | list[str] | None, destination: str, **kwargs: Any) -> None:
        self._lt = _LoopThread()
        self._c: Consumer = self._lt.run(Consumer.connect(bootstrap, destination, **kwargs))

    def receive(self, timeout: float | None = None) -> Message | StreamMessage:
        return self._lt.run(self._c.receive(timeout))

    def ack(self, message: Message) -> None:
        self._lt.loop.call_soon_threadsafe(self._c.ack, message)

    def nack(self, message: Message, requeue: bool = True) -> None:
        """Give the message back, or reject it for good (``Consumer.nack``)."""
        self._lt.loop.call_soon_threadsafe(self._c.nack, message, requeue)

    def commit(self, timeout: float | None = 30) -> None:
        """Wait until every acknowledgement sent so far is committed (``Consumer.commit``)."""
        self._lt.run(self._c.commit(), timeout)

    def close(self) -> None:
        try:
            self._lt.run(self._c.close(), 30)
        finally:
            self._lt.stop()

    def __enter__(self) -> BlockingConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class BlockingSession:
    """``Session`` for synchronous code: ``consumer``, ``receive``, ``send``, ``commit``,
    ``rollback`` with the same semantics."""

    def __init__(self, bootstrap: str | list[str] | None = None, **kwargs: Any) -> None:
        self._lt = _LoopThread()
        self._s: Session = self._lt.run(Session.connect(bootstrap, **kwargs))

    @property
    def transacted(self) -> bool:
        return self._s.transacted

    def consumer(self, destination: str) -> Consumer:
        return self._lt.run(self._s.consumer(destination))

    def receive(self, consumer: Consumer, timeout: float | None = None) -> Message:
        return self._lt.run(self._s.receive(consumer, timeout))

    def send(self, destination: str, value: bytes, **kwargs: Any) -> None:
        self._lt.run(self._s.send(destination, value, **kwargs))

    def commit(self) -> None:
        self._lt.run(self._s.commit())

    def rollback(self) -> None:
        self._lt.run(self._s.rollback())

    def close(self) -> None:
        try:
            self._lt.run(self._s.close(), 30)
        finally:
            self._lt.stop()

    def __enter__(self) -> BlockingSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
