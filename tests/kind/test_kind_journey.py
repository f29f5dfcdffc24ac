"""The kind journey on a cluster made here: the failover demo headless, then what it leaves running.

The demo (hack/kind-demo.sh) builds and loads both images, installs the chart, creates a
BrokerCluster, runs producers in a Job that reaches the CMs by their Service's DNS name, deletes the
primary MM of a fixed partition and audits the run. The tests after it use that BrokerCluster.
"""

from __future__ import annotations

import re
import time

import pytest
from kind_harness import REPO, KindCluster, last_line_value

pytestmark = [pytest.mark.kind, pytest.mark.timeout(2400)]

NAMESPACE = "hybridmq-demo"
CLUSTER = "demo"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


MESSAGES = 8000  # at 200/s: the load outlasts the warm-up, the failure and the failover


def run_demo(kind_cluster: KindCluster, **settings: str) -> tuple[str, float, float | None]:
    """The demo's output, asserting its last line is a PASS; and its two failover times (the second
    is None when no producer wrote to the partition that failed over)."""
    env = {
        "CLUSTER_NAME": kind_cluster.name,
        "NAMESPACE": NAMESPACE,
        "BROKER_CLUSTER": CLUSTER,
        "MESSAGES": str(MESSAGES),
        "RATE": "200",
        "WARMUP_SECONDS": "8",
        "WATCH_SECONDS": "10",
        **settings,
    }
    done = kind_cluster.run(str(REPO / "hack" / "kind-demo.sh"), timeout=2300, check=False, env=env)
    out = ANSI.sub("", done.stdout)
    last = out.strip().splitlines()[-1] if out.strip() else ""
    assert last.startswith("verdict=PASS"), out[-4000:] + done.stderr[-3000:]
    assert done.returncode == 0
    # Every message the two producers sent is in the cluster (the audit read them all).
    assert int(last_line_value(out, "records")) == 2 * MESSAGES, last
    status_updated = float(last_line_value(out, "status_updated_s"))
    resumed_text = last_line_value(out, "producers_resumed_s")
    return out, status_updated, None if resumed_text == "none" else float(resumed_text)


def test_kind_demo_passes_with_failover_times(kind_cluster: KindCluster) -> None:
    out, status_updated, resumed = run_demo(kind_cluster)
    assert 0 < status_updated < 120
    assert resumed is not None and status_updated <= resumed < 120
    # Both producers ran in a pod that reached the CMs by the Service's DNS name, and sent everything.
    assert f"the producers reach the CMs at {CLUSTER}.{NAMESPACE}.svc:" in out
    assert out.count(f"sent {MESSAGES}") == 2, out[-3000:]


def test_mm_data_survives_pod_deletion(kind_cluster: KindCluster) -> None:
    pods = kind_cluster.json(
        "-n",
        NAMESPACE,
        "get",
        "pods",
        "-l",
        f"app.kubernetes.io/component=mm,app.kubernetes.io/instance={CLUSTER}",
    )
    pod = pods["items"][0]
    name = pod["metadata"]["name"]
    claim = next(
        v["persistentVolumeClaim"]["claimName"] for v in pod["spec"]["volumes"] if v["name"] == "data"
    )
    mount = next(m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"] if m["name"] == "data")
    volume = kind_cluster.json("-n", NAMESPACE, "get", "pvc", claim)["spec"]["volumeName"]
    assert kind_cluster.json("get", "pv", volume)["spec"]["storageClassName"] == "standard"
    marker = f"survives-{int(time.time())}"
    kind_cluster.kubectl("-n", NAMESPACE, "exec", name, "--", "sh", "-c", f"echo {marker} > {mount}/{marker}")
    before = set(kind_cluster.kubectl("-n", NAMESPACE, "exec", name, "--", "ls", mount).stdout.split())
    kind_cluster.kubectl("-n", NAMESPACE, "delete", "pod", name, "--wait=true", timeout=180)
    kind_cluster.kubectl(
        "-n", NAMESPACE, "wait", "pod", name, "--for=condition=Ready", "--timeout=300s", timeout=320
    )
    assert kind_cluster.json("-n", NAMESPACE, "get", "pod", name)["metadata"]["uid"] != pod["metadata"]["uid"]
    after = set(kind_cluster.kubectl("-n", NAMESPACE, "exec", name, "--", "ls", mount).stdout.split())
    assert before <= after, (before, after)
    kept = kind_cluster.kubectl("-n", NAMESPACE, "exec", name, "--", "cat", f"{mount}/{marker}").stdout
    assert kept.strip() == marker


@pytest.mark.node_loss
def test_node_loss_loses_no_acknowledged_message(kind_cluster: KindCluster) -> None:
    """`docker stop` of a worker running a primary MM (and a CM): a new primary, then the audit finds
    every message the producers sent (the audit's PASS and its record count), in order, once. The
    stopped node runs neither the producers nor the operator, so the failed partition may have no
    producer on it: its resumption is not measured."""
    # A BrokerCluster of its own: the queue of the first demo still holds that run's records.
    out, status_updated, resumed = run_demo(kind_cluster, FAILURE="node", NAMESPACE="hybridmq-node-loss")
    assert "stop the kind node" in out
    # A stopped node is noticed through the MM's lease (no kubelet report needed): well within the
    # node-monitor grace period of 40 s, with room for a loaded machine.
    assert 0 < status_updated < 60
    assert resumed is None or status_updated <= resumed < 120
