"""The Helm chart (helm/hybridmq): lint, render, schema, RBAC, CRDs in sync with crds/.

These run the real `helm` binary (the one `hack/k8sbin/build.sh` provides) but need no cluster.
Installing the chart into the local cluster is tested in tests/k8s.
"""

from __future__ import annotations

import filecmp
import subprocess
import time
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "hybridmq"
CRDS = REPO / "crds"
CHART_CRDS = CHART / "crds"
#: Files of the chart's crds/ that are not generated into crds/ (Kopf's peering CRDs).
CHART_ONLY_CRDS = {"kopf.dev_peerings.yaml"}

Manifest = dict[str, Any]


@cache
def helm_binary() -> Path:
    out = subprocess.run(
        [str(REPO / "hack" / "k8sbin" / "build.sh")], check=True, capture_output=True, text=True
    ).stdout
    helm = Path(out.strip().splitlines()[-1]) / "helm"
    assert helm.is_file(), f"no helm in {helm.parent}"
    return helm


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([str(helm_binary()), *args], capture_output=True, text=True, timeout=120, cwd=REPO)
    if check:
        assert proc.returncode == 0, f"helm {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


def render(*sets: str, namespace: str = "hybridmq-system") -> list[Manifest]:
    args = ["template", "rel", str(CHART), "--namespace", namespace]
    for item in sets:
        args += ["--set", item]
    docs = yaml.safe_load_all(helm(*args).stdout)
    return [doc for doc in docs if doc]


