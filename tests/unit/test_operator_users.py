"""BrokerUsers -> the CMs' users Secret and each user's Ready condition (pure planner)."""

from __future__ import annotations

import base64
import json
from typing import Any

from hybridmq.api.password_hash import hash_password, verify_password
from hybridmq.api.resources import BrokerCluster, BrokerUser
from hybridmq_operator.resources.users import UsersPlan, hashes_of, plan_users
from hybridmq_operator.settings import ClusterSettings


def cluster(**auth: Any) -> tuple[BrokerCluster, ClusterSettings]:
    body = {
        "apiVersion": "hybridmq.io/v1alpha1",
        "kind": "BrokerCluster",
        "metadata": {"name": "shop", "namespace": "ns", "uid": "u"},
        "spec": {"auth": auth},
    }
    return BrokerCluster.model_validate(body), ClusterSettings.from_body(body)


def user(name: str, acls: list[dict[str, Any]], **spec: Any) -> BrokerUser:
    return BrokerUser.model_validate(
        {"metadata": {"name": name, "namespace": "ns"}, "spec": {"cluster": "shop", "acls": acls, **spec}}
    )


def plan(c: tuple[BrokerCluster, ClusterSettings] | None, users: list[BrokerUser], **kw: Any) -> UsersPlan:
    passwords = kw.get("passwords", {u.metadata.name: f"{u.metadata.name}-pw" for u in users})
    return plan_users(
        c[0] if c else None,
        c[1] if c else None,
        users,
        passwords,
        kw.get("current", {}),
        hash_password,
        verify_password,
    )


def data(p: UsersPlan) -> dict[str, str]:
    assert p.secret is not None
    return {k: base64.b64decode(v).decode() for k, v in p.secret["data"].items()}


def test_users_and_their_grants_reach_the_cms_hashed() -> None:
    alice = user("alice", [{"destination": "queue:orders.*", "operations": ["produce", "consume"]}])
    bob = user("bob-user", [{"destination": "topic:*", "operations": ["consume"]}], username="bob")
    p = plan(cluster(enabled=True), [alice, bob])
    assert p.secret is not None and p.secret["metadata"]["name"] == "shop-users"
    d = data(p)
    hashes = hashes_of(d["credentials"])
    assert set(hashes) == {"alice", "bob"}
    assert verify_password("alice-pw", hashes["alice"]) and verify_password("bob-user-pw", hashes["bob"])
    assert "alice-pw" not in d["credentials"]  # never the password itself
    acl = json.loads(d["acl.json"])
    assert acl["alice"]["produce"] == ["queue:orders.*"] and acl["bob"] == {
        "produce": [],
        "consume": ["topic:*"],
        "admin": [],
    }
    assert all(v.ready for v in p.verdicts.values())


def test_an_unchanged_password_keeps_its_hash() -> None:
    alice = user("alice", [])
    first = hashes_of(data(plan(cluster(enabled=True), [alice]))["credentials"])
    again = hashes_of(data(plan(cluster(enabled=True), [alice], current=first))["credentials"])
    assert again == first
    changed = plan(cluster(enabled=True), [alice], current=first, passwords={"alice": "new"})
    assert hashes_of(data(changed)["credentials"]) != first


def test_refusals_say_why() -> None:
    alice = user("alice", [])
    assert plan(None, [alice]).verdicts["alice"].reason == "ClusterNotFound"
    off = plan(cluster(enabled=False), [alice])
    assert off.secret is None and off.verdicts["alice"].reason == "AuthNotManaged"
    missing = plan(cluster(enabled=True), [alice], passwords={"alice": None})
    assert (
        missing.verdicts["alice"].reason == "PasswordNotFound"
        and hashes_of(data(missing)["credentials"]) == {}
    )
    twin = user("alice-2", [], username="alice")
    dup = plan(cluster(enabled=True), [alice, twin])
    assert dup.verdicts["alice"].ready and dup.verdicts["alice-2"].reason == "DuplicateUsername"
