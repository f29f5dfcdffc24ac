"""The broker pod template shared by the CM and MM StatefulSets.

Both roles run the same image with ``hybridmq <role>``; everything a broker needs to find itself
and its peers comes in through the environment (the ``hybridmq`` CLI reads ``HYBRIDMQ_*``).
"""

from typing import Any

from hybridmq_operator import names
from hybridmq_operator.resources.configmap import config_digest
from hybridmq_operator.resources.tls import broker_tls_secret
from hybridmq_operator.resources.users import users_managed
from hybridmq_operator.settings import ClusterSettings


def _field_env(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def broker_env(settings: ClusterSettings, role: str) -> list[dict[str, Any]]:
    port = names.CM_CLIENT_PORT if role == names.ROLE_CM else names.MM_PORT
    # Both roles listen on the pod IP, never on every address: where pods share the host's network
    # (the local cluster's node agent) a wildcard bind would take the port from every other pod.
    env: list[dict[str, Any]] = [
        _field_env("HYBRIDMQ_POD_NAME", "metadata.name"),
        _field_env("HYBRIDMQ_POD_UID", "metadata.uid"),
        _field_env("HYBRIDMQ_NAMESPACE", "metadata.namespace"),
        _field_env("HYBRIDMQ_POD_IP", "status.podIP"),
        {"name": "HYBRIDMQ_CLUSTER", "value": settings.name},
        {"name": "HYBRIDMQ_ROLE", "value": role},
        # What the ``hybridmq cm|mm`` CLI reads (its flags' environment variables):
        {"name": "HYBRIDMQ_NAME", "value": "$(HYBRIDMQ_POD_NAME)"},
        {"name": "HYBRIDMQ_BIND", "value": f"$(HYBRIDMQ_POD_IP):{port}"},
        {"name": "HYBRIDMQ_HTTP_BIND", "value": f"$(HYBRIDMQ_POD_IP):{names.HTTP_PORT}"},
        # The same, split, for code that wants host and ports apart:
        {"name": "HYBRIDMQ_HOST", "value": "$(HYBRIDMQ_POD_IP)"},
        {"name": "HYBRIDMQ_PORT", "value": str(port)},
        {"name": "HYBRIDMQ_HTTP_PORT", "value": str(names.HTTP_PORT)},
        {"name": "HYBRIDMQ_CONFIG", "value": f"{names.CONFIG_MOUNT}/{names.CONFIG_FILE}"},
        {"name": "HYBRIDMQ_ASSIGNMENT_SOURCE", "value": "kubernetes"},
        {"name": "HYBRIDMQ_MIN_IN_SYNC", "value": str(settings.min_in_sync)},
        # What the CM and MM present to each other (an env var from the Secret, never a flag).
        {
            "name": "HYBRIDMQ_CLUSTER_SECRET",
            "valueFrom": {
                "secretKeyRef": {
                    "name": names.cluster_secret_name(settings.name),
                    "key": names.CLUSTER_SECRET_KEY,
                }
            },
        },
    ]
    if role == names.ROLE_CM:
        # `kubectl port-forward` dials 127.0.0.1 inside the pod: a second listener there (given up
        # with a warning where the loopback is not the pod's own and another CM holds it).
        env.append({"name": "HYBRIDMQ_LOCAL_BIND", "value": f"127.0.0.1:{port}"})
    if role == names.ROLE_CM and settings.auth.get("secretName"):
        env.append({"name": "HYBRIDMQ_CREDENTIALS", "value": names.AUTH_MOUNT})
    if role == names.ROLE_CM and users_managed(settings):  # BrokerUsers, read through the API
        env.append({"name": "HYBRIDMQ_USERS_SECRET", "value": names.users_secret_name(settings.name)})
    if broker_tls_secret(settings):  # every listener on TLS, mutual TLS between brokers
        env.append({"name": "HYBRIDMQ_TLS_DIR", "value": names.TLS_MOUNT})
    if role == names.ROLE_MM:
        env += [
            {"name": "HYBRIDMQ_DATA_DIR", "value": names.DATA_MOUNT},
            {"name": "HYBRIDMQ_LEASE_DURATION_SECONDS", "value": str(settings.lease_duration_seconds)},
            {"name": "HYBRIDMQ_LEASE_RENEW_MILLISECONDS", "value": str(settings.lease_renew_milliseconds)},
            # SIGTERM (deletion, roll, drain): hand the replicas over first, within the grace period.
            {"name": "HYBRIDMQ_HANDOFF_TIMEOUT", "value": str(HANDOFF_TIMEOUT_SECONDS)},
        ]
    return env


# The MM's graceful handoff must end (and the MM stop cleanly) before the kubelet's SIGKILL.
TERMINATION_GRACE_SECONDS = 10
HANDOFF_TIMEOUT_SECONDS = TERMINATION_GRACE_SECONDS - 2


def _probe(path: str, period: int, failures: int, tls: bool) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": "http", "scheme": "HTTPS" if tls else "HTTP"},
        "periodSeconds": period,
        "failureThreshold": failures,
        "timeoutSeconds": 1,
    }


