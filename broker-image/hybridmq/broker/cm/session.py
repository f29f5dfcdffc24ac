"""A client's session on a CM, and the CM's record of one of its subscriptions."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hybridmq.protocol import Connection


@dataclass(eq=False)
class Session:
    id: str
    user: str
    client_id: str
    conn: Connection
    app: str = ""
    subs: dict[int, str] = field(default_factory=dict)  # the client's subscription id -> its key
    producers: dict[str, str] = field(default_factory=dict)  # producer id -> partition


@dataclass
class SubEntry:
    session: Session
    client_sub: int
    mm_frame: dict[str, Any]  # the SUBSCRIBE sent to every MM (again when a link reconnects)
