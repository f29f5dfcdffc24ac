"""Replication errors. Each carries a :class:`ErrorCode` that a wire protocol can send as is."""

from __future__ import annotations

from enum import StrEnum


class ErrorCode(StrEnum):
    NONE = "none"
    FENCED_EPOCH = "fenced_epoch"  # the request's epoch is older than the replica's: refused
    UNKNOWN_EPOCH = "unknown_epoch"  # the request's epoch is newer: this replica is behind (retry)
    NOT_PRIMARY = "not_primary"  # not (or no longer) the primary: stepped down or lease lost
    OFFSET_OUT_OF_RANGE = "offset_out_of_range"
    NOT_ENOUGH_REPLICAS = "not_enough_replicas"  # fewer than min_in_sync in sync: write refused
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = "not_enough_replicas_after_append"  # stored, not acknowledged
    UNKNOWN_REPLICA = "unknown_replica"  # the fetching replica is not assigned to the partition
    TIMEOUT = "timeout"  # the write was stored but not replicated in time (resend: idempotent)


class ReplicationError(Exception):
    code: ErrorCode = ErrorCode.NONE
    retriable: bool = False


class FencedEpochError(ReplicationError):
    code = ErrorCode.FENCED_EPOCH


class UnknownEpochError(ReplicationError):
    code = ErrorCode.UNKNOWN_EPOCH
    retriable = True


class NotPrimaryError(ReplicationError):
    code = ErrorCode.NOT_PRIMARY
    retriable = True


class OffsetOutOfRangeReplicationError(ReplicationError):
    code = ErrorCode.OFFSET_OUT_OF_RANGE


class NotEnoughReplicasError(ReplicationError):
    code = ErrorCode.NOT_ENOUGH_REPLICAS
    retriable = True


class NotEnoughReplicasAfterAppendError(ReplicationError):
    code = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    retriable = True


class UnknownReplicaError(ReplicationError):
    code = ErrorCode.UNKNOWN_REPLICA


class ReplicationTimeoutError(ReplicationError):
    code = ErrorCode.TIMEOUT
    retriable = True


_BY_CODE: dict[ErrorCode, type[ReplicationError]] = {
    cls.code: cls
    for cls in (
        FencedEpochError,
        UnknownEpochError,
        NotPrimaryError,
        OffsetOutOfRangeReplicationError,
        NotEnoughReplicasError,
        NotEnoughReplicasAfterAppendError,
        UnknownReplicaError,
        ReplicationTimeoutError,
    )
}


def error_for(code: ErrorCode | str, message: str = "") -> ReplicationError:
    """The exception for a code received over the wire."""
    code = ErrorCode(code)
    return _BY_CODE.get(code, ReplicationError)(message or code.value)
