"""The local cluster against a real control plane: what a user of a Kubernetes cluster would check.

Every workload here runs real processes through the node agent (image `ghcr.io/hybridmq/broker:dev`
maps to the project's virtualenv), and every kubectl step uses the kubectl built from source.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from localcluster import LocalCluster
from localcluster.testing import wait_for

pytestmark = pytest.mark.cluster

IMAGE = "ghcr.io/hybridmq/broker:dev"
REPO_ROOT = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------------------------------ helpers
def apply(cluster: LocalCluster, namespace: str, *manifests: dict[str, Any]) -> None:
    docs = yaml.safe_dump_all(list(manifests))
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=docs)


def get(cluster: LocalCluster, namespace: str, kind: str, name: str = "", **selector: str) -> Any:
    args = ["get", kind, "-n", namespace, "-o", "json"]
    if name:
        args.insert(2, name)
    if selector:
        args += ["-l", ",".join(f"{k}={v}" for k, v in selector.items())]
    result = cluster.kubectl(*args, check=False)
    return json.loads(result.stdout) if result.returncode == 0 else None


def condition(obj: dict[str, Any], kind: str) -> str | None:
    for cond in obj.get("status", {}).get("conditions", []):
        if cond["type"] == kind:
            return str(cond["status"])
    return None


def ready_pods(cluster: LocalCluster, namespace: str, **selector: str) -> list[dict[str, Any]]:
    pods = get(cluster, namespace, "pods", **selector)["items"]
    return [p for p in pods if condition(p, "Ready") == "True" and not p["metadata"].get("deletionTimestamp")]


def container_status(pod: dict[str, Any], index: int = 0) -> dict[str, Any]:
    statuses = pod.get("status", {}).get("containerStatuses") or [{}]
    return dict(statuses[index])


def python_container(name: str, script: str, **extra: Any) -> dict[str, Any]:
    container = {"name": name, "image": IMAGE, "command": ["python", "-u", "-c", textwrap.dedent(script)]}
    container.update(extra)
    return container


def pod_manifest(name: str, *containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"test": name}},
        "spec": {"containers": list(containers), "terminationGracePeriodSeconds": 3, **spec},
    }


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


WEB = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "web"},
    "spec": {
        "replicas": 1,
        "selector": {"matchLabels": {"app": "web"}},
        "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {
                "terminationGracePeriodSeconds": 5,
                "containers": [
                    {
                        "name": "web",
                        "image": IMAGE,
                        "command": ["python", "-m", "http.server", "--bind", "$(POD_IP)", "8080"],
                        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                        "ports": [{"name": "http", "containerPort": 8080}],
                        "readinessProbe": {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 1},
                    }
                ],
            },
        },
    },
}


# --------------------------------------------------------------------------------------------- tests
def test_deployment_becomes_ready_and_deleted_pod_is_replaced(
    local_cluster: LocalCluster, cluster_namespace: str
) -> None:
    ns = cluster_namespace
    apply(local_cluster, ns, WEB)
    local_cluster.kubectl("rollout", "status", "deployment/web", "-n", ns, "--timeout=60s", timeout=70)
    [pod] = wait_for(lambda: ready_pods(local_cluster, ns, app="web"), 30, "a ready web pod")
    name, ip = pod["metadata"]["name"], pod["status"]["podIP"]
    assert ip.startswith("127.") and ip != "127.0.0.1", ip
    assert pod["status"]["phase"] == "Running"
    status = container_status(pod)
    assert status["ready"] and status["started"] and "running" in status["state"]
    assert status["image"] == IMAGE and status["imageID"]
    assert {c["type"] for c in pod["status"]["conditions"]} >= {
        "PodScheduled",
        "Initialized",
        "ContainersReady",
        "Ready",
    }
    # the real process serves on its own pod IP
    with urllib.request.urlopen(f"http://{ip}:8080/", timeout=5) as resp:
        assert resp.status == 200
    pid = local_cluster.container_pid(ns, name, "web")
    assert pid is not None and not gone(pid)

    started = time.monotonic()
    local_cluster.kubectl("delete", "pod", name, "-n", ns, timeout=30)
    took = time.monotonic() - started
    assert took < 5 + 5, f"deletion took {took:.1f}s with a 5s grace period"
    assert gone(pid), "the container process survived its pod"

    def replaced() -> list[dict[str, Any]]:
        return [p for p in ready_pods(local_cluster, ns, app="web") if p["metadata"]["name"] != name]

    [new] = wait_for(replaced, 30, "the ReplicaSet's replacement pod to be Ready")
    new_ip = new["status"]["podIP"]
    with urllib.request.urlopen(f"http://{new_ip}:8080/", timeout=5) as resp:
        assert resp.status == 200
    logs = local_cluster.kubectl("logs", new["metadata"]["name"], "-n", ns, "--tail=1").stdout
    assert '"GET / HTTP/1.1" 200' in logs


def test_sigterm_is_followed_by_sigkill_after_the_grace_period(
    local_cluster: LocalCluster, cluster_namespace: str, tmp_path: Path
) -> None:
    ns = cluster_namespace
    stubborn = python_container(
        "stubborn",
        """
        import signal, time
        signal.signal(signal.SIGTERM, lambda *a: print("got SIGTERM, ignoring it"))
        open("/hook/ready", "w").close()
        print("started")
        while True:
            time.sleep(0.1)
        """,
    )
    stubborn["lifecycle"] = {"preStop": {"exec": {"command": ["touch", "/hook/pre-stop-ran"]}}}
    stubborn["volumeMounts"] = [{"name": "hook", "mountPath": "/hook"}]
    # Ready only once the SIGTERM handler is installed
    stubborn["readinessProbe"] = {"exec": {"command": ["test", "-f", "/hook/ready"]}, "periodSeconds": 1}
    hook = {"name": "hook", "hostPath": {"path": str(tmp_path), "type": "Directory"}}
    apply(
        local_cluster, ns, pod_manifest("stubborn", stubborn, terminationGracePeriodSeconds=2, volumes=[hook])
    )
    wait_for(lambda: ready_pods(local_cluster, ns, test="stubborn"), 30, "stubborn pod Ready")
    pid = local_cluster.container_pid(ns, "stubborn")
    assert pid is not None
    started = time.monotonic()
    local_cluster.kubectl("delete", "pod", "stubborn", "-n", ns, timeout=30)
    took = time.monotonic() - started
    assert 1.5 <= took < 2 + 6, f"deletion took {took:.1f}s with a 2s grace period"
    assert gone(pid)
    log = local_cluster.container_log(ns, "stubborn", "stubborn")
    assert log is not None and "got SIGTERM" in log.read_text()
    assert (tmp_path / "pre-stop-ran").exists(), "the preStop hook did not run"


def test_statefulset_gets_bound_pvc_and_data_survives_restarts(
    local_cluster: LocalCluster, cluster_namespace: str
) -> None:
    ns = cluster_namespace
    counter = python_container(
        "counter",
        """
        import os, signal, sys, time
        signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
        path = "/var/lib/store/count"
        n = int(open(path).read()) + 1 if os.path.exists(path) else 1
        with open(path, "w") as f:
            f.write(str(n))
        print("count", n, flush=True)
        time.sleep(3600)
        """,
        volumeMounts=[{"name": "data", "mountPath": "/var/lib/store"}],
    )
    sts = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "store"},
        "spec": {
            "serviceName": "store",
            "replicas": 1,
            "selector": {"matchLabels": {"app": "store"}},
            "template": {
                "metadata": {"labels": {"app": "store"}},
                "spec": {"terminationGracePeriodSeconds": 3, "containers": [counter]},
            },
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": "data"},
                    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
                }
            ],
        },
    }
    apply(local_cluster, ns, sts)
    pvc = wait_for(
        lambda: (
            (p := get(local_cluster, ns, "pvc", "data-store-0")) and p["status"].get("phase") == "Bound" and p
        ),
        60,
        "PVC data-store-0 to be Bound",
    )
    assert pvc["spec"]["storageClassName"] == "standard"
    pv = get(local_cluster, ns, "pv", pvc["spec"]["volumeName"])
    host_file = Path(pv["spec"]["hostPath"]["path"]) / "count"
    wait_for(lambda: ready_pods(local_cluster, ns, app="store"), 60, "store-0 Ready")
    wait_for(lambda: host_file.exists() and host_file.read_text() == "1", 10, "count 1 on the volume")

    # a crash: the container restarts in the same pod and sees its data
    local_cluster.kill_container(ns, "store-0", "counter")
    wait_for(lambda: host_file.read_text() == "2", 30, "count 2 after the container restarted")
    pod = get(local_cluster, ns, "pod", "store-0")
    assert container_status(pod)["restartCount"] == 1

    # a new pod (deleted, recreated by the StatefulSet) mounts the same claim
    old_uid = pod["metadata"]["uid"]
    # Not waiting inside kubectl (30 s) for the old pod to go: the new pod Ready is the event
    # that counts, and its wait includes the old one's graceful stop on a loaded machine.
    local_cluster.kubectl("delete", "pod", "store-0", "-n", ns, "--wait=false", timeout=30)
    wait_for(
        lambda: [p for p in ready_pods(local_cluster, ns, app="store") if p["metadata"]["uid"] != old_uid],
        90,
        "a new store-0 to be Ready",
    )
    wait_for(lambda: host_file.read_text() == "3", 10, "count 3 in the new pod")


def test_non_zero_exit_is_restarted_with_backoff(local_cluster: LocalCluster, cluster_namespace: str) -> None:
    ns = cluster_namespace
    crasher = python_container("crasher", "import sys; print('exiting with 3'); sys.exit(3)")
    apply(local_cluster, ns, pod_manifest("crasher", crasher))
    seen_backoff: list[str] = []

    def restarted_twice() -> dict[str, Any] | None:
        pod = get(local_cluster, ns, "pod", "crasher")
        status = container_status(pod)
        waiting = status.get("state", {}).get("waiting", {})
        if waiting.get("reason") == "CrashLoopBackOff":
            seen_backoff.append(waiting.get("message", ""))
        delays = {m.split()[1] for m in seen_backoff}  # "back-off 4s restarting failed container=..."
        return pod if status.get("restartCount", 0) >= 2 and len(delays) >= 2 else None

    pod = wait_for(restarted_twice, 60, "restartCount >= 2")
    status = container_status(pod)
    assert status["lastState"]["terminated"]["exitCode"] == 3
    assert status["lastState"]["terminated"]["reason"] == "Error"
    assert pod["status"]["phase"] == "Running"  # restartPolicy Always
    assert seen_backoff and "back-off" in seen_backoff[0]
    # the back-off grows: the second delay is longer than the first
    delays = {m.split()[1] for m in seen_backoff}
    assert len(delays) >= 2, delays
    get_out = local_cluster.kubectl("get", "pod", "crasher", "-n", ns).stdout
    assert "CrashLoopBackOff" in get_out or "Error" in get_out or "Running" in get_out


def test_volume_over_the_cluster_directory_keeps_the_default_working_directory(
    local_cluster: LocalCluster, cluster_namespace: str
) -> None:
    """A volume mounted over the directory holding the cluster directory (the chart's operator
    mounts an emptyDir at /tmp, and test clusters live under /tmp) hides the pod's default
    working directory on the host; the container must still start in it."""
    ns = cluster_namespace
    hidden = str(local_cluster.directory.resolve().parent)
    script = "import os; print('cwd', os.getcwd(), 'entries', sorted(os.listdir(os.environ['SCRATCH'])))"
    worker = python_container(
        "worker",
        script,
        env=[{"name": "SCRATCH", "value": hidden}],
        volumeMounts=[{"name": "scratch", "mountPath": hidden}],
    )
    apply(
        local_cluster,
        ns,
        pod_manifest("scratch", worker, restartPolicy="Never", volumes=[{"name": "scratch", "emptyDir": {}}]),
    )

    def finished() -> dict[str, Any] | None:
        pod = get(local_cluster, ns, "pod", "scratch")
        return pod if pod and pod["status"].get("phase") in ("Succeeded", "Failed") else None

    pod = wait_for(finished, 60, "the pod to finish")
    log = local_cluster.kubectl("logs", "scratch", "-n", ns).stdout
    assert pod["status"]["phase"] == "Succeeded", log
    # It ran in its own directory and saw the (empty) volume, not the host's directory. The one
    # exception: the agent mounts the project back into a volume that would hide it (a clone under
    # /tmp), so its top directory below the volume may show.
    project = Path(__file__).resolve().parents[2]
    reexposed = [project.relative_to(hidden).parts[0]] if project.is_relative_to(hidden) else []
    assert f"cwd {local_cluster.directory.resolve()}/pods/" in log, log
    assert f"entries {reexposed!r}" in log, log


def test_frozen_node_runs_no_pod_changes_until_thawed(
    local_cluster: LocalCluster, cluster_namespace: str
) -> None:
    """freeze_node(): the agent stops dead (a node that stopped answering); its containers run on."""
    ns = cluster_namespace
    apply(
        local_cluster,
        ns,
        pod_manifest("sleeper", python_container("sleeper", "import time; time.sleep(600)")),
    )
    wait_for(lambda: ready_pods(local_cluster, ns, test="sleeper"), 60, "sleeper Ready")
    pid = local_cluster.container_pid(ns, "sleeper", "sleeper")
    assert pid is not None
    local_cluster.freeze_node()
    try:
        apply(
            local_cluster, ns, pod_manifest("late", python_container("late", "import time; time.sleep(600)"))
        )
        local_cluster.kubectl("delete", "pod", "sleeper", "-n", ns, "--grace-period=0", "--force")
        time.sleep(3)
        # Nobody killed the deleted pod's process, nobody started the new pod.
        assert psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        late = get(local_cluster, ns, "pod", "late")
        assert not (late["status"].get("containerStatuses") or []), late["status"]
    finally:
        local_cluster.thaw_node()
    wait_for(lambda: ready_pods(local_cluster, ns, test="late"), 60, "the new pod started after the thaw")
    wait_for(lambda: gone(pid), 60, "the deleted pod's process stopped after the thaw")


def test_unknown_image_and_failing_command_get_clear_status_while_others_run(
    local_cluster: LocalCluster, cluster_namespace: str
) -> None:
    ns = cluster_namespace
    healthy = python_container("main", "import time; print('up'); time.sleep(3600)")
    apply(
        local_cluster,
        ns,
        pod_manifest("unknown-image", {"name": "nginx", "image": "docker.io/library/nginx:1.27"}),
        pod_manifest("no-such-command", {"name": "main", "image": IMAGE, "command": ["no-such-command"]}),
        pod_manifest("healthy", healthy),
    )

    def waiting(pod_name: str, reason: str) -> dict[str, Any] | None:
        pod = get(local_cluster, ns, "pod", pod_name)
        state = container_status(pod).get("state", {}).get("waiting", {})
        return state if state.get("reason") == reason else None

    pulled = wait_for(lambda: waiting("unknown-image", "ErrImagePull"), 30, "ErrImagePull")
    assert "nginx:1.27" in pulled["message"] and "no local mapping" in pulled["message"]
    assert get(local_cluster, ns, "pod", "unknown-image")["status"]["phase"] == "Pending"

    wait_for(lambda: waiting("no-such-command", "CrashLoopBackOff"), 30, "CrashLoopBackOff")
    failed = container_status(get(local_cluster, ns, "pod", "no-such-command"))
    assert failed["lastState"]["terminated"]["reason"] == "StartError"
    assert "no-such-command" in failed["lastState"]["terminated"]["message"]

    wait_for(lambda: ready_pods(local_cluster, ns, test="healthy"), 30, "the healthy pod Ready")
    table = local_cluster.kubectl("get", "pods", "-n", ns).stdout
    assert "ErrImagePull" in table and "Running" in table


def test_pod_environment_volumes_and_in_cluster_config(
    local_cluster: LocalCluster, cluster_namespace: str
) -> None:
    ns = cluster_namespace
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "settings"},
        "data": {"mode": "fast", "app.conf": "level=3\n"},
    }
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "creds"},
        "stringData": {"password": "s3cret"},
    }
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "default-view"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": ns}],
    }
    probe = python_container(
        "probe",
        """
        with open("/scratch/marker", "w") as f:  # first: the liveness probe checks it
            f.write("emptydir")
        import json, os, time
        from kubernetes import client, config
        config.load_incluster_config()
        pods = client.CoreV1Api().list_namespaced_pod(os.environ["MY_NS"]).items
        report = {
            "env": {k: v for k, v in os.environ.items()},
            "cwd": os.getcwd(),
            "pods": [p.metadata.name for p in pods],
            "conf": open("/etc/app/app.conf").read(),
            "password": open("/etc/creds/password").read(),
            "scratch": open("/scratch/marker").read(),
        }
        print("REPORT " + json.dumps(report), flush=True)
        time.sleep(3600)
        """,
        workingDir="/scratch",
        env=[
            {"name": "MY_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "MY_NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "MY_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "MY_NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}},
            {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "mode"}}},
            {
                "name": "MEM_LIMIT_MI",
                "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}},
            },
            {"name": "GREETING", "value": "hello $(MY_NAME)"},
        ],
        envFrom=[{"configMapRef": {"name": "settings"}, "prefix": "CFG_"}],
        resources={"limits": {"memory": "256Mi", "cpu": "500m"}},
        volumeMounts=[
            {"name": "conf", "mountPath": "/etc/app"},
            {"name": "creds", "mountPath": "/etc/creds"},
            {"name": "scratch", "mountPath": "/scratch"},
        ],
        livenessProbe={
            "exec": {"command": ["cat", "/scratch/marker"]},
            "periodSeconds": 1,
            "initialDelaySeconds": 5,
        },
    )
    pod = pod_manifest(
        "probe",
        probe,
        volumes=[
            {"name": "conf", "configMap": {"name": "settings"}},
            {"name": "creds", "secret": {"secretName": "creds"}},
            {"name": "scratch", "emptyDir": {}},
        ],
    )
    apply(local_cluster, ns, config_map, secret, role, pod)

    def report() -> dict[str, Any] | None:
        log = local_cluster.container_log(ns, "probe", "probe")
        if log is None:
            return None
        for line in log.read_text().splitlines():
            if line.startswith("REPORT "):
                return dict(json.loads(line[len("REPORT ") :]))
        return None

    seen = wait_for(report, 60, "the pod's report")
    env = seen["env"]
    running = get(local_cluster, ns, "pod", "probe")
    assert env["MY_NAME"] == "probe" and env["MY_NS"] == ns
    assert env["MY_IP"] == running["status"]["podIP"]
    assert env["MY_NODE"] == local_cluster.node_name
    assert env["PASSWORD"] == "s3cret" and env["MODE"] == "fast" and env["CFG_mode"] == "fast"
    assert env["MEM_LIMIT_MI"] == "256"
    assert env["GREETING"] == "hello probe"
    assert env["KUBERNETES_SERVICE_HOST"] == "127.0.0.1"
    assert env["KUBERNETES_SERVICE_PORT"] == str(local_cluster.api_port)
    assert seen["cwd"] == "/scratch"
    assert "probe" in seen["pods"]  # in-cluster config with the projected token works
    assert seen["conf"] == "level=3\n" and seen["password"] == "s3cret" and seen["scratch"] == "emptydir"
    # the mounts are private to the container: nothing leaked onto the host
    assert not Path("/etc/creds/password").exists()
    time.sleep(4)  # the exec liveness probe (inside the container's mount namespace) keeps passing
    assert container_status(get(local_cluster, ns, "pod", "probe"))["restartCount"] == 0


def test_failing_liveness_probe_restarts_the_container(
    local_cluster: LocalCluster, cluster_namespace: str
) -> None:
    ns = cluster_namespace
    server = python_container(
        "server",
        "import time; time.sleep(3600)",
        livenessProbe={"tcpSocket": {"port": 9999}, "periodSeconds": 1, "failureThreshold": 2},
    )
    apply(local_cluster, ns, pod_manifest("unhealthy", server, terminationGracePeriodSeconds=1))
    pod = wait_for(
        lambda: (
            (p := get(local_cluster, ns, "pod", "unhealthy"))
            and container_status(p).get("restartCount", 0) >= 1
            and p
        ),
        40,
        "a liveness restart",
    )
    message = container_status(pod)["lastState"]["terminated"].get("message", "")
    assert "liveness" in message


def test_job_with_init_container_completes_and_cluster_names_resolve(
    local_cluster: LocalCluster, cluster_namespace: str
) -> None:
    ns = cluster_namespace
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 8080, "targetPort": 8080}]},
    }
    apply(local_cluster, ns, WEB, service)
    wait_for(lambda: ready_pods(local_cluster, ns, app="web"), 60, "web Ready")
    init = python_container("init", "open('/shared/greeting', 'w').write('hello from init')")
    init["volumeMounts"] = [{"name": "work", "mountPath": "/shared"}]
    main = python_container(
        "main",
        f"""
        import socket, urllib.request
        print(open('/shared/greeting').read())
        print("web ->", socket.gethostbyname("web"))
        with urllib.request.urlopen("http://web.{ns}.svc.cluster.local:8080/", timeout=5) as r:
            print("status", r.status)
        """,
        volumeMounts=[{"name": "work", "mountPath": "/shared"}],
    )
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "check"},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "initContainers": [init],
                    "containers": [main],
                    "volumes": [{"name": "work", "emptyDir": {}}],
                }
            },
        },
    }
    apply(local_cluster, ns, job)
    local_cluster.kubectl(
        "wait", "--for=condition=complete", "job/check", "-n", ns, "--timeout=60s", timeout=70
    )
    [pod] = get(local_cluster, ns, "pods", **{"job-name": "check"})["items"]
    assert pod["status"]["phase"] == "Succeeded"
    init_state = pod["status"]["initContainerStatuses"][0]["state"]["terminated"]
    assert init_state["exitCode"] == 0 and init_state["reason"] == "Completed"
    # kubectl logs goes through the API server to the agent's kubelet endpoint
    logs = local_cluster.kubectl("logs", "job/check", "-n", ns).stdout
    [web] = ready_pods(local_cluster, ns, app="web")
    assert "hello from init" in logs
    assert f"web -> {web['status']['podIP']}" in logs
    assert "status 200" in logs


def test_host_network_pod_and_startup_probe(local_cluster: LocalCluster, cluster_namespace: str) -> None:
    ns = cluster_namespace
    slow = python_container(
        "slow",
        """
        import socket, time
        time.sleep(3)
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen()
        open("/state/port", "w").write(str(s.getsockname()[1]))
        print("listening", flush=True)
        time.sleep(3600)
        """,
        # the exec probe runs inside the container's mount namespace, where /state is an emptyDir
        startupProbe={
            "exec": {"command": ["test", "-f", "/state/port"]},
            "periodSeconds": 1,
            "failureThreshold": 30,
        },
        volumeMounts=[{"name": "state", "mountPath": "/state"}],
    )
    manifest = pod_manifest("hostnet", slow, hostNetwork=True, volumes=[{"name": "state", "emptyDir": {}}])
    apply(local_cluster, ns, manifest)

    def not_started() -> dict[str, Any] | None:
        pod = get(local_cluster, ns, "pod", "hostnet")
        status = container_status(pod)
        return pod if "running" in status.get("state", {}) and status.get("started") is False else None

    pod = wait_for(not_started, 30, "the container running but not yet started")
    assert condition(pod, "Ready") != "True"
    wait_for(
        lambda: ready_pods(local_cluster, ns, test="hostnet"), 40, "hostnet Ready after its startup probe"
    )
    pod = get(local_cluster, ns, "pod", "hostnet")
    assert pod["status"]["podIP"] == "127.0.0.1"
    status = container_status(pod)
    assert status["started"] and status["restartCount"] == 0


def test_deleting_a_namespace_removes_everything_in_it(local_cluster: LocalCluster) -> None:
    ns = "doomed"
    local_cluster.create_namespace(ns)
    web = json.loads(json.dumps(WEB))
    web["spec"]["replicas"] = 2
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]},
    }
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": {"a": "b"}}
    pvc = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "claim"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Mi"}}},
    }
    apply(local_cluster, ns, web, service, cm, pvc)
    bound = wait_for(
        lambda: (c := get(local_cluster, ns, "pvc", "claim")) and c["spec"].get("volumeName"),
        60,
        "claim bound",
    )

    def two_ready() -> list[dict[str, Any]] | None:
        pods = ready_pods(local_cluster, ns, app="web")
        return pods if len(pods) == 2 else None

    pods = wait_for(two_ready, 60, "2 ready pods")
    pids = [local_cluster.container_pid(ns, p["metadata"]["name"]) for p in pods]
    assert all(pids)
    local_cluster.kubectl("delete", "namespace", ns, "--timeout=90s", timeout=100)
    result = local_cluster.kubectl("get", "namespace", ns, check=False)
    assert result.returncode != 0 and "NotFound" in result.stderr
    assert all(gone(pid) for pid in pids if pid)
    for kind in ("deployments", "replicasets", "pods", "services", "configmaps", "pvc"):
        listing = local_cluster.kubectl("get", kind, "-n", ns, "-o", "name").stdout
        assert listing.strip() == "", f"{kind} left in {ns}: {listing}"
    # the claim's volume is reclaimed (policy Delete) by the controller-manager
    wait_for(
        lambda: local_cluster.kubectl("get", "pv", str(bound), check=False).returncode != 0, 60, "PV deleted"
    )


def test_pausing_heartbeats_turns_the_node_not_ready(local_cluster: LocalCluster) -> None:
    node = local_cluster.node_name

    def ready() -> str | None:
        return condition(json.loads(local_cluster.kubectl("get", "node", node, "-o", "json").stdout), "Ready")

    assert ready() == "True"
    local_cluster.pause_heartbeats()
    try:
        started = time.monotonic()
        status = wait_for(lambda: (s := ready()) != "True" and s, 60, "the node to turn NotReady", interval=1)
        assert status == "Unknown"  # the node lifecycle controller: "Kubelet stopped posting node status"
        assert time.monotonic() - started < 45
        assert "NotReady" in local_cluster.kubectl("get", "node", node).stdout
    finally:
        local_cluster.resume_heartbeats()
    wait_for(lambda: ready() == "True", 60, "the node to be Ready again", interval=1)

    def untainted() -> bool:
        node_obj = json.loads(local_cluster.kubectl("get", "node", node, "-o", "json").stdout)
        return not [t for t in node_obj["spec"].get("taints", []) if "unreachable" in t["key"]]

    wait_for(untainted, 60, "the unreachable taint to be removed", interval=1)


def test_cli_up_and_down_leave_no_process_behind(tmp_path: Path) -> None:
    directory = tmp_path / "cluster"
    env_cmd = [sys.executable, "-m", "localcluster"]
    full_env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "hack")}
    up = subprocess.run(
        [*env_cmd, "up", "--dir", str(directory)], env=full_env, capture_output=True, text=True, timeout=180
    )
    assert up.returncode == 0, up.stderr
    assert Path(up.stdout.strip()) == directory.absolute() / "kubeconfig"
    cluster = LocalCluster.attach(directory)
    try:
        assert cluster.running()
        cluster.create_namespace("work")
        sleeper = python_container("main", "import time; time.sleep(3600)")
        apply(cluster, "work", pod_manifest("sleeper", sleeper, terminationGracePeriodSeconds=30))
        wait_for(lambda: ready_pods(cluster, "work", test="sleeper"), 60, "sleeper Ready")
        pod_pid = cluster.container_pid("work", "sleeper")
        assert pod_pid is not None
        members = {p.pid for p in cluster.processes()}
        names = {r.name for r in cluster.records}
        assert names == {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "node-agent"}
        assert {r.pid for r in cluster.records} | {pod_pid} <= members
    finally:
        down = subprocess.run(
            [*env_cmd, "down", "--dir", str(directory)],
            env=full_env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert down.returncode == 0, down.stderr
    leftovers = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            cmdline = " ".join(proc.info["cmdline"] or [])
            environ = proc.environ()
        except psutil.Error:
            continue
        if str(directory) in cmdline or environ.get("LOCALCLUSTER_MARKER") == cluster.marker:
            leftovers.append((proc.pid, cmdline))
    assert leftovers == []
    assert all(gone(r.pid) for r in cluster.records) and gone(pod_pid)
