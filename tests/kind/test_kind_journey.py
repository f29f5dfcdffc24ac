"""The kind journey on a cluster made here: the failover demo headless, then what it leaves running.

The demo (hack/kind-demo.sh) builds and loads both images, installs the chart, creates a
BrokerCluster, runs producers in a Job that reaches the CMs by their Service's DNS name, deletes the
primary MM of a fixed partition and audits the run. The tests after it use that BrokerCluster.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from kind_harness import REPO, KindCluster, last_line_value

import results_record
from localcluster.testing import wait_for

pytestmark = [pytest.mark.kind, pytest.mark.timeout(2400)]

NAMESPACE = "hybridmq-demo"
CLUSTER = "demo"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
STEP = re.compile(r"^==> (\d+)\. (.*) \[at (\d+) s\]$", re.M)
# A producer's last line (`kubectl logs --prefix`): how many messages it sent, each acknowledged.
SENT = re.compile(r"^\[pod/[^\]]+/(fixed|on-demand)\] sent (\d+)$", re.M)


MESSAGES = 8000  # at 200/s: the load outlasts the warm-up, the failure and the failover
# The clusters whose images a demo of this session built and loaded: later demos skip that step.
_IMAGES_LOADED: set[str] = set()


def run_demo(
    kind_cluster: KindCluster, messages: int = MESSAGES, **settings: str
) -> tuple[str, float, float | None]:
    """The demo's output, asserting its last line is a PASS; and its two failover times (the second
    is None when no producer wrote to the partition that failed over). A failed demo leaves the
    pods' logs in a directory it names. ``messages``: each producer's count (FAILURE=pod; with
    FAILURE=node the demo stops them once the failover was watched)."""
    failure = settings.get("FAILURE", "pod")
    logs = tempfile.mkdtemp(prefix="hybridmq-kind-logs-")
    env = {
        "LOGS_DIR": logs,
        "SKIP_BUILD": "1" if kind_cluster.name in _IMAGES_LOADED else "0",
        "CLUSTER_NAME": kind_cluster.name,
        "NAMESPACE": NAMESPACE,
        "BROKER_CLUSTER": CLUSTER,
        "MESSAGES": str(messages),
        "RATE": "200",
        "WARMUP_SECONDS": "8",
        "WATCH_SECONDS": "10",
        "SLOW_FAILOVER_S": "5",
        **settings,
    }
    done = kind_cluster.run(str(REPO / "hack" / "kind-demo.sh"), timeout=2300, check=False, env=env)
    out = ANSI.sub("", done.stdout)
    last = out.strip().splitlines()[-1] if out.strip() else ""
    assert last.startswith("verdict=PASS"), out[-4000:] + done.stderr[-3000:]
    assert done.returncode == 0
    _IMAGES_LOADED.add(kind_cluster.name)
    kept_logs = any(Path(logs).iterdir())  # saved by the demo for a slow failover: kept, recorded
    if not kept_logs:
        shutil.rmtree(logs, ignore_errors=True)
    # Every message the two producers say they sent is in the cluster (the audit read them all),
    # and the audit checked each acknowledged one against the producers' send logs.
    sent = {producer: int(n) for producer, n in SENT.findall(out)}
    assert sorted(sent) == ["fixed", "on-demand"] and min(sent.values()) > 0, out[-3000:]
    if failure == "pod":
        assert sent == {"fixed": messages, "on-demand": messages}, sent
    assert int(last_line_value(out, "records")) == sum(sent.values()), (last, sent)
    assert int(last_line_value(out, "acked")) == sum(sent.values()), (last, sent)
    assert last_line_value(out, "acked_missing") == "0", last
    status_updated = float(last_line_value(out, "status_updated_s"))
    resumed_text = last_line_value(out, "producers_resumed_s")
    _record_failover(failure, status_updated, resumed_text, step_times(out), logs if kept_logs else None)
    return out, status_updated, None if resumed_text == "none" else float(resumed_text)


def step_times(out: str) -> dict[str, int]:
    """When each of the demo's steps began (seconds into the demo), by its number and first words."""
    return {f"{n}. {' '.join(title.split()[:3])}": int(at) for n, title, at in STEP.findall(out)}


def _record_failover(
    failure: str, status_updated: float, resumed: str, steps: dict[str, int], logs_dir: str | None
) -> None:
    """Under ``make test`` the demo's failover times go to ``bench/results/kind_failover.jsonl``:
    every run of the suite measures them on kind (and when each step began: where a slow run went;
    and where the pods' logs of a slow failover were kept)."""
    results_record.append(
        "kind_failover",
        {
            "failure": failure,
            "status_updated_s": status_updated,
            "producers_resumed_s": None if resumed == "none" else float(resumed),
            "steps_at_s": steps,
            **({"logs_dir": logs_dir} if logs_dir else {}),
        },
    )


