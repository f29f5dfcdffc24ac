"""The kind demo's node failure (FAILURE=node): pick a worker, stop it, time the failover.

    python3 node_loss.py settle --context C --namespace NS --cluster BC
    python3 node_loss.py stop --context C --namespace NS --cluster BC --operator-namespace ONS
                              --release R --load-job J --stopped-file F
    python3 node_loss.py acks --since-ms T FILE...
    python3 node_loss.py stall --since-ms T --sent-within-s S FILE

``stop`` waits until the BrokerCluster is settled (every MM Ready, every fixed partition Active
with all its replicas in sync and reporting at its epoch, fixed primaries balanced: max - min <= 1,
so no balancing move is in flight), then picks the worker node holding the most fixed primaries,
ties broken in favour of the node running the leading operator, then by all primaries. Stopping
that node therefore always takes primaries (and, with the chart's two operator replicas spread
over nodes, the leading operator too). The node is written to ``--stopped-file`` before the
``docker stop`` (the demo starts it again at its end), then ``stop`` waits until every partition
whose primary was on it has a new primary at a newer epoch. It prints ``key=value`` lines.

``acks`` reads producer logs (``acked <n> <unix ms>`` lines, hack/kind/load.py) and prints how long
after ``--since-ms`` each producer was first acknowledged, and the slowest of them.

``stall`` (FAILURE=pod) reads one producer's log (``acked <n> <unix ms> <send ms>``): of the sends
in flight at some moment between ``--since-ms`` and ``--sent-within-s`` after it (acknowledged at or
after ``--since-ms``, begun before the end of that window), the one that waited longest is the one
the failover held; it prints how long it waited and when, after ``--since-ms``, it was acknowledged
(``producers_resumed_s``). The demo ends the window a second after the partition's status named the
new primary: a send begun later is not the failover's, and a later stall of the loaded machine (a
slow Lease renewal) must not be taken for it. The first acknowledgement after a pod's deletion would
say nothing: a send in flight is acknowledged by the old primary before the kubelet even stops it.

Standard library only: the demo runs it with the host's python3.
"""

from __future__ import annotations

import argparse
import json
import queue
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

SETTLE_TIMEOUT_S = 600.0
FAILOVER_TIMEOUT_S = 180.0


