"""Blocking wrappers: the asyncio client on a private event loop in a daemon thread.

``close()`` (or the end of a ``with`` block) closes the client, cancels what is left on the loop
(as ``asyncio.run`` does), stops the thread and closes the loop. A wrapper that was never closed
leaves one ``ResourceWarning`` when it is collected.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from hybridmq.client.consumer import Consumer, StreamMessage
from hybridmq.client.message import Ack, Message
from hybridmq.client.producer import Producer
from hybridmq.client.session import ClientClosedError, unclosed
from hybridmq.client.tx_session import Session

T = TypeVar("T")


class _LoopThread:
    def __init__(self, what: str) -> None:
        self.what = what
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="hybridmq-client")
        self.thread.start()

    def start(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run the client's ``connect``; stop again when it fails."""
        try:
            return self.run(coro)
        except BaseException:
            self.stop()
            raise

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        if self.loop.is_closed():
            coro.close()
            raise ClientClosedError(f"the {self.what} is closed")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call(self, callback: Callable[..., object], *args: Any) -> None:
        if self.loop.is_closed():
            raise ClientClosedError(f"the {self.what} is closed")
        self.loop.call_soon_threadsafe(callback, *args)

    def stop(self) -> None:
        """Cancel the tasks left on the loop and wait for them, stop the thread, close the loop."""
        if self.loop.is_closed():
            return
        if self.thread.is_alive():
            try:
                self.run(_cancel_rest(), 5)
            except Exception:  # (timed out: a task that does not end when cancelled)
                pass
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)
        if not self.thread.is_alive():
            self.loop.close()

    @property
    def stopped(self) -> bool:
        return self.loop.is_closed()


async def _cancel_rest() -> None:
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def _warn_unclosed(wrapper: object, lt: _LoopThread | None, what: str) -> None:
    if lt is not None and not lt.stopped:
        unclosed(wrapper, what, "with")


class BlockingProducer:
    def __init__(self, bootstrap: str | list[str] | None = None, **kwargs: Any) -> None:
        self._lt = _LoopThread("producer")
        self._p: Producer = self._lt.start(Producer.connect(bootstrap, **kwargs))

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

    @property
    def closed(self) -> bool:
        return self._lt.stopped

    def close(self) -> None:
        if self._lt.stopped:
            return
        try:
            self._lt.run(self._p.close(), 30)
        finally:
            self._lt.stop()

    def __enter__(self) -> BlockingProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self, _warn: Callable[[object, _LoopThread | None, str], None] = _warn_unclosed) -> None:
        _warn(self, getattr(self, "_lt", None), "BlockingProducer")


class BlockingConsumer:
    def __init__(self, bootstrap: str | list[str] | None, destination: str, **kwargs: Any) -> None:
        self._lt = _LoopThread("consumer")
        self._c: Consumer = self._lt.start(Consumer.connect(bootstrap, destination, **kwargs))

    def receive(self, timeout: float | None = None) -> Message | StreamMessage:
        return self._lt.run(self._c.receive(timeout))

    def ack(self, message: Message) -> None:
        self._lt.call(self._c.ack, message)

    def nack(self, message: Message, requeue: bool = True) -> None:
        """Give the message back, or reject it for good (``Consumer.nack``)."""
        self._lt.call(self._c.nack, message, requeue)

    def commit(self, timeout: float | None = 30) -> None:
        """Wait until every acknowledgement sent so far is committed (``Consumer.commit``)."""
        self._lt.run(self._c.commit(), timeout)

    @property
    def closed(self) -> bool:
        return self._lt.stopped

    def close(self) -> None:
        if self._lt.stopped:
            return
        try:
            self._lt.run(self._c.close(), 30)
        finally:
            self._lt.stop()

    def __enter__(self) -> BlockingConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self, _warn: Callable[[object, _LoopThread | None, str], None] = _warn_unclosed) -> None:
        _warn(self, getattr(self, "_lt", None), "BlockingConsumer")


class BlockingSession:
    """``Session`` for synchronous code: ``consumer``, ``receive``, ``send``, ``commit``,
    ``rollback`` with the same semantics."""

    def __init__(self, bootstrap: str | list[str] | None = None, **kwargs: Any) -> None:
        self._lt = _LoopThread("session")
        self._s: Session = self._lt.start(Session.connect(bootstrap, **kwargs))

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

    @property
    def closed(self) -> bool:
        return self._lt.stopped

    def close(self) -> None:
        if self._lt.stopped:
            return
        try:
            self._lt.run(self._s.close(), 30)
        finally:
            self._lt.stop()

    def __enter__(self) -> BlockingSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self, _warn: Callable[[object, _LoopThread | None, str], None] = _warn_unclosed) -> None:
        _warn(self, getattr(self, "_lt", None), "BlockingSession")
