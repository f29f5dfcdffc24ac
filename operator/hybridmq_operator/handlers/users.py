"""BrokerUsers: any change of one (created, edited, deleted) recomputes its cluster's users Secret
``<c>-users`` (``resources/users.py``) and the users' Ready conditions. The CMs read that Secret
every second (``hybridmq.broker.auth.kube_users``): a new user is admitted, a changed ACL applies
and a deleted user's sessions end within seconds. The BrokerCluster's reconcile calls
``sync_users`` too (auth switched on or off)."""

from __future__ import annotations

import datetime as dt
import logging
import secrets
import threading
from collections import defaultdict
from typing import Any

import kopf

from hybridmq.api.password_hash import hash_password, verify_password
from hybridmq.api.resources import BrokerCluster, BrokerUser, BrokerUserStatus, set_condition
from hybridmq_operator import kube, names
from hybridmq_operator.resources.tls import decode, encode_data
from hybridmq_operator.resources.users import UserVerdict, hashes_of, plan_users
from hybridmq_operator.settings import ClusterSettings

log = logging.getLogger(__name__)


def _generated_password(user: BrokerUser) -> str | None:
    """The password of a user without ``passwordSecret``: made once into ``<name>-credentials``,
    owned by the BrokerUser (deleted with it)."""
    ns, name = user.metadata.namespace, user.metadata.name or ""
    secret_name = names.user_credentials_secret_name(name)
    data = decode(kube.get("v1", "Secret", ns, secret_name))
    if "password" in data:
        return data["password"]
    owner = {
        "apiVersion": names.API_VERSION,
        "kind": names.USER_KIND,
        "name": name,
        "uid": user.metadata.uid or "",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    manifest = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": secret_name, "namespace": ns, "ownerReferences": [owner]},
        "type": "Opaque",
        "data": encode_data({"username": user.username, "password": secrets.token_urlsafe(24)}),
    }
    try:
        kube.create(manifest)
    except kube.KubeError as exc:
        if not exc.conflict:
            raise
    return decode(kube.get("v1", "Secret", ns, secret_name)).get("password")


def _password(user: BrokerUser) -> str | None:
    ref = user.spec.password_secret
    if ref is None:
        return _generated_password(user)
    return decode(kube.get("v1", "Secret", user.metadata.namespace, ref.name)).get(ref.key)


def _write_status(user: BrokerUser, verdict: UserVerdict, secret: str | None) -> None:
    old = user.status or BrokerUserStatus()
    conditions = set_condition(
        old.conditions,
        "Ready",
        verdict.ready,
        verdict.reason,
        verdict.message,
        dt.datetime.now(dt.UTC),
        user.metadata.generation,
    )
    new = BrokerUserStatus(
        observed_generation=user.metadata.generation,
        username=user.username,
        password_secret=secret,
        conditions=conditions,
    )
    if new.model_dump(mode="json") == old.model_dump(mode="json"):
        return
    kube.merge_patch(
        names.API_VERSION,
        names.USER_KIND,
        user.metadata.namespace,
        user.metadata.name or "",
        {"status": new.model_dump(mode="json", exclude_none=True)},
        "status",
    )


# One users sync per cluster at a time: kopf runs the handlers of different BrokerUsers at once,
# and a sync that read the Secret before another's write would write back what it read: a password
# hashed again (with a new salt: the CMs end that user's sessions as if it had been changed) or an
# ACL as it was before a narrowing.
_sync_locks: defaultdict[tuple[str, str], threading.Lock] = defaultdict(threading.Lock)


def sync_users(namespace: str, cluster_name: str) -> None:
    with _sync_locks[(namespace, cluster_name)]:
        _sync_users(namespace, cluster_name)


def _sync_users(namespace: str, cluster_name: str) -> None:
    raw = kube.get(names.API_VERSION, names.CLUSTER_KIND, namespace, cluster_name)
    cluster = BrokerCluster.model_validate(raw) if raw else None
    settings = ClusterSettings.from_body(raw) if raw else None
    users = [
        BrokerUser.model_validate(o)
        for o in kube.list_objects(names.API_VERSION, names.USER_KIND, namespace)
        if (o.get("spec") or {}).get("cluster") == cluster_name
        and not (o.get("metadata") or {}).get("deletionTimestamp")
    ]
    passwords = {u.metadata.name or "": _password(u) for u in users}
    current = decode(kube.get("v1", "Secret", namespace, names.users_secret_name(cluster_name)))
    plan = plan_users(
        cluster,
        settings,
        users,
        passwords,
        hashes_of(current.get("credentials", "")),
        hash_password,
        verify_password,
    )
    if plan.secret is not None and decode(plan.secret) != current:
        kube.apply(plan.secret)
        log.info(
            "users of %s/%s: %d admitted",
            namespace,
            cluster_name,
            sum(v.ready for v in plan.verdicts.values()),
        )
    for user in users:
        ref = user.spec.password_secret
        secret = ref.name if ref else names.user_credentials_secret_name(user.metadata.name or "")
        _write_status(user, plan.verdicts[user.metadata.name or ""], secret)


@kopf.on.event(names.GROUP, names.VERSION, names.USER_PLURAL)
def user_changed(*, body: kopf.Body, namespace: str | None, **_: Any) -> None:
    cluster = str((body.get("spec") or {}).get("cluster") or "")
    if cluster and namespace:
        sync_users(namespace, cluster)
