"""The NetworkPolicy child: the MM broker port admits only the cluster's own pods."""

from __future__ import annotations

from hybridmq_operator import names
from hybridmq_operator.resources import build_network_policy
from hybridmq_operator.settings import ClusterSettings

SETTINGS = ClusterSettings.from_body(
    {
        "apiVersion": "hybridmq.io/v1alpha1",
        "kind": "BrokerCluster",
        "metadata": {"name": "demo", "namespace": "ns1", "uid": "uid-1", "generation": 1},
        "spec": {},
    }
)


def _selects(selector: dict[str, dict[str, str]], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector["matchLabels"].items())


def test_only_the_clusters_pods_reach_the_mm_port() -> None:
    policy = build_network_policy(SETTINGS)
    assert policy["kind"] == "NetworkPolicy" and policy["metadata"]["namespace"] == "ns1"
    assert policy["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress"]
    mm, cm = names.common_labels("demo", "mm"), names.common_labels("demo", "cm")
    other = names.common_labels("other", "cm")
    assert _selects(spec["podSelector"], mm)
    assert not _selects(spec["podSelector"], cm)  # CM client ports stay open

    def admitted(labels: dict[str, str] | None, port: int) -> bool:
        for rule in spec["ingress"]:
            if port not in [p["port"] for p in rule["ports"]]:
                continue
            if "from" not in rule:
                return True
            if labels is not None and any(_selects(f["podSelector"], labels) for f in rule["from"]):
                return True
        return False

    assert admitted(cm, names.MM_PORT) and admitted(mm, names.MM_PORT)
    assert not admitted(other, names.MM_PORT)  # a CM of another BrokerCluster
    assert not admitted(None, names.MM_PORT)  # anything outside the namespace's pods
    assert admitted(None, names.HTTP_PORT)  # probes and metrics
