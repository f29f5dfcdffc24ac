"""The error a partition's commit fails with, shared by the partition host and the handlers that
wait on its commits (acknowledgements, reader cursors, transactions)."""

from __future__ import annotations

from hybridmq.api.frames import ErrorCode


class CommitError(Exception):
    """A commit that failed: ``frame_code`` is the error the waiting requests get instead
    (NOT_PRIMARY or MM_UNAVAILABLE: both make the client resend; the resend is stored once)."""

    def __init__(self, code: ErrorCode, msg: str) -> None:
        super().__init__(msg)
        self.frame_code = code
