"""Graceful handoff: an MM asked to stop (SIGTERM: a roll, a drain) moves its replicas away first.

The request goes through what the controller already reads, the MM's report (``MMReport.stopping``,
in the Lease annotation or the local heartbeat); the controller's planner then hands each primary
to an in-sync replica at ``epoch + 1`` (``planner.scaling.evacuate``). The old primary keeps
serving until the new table reaches it; then it demotes, fails what is pending with ``NOT_PRIMARY``
(producers resend to the new primary with their sequence numbers) and stays an in-sync backup until
a replacement caught up, so the partition never has fewer copies meanwhile. The MM exits once the
table no longer names it, when its lease lapsed (nobody is there to hand over to: the controller
is gone), or after ``timeout_s`` (the pod's termination grace period); a crash still takes the
normal failover path.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hybridmq.broker.mm.context import MMContext

log = logging.getLogger(__name__)

POLL_S = 0.02


def names_me(mm: MMContext) -> list[str]:
    """The partitions whose replicas in the current table still name this MM."""
    me = mm.config.name
    return sorted(name for name, a in mm.source.partitions().items() if me in a.replicas)


async def hand_off(mm: MMContext, timeout_s: float) -> str:
    """Ask for this MM's replicas to move and wait for it (bounded); returns how it ended."""
    if timeout_s <= 0 or not mm.liveness.commits_in_sync:
        return "skipped"  # static assignments: nobody to hand over to
    started = time.monotonic()
    mm.replica_manager.stopping = True
    mm.liveness.trigger()
    held = names_me(mm)
    log.info("stopping: handing off %d replicas (at most %.1f s)", len(held), timeout_s)
    outcome = "timeout"
    while time.monotonic() - started < timeout_s:
        held = names_me(mm)
        if not held and mm.settled():
            outcome = "done"
            break
        if not mm.liveness.valid() and not mm.liveness.catching_up():
            outcome = "lease lost"
            break
        await asyncio.sleep(POLL_S)
    log.info(
        "handoff %s after %.3f s%s",
        outcome,
        time.monotonic() - started,
        f"; still named in {', '.join(held)}" if outcome != "done" else "",
    )
    return outcome
