"""Destination matching and per-partition delivery state (unit level)."""

from __future__ import annotations

from types import SimpleNamespace

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


def test_queue_state_round_robin_credit_and_low_watermark() -> None:
    s = DeliveryState("q:queue:x", make_matcher("queue:x"), 0, True, False)
    a, b = _link(2), _link(2)
    s.links += [a, b]
    picked = []
    for base in range(4):
        link = s.pick_link()
        assert link is not None
        s.record_delivery(base, 1, 10, link)
        picked.append(link)
    assert picked == [a, b, a, b]
    assert s.pick_link() is None  # both windows used up
    s.next_offset = 4
    assert s.settle(1) and s.lw() == 0
    assert s.settle(0) and s.lw() == 2
    assert s.snapshot() == (2, ())
    s.detach(a)  # a's unacked batch 2 goes back for redelivery
    assert pop_redelivery(s) == 2
    assert s.pick_link() is b


def test_snapshot_restore_skips_acked_batches() -> None:
    s = DeliveryState("q:queue:y", make_matcher("queue:y"), 0, True, False)
    link = _link()
    for base in (0, 5, 9):
        s.record_delivery(base, 1, 1, link)
    s.next_offset = 10
    s.settle(5)
    snap = s.snapshot()
    assert snap == (0, ((5, 5),))
    t = DeliveryState("q:queue:y", make_matcher("queue:y"), 0, True, False)
    t.restore(*snap)
    assert t.next_offset == 0 and t.acked == {5: 5}
