"""Names, labels and annotation keys shared by the operator, its children and the brokers.

The broker side (``hybridmq.broker.kube_source`` and ``hybridmq.broker.lease``) uses the same
strings; they are plain constants so that neither side has to import the other.
"""

from collections.abc import Callable
from typing import Final

# Shared with the brokers, whose Partition watch selects on the cluster label.
from hybridmq.api.resources import LABEL_CLUSTER as LABEL_CLUSTER
from hybridmq.api.resources import LABEL_PARTITION_TYPE as LABEL_PARTITION_TYPE

GROUP: Final = "hybridmq.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
CLUSTER_KIND: Final = "BrokerCluster"
CLUSTER_PLURAL: Final = "brokerclusters"
PARTITION_KIND: Final = "Partition"
PARTITION_PLURAL: Final = "partitions"
USER_KIND: Final = "BrokerUser"
USER_PLURAL: Final = "brokerusers"

MANAGER: Final = "hybridmq-operator"

# Kopf's own bookkeeping annotations (handler progress, last handled configuration) go under a
# prefix of their own: Kopf leaves every annotation under its storage prefix out of what it diffs,
# so under ``hybridmq.io/`` a user's restart request (``hybridmq.io/restartedAt``) was no change at
# all and waited for the minute's resync.
KOPF_STORAGE_PREFIX: Final = f"operator.{GROUP}"
# What earlier versions stored under ``hybridmq.io/``: removed from a BrokerCluster when it is next
# handled (the marker alone would keep hiding every ``hybridmq.io/`` annotation from the diff).
LEGACY_KOPF_ANNOTATIONS: Final = (f"{GROUP}/kopf-managed", f"{GROUP}/last-handled-configuration")

# Labels on every child object.
LABEL_NAME: Final = "app.kubernetes.io/name"
LABEL_INSTANCE: Final = "app.kubernetes.io/instance"
LABEL_COMPONENT: Final = "app.kubernetes.io/component"
LABEL_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
LABEL_PART_OF: Final = "app.kubernetes.io/part-of"
LABEL_ROLE: Final = "hybridmq.io/role"

# Annotations.
ANNOTATION_CONFIG_DIGEST: Final = "hybridmq.io/config-digest"
# On a MM Lease: JSON report of what the MM holds (partition -> role, epoch, log end, backlog, ...).
ANNOTATION_LEASE_REPORT: Final = "hybridmq.io/report"
# On a BrokerCluster (copied into both pod templates): a restart request, like `kubectl rollout
# restart`; any new value rolls every broker pod.
ANNOTATION_RESTARTED_AT: Final = "hybridmq.io/restartedAt"
# On an MM pod, set by the roll: its replicas are moved off before the pod is deleted.
ANNOTATION_ROLL: Final = "hybridmq.io/roll"
ROLL_MOVING_REPLICAS: Final = "moving-replicas"
# The StatefulSet controller's label naming the revision a pod was created from.
LABEL_REVISION: Final = "controller-revision-hash"

# The finalizer that keeps a Partition until no live MM holds its data any more.
PARTITION_FINALIZER: Final = "hybridmq.io/partition-data"
# Kopf's own finalizer (for the BrokerCluster daemons), renamed into our group.
OPERATOR_FINALIZER: Final = "hybridmq.io/operator"

ROLE_CM: Final = "cm"
ROLE_MM: Final = "mm"

# Ports inside every broker pod (each pod has its own IP, so every pod uses the same numbers).
CM_CLIENT_PORT: Final = 7400
MM_PORT: Final = 7500
HTTP_PORT: Final = 8080

# The key of the cluster secret in Secret/<cluster>-cluster-secret (HYBRIDMQ_CLUSTER_SECRET of the brokers).
CLUSTER_SECRET_KEY: Final = "secret"

CONFIG_FILE: Final = "hybridmq.yaml"
CONFIG_MOUNT: Final = "/etc/hybridmq"
TLS_MOUNT: Final = "/etc/hybridmq-tls"  # not under CONFIG_MOUNT: a read-only mount cannot nest another
AUTH_MOUNT: Final = "/etc/hybridmq-auth"  # the CMs' auth.secretName, likewise
DATA_MOUNT: Final = "/var/lib/hybridmq"
DATA_VOLUME: Final = "data"


def statefulset_name(cluster: str, role: str) -> str:
    return f"{cluster}-{role}"


def headless_service_name(cluster: str, role: str) -> str:
    return f"{cluster}-{role}-headless"


def client_service_name(cluster: str) -> str:
    return cluster


def _suffixed(suffix: str) -> Callable[[str], str]:
    def name(owner: str) -> str:
        return f"{owner}-{suffix}"

    return name


# Objects named after their cluster (or user), one a row: <owner>-<suffix>.
cluster_secret_name = _suffixed("cluster-secret")  # what CMs and MMs present to each other
ca_secret_name = _suffixed("cluster-ca")  # the cluster CA: key, certificate, CRL (the operator's only)
ca_cert_secret_name = _suffixed("cluster-ca-cert")  # the CA's certificate alone: clients verify CMs with it
# The brokers' certificate (kubernetes.io/tls + ca.crt, ca.crl), mounted by every pod:
broker_tls_secret_name = _suffixed("broker-tls")
users_secret_name = _suffixed("users")  # the CMs' users and ACLs from the BrokerUsers (hashes only)
user_credentials_secret_name = _suffixed("credentials")  # a BrokerUser's generated password
network_policy_name = _suffixed("mm-peers")
configmap_name = _suffixed("config")
service_account_name = _suffixed("broker")


def pdb_name(cluster: str, role: str) -> str:
    return f"{cluster}-{role}"


def fixed_partition_name(cluster: str, index: int) -> str:
    return f"{cluster}-fixed-{index}"


def pod_name(cluster: str, role: str, ordinal: int) -> str:
    return f"{statefulset_name(cluster, role)}-{ordinal}"


def pod_ordinal(pod: str) -> int:
    """The StatefulSet ordinal of a pod name (``-1`` when it has none)."""
    head, _, tail = pod.rpartition("-")
    return int(tail) if head and tail.isdigit() else -1


def selector_labels(cluster: str, role: str | None = None) -> dict[str, str]:
    labels = {LABEL_NAME: "hybridmq", LABEL_INSTANCE: cluster}
    if role is not None:
        labels[LABEL_COMPONENT] = role
    return labels


def common_labels(cluster: str, role: str | None = None) -> dict[str, str]:
    labels = selector_labels(cluster, role)
    labels[LABEL_MANAGED_BY] = MANAGER
    labels[LABEL_PART_OF] = "hybridmq"
    labels[LABEL_CLUSTER] = cluster
    if role is not None:
        labels[LABEL_ROLE] = role
    return labels
