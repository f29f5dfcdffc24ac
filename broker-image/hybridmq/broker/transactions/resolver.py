"""Every CM resolves the prepared transactions a dead CM left behind.

Once a second it asks each MM for the transactions prepared there at least ``TX_TIMEOUT_S`` ago
and not ended (TX_INDOUBT), asks their coordinator partition for the decision - writing a
rollback if there is none yet, which a late commit of the dead CM can no longer overturn - and
carries it out (TX_END). Several CMs doing this at once is harmless: the first decision wins and
TX_END is idempotent.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from hybridmq.api.frames import FrameType
from hybridmq.broker.transactions.coordinator import TX_TIMEOUT_S, TxFailed, TxManager

if TYPE_CHECKING:
    from hybridmq.broker.cm.context import CMContext

log = logging.getLogger(__name__)


async def resolve_forever(cm: CMContext, manager: TxManager, every_s: float = 1.0) -> None:
    while True:
        await asyncio.sleep(every_s)
        try:
            await resolve_once(cm, manager)
        except Exception:
            log.exception("resolving prepared transactions failed")


async def resolve_once(cm: CMContext, manager: TxManager) -> int:
    """Resolve what the MMs report in doubt now; how many were resolved."""
    found: dict[tuple[str, str], str] = {}  # (txid, partition) -> coordinator partition
    for link in list(cm.links.values()):
        if link.conn is None or link.conn.closed:
            continue
        try:
            reply = await link.conn.request({"t": FrameType.TX_INDOUBT, "age": TX_TIMEOUT_S}, timeout=5)
        except Exception:
            continue
        for tx in reply.get("txs") or ():
            found[(str(tx["x"]), str(tx["p"]))] = str(tx["co"])
    done = 0
    for (txid, partition), co in found.items():
        if txid in manager.open:
            continue  # this CM is committing it right now
        try:
            commit = await manager.outcome(txid, co, [partition])
        except TxFailed as exc:
            log.warning("transaction %s in doubt on %s: %s (next round)", txid, partition, exc)
            continue
        log.warning(
            "resolved transaction %s on %s: %s", txid, partition, "committed" if commit else "rolled back"
        )
        done += 1
    return done
