"""Authentication and ACLs: a refused client gets a clear error; everyone else keeps working."""

from __future__ import annotations

import pytest

from hybridmq.api.frames import ErrorCode
from hybridmq.client import ClientError, Consumer, Message, Producer
from hybridmq.local.runner import LocalCluster

ALICE = {"user": "alice", "password": "alice-secret"}
BOB = {"user": "bob", "password": "bob-secret"}


async def test_wrong_password_is_refused_only_for_that_client(secure_cluster: LocalCluster) -> None:
    good = await Producer.connect(secure_cluster.bootstrap, **ALICE)
    with pytest.raises(ClientError) as err:
        await Producer.connect(secure_cluster.bootstrap, user="alice", password="wrong")
    assert err.value.code == ErrorCode.AUTH_FAILED
    assert "authentication failed for user 'alice'" in str(err.value)
    with pytest.raises(ClientError) as err2:
        await Consumer.connect(secure_cluster.bootstrap, "topic:orders.eu", user="mallory", password="x")
    assert err2.value.code == ErrorCode.AUTH_FAILED
    # the already-connected client is unaffected
    ack = await good.send("topic:orders.eu", b"still here")
    assert ack.offset >= 0
    await good.close()


async def test_acl_denial_is_reported_to_that_client_only(secure_cluster: LocalCluster) -> None:
    reader = await Consumer.connect(secure_cluster.bootstrap, "topic:orders.us", **BOB)
    alice = await Producer.connect(secure_cluster.bootstrap, **ALICE)
    bob = await Producer.connect(secure_cluster.bootstrap, **BOB)
    with pytest.raises(ClientError) as err:
        await bob.send("topic:orders.us", b"forged")
    assert err.value.code == ErrorCode.ACL_DENIED
    assert "bob" in str(err.value) and "topic:orders.us" in str(err.value)
    with pytest.raises(ClientError) as err2:
        await alice.send("topic:payroll", b"x")  # alice may not produce there either
    assert err2.value.code == ErrorCode.ACL_DENIED
    await alice.send("topic:orders.us", b"legit")
    m = await reader.receive(timeout=10)
    assert isinstance(m, Message) and m.value == b"legit"
    with pytest.raises(ClientError) as err3:
        await Consumer.connect(secure_cluster.bootstrap, "queue:jobs", **BOB)
    assert err3.value.code == ErrorCode.ACL_DENIED
    for c in (alice, bob):
        await c.close()
    await reader.close()


def test_credentials_are_stored_as_salted_hashes() -> None:
    from hybridmq.broker.auth.credentials import CredentialStore

    store = CredentialStore()
    store.add("u", "pw")
    store.add("v", "pw")
    stored = store._hashes
    assert "pw" not in stored["u"] and stored["u"] != stored["v"]  # salted
    assert store.authenticate("u", "pw") and not store.authenticate("u", "nope")
    assert not store.authenticate("nobody", "pw")


async def test_wildcard_subscription_cannot_reach_another_users_queue(secure_cluster: LocalCluster) -> None:
    """bob may consume only queue:bob.*; wildcards that also match alice's queue get none of hers."""
    alice = await Producer.connect(secure_cluster.bootstrap, **ALICE)
    sent = [f"alice-{i}".encode() for i in range(20)]
    for value in sent[:10]:
        await alice.send("queue:alice.inbox", value)
    # The pattern's text matches bob's grant, the regex also matches alice's queues.
    sneaky = await Consumer.connect(secure_cluster.bootstrap, "queue:bob.*|alice.*", match="regex", **BOB)
    broad = await Consumer.connect(secure_cluster.bootstrap, "queue:*", match="glob", **BOB)
    for value in sent[10:]:  # destinations matched after the subscription too
        await alice.send("queue:alice.inbox", value)
    await alice.send("queue:bob.mail", b"for bob")
    got = []
    for consumer in (sneaky, broad):
        while True:
            try:
                msg = await consumer.receive(timeout=3)
            except TimeoutError:
                break
            assert isinstance(msg, Message)
            got.append((msg.destination, msg.value))
            consumer.ack(msg)
    assert got == [("queue:bob.mail", b"for bob")]
    await sneaky.close()
    await broad.close()

    # A pattern that can only match denied destinations is refused, with the reason.
    for pattern, match in (
        (r"queue:alice\..*", "regex"),
        ("queue:alice.*", "glob"),
        ("topic:payroll.*", "glob"),
    ):
        with pytest.raises(ClientError) as err:
            await Consumer.connect(secure_cluster.bootstrap, pattern, match=match, **BOB)
        assert err.value.code == ErrorCode.ACL_DENIED
        assert "may not consume from any destination" in str(err.value) and pattern in str(err.value)

    # alice, the owner, still gets every one of her messages.
    owner = await Consumer.connect(secure_cluster.bootstrap, "queue:alice.inbox", **ALICE)
    received = []
    for _ in sent:
        msg = await owner.receive(timeout=15)
        assert isinstance(msg, Message)
        received.append(msg.value)
        owner.ack(msg)
    assert sorted(received) == sorted(sent)
    await owner.close()
    await alice.close()
