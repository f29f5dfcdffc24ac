"""The Message Manager's storage: a segmented, append-only log per partition.

Modules, one job each: ``batch`` (the binary batch format), ``segment`` (one file), ``index``
(sparse offset index), ``recovery`` (CRC scan and torn-tail truncation of one segment), ``loader``
(opening a log: its files, crash recovery, producer state), ``durability`` (durable offset, fsync
rounds, recovery point), ``group_commit`` (batched fsync in a worker thread), ``epoch_cache``
(epoch -> start offset), ``producer_state`` (idempotent producers), ``control`` (control-record
payloads), ``partition_log`` (the front: append, read, truncation, retention, epochs).

Primary side::

    log = PartitionLog.open(data_dir / "orders-0", LogConfig(fsync="group"))
    result = log.append(payload, count, epoch, producer_id=pid, base_sequence=seq)
    await log.flush_until(result.end_offset)        # durable: now acknowledge
    data = log.read(offset, 1 << 20, max_offset=high_watermark)   # whole raw batches

``read`` returns whole batches starting with the one that holds ``from_offset`` (it may start
before it), at least one batch, never past ``max_offset`` or the end of a segment. Decode with
``iter_batches(data)`` / ``iter_headers(data)``. ``log.add_append_listener(cb)`` is called after
every append (long-polling fetches). Idempotent resends come back as ``AppendResult(...,
duplicate=True)`` with the original offsets; bad sequences raise ``OutOfOrderSequenceError`` /
``ProducerFencedError``; an older epoch raises ``StaleEpochError``.

Backup side::

    log.append_raw(data)                             # byte for byte, CRC and continuity checked
    epoch, end = primary_log.end_offset_for_epoch(log.latest_epoch)  # asked of the new primary
    log.truncate_to(end)
"""

from .batch import (
    ATTR_CONTROL,
    HEADER_SIZE,
    MAGIC,
    BatchHeader,
    encode_batch,
    encode_header,
    iter_batches,
    iter_headers,
    parse_header,
    verify_batch,
)
from .config import FsyncMode, LogConfig
from .control import (
    AckRanges,
    ControlRecord,
    CursorCommit,
    DeliveredThrough,
    Marker,
    ProducerSequence,
    Redelivery,
    SubscriptionState,
    UnknownControl,
    decode_control,
    encode_control,
)
from .epoch_cache import UNDEFINED_EPOCH, UNDEFINED_OFFSET, EpochEntry, LeaderEpochCache
from .errors import (
    CorruptBatchError,
    InvalidOffsetError,
    LogClosedError,
    LogError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    ProducerFencedError,
    StaleEpochError,
)
from .group_commit import GroupCommitter, LogTruncatedError
from .partition_log import AppendResult, BatchTooLargeError, PartitionLog, RecoveryReport
from .producer_state import (
    DuplicateSequence,
    OutOfOrderSequence,
    ProducerFenced,
    ProducerStateManager,
    SequenceCheck,
    SequenceOk,
)

__all__ = [
    "ATTR_CONTROL",
    "HEADER_SIZE",
    "MAGIC",
    "UNDEFINED_EPOCH",
    "UNDEFINED_OFFSET",
    "AckRanges",
    "AppendResult",
    "BatchHeader",
    "BatchTooLargeError",
    "ControlRecord",
    "CorruptBatchError",
    "CursorCommit",
    "DeliveredThrough",
    "DuplicateSequence",
    "EpochEntry",
    "FsyncMode",
    "GroupCommitter",
    "InvalidOffsetError",
    "LeaderEpochCache",
    "LogClosedError",
    "LogConfig",
    "LogError",
    "LogTruncatedError",
    "Marker",
    "OffsetOutOfRangeError",
    "OutOfOrderSequence",
    "OutOfOrderSequenceError",
    "PartitionLog",
    "ProducerFenced",
    "ProducerFencedError",
    "ProducerSequence",
    "ProducerStateManager",
    "RecoveryReport",
    "Redelivery",
    "SequenceCheck",
    "SequenceOk",
    "StaleEpochError",
    "SubscriptionState",
    "UnknownControl",
    "decode_control",
    "encode_batch",
    "encode_control",
    "encode_header",
    "iter_batches",
    "iter_headers",
    "parse_header",
    "verify_batch",
]
