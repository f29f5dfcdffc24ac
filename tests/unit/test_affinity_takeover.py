"""Affinity takeover markers: per session key, exactly once and in publish order across a takeover."""

from __future__ import annotations

import random
from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st

from hybridmq.client.affinity import Action, AffinityMessage, Ownership, Phase, Takeover

Msg = tuple[str, str | None, int | None, str | None]  # partition, key, sequence, marker id


def interleave(streams: dict[str, list[Msg]], rng: random.Random) -> list[Msg]:
    """One subscription's delivery order: each partition in order, partitions interleaved at random."""
    cursors = {p: 0 for p in streams}
    out: list[Msg] = []
    while any(cursors[p] < len(s) for p, s in streams.items()):
        p = rng.choice([p for p, s in streams.items() if cursors[p] < len(s)])
        out.append(streams[p][cursors[p]])
        cursors[p] += 1
    return out


@settings(max_examples=300, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    n_keys=st.integers(1, 12),
    n_partitions=st.integers(1, 4),
    before=st.integers(0, 60),
    after=st.integers(0, 30),
    dead_progress=st.floats(0, 1),
    survivor_progress=st.floats(0, 1),
)
def test_takeover_processes_each_message_once_in_order(
    seed: int,
    n_keys: int,
    n_partitions: int,
    before: int,
    after: int,
    dead_progress: float,
    survivor_progress: float,
) -> None:
    rng = random.Random(seed)
    group = Ownership(("a", "b", "c"))
    keys = [f"session-{i}" for i in range(n_keys)]
    partitions = [f"p{i}" for i in range(n_partitions)]
    key_partition = {k: rng.choice(partitions) for k in keys}  # one producer per key
    published: dict[str, list[int]] = defaultdict(list)
    streams: dict[str, list[Msg]] = {p: [] for p in partitions}
    sequence = 0

    def publish(n: int) -> None:
        nonlocal sequence
        for _ in range(n):
            key = rng.choice(keys)
            streams[key_partition[key]].append((key_partition[key], key, sequence, None))
            published[key].append(sequence)
            sequence += 1

    publish(before)
    dead_queue = interleave(streams, rng)
    own_queue = interleave(streams, rng)
    processed: dict[str, list[int]] = defaultdict(list)

    # "a" dies after processing a prefix of its queue; "b" has processed a prefix of its own.
    dead_done = int(len(dead_queue) * dead_progress)
    own_done = int(len(own_queue) * survivor_progress)
    for _p, key, seq, _ in dead_queue[:dead_done]:
        if group.owner(key) == "a":
            assert seq is not None
            processed[key].append(seq)
    for _p, key, seq, _ in own_queue[:own_done]:
        if group.owner(key) == "b":
            assert seq is not None
            processed[key].append(seq)

    # "b" takes over: the marker goes to every partition, after everything published so far.
    takeover_group = group.adopt("a", "b")
    marker_tail = {p: [(p, None, None, "m1")] for p in partitions}
    later: dict[str, list[Msg]] = {p: [] for p in partitions}
    streams = later
    publish(after)
    tails = {p: marker_tail[p] + later[p] for p in partitions}
    dead_rest = dead_queue[dead_done:] + interleave(tails, rng)
    own_rest = own_queue[own_done:] + interleave(tails, rng)

    takeover = Takeover(
        marker_id="m1",
        owns=lambda k: group.owner(k) == "b",
        adopted=lambda k: group.owner(k) == "a",
        marker_partitions=frozenset(partitions),
    )

    def handle(action: Action, key: str | None, seq: int | None) -> None:
        if action is Action.PROCESS:
            assert key is not None and seq is not None
            processed[key].append(seq)

    for p, key, seq, marker in dead_rest:
        if takeover.dead_queue_done:
            break
        handle(takeover.on_dead_queue(AffinityMessage(p, key, marker)), key, seq)
    assert takeover.phase is Phase.CATCH_UP_OWN
    for p, key, seq, marker in own_rest:
        handle(takeover.on_own_queue(AffinityMessage(p, key, marker)), key, seq)
    assert takeover.finished

    for key in keys:
        if takeover_group.owner(key) == "b":
            assert processed[key] == published[key], key
        else:
            # "c" is alive and processes its own keys; the survivor never touched them.
            assert processed[key] == [], key


def test_ownership_moves_only_the_dead_members_keys() -> None:
    group = Ownership(("a", "b", "c"))
    keys = [f"k{i}" for i in range(200)]
    after = group.adopt("a", "b")
    for key in keys:
        before_owner = group.owner(key)
        assert after.owner(key) == ("b" if before_owner == "a" else before_owner)
    assert {group.owner(k) for k in keys} == {"a", "b", "c"}
    assert group.adopt("a", "b").adopt("b", "c").owner(next(k for k in keys if group.home(k) == "a")) == "c"
