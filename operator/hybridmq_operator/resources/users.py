"""BrokerUsers -> the CMs' users Secret and each user's Ready condition (pure).

``plan_users`` takes the cluster (or None), the cluster's BrokerUsers, each one's password as read
from its Secret (None: not found) and the hashes the CMs have now; it answers the Secret to apply
(None: nothing to write, the cluster is gone or does not authenticate) and one condition per user.
A hash is kept when it still matches the password (PBKDF2 costs milliseconds, and an unchanged
Secret does not wake the CMs).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from hybridmq.api.resources import BrokerCluster, BrokerUser
from hybridmq_operator import names
from hybridmq_operator.resources.common import Manifest, metadata
from hybridmq_operator.resources.tls import encode_data
from hybridmq_operator.settings import ClusterSettings


def users_managed(settings: ClusterSettings) -> bool:
    """The CMs take their users from BrokerUsers: auth on, and no Secret of the user's own."""
    return bool(settings.auth.get("enabled")) and not settings.auth.get("secretName")


@dataclass(frozen=True)
class UserVerdict:
    ready: bool
    reason: str
    message: str


@dataclass(frozen=True)
class UsersPlan:
    secret: Manifest | None
    verdicts: dict[str, UserVerdict]  # BrokerUser metadata.name -> its Ready condition


def acl_of(users: list[tuple[str, BrokerUser]]) -> dict[str, dict[str, list[str]]]:
    """The CM's ACL table (``auth/acl.py``): user -> operation -> destination globs."""
    table: dict[str, dict[str, list[str]]] = {}
    for username, user in users:
        grants = table.setdefault(username, {"produce": [], "consume": [], "admin": []})
        for rule in user.spec.acls:
            for op in rule.operations:
                grants[str(op)].append(rule.destination)
    return table


def plan_users(
    cluster: BrokerCluster | None,
    settings: ClusterSettings | None,
    users: list[BrokerUser],
    passwords: Mapping[str, str | None],
    current_hashes: Mapping[str, str],
    hash_password: Callable[[str], str],
    verify_password: Callable[[str, str], bool],
) -> UsersPlan:
    verdicts: dict[str, UserVerdict] = {}
    if cluster is None or settings is None:
        for u in users:
            verdicts[u.metadata.name or ""] = UserVerdict(
                False, "ClusterNotFound", f"no BrokerCluster {u.spec.cluster!r} in this namespace"
            )
        return UsersPlan(None, verdicts)
    if not cluster.spec.auth.enabled or cluster.spec.auth.secret_name:
        why = (
            "its auth.enabled is false: any client is admitted and these ACLs are not enforced"
            if not cluster.spec.auth.enabled
            else f"it takes its users from Secret {cluster.spec.auth.secret_name!r} (auth.secretName)"
        )
        for u in users:
            verdicts[u.metadata.name or ""] = UserVerdict(
                False, "AuthNotManaged", f"BrokerCluster {u.spec.cluster}: {why}"
            )
        return UsersPlan(None, verdicts)
    admitted: list[tuple[str, BrokerUser]] = []
    lines: list[str] = []
    owners: dict[str, str] = {}
    for u in sorted(users, key=lambda x: x.metadata.name or ""):
        name = u.metadata.name or ""
        username = u.username
        password = passwords.get(name)
        if username in owners:
            verdicts[name] = UserVerdict(
                False, "DuplicateUsername", f"BrokerUser {owners[username]} has that name"
            )
            continue
        if password is None:
            ref = u.spec.password_secret
            where = f"Secret {ref.name!r} key {ref.key!r}" if ref else "its generated Secret"
            verdicts[name] = UserVerdict(False, "PasswordNotFound", f"no password in {where}")
            continue
        owners[username] = name
        stored = current_hashes.get(username)
        if stored is None or not verify_password(password, stored):
            stored = hash_password(password)
        lines.append(f"{username}:{stored}")
        admitted.append((username, u))
        verdicts[name] = UserVerdict(True, "Admitted", f"the CMs of {u.spec.cluster} admit {username!r}")
    data = {
        "credentials": "".join(f"{line}\n" for line in lines),
        "acl.json": json.dumps(acl_of(admitted), sort_keys=True),
    }
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata(settings, names.users_secret_name(settings.name)),
        "type": "Opaque",
        "data": encode_data(data),
    }
    return UsersPlan(secret, verdicts)


def hashes_of(credentials: str) -> dict[str, str]:
    """username -> stored hash, from a users Secret's ``credentials``."""
    out = {}
    for line in credentials.splitlines():
        user, _, stored = line.partition(":")
        if user and stored:
            out[user] = stored
    return out
