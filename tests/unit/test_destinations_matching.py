"""Destination matching and per-partition delivery state (unit level)."""

from __future__ import annotations

from types import SimpleNamespace

from hybridmq.api.ranges import RangeSet
from hybridmq.broker.destinations.delivery import ConsumerLink, DeliveryState, pop_redelivery
from hybridmq.broker.destinations.matching import make_matcher


def test_exact_glob_regex() -> None:
    assert make_matcher("orders")("topic:orders")
    assert not make_matcher("orders")("queue:orders")
    g = make_matcher("queue:jobs.*", "glob")
    assert g("queue:jobs.a") and not g("topic:jobs.a") and not g("queue:other")
    r = make_matcher(r"topic:m\.(a|b)", "regex")
    assert r("topic:m.a") and not r("topic:m.c") and not r("topic:m.ab")


def _link(window: int = 10) -> ConsumerLink:
    return ConsumerLink(SimpleNamespace(closed=False), "k", window, 1 << 20)


def _pick(s: DeliveryState) -> ConsumerLink | None:
    links = s.links_with_credit()
    if not links:
        return None
    s.picked(links[0])
    return links[0]


def test_queue_state_round_robin_credit_and_low_watermark() -> None:
    s = DeliveryState("q:queue:x", make_matcher("queue:x"), 0, True, False)
    a, b = _link(2), _link(2)
    s.links += [a, b]
    picked = []
    for base in range(4):
        link = _pick(s)
        assert link is not None
        s.record_delivery(base, 1, 10, link, b"")
        picked.append(link)
    assert picked == [a, b, a, b]
    assert _pick(s) is None  # both windows used up
    s.next_offset = 4
    assert s.settle(1) and s.lw() == 0
    assert s.settle(0) and s.lw() == 2
    assert s.snapshot() == (2, ())
    s.detach(a)  # a's unacked message 2 goes back for redelivery
    assert pop_redelivery(s) == (2, 2)
    assert _pick(s) is b


def test_records_of_one_delivery_are_settled_and_given_back_one_by_one() -> None:
    s = DeliveryState("q:queue:z", make_matcher("queue:z"), 0, True, False)
    link = _link(10)
    s.record_delivery(0, 5, 50, link, b"")  # records 0..4 in one delivery
    s.next_offset = 5
    assert link.inflight == 5
    assert s.settle(0, link, 1, 2, 2)  # message 2 alone
    assert not s.settle(0, link, 1, 2, 2)  # not outstanding any more
    assert s.give_back(0, 4, 4, link)  # message 4 back for redelivery
    assert link.inflight == 3
    assert s.settle(0, link, 1)  # what is left: 0, 1, 3
    assert link.inflight == 0 and not s.pending
    assert s.snapshot() == (4, ())
    assert pop_redelivery(s) == (4, 4)


def test_snapshot_restore_skips_acked_batches() -> None:
    s = DeliveryState("q:queue:y", make_matcher("queue:y"), 0, True, False)
    link = _link()
    for base in (0, 5, 9):
        s.record_delivery(base, 1, 1, link, b"")
    s.next_offset = 10
    s.settle(5)
    snap = s.snapshot()
    assert snap == (0, ((5, 5),))
    t = DeliveryState("q:queue:y", make_matcher("queue:y"), 0, True, False)
    t.restore(*snap)
    assert t.next_offset == 0 and list(t.acked) == [(5, 5)]


def test_range_set_merges_splits_and_finds_gaps() -> None:
    acked = RangeSet()
    for first, last in ((5, 5), (7, 9), (6, 6), (20, 25), (1, 2)):
        acked.add(first, last)
    assert list(acked) == [(1, 2), (5, 9), (20, 25)]  # 5..9 merged from three adds
    assert acked.count() == 2 + 5 + 6
    assert 7 in acked and 10 not in acked and 0 not in acked
    assert acked.next_missing(5) == 10 and acked.next_missing(3) == 3
    assert acked.missing_until(10, 100) == 19 and acked.missing_until(26, 100) == 100
    assert acked.covers(5, 9) and not acked.covers(5, 10)
    assert not acked.remove(8, 12)  # not all of it is there: nothing changes
    assert acked.remove(6, 7) and list(acked) == [(1, 2), (5, 5), (8, 9), (20, 25)]
    acked.drop_below(9)
    assert list(acked) == [(8, 9), (20, 25)]
    assert acked.to_tuple(10) == ((20, 25),)