@dataclass(frozen=True)
class Kubectl:
    context: str

    def json(self, *args: str) -> Any:
        done = subprocess.run(
            ["kubectl", "--context", self.context, *args, "-o", "json"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if done.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
        return json.loads(done.stdout)

    def watch_partitions(self, namespace: str, deadline: float) -> Iterator[tuple[str, str, int]]:
        """(name, primary, epoch) of the namespace's Partitions, each as listed and then at every
        change, until ``deadline`` (time.time()): a watch, so nothing is polled while waiting."""
        template = '{.metadata.name},{.status.primary},{.status.epoch}{"\\n"}'
        cmd = ["kubectl", "--context", self.context, "-n", namespace, "get", "partitions.hybridmq.io"]
        watch = subprocess.Popen(
            [*cmd, "--watch", "-o", f"jsonpath={template}"], stdout=subprocess.PIPE, text=True
        )
        lines: queue.Queue[str | None] = queue.Queue()

        def pump() -> None:
            assert watch.stdout is not None
            for line in watch.stdout:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=pump, daemon=True).start()
        try:
            while (left := deadline - time.time()) > 0:
                try:
                    line = lines.get(timeout=left)
                except queue.Empty:
                    return
                if line is None:
                    return
                name, _, rest = line.strip().partition(",")
                primary, _, epoch = rest.partition(",")
                if name:
                    yield name, primary, int(epoch or 0)
        finally:
            watch.kill()
            watch.wait()


def _ready(pod: Mapping[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def unsettled(cluster: Mapping[str, Any], parts: Sequence[Mapping[str, Any]], mms: Sequence[Any]) -> str:
    """Why the BrokerCluster is not settled yet ('' when it is)."""
    wanted = int(cluster["spec"]["messageManagers"]["replicas"])
    ready = [p["metadata"]["name"] for p in mms if _ready(p) and not p["metadata"].get("deletionTimestamp")]
    if len(ready) != wanted:
        return f"{len(ready)} of {wanted} MMs Ready"
    fixed = [p for p in parts if p["spec"]["type"] == "fixed"]
    if not fixed:
        return "no fixed partition yet"
    for p in fixed:
        st = p.get("status") or {}
        name = p["metadata"]["name"]
        if st.get("state") != "Active" or not st.get("primary"):
            return f"{name} is {st.get('state')} (primary {st.get('primary')})"
        if len(st.get("replicas") or []) != int(p["spec"]["replicas"]):
            return f"{name} has replicas {st.get('replicas')}"
        if sorted(st.get("inSync") or []) != sorted(st["replicas"]):
            return f"{name} has {st.get('inSync')} of {st['replicas']} in sync"
        if st.get("reportedEpoch") != st.get("epoch"):
            return f"{name}: epoch {st.get('epoch')}, reported {st.get('reportedEpoch')}"
    led = Counter(str((p.get("status") or {}).get("primary")) for p in fixed)
    counts = [led.get(m, 0) for m in ready]
    if max(counts) - min(counts) > 1:
        return f"fixed primaries not balanced yet: {dict(zip(ready, counts, strict=True))}"
    return ""


def leading_operator(peering: Mapping[str, Any] | None, now: datetime) -> str | None:
    """The identity (pod name) of the live peering record with the highest priority."""
    live = {}
    for identity, record in ((peering or {}).get("status") or {}).items():
        if not isinstance(record, dict) or "priority" not in record:
            continue
        seen = datetime.fromisoformat(str(record.get("lastseen")))
        if seen.tzinfo is None:
            seen = seen.replace(tzinfo=UTC)
        if (now - seen).total_seconds() < float(record.get("lifetime") or 60):
            live[identity] = int(record["priority"])
    return max(live, key=live.__getitem__) if live else None


def primaries_by_node(
    parts: Sequence[Mapping[str, Any]], node_of: Mapping[str, str]
) -> dict[str, tuple[int, int]]:
    """Per node: (fixed primaries, all primaries) of the MMs running there."""
    counts: dict[str, tuple[int, int]] = {node: (0, 0) for node in node_of.values()}
    for p in parts:
        node = node_of.get(str((p.get("status") or {}).get("primary")))
        if node is not None:
            fixed, total = counts[node]
            counts[node] = (fixed + (p["spec"]["type"] == "fixed"), total + 1)
    return counts


def choose_node(counts: Mapping[str, tuple[int, int]], operator_node: str | None) -> str:
    """The node holding the most fixed primaries; ties: the leading operator's, then most primaries."""
    return max(sorted(counts), key=lambda n: (counts[n][0], n == operator_node, counts[n][1]))


def _pods(kube: Kubectl, namespace: str, selector: str) -> list[dict[str, Any]]:
    return list(kube.json("-n", namespace, "get", "pods", "-l", selector)["items"])


def _operator(kube: Kubectl, args: argparse.Namespace) -> tuple[str | None, dict[str, str]]:
    """The leading operator's pod and the node of every operator pod."""
    selector = f"app.kubernetes.io/instance={args.release},app.kubernetes.io/component=operator"
    pods = {
        p["metadata"]["name"]: p["spec"].get("nodeName", "")
        for p in _pods(kube, args.operator_namespace, selector)
    }
    peerings = kube.json(
        "get", "clusterkopfpeerings.kopf.dev", "-l", f"app.kubernetes.io/instance={args.release}"
    )
    leader = None
    for peering in peerings["items"]:
        leader = leader or leading_operator(peering, datetime.now(UTC))
    return leader, pods


def wait_settled(
    kube: Kubectl, args: argparse.Namespace
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
    """The Partitions and MM pods once the cluster is settled (None after the settle timeout)."""
    mm_selector = f"app.kubernetes.io/component=mm,app.kubernetes.io/instance={args.cluster}"
    waited = time.monotonic()
    while True:
        cluster = kube.json("-n", args.namespace, "get", "brokercluster", args.cluster)
        parts = _partitions(kube, args)
        mms = _pods(kube, args.namespace, mm_selector)
        why = unsettled(cluster, parts, mms)
        if not why:
            print(f"settled_after_s={time.monotonic() - waited:.1f}", flush=True)
            return parts, mms
        if time.monotonic() - waited > args.settle_timeout:
            print(
                f"node-loss: the cluster did not settle in {args.settle_timeout:.0f} s: {why}",
                file=sys.stderr,
            )
            return None
        time.sleep(1)


def _partitions(kube: Kubectl, args: argparse.Namespace) -> list[dict[str, Any]]:
    items = kube.json("-n", args.namespace, "get", "partitions.hybridmq.io")["items"]
    return [p for p in items if p["spec"]["cluster"] == args.cluster]


def settle(args: argparse.Namespace) -> int:
    return 0 if wait_settled(Kubectl(args.context), args) is not None else 1


def stop(args: argparse.Namespace) -> int:
    kube = Kubectl(args.context)
    found = wait_settled(kube, args)
    if found is None:
        return 1
    parts, mms = found
    job = kube.json("-n", args.namespace, "get", "job", args.load_job)
    if (job.get("status") or {}).get("completionTime"):
        print(
            "node-loss: the producers finished before the cluster settled (raise MESSAGES)", file=sys.stderr
        )
        return 1
    leader, operator_nodes = _operator(kube, args)
    node_of = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in mms}
    counts = primaries_by_node(parts, node_of)
    node = choose_node(counts, operator_nodes.get(leader or ""))
    lost = {
        p["metadata"]["name"]: (p["status"]["primary"], int(p["status"].get("epoch") or 0))
        for p in parts
        if node_of.get((p.get("status") or {}).get("primary") or "") == node
    }
    print(f"primaries_by_node={json.dumps(counts, sort_keys=True, separators=(',', ':'))}")
    placed = ",".join(f"{pod}@{at}" for pod, at in sorted(operator_nodes.items()))
    leader_stopped = "yes" if operator_nodes.get(leader or "") == node else "no"
    print(f"operator_leader={leader} operator_nodes={placed}")
    print(f"stopped_node={node} operator_leader_stopped={leader_stopped}")
    print(f"partitions_lost={','.join(f'{n}@{p}:{e}' for n, (p, e) in sorted(lost.items()))}")
    sys.stdout.flush()
    Path(args.stopped_file).write_text(node + "\n")
    started = time.time()
    subprocess.run(["docker", "stop", "--time", "0", node], check=True, capture_output=True, timeout=120)
    print(f"stop_ms={int(started * 1000)}")
    pending = dict(lost)
    taken: dict[str, float] = {}
    for name, primary, epoch in kube.watch_partitions(args.namespace, started + args.failover_timeout):
        if name not in pending:
            continue
        old_primary, old_epoch = pending[name]
        if primary not in ("", old_primary) and epoch > old_epoch:
            taken[name] = time.time() - started
            print(
                f"failed_over {name} {old_primary}:{old_epoch} -> {primary}:{epoch} after {taken[name]:.3f} s"
            )
            sys.stdout.flush()
            del pending[name]
            if not pending:
                break
    if pending:
        print(
            f"node-loss: no new primary after {args.failover_timeout:.0f} s for {sorted(pending)}",
            file=sys.stderr,
        )
        return 1
    print(f"failed_over_partitions={','.join(sorted(taken))}")
    print(f"partitions_failed_over_s={max(taken.values()):.3f}")
    return 0


def first_acks(lines: Sequence[str], since_ms: int) -> int | None:
    """The time of the first acknowledgement at or after ``since_ms`` (None when there is none)."""
    for line in lines:
        words = line.split()
        if len(words) >= 3 and words[0] == "acked" and int(words[2]) >= since_ms:
            return int(words[2])
    return None


def longest_stall(lines: Sequence[str], since_ms: int, sent_within_ms: int) -> tuple[int, float] | None:
    """(when it was acknowledged, how long it waited in ms) of the send that waited longest among
    those acknowledged at or after ``since_ms`` and begun by ``since_ms + sent_within_ms``; None when
    there is none."""
    longest: tuple[int, float] | None = None
    for line in lines:
        words = line.split()
        if len(words) < 4 or words[0] != "acked":
            continue
        acked_ms, waited_ms = int(words[2]), float(words[3])
        began_ms = acked_ms - waited_ms
        if (
            acked_ms >= since_ms
            and began_ms <= since_ms + sent_within_ms
            and (longest is None or waited_ms > longest[1])
        ):
            longest = (acked_ms, waited_ms)
    return longest


def stall(args: argparse.Namespace) -> int:
    lines = Path(args.log).read_text().splitlines()
    longest = longest_stall(lines, args.since_ms, int(args.sent_within_s * 1000))
    if longest is None:
        print("producers_resumed_s=none")
        return 1
    acked_ms, waited_ms = longest
    print(f"producer_longest_wait_ms={waited_ms:.1f}")
    print(f"producers_resumed_s={(acked_ms - args.since_ms) / 1000:.3f}")
    return 0


def acks(args: argparse.Namespace) -> int:
    worst = 0.0
    for path in args.logs:
        first = first_acks(Path(path).read_text().splitlines(), args.since_ms)
        if first is None:
            print(f"producer_acked_again {Path(path).name} none")
            print("producers_acked_s=none")
            return 1
        took = (first - args.since_ms) / 1000
        worst = max(worst, took)
        print(f"producer_acked_again {Path(path).name} {took:.3f}")
    print(f"producers_acked_s={worst:.3f}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser("node_loss.py")
    sub = parser.add_subparsers(dest="command", required=True)
    st = sub.add_parser("stop")
    se = sub.add_parser("settle")
    for cmd in (st, se):
        for flag in ("--context", "--namespace", "--cluster"):
            cmd.add_argument(flag, required=True)
        cmd.add_argument("--settle-timeout", type=float, default=SETTLE_TIMEOUT_S)
    for flag in ("--operator-namespace", "--release", "--load-job", "--stopped-file"):
        st.add_argument(flag, required=True)
    st.add_argument("--failover-timeout", type=float, default=FAILOVER_TIMEOUT_S)
    ak = sub.add_parser("acks")
    ak.add_argument("--since-ms", type=int, required=True)
    ak.add_argument("logs", nargs="+")
    sl = sub.add_parser("stall")
    sl.add_argument("--since-ms", type=int, required=True)
    sl.add_argument("--sent-within-s", type=float, required=True)
    sl.add_argument("log")
    args = parser.parse_args(argv)
    return {"stop": stop, "settle": settle, "acks": acks, "stall": stall}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
