"""BrokerCluster create/update/resume: apply every child object (server-side apply).

MM scale-down is two-step: while MMs that will go still hold replicas, the MM StatefulSet keeps
its current size; the ``partitions`` daemon shrinks it once the planner reports them evacuated.
"""

from __future__ import annotations

import logging
from typing import Any, NoReturn

import kopf

from hybridmq_operator import kube, names, tls
from hybridmq_operator.handlers import users
from hybridmq_operator.resources import build_children, build_cluster_secret, generate_value
from hybridmq_operator.settings import ClusterSettings

Logger = logging.Logger | logging.LoggerAdapter[Any]

# (namespace, cluster) -> why the last apply of its children failed; the reconcile daemon puts it
# in the BrokerCluster's Ready condition (the user sees the cause, not only unready pods).
failures: dict[tuple[str, str], str] = {}


def mm_replicas_to_apply(desired: int, current: int | None) -> int:
    """Grow at once; never shrink here (evacuation first, see ``partitions``)."""
    if current is None:
        return desired
    return max(desired, current)


def apply_children(body: kopf.Body, logger: Logger) -> int:
    settings = ClusterSettings.from_body(body)
    sts = kube.get("apps/v1", "StatefulSet", settings.namespace, names.statefulset_name(settings.name, "mm"))
    current = int(sts["spec"]["replicas"]) if sts else None
    mm_replicas = mm_replicas_to_apply(settings.mm_replicas, current)
    ensure_cluster_secret(settings)
    key = (settings.namespace, settings.name)
    try:
        reason = tls.ensure_tls(settings)  # before the pods: they mount its Secret
    except kube.KubeError as exc:
        _failed(body, key, "CertificateNotIssued", f"issuing the brokers' certificate: {exc}", exc)
    if reason is not None:
        kopf.info(body, reason="CertificateIssued", message=f"brokers' certificate issued: {reason}")
    for manifest in build_children(settings, mm_replicas):
        try:
            kube.apply(manifest)
        except kube.KubeError as exc:
            what = f"applying {manifest['kind']}/{manifest['metadata']['name']}: {exc}"
            _failed(body, key, "ChildrenNotApplied", what, exc)
    failures.pop(key, None)
    try:
        users.sync_users(settings.namespace, settings.name)  # auth switched on or off
    except kube.KubeError as exc:
        logger.warning("syncing the BrokerUsers of %s: %s", settings.name, exc)
    if current is not None and mm_replicas > settings.mm_replicas:
        logger.info("MM scale-down %d -> %d waits for evacuation", current, settings.mm_replicas)
    return mm_replicas


def _failed(body: kopf.Body, key: tuple[str, str], reason: str, message: str, exc: Exception) -> NoReturn:
    """Warn once per distinct failure and retry with backoff (4xx other than conflicts will not fix
    themselves, but the cause may be fixed by the user)."""
    if failures.get(key) != message:
        kopf.warn(body, reason=reason, message=message)
    failures[key] = message
    raise kopf.TemporaryError(message, delay=5) from exc


def ensure_cluster_secret(settings: ClusterSettings) -> None:
    """Create the cluster secret once; AlreadyExists keeps the value the pods use (create-only RBAC)."""
    try:
        kube.create(build_cluster_secret(settings, generate_value()))
    except kube.KubeError as exc:
        if not exc.conflict:  # 409 AlreadyExists
            raise kopf.TemporaryError(f"creating the cluster secret: {exc}", delay=5) from exc


@kopf.on.resume(names.GROUP, names.VERSION, names.CLUSTER_PLURAL)
@kopf.on.create(names.GROUP, names.VERSION, names.CLUSTER_PLURAL)
@kopf.on.update(names.GROUP, names.VERSION, names.CLUSTER_PLURAL, field="spec")
@kopf.on.update(names.GROUP, names.VERSION, names.CLUSTER_PLURAL, field="metadata.annotations")
def reconcile_children(*, body: kopf.Body, patch: kopf.Patch, logger: Logger, **_: Any) -> None:
    forget_legacy_bookkeeping(body, patch)
    apply_children(body, logger)


@kopf.timer(names.GROUP, names.VERSION, names.CLUSTER_PLURAL, interval=60, initial_delay=60, idle=30)
def resync_children(*, body: kopf.Body, patch: kopf.Patch, logger: Logger, **_: Any) -> None:
    """Level-based safety net: re-apply the children (drift, a deleted child) every minute."""
    forget_legacy_bookkeeping(body, patch)
    apply_children(body, logger)


def forget_legacy_bookkeeping(body: kopf.Body, patch: kopf.Patch) -> None:
    """Remove Kopf's annotations of earlier versions (under ``hybridmq.io/``), see the names."""
    for key in names.LEGACY_KOPF_ANNOTATIONS:
        if key in body.metadata.annotations:
            patch.metadata.annotations[key] = None
