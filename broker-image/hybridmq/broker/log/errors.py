"""Exceptions raised by the partition log. All derive from :class:`LogError`."""


class LogError(Exception):
    """Base class of every error raised by ``hybridmq.broker.log``."""


class LogClosedError(LogError):
    """The log was closed."""


class CorruptBatchError(LogError):
    """A batch failed validation: bad magic, bad length or CRC mismatch."""


class InvalidOffsetError(LogError):
    """A raw batch does not continue the log (its base offset is not the log end offset)."""


class OffsetOutOfRangeError(LogError):
    """A read asked for an offset outside ``[log_start_offset, log_end_offset]``."""


class StaleEpochError(LogError):
    """An append carried a partition epoch older than the latest epoch in the log (fencing)."""

    def __init__(self, epoch: int, latest_epoch: int) -> None:
        super().__init__(f"epoch {epoch} is older than the log's latest epoch {latest_epoch}")
        self.epoch = epoch
        self.latest_epoch = latest_epoch


class OutOfOrderSequenceError(LogError):
    """An idempotent producer sent a sequence number that leaves a gap."""

    def __init__(self, producer_id: int, expected: int, got: int) -> None:
        super().__init__(f"producer {producer_id}: expected sequence {expected}, got {got}")
        self.producer_id = producer_id
        self.expected = expected
        self.got = got


class ProducerFencedError(LogError):
    """An idempotent producer used a producer epoch older than the one the log knows."""

    def __init__(self, producer_id: int, producer_epoch: int, current_epoch: int) -> None:
        super().__init__(
            f"producer {producer_id}: producer epoch {producer_epoch} is older than {current_epoch}"
        )
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.current_epoch = current_epoch