def broker_container(settings: ClusterSettings, role: str) -> dict[str, Any]:
    port_name, port = ("client", names.CM_CLIENT_PORT) if role == names.ROLE_CM else ("mm", names.MM_PORT)
    mounts: list[dict[str, Any]] = [
        {"name": "config", "mountPath": names.CONFIG_MOUNT, "readOnly": True},
    ]
    if role == names.ROLE_MM:
        mounts.append({"name": names.DATA_VOLUME, "mountPath": names.DATA_MOUNT})
    tls_secret = broker_tls_secret(settings)
    if tls_secret:
        mounts.append({"name": "tls", "mountPath": names.TLS_MOUNT, "readOnly": True})
    if role == names.ROLE_CM and settings.auth.get("secretName"):
        mounts.append({"name": "auth", "mountPath": names.AUTH_MOUNT, "readOnly": True})
    resources = settings.cm_resources if role == names.ROLE_CM else settings.mm_resources
    container: dict[str, Any] = {
        "name": role,
        "image": settings.image,
        "imagePullPolicy": settings.image_pull_policy,
        "command": [*settings.broker_command, role],
        "env": broker_env(settings, role),
        "ports": [
            {"name": port_name, "containerPort": port, "protocol": "TCP"},
            {"name": "http", "containerPort": names.HTTP_PORT, "protocol": "TCP"},
        ],
        "readinessProbe": _probe("/readyz", 1, 2, bool(tls_secret)),
        "livenessProbe": _probe("/healthz", 5, 6, bool(tls_secret)),
        "volumeMounts": mounts,
        "securityContext": {
            "runAsNonRoot": True,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    if resources:
        container["resources"] = dict(resources)
    return container


def pod_template(settings: ClusterSettings, role: str) -> dict[str, Any]:
    volumes: list[dict[str, Any]] = [
        {"name": "config", "configMap": {"name": names.configmap_name(settings.name)}},
    ]
    if role == names.ROLE_MM and settings.storage_type == "ephemeral":
        volumes.append({"name": names.DATA_VOLUME, "emptyDir": {}})
    tls_secret = broker_tls_secret(settings)
    if tls_secret:
        volumes.append({"name": "tls", "secret": {"secretName": tls_secret}})
    if role == names.ROLE_CM and settings.auth.get("secretName"):
        volumes.append({"name": "auth", "secret": {"secretName": str(settings.auth["secretName"])}})
    annotations = {names.ANNOTATION_CONFIG_DIGEST: config_digest(settings)}
    if settings.restarted_at:
        annotations[names.ANNOTATION_RESTARTED_AT] = settings.restarted_at
    return {
        "metadata": {"labels": names.common_labels(settings.name, role), "annotations": annotations},
        "spec": {
            "serviceAccountName": names.service_account_name(settings.name),
            "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
            "securityContext": {"runAsNonRoot": True, "runAsUser": 10001, "fsGroup": 10001},
            "containers": [broker_container(settings, role)],
            "volumes": volumes,
            "affinity": {
                "podAntiAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 100,
                            "podAffinityTerm": {
                                # MMs: one per failure domain where possible (replicas
                                # of a partition are on different MMs); CMs: one per node.
                                "topologyKey": settings.mm_topology_key
                                if role == names.ROLE_MM
                                else "kubernetes.io/hostname",
                                "labelSelector": {"matchLabels": names.selector_labels(settings.name, role)},
                            },
                        }
                    ]
                }
            },
        },
    }
