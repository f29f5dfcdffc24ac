"""The chaos checker on hand-made histories: each verdict fires on its violation and only on it."""

from __future__ import annotations

from adv_checker import MUST_BE_ZERO, Delivery, History, LargeReceipt, Sent, Stored, check

Q = "queue:q"


def _clean() -> History:
    """p.0 stored and delivered once, acked; p.1 delivered, acked; both in order in one partition."""
    h = History()
    h.sent += [Sent("p", 0, Q, fixed=True, acked=True), Sent("p", 1, Q, fixed=True, acked=True)]
    h.deliveries += [
        Delivery(Q, "p:0", "f0", 10, False, received_at=1.0, acked_at=1.1),
        Delivery(Q, "p:1", "f0", 11, False, received_at=1.0, acked_at=1.1),
    ]
    h.stored += [Stored("p:0", "f0", 10), Stored("p:1", "f0", 11)]
    h.large_sent["large:0"] = ("abc", 3)
    h.large_receipts.append(LargeReceipt("large:0", "abc", 3))
    return h


def _bad(h: History) -> dict[str, int]:
    verdict, _ = check(h, settle_s=1.0)
    return {k: v for k, v in verdict.items() if v and k in MUST_BE_ZERO}


def test_clean_history_passes() -> None:
    verdict, examples = check(_clean(), settle_s=1.0)
    assert _bad(_clean()) == {}, examples
    assert verdict["acked"] == 2 and verdict["large_ok"] == 1


def test_acked_message_missing_is_lost() -> None:
    h = _clean()
    h.sent.append(Sent("p", 2, Q, fixed=True, acked=True))
    assert _bad(h) == {"lost": 1}
    h.sent[-1] = Sent("p", 2, Q, fixed=True, acked=False)  # never acknowledged: nothing promised
    assert _bad(h) == {}


def test_stored_but_never_delivered() -> None:
    h = _clean()
    h.sent.append(Sent("p", 2, Q, fixed=True, acked=True))
    h.stored.append(Stored("p:2", "f0", 12))
    assert _bad(h) == {"undelivered": 1}


def test_one_payload_at_two_offsets_is_stored_twice() -> None:
    h = _clean()
    h.stored.append(Stored("p:1", "f0", 12))
    assert _bad(h) == {"dup_stored": 1}


def test_fixed_producer_order() -> None:
    h = _clean()
    h.stored = [Stored("p:0", "f0", 11), Stored("p:1", "f0", 10)]
    h.deliveries = [
        Delivery(Q, "p:0", "f0", 11, False, 1.0, 1.1),
        Delivery(Q, "p:1", "f0", 10, False, 1.0, 1.1),
    ]
    assert _bad(h) == {"order_violations": 1}
    h.sent = [Sent(s.producer, s.n, s.group, fixed=False, acked=True) for s in h.sent]  # on-demand: no order
    assert _bad(h) == {}


def test_redelivery_after_a_settled_ack() -> None:
    h = _clean()
    h.deliveries.append(Delivery(Q, "p:0", "f0", 10, True, received_at=5.0, acked_at=5.1))
    assert _bad(h) == {"acked_redelivered": 1}
    h.faults.append((1.5, 3.0))  # the ACK at 1.1 was within 1 s of a fault: it may have been lost
    assert _bad(h) == {}
    assert check(h, settle_s=1.0)[0]["acked_redelivered_near_fault"] == 1


def test_redelivery_after_an_unconfirmed_ack_is_no_defect() -> None:
    """An ACK the broker refused (its delivery was made again by a new primary meanwhile) promises
    nothing: the repeat is counted for information, not held against the broker."""
    h = _clean()
    h.deliveries[0] = Delivery(Q, "p:0", "f0", 10, False, received_at=1.0, acked_at=None, ack_sent_at=1.1)
    h.deliveries.append(Delivery(Q, "p:0", "f0", 10, True, received_at=5.0, acked_at=5.1, ack_sent_at=5.1))
    assert _bad(h) == {}
    assert check(h, settle_s=1.0)[0]["ack_unconfirmed_redelivered"] == 1
    h.deliveries[0] = Delivery(Q, "p:0", "f0", 10, False, received_at=1.0, acked_at=1.1, ack_sent_at=1.1)
    assert _bad(h) == {"acked_redelivered": 1}  # confirmed, then delivered again: a defect


def test_redelivery_must_be_flagged() -> None:
    h = _clean()
    h.deliveries[0] = Delivery(Q, "p:0", "f0", 10, False, received_at=1.0, acked_at=None)
    h.deliveries.append(Delivery(Q, "p:0", "f0", 10, False, received_at=5.0, acked_at=5.1))
    assert _bad(h) == {"unflagged_redeliveries": 1}
    h.deliveries[-1] = Delivery(Q, "p:0", "f0", 10, True, received_at=5.0, acked_at=5.1)
    assert _bad(h) == {}


def test_other_subscription_is_not_a_redelivery() -> None:
    h = _clean()
    h.deliveries.append(Delivery("topic:t#other", "p:0", "f0", 10, False, received_at=5.0, acked_at=5.1))
    assert _bad(h) == {}


def test_large_message_corrupt_or_missing() -> None:
    h = _clean()
    h.large_receipts.append(LargeReceipt("large:0", "abd", 3))
    assert _bad(h) == {"large_corrupt": 1}
    h.large_receipts = [LargeReceipt("large:0", "abd", 3)]
    assert _bad(h) == {"large_corrupt": 1, "large_lost": 1}
