"""The kind journey on a cluster made here: the failover demo headless, then what it leaves running.

The demo (hack/kind-demo.sh) builds and loads both images, installs the chart, creates a
BrokerCluster, runs producers in a Job that reaches the CMs by their Service's DNS name, deletes the
primary MM of a fixed partition and audits the run. The tests after it use that BrokerCluster.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from kind_harness import REPO, KindCluster, last_line_value

from localcluster.testing import wait_for

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


def partitions(kind_cluster: KindCluster) -> dict[str, dict[str, Any]]:
    """The demo cluster's Partitions as `kubectl get hpart -o json` shows them."""
    items = kind_cluster.json("-n", NAMESPACE, "get", "partitions.hybridmq.io")["items"]
    return {p["metadata"]["name"]: p for p in items if p["spec"]["cluster"] == CLUSTER}


def listing(kind_cluster: KindCluster, pod: str, path: str) -> set[str]:
    return set(kind_cluster.kubectl("-n", NAMESPACE, "exec", pod, "--", "ls", path).stdout.split())


def test_mm_data_survives_pod_deletion(kind_cluster: KindCluster) -> None:
    """What a user checks after deleting an MM pod: its volume (and a file on it) is still there,
    every fixed partition still holds at least every record acknowledged before (its log end
    offset), and a partition directory gone from the volume belongs to a partition that left the
    MM for a reason the product gives: an on-demand one drained (and maybe garbage-collected) or a
    fixed one whose replica moved to another MM. (Comparing raw listings failed: a drained
    on-demand partition is collected and a new one spawned, by design.)"""
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
    before = partitions(kind_cluster)
    # Acknowledged = committed (replicated to minInSync copies) before the deletion.
    acked = {
        n: int((p.get("status") or {}).get("committedOffset") or 0)
        for n, p in before.items()
        if p["spec"]["type"] == "fixed"
    }
    assert acked and sum(acked.values()) > 0, acked  # the demo wrote to the fixed partitions
    held = listing(kind_cluster, name, mount) & set(before)

    kind_cluster.kubectl("-n", NAMESPACE, "delete", "pod", name, "--wait=true", timeout=180)

    def recreated() -> bool:
        # `kubectl wait` on a pod the StatefulSet has not created again yet fails at once (NotFound).
        got = kind_cluster.kubectl("-n", NAMESPACE, "get", "pod", name, "-o", "json", check=False)
        return got.returncode == 0 and '"uid"' in got.stdout and pod["metadata"]["uid"] not in got.stdout

    wait_for(recreated, 120, f"{name} created again by its StatefulSet", interval=1)
    kind_cluster.kubectl(
        "-n", NAMESPACE, "wait", "pod", name, "--for=condition=Ready", "--timeout=300s", timeout=320
    )
    assert kind_cluster.json("-n", NAMESPACE, "get", "pod", name)["metadata"]["uid"] != pod["metadata"]["uid"]
    kept = kind_cluster.kubectl("-n", NAMESPACE, "exec", name, "--", "cat", f"{mount}/{marker}").stdout
    assert kept.strip() == marker

    def fixed_data_kept() -> dict[str, dict[str, Any]] | None:
        now = partitions(kind_cluster)
        # Figures its current primary reported at its current epoch, not those of the one before.
        ok = all(
            (st := now[n].get("status") or {}).get("primary")
            and st.get("reportedEpoch") == st.get("epoch")
            and int(st.get("logEndOffset") or 0) >= acked[n]
            for n in acked
            if n in now
        )
        return now if ok and set(acked) <= set(now) else None

    after = wait_for(fixed_data_kept, 300, f"every fixed partition serving with at least {acked} records")
    for gone in sorted(held - listing(kind_cluster, name, mount)):
        if gone in after:
            # Still there: its replica left this MM (dropped when the pod went, placed elsewhere).
            assert name not in (after[gone].get("status") or {}).get("replicas", []), after[gone]
        else:
            # Deleted: only a drained on-demand partition is, and its events say so.
            assert before[gone]["spec"]["type"] == "on-demand", gone
            events = kind_cluster.json(
                "-n", NAMESPACE, "get", "events", "--field-selector", f"involvedObject.name={gone}"
            )["items"]
            assert {"Drained", "PartitionDeleted"} & {e["reason"] for e in events}, (gone, events)


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
