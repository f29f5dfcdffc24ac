"""What a consumer remembers having handed to its application (it drops repeats after a CM
failover): checked against a plain set, whatever the order of deliveries and give-backs."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from hybridmq.client.redelivery import HandedOut, OffsetRuns

ops = st.lists(st.tuples(st.sampled_from(["add", "discard"]), st.integers(0, 60)), max_size=200)


@settings(max_examples=300, deadline=None)
@given(ops)
def test_runs_hold_exactly_what_was_added_and_not_discarded(steps: list[tuple[str, int]]) -> None:
    runs, model = OffsetRuns(capacity=1000), set[int]()
    for op, offset in steps:
        if op == "add":
            runs.add(offset)
            model.add(offset)
        else:
            runs.discard(offset)
            model.discard(offset)
        assert {o for o in range(-1, 62) if o in runs} == model
        kept = runs.runs()
        # sorted, disjoint and never adjacent: one run per stretch of consecutive offsets
        assert all(a <= b and b + 1 < c for (a, b), (c, _) in itertools.pairwise(kept))


@settings(max_examples=300, deadline=None)
@given(ops, st.integers(1, 4))
def test_a_full_memory_forgets_but_never_claims_what_it_did_not_hand_out(
    steps: list[tuple[str, int]], capacity: int
) -> None:
    """Forgetting costs a duplicate; claiming an offset never handed out would lose it."""
    runs, model = OffsetRuns(capacity), set[int]()
    for op, offset in steps:
        (runs.add if op == "add" else runs.discard)(offset)
        (model.add if op == "add" else model.discard)(offset)
        assert {o for o in range(-1, 62) if o in runs} <= model
        assert len(runs) <= capacity


def test_a_delivery_behind_a_later_one_is_not_taken_for_a_repeat() -> None:
    """A topic's redelivery can come after later offsets (given back, or withdrawn by a primary
    whose commit failed): it was never handed out, so it is not dropped."""
    handed = HandedOut(capacity=100)
    for offset in [*range(0, 10), *range(15, 20)]:
        handed.add("p0", offset)
    assert ("p0", 12) not in handed and ("p0", 9) in handed and ("p0", 15) in handed
    assert ("p1", 3) not in handed


def test_a_message_given_back_is_no_longer_handed_out() -> None:
    handed = HandedOut(capacity=100)
    for offset in range(5):
        handed.add("p0", offset)
    handed.discard("p0", 2)
    assert [o for o in range(5) if ("p0", o) in handed] == [0, 1, 3, 4]
    handed.discard("p9", 2)  # a partition it never saw: nothing to forget
