"""BrokerUsers created and changed at the same moment, on the real API server: the users Secret the
CMs read keeps each user's password hash as first written (a hash written again, with a new salt,
makes every CM end that user's sessions as if the password had changed), and ends with every
user's latest ACL (never one read before a change and written back after it).

The checker is the test's own reading of the users Secret every 20 ms while 8 users are created
together and then all narrowed together (stand-in brokers: only the operator's writes matter).
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from operator_harness import GROUP, VERSION, Kube, OperatorProcess, module_fixtures, sample_cluster, wait_for

from localcluster import LocalCluster

NAME = "uc"
USERS = [f"user{i}" for i in range(8)]
namespace, kube, operator, _cluster = module_fixtures("users-concurrent", NAME, 1, 1, 1)


def _user(name: str, destination: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "BrokerUser",
        "metadata": {"name": name},
        "spec": {"cluster": NAME, "acls": [{"destination": destination, "operations": ["produce"]}]},
    }


def _users_secret(kube: Kube) -> tuple[dict[str, str], dict[str, Any]]:
    """(user -> stored hash, ACL table) as the users Secret holds them now."""
    try:
        secret = kube.core.read_namespaced_secret(f"{NAME}-users", kube.namespace)
    except Exception:
        return {}, {}
    data = {k: base64.b64decode(v).decode() for k, v in (secret.data or {}).items()}
    hashes = {}
    for line in data.get("credentials", "").splitlines():
        user, _, stored = line.partition(":")
        if user and stored:
            hashes[user] = stored
    return hashes, json.loads(data.get("acl.json") or "{}")


@pytest.fixture
def watched(kube: Kube) -> Iterator[dict[str, set[str]]]:
    """Every hash each user had in the users Secret while the test ran."""
    seen: dict[str, set[str]] = defaultdict(set)
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            for user, stored in _users_secret(kube)[0].items():
                seen[user].add(stored)
            stop.wait(0.02)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    yield seen
    stop.set()
    thread.join()


def test_users_changed_together_keep_their_hashes_and_latest_acls(
    local_cluster: LocalCluster, kube: Kube, operator: OperatorProcess, watched: dict[str, set[str]]
) -> None:
    body = sample_cluster(NAME, kube.namespace, mms=1, cms=1, fixed=1)
    body["spec"]["auth"] = {"enabled": True}
    kube.create(body)
    custom = kube.custom
    with ThreadPoolExecutor(len(USERS)) as pool:
        list(
            pool.map(
                lambda u: custom.create_namespaced_custom_object(
                    GROUP, VERSION, kube.namespace, "brokerusers", _user(u, f"queue:{u}.wide.*")
                ),
                USERS,
            )
        )
    wait_for(lambda: set(_users_secret(kube)[0]) == set(USERS) or None, 60, "every user admitted")
    with ThreadPoolExecutor(len(USERS)) as pool:
        list(
            pool.map(
                lambda u: custom.patch_namespaced_custom_object(
                    GROUP,
                    VERSION,
                    kube.namespace,
                    "brokerusers",
                    u,
                    {"spec": {"acls": [{"destination": f"queue:{u}.narrow", "operations": ["produce"]}]}},
                ),
                USERS,
            )
        )

    def narrowed() -> bool:
        acl = _users_secret(kube)[1]
        return all(acl.get(u, {}).get("produce") == [f"queue:{u}.narrow"] for u in USERS)

    wait_for(lambda: narrowed() or None, 60, "every user's narrowed ACL in the users Secret")
    time.sleep(3)  # a few more syncs: the status writes of every user trigger them
    assert narrowed(), f"an ACL narrowing was written back over: {_users_secret(kube)[1]}"
    rehashed = {u: len(h) for u, h in watched.items() if len(h) > 1}
    assert not rehashed, f"users whose stored hash was written again (sessions ended): {rehashed}"
