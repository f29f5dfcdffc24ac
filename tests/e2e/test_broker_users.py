"""BrokerUsers on the real API server with real brokers: a user created can produce, an ACL
narrowed is refused within 5 s, a user deleted has its session closed, and a user whose password
Secret is missing is told so in its status. Clients go over TLS with the cluster's CA."""

from __future__ import annotations

import asyncio
import base64
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "k8s"))

from operator_harness import (
    GROUP,
    VERSION,
    Kube,
    OperatorProcess,
    real_brokers,
    sample_cluster,
    trust_cluster_ca,
    wait_for,
)

from hybridmq.api.frames import ErrorCode
from hybridmq.client import ClientError, Producer
from localcluster import LocalCluster

pytestmark = pytest.mark.cluster
CLUSTER = "usr"
LIMIT_S = 5.0


@pytest.fixture(scope="module")
def real(local_cluster: LocalCluster) -> Iterator[tuple[Kube, OperatorProcess]]:
    """The conftest's, for the whole module (one BrokerCluster serves its tests)."""
    with real_brokers(local_cluster, "e2e-users") as pair:
        yield pair


def user(name: str, acls: list[dict[str, Any]], password_secret: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"cluster": CLUSTER, "acls": acls}
    if password_secret:
        spec["passwordSecret"] = {"name": password_secret}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "BrokerUser",
        "metadata": {"name": name},
        "spec": spec,
    }


def ready(kube: Kube, name: str) -> dict[str, Any] | None:
    obj = kube.custom.get_namespaced_custom_object(GROUP, VERSION, kube.namespace, "brokerusers", name)
    conds = {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}
    return conds.get("Ready")


async def within(check: Any, what: str, limit: float = LIMIT_S) -> float:
    start = time.monotonic()
    while not await check():
        assert time.monotonic() - start < limit, f"{what}: not within {limit} s"
        await asyncio.sleep(0.1)
    return time.monotonic() - start


def test_broker_users_are_kept_in_sync_on_the_cms(
    local_cluster: LocalCluster, real: tuple[Kube, OperatorProcess], tmp_path: Path
) -> None:
    kube, _op = real
    body = sample_cluster(CLUSTER, kube.namespace, mms=2, cms=1, fixed=1)
    body["spec"]["auth"] = {"enabled": True}
    kube.create(body)
    wait_for(lambda: len(kube.ready_pods("mm")) == 2 or None, 180, "2 real MMs Ready")
    wait_for(lambda: len(kube.ready_pods("cm")) == 1 or None, 180, "1 real CM Ready")
    wait_for(
        lambda: all(
            b["ready"] for b in kube.cluster(CLUSTER).get("status", {}).get("brokers") or [{"ready": 0}]
        ),
        60,
        "brokers ready",
    )
    wait_for(
        lambda: (
            len(kube.by_type("on-demand")) == 2
            and all((p.get("status") or {}).get("primary") for p in kube.partitions())
        ),
        60,
        "partitions placed",
    )
    cm = next(b for b in kube.cluster(CLUSTER)["status"]["brokers"] if b["role"] == "cm")["address"]
    trust_cluster_ca(kube, CLUSTER, tmp_path)

    def create(body: dict[str, Any]) -> None:
        kube.custom.create_namespaced_custom_object(GROUP, VERSION, kube.namespace, "brokerusers", body)

    create(user("alice", [{"destination": "queue:orders.*", "operations": ["produce"]}]))
    create(user("mallory", [{"destination": "queue:*", "operations": ["produce"]}], password_secret="absent"))
    cond = wait_for(lambda: (c := ready(kube, "alice")) and c["status"] == "True" and c, 30, "alice Ready")
    assert cond["reason"] == "Admitted"
    refused = wait_for(
        lambda: (c := ready(kube, "mallory")) and c["status"] == "False" and c, 30, "mallory refused"
    )
    assert refused["reason"] == "PasswordNotFound" and "absent" in refused["message"]
    secret = kube.core.read_namespaced_secret("alice-credentials", kube.namespace).data
    password = base64.b64decode(secret["password"]).decode()

    async def scenario() -> dict[str, float]:
        producer: Producer | None = None

        async def alice_produces() -> bool:
            nonlocal producer
            try:
                producer = await Producer.connect(cm, user="alice", password=password, reconnect=False)
                await producer.send("queue:orders.1", b"created")
                return True
            except ClientError as exc:
                assert exc.code == ErrorCode.AUTH_FAILED, exc
                return False

        created = await within(alice_produces, "the new user producing", 30)
        assert producer is not None
        kube.custom.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            kube.namespace,
            "brokerusers",
            "alice",
            {"spec": {"acls": [{"destination": "queue:audit.*", "operations": ["produce"]}]}},
        )

        async def refused() -> bool:
            assert producer is not None
            try:
                await producer.send("queue:orders.1", b"narrowed?")
                return False
            except ClientError as exc:
                assert exc.code == ErrorCode.ACL_DENIED, exc
                return True

        narrowed = await within(refused, "the narrowed ACL refusing")
        kube.custom.delete_namespaced_custom_object(GROUP, VERSION, kube.namespace, "brokerusers", "alice")

        async def ended() -> bool:
            assert producer is not None
            return producer.session.ended

        deleted = await within(ended, "the deleted user's session closing")
        with pytest.raises(ClientError) as after:
            await Producer.connect(cm, user="alice", password=password, reconnect=False)
        assert after.value.code == ErrorCode.AUTH_FAILED
        return {"created_s": created, "acl_refused_s": narrowed, "session_closed_s": deleted}

    figures = asyncio.run(scenario())
    print(" ".join(f"{k}={v:.2f}" for k, v in figures.items()))
