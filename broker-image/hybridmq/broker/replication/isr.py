"""The in-sync rule, Kafka's lag-time version, as small pure helpers.

A backup is *caught up* at time t when a fetch at t asks for an offset >= the primary's log end at
that moment, or >= the log end the primary had when it answered the backup's previous fetch (then
it was caught up at the time of that previous fetch). A backup stays in sync while it was caught up
within ``lag_time``; an out-of-sync backup joins once it is caught up again and its copy reaches
the high watermark. The primary is always in sync.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class ReplicaState:
    replica_id: str
    fetch_offset: int = -1  # the backup's log end offset, as its last fetch said (-1: unknown)
    last_fetch_time: float = float("-inf")
    last_caught_up_time: float = float("-inf")
    leo_at_last_fetch: int = -1

    def on_fetch(self, fetch_offset: int, now: float, primary_leo: int) -> None:
        if fetch_offset >= primary_leo:
            self.last_caught_up_time = now
        elif self.leo_at_last_fetch >= 0 and fetch_offset >= self.leo_at_last_fetch:
            self.last_caught_up_time = max(self.last_caught_up_time, self.last_fetch_time)
        self.fetch_offset = fetch_offset
        self.last_fetch_time = now
        self.leo_at_last_fetch = primary_leo


def is_lagging(state: ReplicaState, now: float, lag_time: float) -> bool:
    return now - state.last_caught_up_time > lag_time


def can_join(state: ReplicaState, now: float, lag_time: float, high_watermark: int, epoch_start: int) -> bool:
    return (
        not is_lagging(state, now, lag_time)
        and state.fetch_offset >= high_watermark
        and state.fetch_offset >= epoch_start
    )
