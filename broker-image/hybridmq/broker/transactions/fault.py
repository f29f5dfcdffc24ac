"""Test-only pause of a commit at a protocol step, so a test can kill -9 a process right there.

A process that pauses writes ``<step> <transaction id> <partition>`` to the file
``HYBRIDMQ_TX_PAUSE_FILE`` and waits until the file is deleted. What pauses:

* ``HYBRIDMQ_TX_PAUSE=<step>``: the first time the process reaches ``step`` (once per process).
* ``HYBRIDMQ_TX_PAUSE=armed``: whenever the file ``HYBRIDMQ_TX_PAUSE_FILE`` + ``.arm`` names the
  step (``<step>``, or ``<step> <partition>`` for a participant's steps). The first process to
  get there takes the arm (an atomic rename), so one cluster can be stopped at one step after
  another.

Steps of the transaction manager (the CM): ``before-prepare``, ``after-ready`` (one participant
READY, the others not asked yet), ``before-decision`` (all READY, no decision asked),
``after-decision``, ``after-complete`` (one participant COMPLETE, the others not told yet); while
any pause is set, participants are asked one at a time. Steps of a participant (the primary MM
of ``<partition>``): ``mm-before-prepare`` (TX_PREPARE received, nothing recorded),
``mm-prepared`` (``TxPrepare`` replicated, READY not sent), ``mm-part-applied`` (committing: the
first of its data batches appended and replicated, the others and ``TxEnd`` not). Unset, a step
costs one environment look-up.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

CM_STEPS = ("before-prepare", "after-ready", "before-decision", "after-decision", "after-complete")
MM_STEPS = ("mm-before-prepare", "mm-prepared", "mm-part-applied")
STEPS = CM_STEPS + MM_STEPS
ARMED = "armed"
_paused: list[str] = []  # with a fixed step, a process pauses once


def active() -> bool:
    mode = os.environ.get("HYBRIDMQ_TX_PAUSE", "")
    return mode == ARMED or mode in STEPS


async def pause(step: str, txid: str, partition: str = "") -> None:
    mode, path = os.environ.get("HYBRIDMQ_TX_PAUSE"), os.environ.get("HYBRIDMQ_TX_PAUSE_FILE")
    if not path or not mode:
        return
    if mode == ARMED:
        if not _take_arm(Path(path + ".arm"), step, partition):
            return
    elif mode != step or _paused:
        return
    _paused.append(txid)
    _write(Path(path), f"{step} {txid} {partition}\n")
    while True:  # polled: the test deletes the file from another process
        if not _exists(Path(path)):
            return
        await asyncio.sleep(0.05)


def _write(path: Path, text: str) -> None:
    path.write_text(text)


def _exists(path: Path) -> bool:
    return path.exists()


def _take_arm(arm: Path, step: str, partition: str) -> bool:
    """The arm names this step (and partition, if it names one) and this process took it."""
    try:
        wanted = arm.read_text().split()
    except FileNotFoundError:
        return False
    if not wanted or wanted[0] != step or (len(wanted) > 1 and wanted[1] != partition):
        return False
    try:
        arm.rename(arm.with_suffix(".taken"))  # atomic: one process wins
    except FileNotFoundError:
        return False
    return True
