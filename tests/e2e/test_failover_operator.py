"""The real broker processes (``hybridmq cm`` / ``hybridmq mm``) run by the operator on the local
cluster: pods come up Ready on their pod IPs with the environment the operator gives them, the
broker table lists them, and losing the primary MM's pod fails its fixed partitions over.

The data path through a failover (produce, kill, resume with zero loss) needs the broker to follow
``KubeAssignmentSource`` and renew its Lease (``hybridmq.broker.kube_source`` / ``lease``); see
docs/operator.md.
"""

from __future__ import annotations

import sys
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "k8s"))

from operator_harness import (
    Kube,
    OperatorProcess,
    forget_cluster_ca,
    poll,
    sample_cluster,
    trust_cluster_ca,
    wait_for,
)

from localcluster import LocalCluster

pytestmark = pytest.mark.cluster


def test_real_brokers_under_the_operator(
    local_cluster: LocalCluster, real: tuple[Kube, OperatorProcess], tmp_path: Path
) -> None:
    kube, _op = real
    kube.create(sample_cluster("e2e", kube.namespace, mms=3, cms=1, fixed=3))
    try:
        wait_for(lambda: len(kube.ready_pods("mm")) == 3 or None, 180, "3 real MMs Ready")
        wait_for(lambda: len(kube.ready_pods("cm")) == 1 or None, 180, "1 real CM Ready")
    except AssertionError:
        for pod in kube.pods():
            role = pod.metadata.labels["hybridmq.io/role"]
            log = local_cluster.container_log(kube.namespace, pod.metadata.name, role)
            if log is not None:
                print(pod.metadata.name, log.read_text(errors="replace")[-2000:])
        raise
    wait_for(
        lambda: (
            len(kube.cluster("e2e").get("status", {}).get("brokers", [])) == 4
            and all(b["ready"] for b in kube.cluster("e2e")["status"]["brokers"])
        ),
        60,
        "broker table of 4 ready brokers",
    )
    table = {b["name"]: b for b in kube.cluster("e2e")["status"]["brokers"]}
    pods = {p.metadata.name: p for p in kube.pods()}
    ca = trust_cluster_ca(kube, "e2e", tmp_path)
    forget_cluster_ca()  # only the context is used here
    for name, row in table.items():
        assert row["address"].split(":")[0] == pods[name].status.pod_ip
        # The real broker listens where the table says: its HTTP side answers, over HTTPS with a
        # certificate of the cluster's CA.
        url = f"https://{row['httpAddress']}/healthz"
        with urllib.request.urlopen(url, timeout=5, context=ca) as resp:
            assert resp.status == 200
    # Every partition is placed on the real MMs.
    wait_for(
        lambda: (
            all((p.get("status") or {}).get("primary") in pods for p in kube.partitions())
            and len(kube.by_type("fixed")) == 3
        ),
        60,
        "partitions placed",
    )
    # Until the MMs report their in-sync sets through their Leases (hybridmq.broker.lease), the
    # operator cannot know that a backup caught up, so it never promotes one: losing the primary
    # leaves the partition offline with a Warning rather than risking acknowledged messages.
    fixed = kube.by_type("fixed")[0]
    st = fixed["status"]
    victim = st["primary"]
    kube.core.delete_namespaced_pod(victim, kube.namespace)

    def handled() -> bool:
        now = next(p for p in kube.by_type("fixed") if p["metadata"]["name"] == fixed["metadata"]["name"])[
            "status"
        ]
        if len(st["inSync"]) > 1:
            return bool(now["primary"] not in (None, victim) and now["epoch"] == st["epoch"] + 1)
        return now.get("primary") != victim

    _, took = poll(handled, 10)
    assert took < 2.0
