"""The pure builders: one BrokerCluster in, child manifests out."""

from __future__ import annotations

from typing import Any

import pytest

from hybridmq_operator import names
from hybridmq_operator.resources import (
    build_children,
    build_client_service,
    build_cm_statefulset,
    build_configmap,
    build_headless_service,
    build_mm_statefulset,
    build_pdb,
    build_role,
    build_role_binding,
    build_service_account,
    config_digest,
)
from hybridmq_operator.settings import ClusterSettings


def body(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "hybridmq.io/v1alpha1",
        "kind": "BrokerCluster",
        "metadata": {"name": "demo", "namespace": "ns1", "uid": "uid-1", "generation": 3},
        "spec": spec,
    }


@pytest.fixture
def settings() -> ClusterSettings:
    return ClusterSettings.from_body(body())


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_settings_defaults_follow_the_crd_model(settings: ClusterSettings) -> None:
    assert (settings.cm_replicas, settings.mm_replicas) == (2, 3)
    assert (settings.fixed_count, settings.fixed_replicas, settings.min_in_sync) == (3, 2, 2)
    assert settings.on_demand_per_mm == 1 and settings.accept_writes_after_failover is False
    assert settings.lease_duration_seconds == 1 and settings.lease_renew_milliseconds == 250
    assert settings.generation == 3 and settings.uid == "uid-1"