def only(manifests: list[Manifest], kind: str) -> Manifest:
    found = [m for m in manifests if m["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def chart_meta() -> dict[str, Any]:
    meta: dict[str, Any] = yaml.safe_load((CHART / "Chart.yaml").read_text())
    return meta


# --- lint and render ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sets",
    [
        [],
        ["sampleCluster.enabled=true"],
        ["operator.watchNamespaces={team-a,team-b}", "peering.enabled=false", "operator.replicas=1"],
    ],
    ids=["default", "sample-cluster", "namespaced"],
)
def test_helm_lint_strict(sets: list[str]) -> None:
    args = ["lint", "--strict", str(CHART)]
    for item in sets:
        args += ["--set", item]
    proc = helm(*args)
    assert "0 chart(s) failed" in proc.stdout
    assert "[WARNING]" not in proc.stdout and "[ERROR]" not in proc.stdout


def test_template_default_renders_operator_and_its_test_only() -> None:
    kinds = sorted(m["kind"] for m in render())
    assert kinds == [
        "ClusterKopfPeering",
        "ClusterRole",
        "ClusterRoleBinding",
        "Deployment",
        "Pod",  # the helm test (a hook) of the cluster NOTES shows how to create
        "ServiceAccount",
    ]


def test_template_with_sample_cluster() -> None:
    manifests = render("sampleCluster.enabled=true")
    cluster = only(manifests, "BrokerCluster")
    assert cluster["apiVersion"] == "hybridmq.io/v1alpha1"
    assert cluster["metadata"] == {**cluster["metadata"], "name": "demo", "namespace": "hybridmq-system"}
    assert cluster["spec"]["image"] == f"ghcr.io/hybridmq/broker:{chart_meta()['appVersion']}"
    test_pod = only(manifests, "Pod")
    assert test_pod["metadata"]["annotations"]["helm.sh/hook"] == "test"


def _check_against_schema(value: Any, schema: dict[str, Any], path: str) -> None:
    """A small structural check: unknown fields (which the API server would prune) and basic types."""
    if schema.get("x-kubernetes-int-or-string"):
        assert isinstance(value, int | str), f"{path}: {value!r} is not an int or a string"
        return
    kind = schema.get("type")
    if kind == "object":
        assert isinstance(value, dict), f"{path}: {value!r} is not an object"
        props: dict[str, Any] = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            if key in props:
                _check_against_schema(item, props[key], f"{path}.{key}")
            elif isinstance(extra, dict):
                _check_against_schema(item, extra, f"{path}.{key}")
            else:
                assert schema.get("x-kubernetes-preserve-unknown-fields"), f"{path}.{key}: unknown field"
    elif kind == "integer":
        assert isinstance(value, int) and not isinstance(value, bool), f"{path}: {value!r} is not an int"
    elif kind == "string":
        assert isinstance(value, str), f"{path}: {value!r} is not a string"
        if "enum" in schema:
            assert value in schema["enum"], f"{path}: {value!r} not in {schema['enum']}"
    elif kind == "boolean":
        assert isinstance(value, bool), f"{path}: {value!r} is not a boolean"


def test_sample_cluster_matches_the_crd() -> None:
    crd_path = CHART_CRDS / "brokerclusters.hybridmq.io.yaml"
    assert crd_path.exists(), "the chart does not ship the BrokerCluster CRD"
    crd = yaml.safe_load(crd_path.read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    cluster = only(render("sampleCluster.enabled=true"), "BrokerCluster")
    _check_against_schema(cluster["spec"], schema, "spec")


def _test_pod_tls(pod: Manifest) -> tuple[dict[str, Any], str | None]:
    """The test container's env and the Secret mounted as its CA (None without TLS)."""
    container = pod["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    if "cluster-ca" not in volumes:
        assert "TLS_CA" not in env and "cluster-ca" not in mounts
        return env, None
    assert env["TLS_CA"] == f"{mounts['cluster-ca']}/ca.crt"
    return env, str(volumes["cluster-ca"]["secret"]["secretName"])


def test_default_test_pod_checks_the_notes_cluster_over_tls() -> None:
    """Without a sample cluster the test checks the one NOTES shows (same name, TLS on as the CRD's
    default), in the release namespace, with the cluster CA's Secret."""
    pod = only(render(), "Pod")
    assert pod["metadata"]["namespace"] == "hybridmq-system"
    env, secret = _test_pod_tls(pod)
    assert env["HYBRIDMQ_BOOTSTRAP"] == "demo.hybridmq-system.svc:7400"
    assert env["TLS_SERVER_NAME"] == "demo.hybridmq-system.svc"
    assert secret == "demo-cluster-ca-cert"
    assert not [m for m in render("tests.enabled=false") if m["kind"] == "Pod"]


@pytest.mark.parametrize(
    ("sets", "bootstrap", "secret", "server_name"),
    [
        (
            ["sampleCluster.enabled=true", "sampleCluster.spec.tls.enabled=false"],
            "demo.hybridmq-system.svc:7400",
            None,
            None,
        ),
        (["sampleCluster.spec.tls.enabled=false"], "demo.hybridmq-system.svc:7400", None, None),
        (
            ["sampleCluster.spec.tls.secretName=mine"],
            "demo.hybridmq-system.svc:7400",
            "mine",
            "demo.hybridmq-system.svc",
        ),
        (["tests.bootstrap=cm.example:7400", "tests.tls.enabled=false"], "cm.example:7400", None, None),
        (
            ["tests.bootstrap=cm.example:7400\\,cm2.example:7400", "tests.tls.caSecret=ext-ca"],
            "cm.example:7400,cm2.example:7400",
            "ext-ca",
            "cm.example",
        ),
        (
            ["tests.tls.serverName=cms.example"],
            "demo.hybridmq-system.svc:7400",
            "demo-cluster-ca-cert",
            "cms.example",
        ),
    ],
    ids=["sample-plain", "notes-plain", "own-secret", "bootstrap-plain", "bootstrap-tls", "server-name"],
)
def test_test_pod_tls_follows_the_values(
    sets: list[str], bootstrap: str, secret: str | None, server_name: str | None
) -> None:
    env, mounted = _test_pod_tls(only(render(*sets), "Pod"))
    assert env["HYBRIDMQ_BOOTSTRAP"] == bootstrap
    assert mounted == secret
    assert env.get("TLS_SERVER_NAME") == server_name


def test_helm_test_pod_produces_then_consumes_through_the_sample_cm() -> None:
    pod = only(render("sampleCluster.enabled=true", "sampleCluster.name=orders"), "Pod")
    container = pod["spec"]["containers"][0]
    assert container["image"].rsplit(":", 1)[0].endswith("hybridmq/broker")
    script = container["command"][-1]
    assert script.index("hybridmq produce") < script.index("hybridmq consume")
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["HYBRIDMQ_BOOTSTRAP"] == "orders.hybridmq-system.svc:7400"
    assert pod["spec"]["restartPolicy"] == "Never"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("operator.replicas=-1", "minimum"),
        ("operator.logLevel=chatty", "operator/logLevel"),
        ("image.operator.pullPolicy=Sometimes", "pullPolicy"),
        ("operator.liveness.port=70000", "liveness/port"),
        ("sampleCluster.name=Not_A_Name", "sampleCluster/name"),
        ("tests.bootstrap=no-port", "tests/bootstrap"),
        ("tests.tls.enabled=maybe", "tests/tls/enabled"),
        ("operatr.replicas=1", "additional properties"),
        ("operator.resourcez.limits.cpu=1", "additional properties"),
    ],
)
def test_values_schema_rejects_bad_values(bad: str, message: str) -> None:
    proc = helm("template", "rel", str(CHART), "--set", bad, check=False)
    assert proc.returncode != 0, f"--set {bad} was accepted"
    assert message in proc.stderr, proc.stderr


# --- the operator Deployment ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def deployment() -> Manifest:
    return only(render(), "Deployment")


def _container(deployment: Manifest) -> dict[str, Any]:
    containers: list[dict[str, Any]] = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def test_deployment_recreate_strategy(deployment: Manifest) -> None:
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}


