"""HybridMQ client: asyncio ``Producer`` / ``Consumer`` and blocking wrappers.

Each producer and consumer runs on a session (``client/session.py``): CM distribution, keepalive,
and CM failover - it reconnects to another CM and recreates its state (``reconnect=False`` turns
that off).

    async with await Producer.connect("127.0.0.1:7000", partition_type="fixed", key="k") as p:
        ack = await p.send("queue:orders", b"hello")        # Ack(partition, offset)
    async with await Consumer.connect("127.0.0.1:7000", "queue:orders") as c:
        async for msg in c:
            print(msg.value)

``Session.connect(..., transacted=True)`` groups sends and receives into transactions
(``commit()`` / ``rollback()``): ``client/tx_session.py``.

``async with`` (``with`` for the blocking wrappers) closes what it opened; after ``close()`` a
client raises ``ClientClosedError``. One that is never closed leaves a ``ResourceWarning``.

``Fetcher`` reads partitions by offset (the PySpark data source, the audit): ``client/fetcher.py``.

Destinations are ``topic:<name>`` (the default for a bare name) or ``queue:<name>``.
"""

from hybridmq.client.admin import admin
from hybridmq.client.blocking import BlockingConsumer, BlockingProducer, BlockingSession
from hybridmq.client.connection import ClientError, connect
from hybridmq.client.consumer import Consumer
from hybridmq.client.fetcher import (
    FetchedBatch,
    Fetcher,
    FetchResult,
    OffsetOutOfRangeError,
    PartitionMeta,
)
from hybridmq.client.message import Ack, Message
from hybridmq.client.producer import DeliveryTimeout, Producer
from hybridmq.client.session import ClientClosedError
from hybridmq.client.tx_session import Session, TransactionRolledBack

__all__ = [
    "Ack",
    "BlockingConsumer",
    "BlockingProducer",
    "BlockingSession",
    "ClientClosedError",
    "ClientError",
    "Consumer",
    "DeliveryTimeout",
    "FetchResult",
    "FetchedBatch",
    "Fetcher",
    "Message",
    "OffsetOutOfRangeError",
    "PartitionMeta",
    "Producer",
    "Session",
    "TransactionRolledBack",
    "admin",
    "connect",
]
