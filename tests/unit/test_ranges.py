"""``RangeSet``, the offset sets the broker's cursors and a consumer's memory of what it handed out
are kept in, against a plain set of offsets, whatever the order of operations."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from hybridmq.api.ranges import RangeSet

SPAN = 50
interval = st.tuples(st.integers(0, SPAN), st.integers(0, 6)).map(lambda t: (t[0], t[0] + t[1]))
ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), interval),
        st.tuples(st.just("remove"), interval),
        st.tuples(st.just("drop_below"), st.integers(0, SPAN)),
        st.tuples(st.just("drop_first"), st.integers(0, 3)),
    ),
    max_size=80,
)


@settings(max_examples=400, deadline=None)
@given(ops)
def test_a_range_set_holds_what_a_set_of_offsets_holds(steps: list[tuple[str, object]]) -> None:
    ranges, model = RangeSet(), set[int]()
    for op, arg in steps:
        if op == "add":
            first, last = arg  # type: ignore[misc]
            ranges.add(first, last)
            model.update(range(first, last + 1))
        elif op == "remove":
            first, last = arg  # type: ignore[misc]
            whole = all(o in model for o in range(first, last + 1))
            assert ranges.remove(first, last) == whole  # all of it or nothing
            if whole:
                model.difference_update(range(first, last + 1))
        elif op == "drop_below":
            low = int(arg)  # type: ignore[call-overload]
            ends_below = {o for f, e in ranges if e < low for o in range(f, e + 1)}
            ranges.drop_below(low)
            model -= ends_below
        else:
            n = int(arg)  # type: ignore[call-overload]
            dropped = {o for f, e in list(ranges)[:n] for o in range(f, e + 1)}
            ranges.drop_first(n)
            model -= dropped
        universe = range(-1, SPAN + 10)
        assert {o for o in universe if o in ranges} == model
        assert ranges.count() == len(model) and bool(ranges) == bool(model)
        kept = list(ranges)
        # sorted, disjoint and never adjacent: one interval per stretch of consecutive offsets
        assert all(a <= b and b + 1 < c for (a, b), (c, _) in itertools.pairwise(kept))
        for o in universe:
            missing = next(m for m in itertools.count(o) if m not in model)
            assert ranges.next_missing(o) == missing
            if o not in model:
                limit = o + 5
                until = next((m - 1 for m in range(o, limit + 1) if m in model), limit)
                assert ranges.missing_until(o, limit) == until
        for first, last in kept:
            assert ranges.covers(first, last) and not ranges.covers(first, last + 1)
