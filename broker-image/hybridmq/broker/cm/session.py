"""A client's session on a CM, and the CM's record of one of its subscriptions."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hybridmq.api.frames import ErrorCode
from hybridmq.protocol import Connection
from hybridmq.protocol.codec import Decoded


@dataclass(eq=False)
class Session:
    id: str
    user: str
    client_id: str
    conn: Connection
    app: str = ""
    subs: dict[int, str] = field(default_factory=dict)  # the client's subscription id -> its key
    producers: dict[str, str] = field(default_factory=dict)  # producer id -> partition

    # Answered like a connection: a request the CM holds for it (``HeldRequests``) may be refused.
    @property
    def closed(self) -> bool:
        return self.conn.closed

    def reply_error(self, request: Decoded, code: ErrorCode, msg: str) -> None:
        self.conn.reply_error(request, code, msg)


@dataclass
class SubEntry:
    session: Session
    client_sub: int
    mm_frame: dict[str, Any]  # the SUBSCRIBE sent to every MM (again when a link reconnects)
