"""Users and ACLs change while the CM runs (the files it was given, as a mounted Secret changes):
a new user can produce, a narrowed ACL refuses within 5 s, a removed user's open sessions end.

Real CM and MM processes; the files are rewritten the way an editor or the kubelet does (a new
file renamed over the old one)."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hybridmq.api.frames import ErrorCode
from hybridmq.client import ClientError, Producer
from hybridmq.local.runner import LocalCluster

LIMIT_S = 5.0


def replace(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.new")
    tmp.write_text(text)
    os.replace(tmp, path)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[LocalCluster, Path, Path]]:
    users = tmp_path / "users.txt"
    users.write_text("alice:alice-pw\n")
    acl = tmp_path / "acl.json"
    acl.write_text(json.dumps({"alice": {"produce": ["queue:orders.*"], "consume": []}}))
    with LocalCluster(tmp_path / "run", mms=1, credentials=users, acl=acl) as c:
        yield c, users, acl


async def _until(check: object, what: str, limit: float = LIMIT_S) -> float:
    start = time.monotonic()
    while True:
        if await check():  # type: ignore[operator]
            return time.monotonic() - start
        assert time.monotonic() - start < limit, f"{what} not within {limit} s"
        await asyncio.sleep(0.1)


async def test_users_and_acls_follow_their_files(cluster: tuple[LocalCluster, Path, Path]) -> None:
    c, users, acl = cluster
    alice = await Producer.connect(c.bootstrap, user="alice", password="alice-pw", reconnect=False)
    await alice.send("queue:orders.eu", b"allowed")

    # A new user: admitted within seconds.
    replace(users, "alice:alice-pw\nbob:bob-pw\n")
    replace(acl, json.dumps({"alice": {"produce": ["queue:orders.*"]}, "bob": {"produce": ["queue:bob.*"]}}))

    async def bob_produces() -> bool:
        try:
            async with await Producer.connect(
                c.bootstrap, user="bob", password="bob-pw", reconnect=False
            ) as p:
                await p.send("queue:bob.1", b"hello")
            return True
        except ClientError as exc:
            assert exc.code == ErrorCode.AUTH_FAILED, exc
            return False

    await _until(bob_produces, "the new user producing")

    # Alice's grant narrowed: her open session is refused within 5 s.
    replace(acl, json.dumps({"alice": {"produce": ["queue:audit.*"]}, "bob": {"produce": ["queue:bob.*"]}}))

    async def alice_refused() -> bool:
        try:
            await alice.send("queue:orders.eu", b"still allowed?")
            return False
        except ClientError as exc:
            assert exc.code == ErrorCode.ACL_DENIED, exc
            return True

    took = await _until(alice_refused, "the narrowed ACL refusing")
    await alice.send("queue:audit.1", b"the new grant works")  # same session, same connection

    # Alice removed: her open session ends, and she cannot come back.
    replace(users, "bob:bob-pw\n")

    async def alice_ended() -> bool:
        return alice.session.ended

    await _until(alice_ended, "the removed user's session ending")
    with pytest.raises(ClientError) as refused:
        await Producer.connect(c.bootstrap, user="alice", password="alice-pw", reconnect=False)
    assert refused.value.code == ErrorCode.AUTH_FAILED
    print(f"acl_refused_after_s={took:.2f}")
