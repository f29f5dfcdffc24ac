"""An MM's settings (``hybridmq mm``'s flags, built into this by ``cli/compose.py``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class MMConfig:
    name: str
    host: str = "127.0.0.1"
    port: int = 7100
    data_dir: Path = Path("data")
    fsync: str = "group"
    group_commit_ms: float = 2.0
    segment_bytes: int = 64 * 1024 * 1024
    max_frame: int = 16 * 1024 * 1024
    max_backlog: int = 1_000_000
    max_redeliveries: int = 5
    cluster_secret: str | None = None  # required: MessageManager.start refuses to run without it
    cache_bytes: int = 16 * 1024 * 1024
    retention_interval: float = 5.0
    tls_dir: str | None = None  # certificates (protocol/tls.py): TLS listener, mutual TLS with peers
    extra: dict[str, Any] = field(default_factory=dict)