def test_every_child_is_owned_labelled_and_namespaced(settings: ClusterSettings) -> None:
    children = build_children(settings)
    kinds = [c["kind"] for c in children]
    assert kinds == [
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ConfigMap",
        "NetworkPolicy",
        "Service",
        "Service",
        "Service",
        "PodDisruptionBudget",
        "PodDisruptionBudget",
        "StatefulSet",
        "StatefulSet",
    ]
    for child in children:
        meta = child["metadata"]
        assert meta["namespace"] == "ns1"
        assert meta["labels"][names.LABEL_CLUSTER] == "demo"
        assert meta["labels"][names.LABEL_MANAGED_BY] == names.MANAGER
        (owner,) = meta["ownerReferences"]
        assert owner == {
            "apiVersion": "hybridmq.io/v1alpha1",
            "kind": "BrokerCluster",
            "name": "demo",
            "uid": "uid-1",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    assert len({(c["kind"], c["metadata"]["name"]) for c in children}) == len(children)


def test_mm_statefulset_has_a_volume_claim_template_and_the_mm_command(settings: ClusterSettings) -> None:
    sts = build_mm_statefulset(settings)
    assert sts["metadata"]["name"] == "demo-mm"
    spec = sts["spec"]
    assert spec["replicas"] == 3
    assert spec["serviceName"] == "demo-mm-headless"
    assert spec["podManagementPolicy"] == "Parallel"
    (claim,) = spec["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == names.DATA_VOLUME
    assert claim["spec"]["resources"]["requests"]["storage"] == "1Gi"
    assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
    (container,) = spec["template"]["spec"]["containers"]
    assert container["command"] == ["hybridmq", "mm"]
    env = env_of(container)
    assert env["HYBRIDMQ_ROLE"] == "mm"
    assert env["HYBRIDMQ_CLUSTER"] == "demo"
    assert env["HYBRIDMQ_POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["HYBRIDMQ_POD_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert env["HYBRIDMQ_DATA_DIR"] == names.DATA_MOUNT
    assert env["HYBRIDMQ_LEASE_DURATION_SECONDS"] == "1"
    assert env["HYBRIDMQ_LEASE_RENEW_MILLISECONDS"] == "250"
    assert env["HYBRIDMQ_PORT"] == str(names.MM_PORT)
    assert env["HYBRIDMQ_NAME"] == "$(HYBRIDMQ_POD_NAME)"
    assert env["HYBRIDMQ_BIND"] == f"$(HYBRIDMQ_POD_IP):{names.MM_PORT}"
    assert env["HYBRIDMQ_HTTP_BIND"] == f"$(HYBRIDMQ_POD_IP):{names.HTTP_PORT}"
    assert env["HYBRIDMQ_ASSIGNMENT_SOURCE"] == "kubernetes"
    # Dependent variables are defined after the ones they use.
    order = [e["name"] for e in container["env"]]
    assert order.index("HYBRIDMQ_POD_IP") < order.index("HYBRIDMQ_BIND")
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts[names.DATA_VOLUME] == names.DATA_MOUNT
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert spec["template"]["spec"]["serviceAccountName"] == "demo-broker"


def test_mm_statefulset_replicas_override_and_ephemeral_storage() -> None:
    b = body(messageManagers={"replicas": 4, "storage": {"size": "5Gi", "storageClassName": "fast"}})
    settings = ClusterSettings.from_body(b)
    sts = build_mm_statefulset(settings)
    assert sts["spec"]["replicas"] == 4
    assert sts["spec"]["volumeClaimTemplates"][0]["spec"]["storageClassName"] == "fast"
    assert build_mm_statefulset(settings, replicas=5)["spec"]["replicas"] == 5
    b["metadata"]["annotations"] = {"hybridmq.io/storage": "ephemeral"}
    eph = build_mm_statefulset(ClusterSettings.from_body(b))
    assert "volumeClaimTemplates" not in eph["spec"]
    vols = {v["name"]: v for v in eph["spec"]["template"]["spec"]["volumes"]}
    assert vols[names.DATA_VOLUME] == {"name": names.DATA_VOLUME, "emptyDir": {}}


def test_volume_claims_are_kept_on_cluster_deletion_unless_delete_claim() -> None:
    kept = build_mm_statefulset(ClusterSettings.from_body(body()))
    assert kept["spec"]["persistentVolumeClaimRetentionPolicy"]["whenDeleted"] == "Retain"
    gone = build_mm_statefulset(
        ClusterSettings.from_body(body(messageManagers={"storage": {"deleteClaim": True}}))
    )
    assert gone["spec"]["persistentVolumeClaimRetentionPolicy"]["whenDeleted"] == "Delete"


def test_cm_statefulset_runs_cm_without_a_data_volume(settings: ClusterSettings) -> None:
    sts = build_cm_statefulset(settings)
    assert sts["metadata"]["name"] == "demo-cm" and sts["spec"]["replicas"] == 2
    assert "volumeClaimTemplates" not in sts["spec"]
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["hybridmq", "cm"]
    assert env_of(container)["HYBRIDMQ_PORT"] == str(names.CM_CLIENT_PORT)
    # Its pod IP (pods may share a host network), and 127.0.0.1 for `kubectl port-forward`.
    assert env_of(container)["HYBRIDMQ_BIND"] == f"$(HYBRIDMQ_POD_IP):{names.CM_CLIENT_PORT}"
    assert env_of(container)["HYBRIDMQ_LOCAL_BIND"] == f"127.0.0.1:{names.CM_CLIENT_PORT}"
    assert names.DATA_VOLUME not in {m["name"] for m in container["volumeMounts"]}


def test_config_change_changes_the_digest_on_both_pod_templates() -> None:
    a = ClusterSettings.from_body(body())
    b = ClusterSettings.from_body(body(partitions={"fixed": {"minInSync": 1}}))
    assert config_digest(a) != config_digest(b)
    for build in (build_cm_statefulset, build_mm_statefulset):
        da = build(a)["spec"]["template"]["metadata"]["annotations"][names.ANNOTATION_CONFIG_DIGEST]
        db = build(b)["spec"]["template"]["metadata"]["annotations"][names.ANNOTATION_CONFIG_DIGEST]
        assert da == config_digest(a) and db == config_digest(b)
    cm = build_configmap(b)
    assert "minInSync: 1" in cm["data"][names.CONFIG_FILE]
    assert cm["metadata"]["annotations"][names.ANNOTATION_CONFIG_DIGEST] == config_digest(b)


def test_scaling_does_not_roll_the_pods() -> None:
    a = ClusterSettings.from_body(body())
    b = ClusterSettings.from_body(body(messageManagers={"replicas": 7}, connectionManagers={"replicas": 5}))
    assert config_digest(a) == config_digest(b)
    assert build_mm_statefulset(a)["spec"]["template"] == build_mm_statefulset(b)["spec"]["template"]


def test_services(settings: ClusterSettings) -> None:
    headless = build_headless_service(settings, names.ROLE_MM)
    assert headless["metadata"]["name"] == "demo-mm-headless"
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["publishNotReadyAddresses"] is True
    assert {p["port"] for p in headless["spec"]["ports"]} == {names.MM_PORT, names.HTTP_PORT}
    client = build_client_service(settings)
    assert client["metadata"]["name"] == "demo"
    assert client["spec"]["selector"][names.LABEL_COMPONENT] == names.ROLE_CM
    assert client["spec"]["ports"][0]["port"] == names.CM_CLIENT_PORT


def test_pdbs(settings: ClusterSettings) -> None:
    for role in (names.ROLE_CM, names.ROLE_MM):
        pdb = build_pdb(settings, role)
        assert pdb["apiVersion"] == "policy/v1"
        assert pdb["spec"]["maxUnavailable"] == 1
        assert pdb["spec"]["selector"]["matchLabels"][names.LABEL_COMPONENT] == role


def test_broker_rbac_is_least_privilege(settings: ClusterSettings) -> None:
    sa = build_service_account(settings)
    role = build_role(settings)
    binding = build_role_binding(settings)
    assert sa["metadata"]["name"] == role["metadata"]["name"] == binding["metadata"]["name"] == "demo-broker"
    verbs = {
        (g, r): set(rule["verbs"])
        for rule in role["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
    }
    assert verbs == {
        ("hybridmq.io", "partitions"): {"get", "list", "watch"},
        ("hybridmq.io", "brokerclusters"): {"get", "list", "watch"},
        ("coordination.k8s.io", "leases"): {"get", "create", "update", "patch"},
        ("", "secrets"): {"get"},
        ("", "configmaps"): {"get", "list", "watch"},
    }
    # Secrets: only the CMs' users Secret, by name; ConfigMaps: only the assignment map.
    (secret_rule,) = [rule for rule in role["rules"] if "secrets" in rule["resources"]]
    assert secret_rule["resourceNames"] == ["demo-users"]
    (map_rule,) = [rule for rule in role["rules"] if "configmaps" in rule["resources"]]
    assert map_rule["resourceNames"] == ["demo-assignments"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "demo-broker", "namespace": "ns1"}]
    assert binding["roleRef"]["name"] == "demo-broker"


def test_tls_and_auth_secrets_are_mounted() -> None:
    settings = ClusterSettings.from_body(
        body(tls={"enabled": True, "secretName": "tls-s"}, auth={"enabled": True, "secretName": "users"})
    )
    cm_pod = build_cm_statefulset(settings)["spec"]["template"]["spec"]
    vols = {v["name"]: v for v in cm_pod["volumes"]}
    assert vols["tls"]["secret"]["secretName"] == "tls-s"
    assert vols["auth"]["secret"]["secretName"] == "users"
    (cm,) = cm_pod["containers"]
    mounts = {m["name"]: m["mountPath"] for m in cm["volumeMounts"]}
    assert env_of(cm)["HYBRIDMQ_CREDENTIALS"] == mounts["auth"] == "/etc/hybridmq-auth"
    mm_pod = build_mm_statefulset(settings)["spec"]["template"]["spec"]
    assert "auth" not in {v["name"] for v in mm_pod["volumes"]}


def test_no_volume_is_mounted_inside_another_mount() -> None:
    """A mount inside a read-only one (the config map's) needs its mount point created in a
    read-only file system: each Secret gets a path of its own."""
    settings = ClusterSettings.from_body(
        body(tls={"enabled": True, "secretName": "tls-s"}, auth={"enabled": True, "secretName": "users"})
    )
    for sts in (build_cm_statefulset(settings), build_mm_statefulset(settings)):
        (container,) = sts["spec"]["template"]["spec"]["containers"]
        paths = [m["mountPath"].rstrip("/") for m in container["volumeMounts"]]
        nested = [(a, b) for a in paths for b in paths if a != b and b.startswith(a + "/")]
        assert nested == [], f"{sts['metadata']['name']}: {nested}"


def anti_affinity_key(sts: dict[str, Any]) -> str:
    terms = sts["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    (term,) = terms["preferredDuringSchedulingIgnoredDuringExecution"]
    return str(term["podAffinityTerm"]["topologyKey"])


def test_mm_pods_spread_over_the_configured_topology_key() -> None:
    default = ClusterSettings.from_body(body())
    assert anti_affinity_key(build_mm_statefulset(default)) == "kubernetes.io/hostname"
    zoned = ClusterSettings.from_body(body(messageManagers={"topologyKey": "topology.kubernetes.io/zone"}))
    assert anti_affinity_key(build_mm_statefulset(zoned)) == "topology.kubernetes.io/zone"
    # CMs hold no data: they stay spread per node.
    assert anti_affinity_key(build_cm_statefulset(zoned)) == "kubernetes.io/hostname"
    with pytest.raises(ValueError):
        ClusterSettings.from_body(body(messageManagers={"topologyKey": ""}))