def test_kind_demo_passes_with_failover_times(kind_cluster: KindCluster) -> None:
    out, status_updated, resumed = run_demo(kind_cluster)
    assert 0 < status_updated < 120
    # From the fixed producer's own log: the send the failover held was acknowledged by then (it
    # may come before a watch on the status sees the new primary).
    assert resumed is not None and 0 < resumed < 120
    # Both producers ran in a pod that reached the CMs by the Service's DNS name, and sent everything.
    assert f"the producers reach the CMs at {CLUSTER}.{NAMESPACE}.svc:" in out


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
            # Still there: its replica left this MM (dropped when the pod went, placed elsewhere),
            # or a new copy was placed on this MM again after it came back, whose directory the MM
            # creates when it applies that placement.
            def moved_or_back(partition: str = gone) -> bool:
                replicas = (partitions(kind_cluster)[partition].get("status") or {}).get("replicas", [])
                return name not in replicas or partition in listing(kind_cluster, name, mount)

            wait_for(moved_or_back, 120, f"{gone}: its copy off {name}, or a new one on it", interval=2)
        else:
            # Deleted: only a drained on-demand partition is, and its events say so.
            assert before[gone]["spec"]["type"] == "on-demand", gone
            events = kind_cluster.json(
                "-n", NAMESPACE, "get", "events", "--field-selector", f"involvedObject.name={gone}"
            )["items"]
            assert {"Drained", "PartitionDeleted"} & {e["reason"] for e in events}, (gone, events)


# Last in this file (and tests/kind has no other): it stops a worker of the session's cluster, and
# the demo starts it again at its end, but a restarted kind node may come back with another address.
@pytest.mark.node_loss
def test_node_loss_loses_no_acknowledged_message(
    kind_cluster: KindCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    """`docker stop` of the worker holding the most primaries of a settled BrokerCluster, the
    leading operator's when they tie (with the chart's two operator replicas on different nodes, a
    standby takes over): every partition whose primary was there gets a new primary at a newer
    epoch, every producer (on the control-plane node, never stopped) is acknowledged again, and the
    audit finds every message the producers sent and had acknowledged, in order, once."""
    # A BrokerCluster of its own (the queue of the first demo still holds that run's records); the
    # demo deletes the namespace first if a kept cluster still holds an earlier run's in it.
    namespace = "hybridmq-node-loss"
    # A 5 s lease: at load averages of 25-45 on the 2 cores, MMs starved past the default 1 s lost
    # it again and again (a failover storm, partitions offline, producers refused); a lost node is
    # still noticed through it.
    # The producers run until each was acknowledged after the stop and the watch is over.
    out, failed_over, acked_again = run_demo(
        kind_cluster, FAILURE="node", NAMESPACE=namespace, LEASE_SECONDS="5"
    )
    stopped = last_line_value(out, "stopped_node")
    by_node = json.loads(last_line_value(out, "primaries_by_node"))
    lost = [p for p in last_line_value(out, "partitions_lost").split(",") if p]
    moved = [p for p in last_line_value(out, "failed_over_partitions").split(",") if p]
    # The stopped node held the most fixed primaries, at least one.
    assert by_node[stopped][0] >= 1 and by_node[stopped][0] == max(f for f, _ in by_node.values()), by_node
    assert lost and sorted(moved) == sorted(p.split("@")[0] for p in lost), (lost, moved)
    # Two operators on different nodes, and the stopped node ran the one leading: the standby failed
    # the partitions over, well before Kubernetes would evict the lost one (300 s).
    operators = dict(o.split("@") for o in last_line_value(out, "operator_nodes").split(","))
    assert len(operators) == 2 and len(set(operators.values())) == 2, operators
    assert last_line_value(out, "operator_leader_stopped") == "yes", out[-3000:]
    # Stop -> every partition of the node with a new primary: the lease (1 s), the dead operator's
    # peering record (15 s) and a loaded machine.
    assert 0 < failed_over < 90, failed_over
    # Stop -> every producer acknowledged again (from the producers' own acknowledgement times).
    assert acked_again is not None and 0 <= acked_again < 150, acked_again
    with capsys.disabled():  # the figures show in `make test`'s output too
        print(
            f"\nnode loss: stopped={stopped} partitions={len(lost)} "
            f"stop->every new primary {failed_over:.1f} s, "
            f"stop->every producer acked {acked_again:.1f} s, lost={last_line_value(out, 'acked_missing')}"
            f"\n  its steps began at (s): {step_times(out)}"
        )
