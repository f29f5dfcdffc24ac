"""The chart's NOTES, followed word for word on the local cluster, end with a passing `helm test`.

`helm install` with the default values (the operator runs as the chart's Deployment, its brokers are
the real `hybridmq cm|mm` of the chart's broker image); then the commands NOTES prints, taken out of
its text: the BrokerCluster to apply (TLS on, the CRD's default), `kubectl wait` for it to be Ready,
and `helm test ... --logs`, whose pod produces and consumes one message through the CMs' Service.

One deviation from a user's install: the operator watches only this test's namespace (the session's
cluster is shared with other tests and their own operators).
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "k8s"))

from operator_harness import Kube, teardown

from localcluster import LocalCluster

pytestmark = pytest.mark.cluster

CHART = Path(__file__).resolve().parents[2] / "helm" / "hybridmq"
HEREDOC = "cat <<YAML | kubectl apply -f -"


def run(local_cluster: LocalCluster, argv: list[str], timeout: float, stdin: str | None = None) -> str:
    """Run ``argv`` (kubectl or helm of the local cluster) as a user would; its output, checked."""
    proc = subprocess.run(
        argv, input=stdin, env=local_cluster.env(), capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, (
        f"{shlex.join(argv)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    )
    return proc.stdout


def notes_of(install_output: str) -> list[str]:
    """The NOTES lines of ``helm install``'s output."""
    lines = install_output.splitlines()
    assert "NOTES:" in lines, install_output
    return lines[lines.index("NOTES:") + 1 :]


def manifest_to_apply(notes: list[str]) -> str:
    """The YAML of NOTES' ``cat <<YAML | kubectl apply -f -`` (up to its closing ``YAML``)."""
    starts = [i for i, line in enumerate(notes) if line.strip() == HEREDOC]
    assert len(starts) == 1, "NOTES show no BrokerCluster to apply:\n" + "\n".join(notes)
    body = notes[starts[0] + 1 :]
    end = next(i for i, line in enumerate(body) if line.strip() == "YAML")
    return textwrap.dedent("\n".join(body[:end])) + "\n"


def command_of(notes: list[str], *words: str) -> list[str]:
    """The one NOTES command line whose first word is ``words[0]`` and that has the other words."""
    found = [
        argv
        for argv in (shlex.split(line) for line in notes if line.startswith("  ") and line.strip())
        if argv[0] == words[0] and all(w in argv for w in words[1:])
    ]
    assert len(found) == 1, f"NOTES show {len(found)} {' '.join(words)} commands:\n" + "\n".join(notes)
    return found[0]


@pytest.fixture
def installed(local_cluster: LocalCluster, cluster_namespace: str) -> Iterator[tuple[str, list[str]]]:
    """``helm install`` of the chart, default values, into the test's namespace: (release, NOTES)."""
    release = f"hmq-{uuid.uuid4().hex[:5]}"
    out = run(
        local_cluster,
        [
            "helm",
            "install",
            release,
            str(CHART),
            "--namespace",
            cluster_namespace,
            "--set",
            f"operator.watchNamespaces={{{cluster_namespace}}}",
        ],
        timeout=120,
    )
    kube = Kube(local_cluster, cluster_namespace)
    try:
        yield release, notes_of(out)
    finally:
        teardown(kube, None)
        subprocess.run(
            ["helm", "uninstall", release, "--namespace", cluster_namespace, "--wait=false"],
            env=local_cluster.env(),
            check=False,
            capture_output=True,
            timeout=60,
        )


def test_following_the_notes_the_helm_test_passes(
    local_cluster: LocalCluster, cluster_namespace: str, installed: tuple[str, list[str]]
) -> None:
    release, notes = installed
    started = time.monotonic()
    manifest = manifest_to_apply(notes)
    cluster = yaml.safe_load(manifest)
    assert cluster["kind"] == "BrokerCluster", manifest
    assert (cluster["spec"].get("tls") or {}).get("enabled", True), (
        "NOTES' cluster should have TLS on (default)"
    )
    run(local_cluster, ["kubectl", "apply", "-f", "-"], timeout=60, stdin=manifest)

    wait = command_of(notes, "kubectl", "wait")
    assert f"hbc/{cluster['metadata']['name']}" in wait, wait
    run(local_cluster, wait, timeout=330)
    ready_s = time.monotonic() - started

    helm_test = command_of(notes, "helm", "test")
    assert helm_test[:3] == ["helm", "test", release] and "--logs" in helm_test, helm_test
    proc = subprocess.run(helm_test, env=local_cluster.env(), capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{shlex.join(helm_test)} failed:\n{out}"
    assert "Phase:          Succeeded" in out or "Phase: Succeeded" in out, out
    assert "produced and consumed one message" in out and "(TLS)" in out, out
    took = time.monotonic() - started - ready_s
    print(f"\nNOTES' cluster Ready after {ready_s:.1f} s; helm test took {took:.1f} s")