def test_two_operators_prefer_different_nodes(deployment: Manifest) -> None:
    """A node loss never takes the only operator: two replicas (one works, one stands by through
    Kopf peering), each preferring a node without the other."""
    assert deployment["spec"]["replicas"] == 2
    assert "--peering=rel-hybridmq" in _container(deployment)["args"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    terms = deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert [t["podAffinityTerm"]["topologyKey"] for t in terms] == ["kubernetes.io/hostname"]
    selector = terms[0]["podAffinityTerm"]["labelSelector"]["matchLabels"]
    assert selector.items() <= pod_labels.items() and "app.kubernetes.io/component" in selector
    # An affinity of one's own replaces it.
    custom = only(
        render(
            "operator.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
            ".nodeSelectorTerms[0].matchExpressions[0].key=pool",
            "operator.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
            ".nodeSelectorTerms[0].matchExpressions[0].operator=Exists",
        ),
        "Deployment",
    )
    assert set(custom["spec"]["template"]["spec"]["affinity"]) == {"nodeAffinity"}


def test_standalone_operators_cannot_be_replicated() -> None:
    """Without peering every replica would act: refused with a message saying what to set."""
    done = helm("template", "rel", str(CHART), "--set", "peering.enabled=false", check=False)
    assert done.returncode != 0
    assert "operator.replicas > 1 needs peering.enabled=true" in done.stderr
    assert only(render("peering.enabled=false", "operator.replicas=1"), "Deployment")["spec"]["replicas"] == 1


def test_replicated_operators_cannot_share_a_fixed_priority() -> None:
    """Equal priorities pause every operator that sees the other: refused, not installed idle."""
    done = helm("template", "rel", str(CHART), "--set", "peering.priority=100", check=False)
    assert done.returncode != 0
    assert "operator.replicas > 1 needs peering.priority=auto" in done.stderr
    single = only(render("peering.priority=100", "operator.replicas=1"), "Deployment")
    assert "--priority=100" in _container(single)["args"]


def test_deployment_liveness_probe_hits_kopf_liveness_endpoint(deployment: Manifest) -> None:
    container = _container(deployment)
    probe = container["livenessProbe"]["httpGet"]
    liveness_args = [a for a in container["args"] if a.startswith("--liveness=")]
    assert liveness_args == [f"--liveness=http://$(POD_IP):{probe['port']}{probe['path']}"]
    assert probe == {"path": "/healthz", "port": 8080}
    assert {"name": "health", "containerPort": 8080, "protocol": "TCP"} in container["ports"]


def test_deployment_has_a_readiness_probe_on_the_health_endpoint(deployment: Manifest) -> None:
    container = _container(deployment)
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": 8080}
    assert container["readinessProbe"]["periodSeconds"] <= container["livenessProbe"]["periodSeconds"]


def test_deployment_resources(deployment: Manifest) -> None:
    resources = _container(deployment)["resources"]
    assert resources["requests"]["cpu"] and resources["requests"]["memory"]
    assert resources["limits"]["memory"]


def test_deployment_runs_non_root_with_read_only_root(deployment: Manifest) -> None:
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert isinstance(pod["securityContext"]["runAsUser"], int) and pod["securityContext"]["runAsUser"] > 0
    sc = _container(deployment)["securityContext"]
    assert sc["runAsNonRoot"] is True
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    mounts = {m["mountPath"]: m["name"] for m in _container(deployment)["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]


def test_deployment_env_and_args(deployment: Manifest) -> None:
    container = _container(deployment)
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert env["POD_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    app_version = chart_meta()["appVersion"]
    assert env["HYBRIDMQ_BROKER_IMAGE"]["value"] == f"ghcr.io/hybridmq/broker:{app_version}"
    assert container["image"] == f"ghcr.io/hybridmq/operator:{app_version}"
    assert container["command"] == ["hybridmq-operator"]
    assert "--all-namespaces" in container["args"]
    assert "--peering=rel-hybridmq" in container["args"]
    # A stable peering identity and a priority that lets a new operator outrank a dead one.
    assert env["POD_ID"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert {"--priority=auto", "--peering-lifetime=15"} <= set(container["args"])
    sa = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    assert sa == "rel-hybridmq-operator"


@pytest.mark.parametrize(
    "sets",
    [
        [],
        [
            "operator.watchNamespaces={team-a,team-b}",
            "peering.enabled=false",
            "operator.replicas=1",
            "operator.logLevel=debug",
        ],
    ],
    ids=["default", "namespaced"],
)
def test_deployment_args_parse_with_the_operator_cli(sets: list[str]) -> None:
    """The chart's args are accepted by hybridmq-operator's own parser (after $(VAR) expansion)."""
    from hybridmq_operator.main import parse_args

    container = _container(only(render(*sets), "Deployment"))
    assert container["command"] == ["hybridmq-operator"]
    args = parse_args([a.replace("$(POD_IP)", "10.1.2.3") for a in container["args"]])
    assert args.liveness == "http://10.1.2.3:8080/healthz"
    assert args.metrics_address == "10.1.2.3:9090"
    if sets:
        assert args.namespace == ["team-a", "team-b"] and not args.all_namespaces
        assert args.standalone and args.peering is None and args.debug
    else:
        assert args.all_namespaces and args.peering == "rel-hybridmq" and not args.standalone
        # "auto": the start time in milliseconds (later operators outrank earlier ones).
        assert abs(args.priority // 1_000_000 - time.time() * 1000) < 60_000  # µs times 1,000
        assert args.peering_lifetime == 15


def test_deployment_namespaced_and_standalone() -> None:
    manifests = render(
        "operator.watchNamespaces={team-a,team-b}", "peering.enabled=false", "operator.replicas=1"
    )
    args = _container(only(manifests, "Deployment"))["args"]
    assert "--namespace=team-a" in args and "--namespace=team-b" in args
    assert "--standalone" in args and "--all-namespaces" not in args
    assert not [m for m in manifests if m["apiVersion"].startswith("kopf.dev/")]


def test_image_digest_and_tag_overrides() -> None:
    digest = "sha256:" + "a" * 64
    manifests = render(f"image.operator.digest={digest}", "image.broker.tag=dev")
    container = _container(only(manifests, "Deployment"))
    assert container["image"] == f"ghcr.io/hybridmq/operator@{digest}"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["HYBRIDMQ_BROKER_IMAGE"] == "ghcr.io/hybridmq/broker:dev"


# --- RBAC -----------------------------------------------------------------------------------------

Grant = tuple[str, str, str]  # (apiGroup, resource, verb)

_ALL = ("get", "list", "watch", "create", "update", "patch", "delete")
#: What the operator is expected to hold; keep in step with templates/_rbac.tpl.
EXPECTED_NAMESPACED: dict[tuple[str, str], tuple[str, ...]] = {
    ("hybridmq.io", "brokerclusters"): ("get", "list", "watch", "patch", "update"),
    ("hybridmq.io", "partitions"): _ALL,
    ("hybridmq.io", "brokerusers"): ("get", "list", "watch"),
    ("hybridmq.io", "brokerusers/status"): ("get", "patch"),
    ("hybridmq.io", "brokerclusters/status"): ("get", "update", "patch"),
    ("hybridmq.io", "partitions/status"): ("get", "update", "patch"),
    ("hybridmq.io", "brokerclusters/finalizers"): ("update",),
    ("hybridmq.io", "partitions/finalizers"): ("update",),
    ("apps", "statefulsets"): _ALL,
    ("", "services"): _ALL,
    ("", "configmaps"): _ALL,
    ("", "serviceaccounts"): _ALL,
    ("", "pods"): ("get", "list", "watch", "patch", "delete"),
    ("policy", "poddisruptionbudgets"): _ALL,
    ("rbac.authorization.k8s.io", "roles"): _ALL,
    ("rbac.authorization.k8s.io", "rolebindings"): _ALL,
    ("coordination.k8s.io", "leases"): ("get", "list", "watch", "create", "update", "patch"),
    ("networking.k8s.io", "networkpolicies"): ("get", "create", "patch"),
    # the cluster secret (created once) and the cluster CA's Secrets (read back to sign, applied)
    ("", "secrets"): ("get", "create", "patch"),
    ("", "events"): ("create", "patch"),
    ("events.k8s.io", "events"): ("create", "patch"),
}
PEERING = ("get", "list", "watch", "patch")


def grants(rules: list[dict[str, Any]]) -> set[Grant]:
    out: set[Grant] = set()
    for rule in rules:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    out.add((group, resource, verb))
    return out


def expand(table: dict[tuple[str, str], tuple[str, ...]]) -> set[Grant]:
    return {(group, resource, verb) for (group, resource), verbs in table.items() for verb in verbs}


def iter_rules(manifests: list[Manifest], kind: str) -> Iterator[Manifest]:
    return (m for m in manifests if m["kind"] == kind)


def test_cluster_wide_rbac_is_exactly_the_expected_list() -> None:
    manifests = render()
    role = only(manifests, "ClusterRole")
    expected = expand(EXPECTED_NAMESPACED) | {("kopf.dev", "clusterkopfpeerings", v) for v in PEERING}
    expected.add(("", "nodes", "get"))  # failure domains: the MMs' nodes' topologyKey label
    assert grants(role["rules"]) == expected
    binding = only(manifests, "ClusterRoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    sa = only(manifests, "ServiceAccount")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": "hybridmq-system"}
    ]


def test_namespaced_rbac_grants_namespaced_rules_per_namespace() -> None:
    manifests = render("operator.watchNamespaces={team-a,team-b}")
    roles = list(iter_rules(manifests, "Role"))
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    for role in roles:
        expected = expand(EXPECTED_NAMESPACED) | {("kopf.dev", "kopfpeerings", verb) for verb in PEERING}
        assert grants(role["rules"]) == expected
    assert not [m for m in manifests if m["kind"].startswith("Cluster")]
    bindings = list(iter_rules(manifests, "RoleBinding"))
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    peerings = list(iter_rules(manifests, "KopfPeering"))
    assert sorted(p["metadata"]["namespace"] for p in peerings) == ["team-a", "team-b"]


def test_rbac_has_no_wildcards_and_cannot_list_secrets() -> None:
    for role in (m for m in render() if m["kind"] in ("ClusterRole", "Role")):
        for group, resource, verb in grants(role["rules"]):
            assert "*" not in (group, resource, verb)
            # Only the Secrets it names (its cluster secret and CA): never listed, watched or deleted.
            assert resource != "secrets" or verb in ("get", "create", "patch")
            assert verb not in ("escalate", "bind", "impersonate", "deletecollection")


def test_operator_holds_every_permission_it_grants_the_brokers() -> None:
    """RBAC escalation prevention: the operator may only create the brokers' Role if it holds it."""
    from hybridmq_operator.resources.rbac import BROKER_RULES

    held = grants(only(render(), "ClusterRole")["rules"])
    missing = grants(BROKER_RULES) - held
    assert not missing, f"the operator cannot grant the brokers {sorted(missing)}"


# --- CRDs -----------------------------------------------------------------------------------------


def test_chart_crds_in_sync_with_generated_crds() -> None:
    generated = sorted(p.name for p in CRDS.glob("*.yaml"))
    shipped = sorted(p.name for p in CHART_CRDS.glob("*.yaml") if p.name not in CHART_ONLY_CRDS)
    fix = "run `make crds` (it copies crds/*.yaml into helm/hybridmq/crds/)"
    assert shipped == generated, f"helm/hybridmq/crds/ differs from crds/: {fix}"
    _, mismatch, errors = filecmp.cmpfiles(CRDS, CHART_CRDS, generated, shallow=False)
    assert not mismatch and not errors, f"{mismatch + errors} differ: {fix}"


def test_chart_ships_the_hybridmq_and_kopf_crds() -> None:
    names = set()
    for path in CHART_CRDS.glob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                assert doc["kind"] == "CustomResourceDefinition", path
                names.add(doc["metadata"]["name"])
    assert {
        "brokerclusters.hybridmq.io",
        "partitions.hybridmq.io",
        "clusterkopfpeerings.kopf.dev",
        "kopfpeerings.kopf.dev",
    } <= names


_STUB_HYBRIDMQ = r"""#!/bin/sh
# A stand-in `hybridmq`: the first produce fails (as while the CM starts), the next is kept; consume
# prints what was produced to that destination as the real CLI does (JSON lines).
cmd=$1; dest=$2; shift 2
echo "$cmd $dest $*" >> "$STATE/calls"
tls_ca=""
while [ $# -gt 0 ]; do
  case "$1" in --message) message=$2 ;; --bootstrap) bootstrap=$2 ;; --tls-ca) tls_ca=$2 ;; esac
  shift
done
[ "$bootstrap" = "$HYBRIDMQ_BOOTSTRAP" ] || exit 3
[ "$tls_ca" = "${TLS_CA:-}" ] || exit 4
key=$(echo "$dest" | tr ':/' '__')
case "$cmd" in
  produce)
    if [ -n "${STUB_ERROR:-}" ]; then echo "$STUB_ERROR" >&2; exit 1; fi
    if [ ! -e "$STATE/failed-once" ]; then touch "$STATE/failed-once"; exit 1; fi
    printf '%s' "$message" > "$STATE/$key" ;;
  consume)
    [ -e "$STATE/$key" ] || exit 0
    printf '{"id": "1", "destination": "%s", "value": "%s"}\n' "$dest" "$(cat "$STATE/$key")" ;;
esac
exit 0
"""


@pytest.mark.parametrize("tls", [True, False], ids=["tls", "plain"])
def test_helm_test_pod_script_runs(tmp_path: Path, tls: bool) -> None:
    """The test pod's shell script, run here with a stand-in `hybridmq`: retries, then round-trips;
    with TLS every call gives the mounted CA (--tls-ca) and the CMs' name (--tls-server-name)."""
    sets = ["sampleCluster.enabled=true", f"sampleCluster.spec.tls.enabled={str(tls).lower()}"]
    container = only(render(*sets), "Pod")["spec"]["containers"][0]
    assert container["command"][:2] == ["/bin/sh", "-ec"]
    stub = tmp_path / "hybridmq"
    stub.write_text(_STUB_HYBRIDMQ)
    stub.chmod(0o755)
    env = {e["name"]: str(e.get("value", "")) for e in container["env"]}
    env.update(POD_NAME="rel-hybridmq-test", PATH=f"{tmp_path}:/usr/bin:/bin", STATE=str(tmp_path))
    script = container["command"][2].replace("/tmp/", f"{tmp_path}/")
    proc = subprocess.run(["/bin/sh", "-ec", script], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "produced and consumed one message" in proc.stdout
    calls = (tmp_path / "calls").read_text().splitlines()
    assert [c.split()[0] for c in calls] == ["produce", "produce", "consume"]
    assert calls[0].split()[1].startswith("queue:helm-test-")
    for call in calls:
        expected = "--tls-ca /etc/hybridmq-ca/ca.crt --tls-server-name demo.hybridmq-system.svc"
        assert (expected in call) == tls, call


def test_helm_test_pod_script_stops_at_a_tls_error(tmp_path: Path) -> None:
    """A TLS mismatch is not retried (it does not heal by waiting): one produce, then the reason."""
    container = only(render(), "Pod")["spec"]["containers"][0]
    stub = tmp_path / "hybridmq"
    stub.write_text(_STUB_HYBRIDMQ)
    stub.chmod(0o755)
    env = {e["name"]: str(e.get("value", "")) for e in container["env"]}
    error = "hybridmq produce: the CM at demo.hybridmq-system.svc:7400 speaks TLS: give ..."
    env.update(PATH=f"{tmp_path}:/usr/bin:/bin", STATE=str(tmp_path), STUB_ERROR=error)
    script = container["command"][2].replace("/tmp/", f"{tmp_path}/")
    proc = subprocess.run(["/bin/sh", "-ec", script], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert error in proc.stderr and "chart values tests.tls" in proc.stderr, proc.stderr
    assert len((tmp_path / "calls").read_text().splitlines()) == 1
