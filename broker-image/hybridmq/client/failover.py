"""Old names: every ``Producer`` and ``Consumer`` fails over to another CM now (``session.py``).

``FailoverProducer.open(...)`` is ``Producer.connect(...)`` and ``FailoverConsumer.open(...)`` is
``Consumer.connect(...)``; kept for code written against the earlier client.
"""

from __future__ import annotations

from typing import Any

from hybridmq.client.consumer import Consumer
from hybridmq.client.producer import Producer
from hybridmq.client.redelivery import SeenIds

__all__ = ["FailoverConsumer", "FailoverProducer", "SeenIds"]


class FailoverProducer(Producer):
    @classmethod
    async def open(cls, bootstrap: str | list[str] | None = None, **options: Any) -> Producer:
        return await Producer.connect(bootstrap, **options)


class FailoverConsumer(Consumer):
    @classmethod
    async def open(cls, bootstrap: str | list[str] | None, destination: str, **options: Any) -> Consumer:
        return await Consumer.connect(bootstrap, destination, **options)
