"""Replication errors. Each carries the wire ``ErrorCode`` (``hybridmq.api.frames``) sent for it."""

from __future__ import annotations

from hybridmq.api.frames import ErrorCode


class ReplicationError(Exception):
    code: ErrorCode = ErrorCode.NONE
    retriable: bool = False


class FencedEpochError(ReplicationError):
    code = ErrorCode.STALE_EPOCH


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
    code = ErrorCode.REPLICATION_TIMEOUT
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


def error_for(code: ErrorCode | int, message: str = "") -> ReplicationError:
    """The exception for a code received over the wire."""
    code = ErrorCode(code)
    return _BY_CODE.get(code, ReplicationError)(message or code.name)
