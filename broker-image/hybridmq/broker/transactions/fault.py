"""Test-only pause of the transaction manager at a protocol step.

With ``HYBRIDMQ_TX_PAUSE=<step>`` a CM that reaches ``step`` writes ``<step> <transaction id>`` to
the file ``HYBRIDMQ_TX_PAUSE_FILE`` and waits there until the file is deleted (once per process),
so a test can kill -9 a process while a transaction stands exactly at that step, then let the CM go on. Steps:
``before-prepare``, ``after-ready`` (one participant READY, the others not asked yet),
``after-decision``, ``after-complete`` (one participant COMPLETE, the others not told yet). While
it is set, participants are asked one at a time. Unset, it costs one environment look-up.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

STEPS = ("before-prepare", "after-ready", "after-decision", "after-complete")
_paused: list[str] = []  # a process pauses once


def active() -> bool:
    return os.environ.get("HYBRIDMQ_TX_PAUSE", "") in STEPS


async def pause(step: str, txid: str) -> None:
    path = os.environ.get("HYBRIDMQ_TX_PAUSE_FILE")
    if os.environ.get("HYBRIDMQ_TX_PAUSE") != step or not path or _paused:
        return
    _paused.append(txid)
    _write(Path(path), f"{step} {txid}\n")
    while True:
        if not _exists(Path(path)):
            return
        await asyncio.sleep(0.05)


def _write(path: Path, text: str) -> None:
    path.write_text(text)


def _exists(path: Path) -> bool:
    return path.exists()
