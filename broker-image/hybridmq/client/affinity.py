"""Subscription takeover for affinity consumers: the marker protocol as a pure state machine.

A consumer group on a topic has one instance per member, each with its own durable subscription queue.
Every queue receives every message of the topic; an instance *processes* only the messages whose
session key it owns and passes over (acknowledges without processing) the rest. When an instance is
declared dead, a survivor adopts its keys and must process, for each adopted key, exactly the
messages the dead instance had not processed, in publish order, without reprocessing anything.

The protocol, driven by :class:`Takeover`:

1. stop processing the survivor's own queue;
2. open the dead instance's queue;
3. publish a marker to every subscriber of the topic (the broker writes it to every partition that
   holds the topic, so each partition's stream carries it after everything published before it);
4. process the dead queue up to the marker, handling only the adopted keys, then close it;
5. resume the own queue, processing the survivor's original keys as usual but skipping adopted keys
   up to the marker (those messages were handled from the dead queue or by the dead instance);
6. past the marker, carry on normally with the union of the keys.

A topic may be spread over several partitions; the marker reaches each of them, so a phase ends when
the marker has been seen in every partition that carried one. Per-key order holds because a key's
messages come from one producer and therefore one partition, which is consumed in offset order.

The module does no I/O: the consumer feeds it messages and performs the :class:`Action` it returns.
The group API that drives it over real connections (leases, takeover) is
:class:`hybridmq.client.affinity_group.AffinityMember`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

MARKER_HEADER = "hybridmq-affinity-marker"


class Action(StrEnum):
    PROCESS = "process"  # hand the message to the application, then acknowledge it
    SKIP = "skip"  # acknowledge without processing: another instance owns (or owned) it
    MARKER = "marker"  # the takeover marker for this partition: acknowledge, nothing to process


class Phase(StrEnum):
    NORMAL = "normal"
    DRAIN_DEAD = "drain-dead"  # reading the dead instance's queue up to the marker
    CATCH_UP_OWN = "catch-up-own"  # reading our own queue up to the marker


@dataclass(frozen=True)
class AffinityMessage:
    """What the state machine needs to know about one delivered message."""

    partition: str
    key: str | None
    marker_id: str | None = None  # set on marker messages only


@dataclass
class Takeover:
    """One survivor's takeover of one dead instance's queue.

    ``owns`` tells whether a key belonged to this survivor *before* the takeover; ``adopted`` whether
    it belonged to the dead instance. ``marker_partitions`` are the partitions the marker was
    published to (the broker reports them when it publishes).
    """

    marker_id: str
    owns: Callable[[str | None], bool]
    adopted: Callable[[str | None], bool]
    marker_partitions: frozenset[str]
    phase: Phase = Phase.DRAIN_DEAD
    _dead_markers_seen: set[str] = field(default_factory=set)
    _own_markers_seen: set[str] = field(default_factory=set)

    def on_dead_queue(self, msg: AffinityMessage) -> Action:
        """A message read from the dead instance's queue (phase DRAIN_DEAD)."""
        if self.phase is not Phase.DRAIN_DEAD:
            raise RuntimeError(f"dead queue read in phase {self.phase}: it should be closed")
        if msg.marker_id is not None:
            if msg.marker_id == self.marker_id:
                self._dead_markers_seen.add(msg.partition)
                if self._dead_markers_seen >= self.marker_partitions:
                    self.phase = Phase.CATCH_UP_OWN
            return Action.MARKER
        if msg.partition in self._dead_markers_seen:
            # Past the marker in this partition: those messages are in our own queue too.
            return Action.SKIP
        return Action.PROCESS if self.adopted(msg.key) else Action.SKIP

    def on_own_queue(self, msg: AffinityMessage) -> Action:
        """A message read from the survivor's own queue (phases CATCH_UP_OWN and NORMAL)."""
        if self.phase is Phase.DRAIN_DEAD:
            raise RuntimeError("own queue read while draining the dead queue: it should be stopped")
        if msg.marker_id is not None:
            if msg.marker_id == self.marker_id:
                self._own_markers_seen.add(msg.partition)
                if self._own_markers_seen >= self.marker_partitions:
                    self.phase = Phase.NORMAL
            return Action.MARKER
        before_marker = self.phase is Phase.CATCH_UP_OWN and msg.partition not in self._own_markers_seen
        if self.owns(msg.key):
            return Action.PROCESS
        if self.adopted(msg.key):
            # Up to the marker an adopted key's messages were handled from the dead queue (or by the
            # dead instance before it died); after it, they are ours.
            return Action.SKIP if before_marker else Action.PROCESS
        return Action.SKIP

    @property
    def dead_queue_done(self) -> bool:
        return self.phase is not Phase.DRAIN_DEAD

    @property
    def finished(self) -> bool:
        return self.phase is Phase.NORMAL


@dataclass
class Ownership:
    """Which instance owns which session keys.

    Each key has a *home* member, chosen by rendezvous hashing over the group's declared members, so
    the split never changes when an instance dies. A dead member's whole queue, and so all of its
    keys, is adopted by one survivor; ``adopted_by`` records that, and chains when an
    adopter dies in turn.
    """

    members: tuple[str, ...]
    adopted_by: dict[str, str] = field(default_factory=dict)

    def home(self, key: str | None) -> str:
        if not self.members:
            raise ValueError("the group has no members")
        return max(
            self.members, key=lambda m: hashlib.blake2b(f"{m}\0{key}".encode(), digest_size=8).digest()
        )

    def owner(self, key: str | None) -> str:
        member = self.home(key)
        seen = {member}
        while member in self.adopted_by:
            member = self.adopted_by[member]
            if member in seen:
                raise ValueError(f"adoption cycle through {member}")
            seen.add(member)
        return member

    def adopt(self, dead: str, survivor: str) -> Ownership:
        return Ownership(self.members, {**self.adopted_by, dead: survivor})
