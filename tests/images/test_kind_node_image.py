"""The kind node image made here by hack/kind/node-image.sh: what `kind create cluster` relies on."""

from __future__ import annotations

import re
import subprocess
import time

import pytest
from docker_harness import REPO, Docker

# Cold: Go builds of containerd, crictl, the CNI plugins, CoreDNS and more on 2 cores.
pytestmark = pytest.mark.timeout(2400)

K8S_VERSION = "v1.35.4"

# Inside a container of the node image (not booted): start its containerd, list what it holds.
LIST_PRELOADED = """
set -eu
containerd >/tmp/containerd.log 2>&1 &
for _ in $(seq 1 60); do ctr version >/dev/null 2>&1 && break; sleep 0.5; done
echo "== kubeadm"; kubeadm config images list --kubernetes-version "$(cat /kind/version)"
echo "== manifests"; sed -n 's/^ *image: *//p; s/^ *- *\\(docker.io\\/[^ ]*\\)$/\\1/p' /kind/manifests/*.yaml
echo "== sandbox"; sed -n 's/^ *sandbox_image *= *"\\(.*\\)"/\\1/p' /etc/containerd/config.toml
echo "== preloaded"; ctr --namespace=k8s.io images list -q
echo "== versions"; kubelet --version; containerd --version; runc --version | head -1
"""


def sections(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    current = ""
    for line in text.splitlines():
        if line.startswith("== "):
            current = line[3:]
            out[current] = []
        elif line.strip():
            out.setdefault(current, []).append(line.strip())
    return out


def build_node_image(docker: Docker, timeout: float) -> subprocess.CompletedProcess[str]:
    built = subprocess.run(
        [str(REPO / "hack" / "kind" / "node-image.sh")],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=docker.env,
    )
    assert built.returncode == 0, built.stderr[-4000:]
    return built


@pytest.fixture(scope="module")
def node_image(docker: Docker) -> str:
    return build_node_image(docker, 2300).stdout.strip().splitlines()[-1]


def test_node_image_preloads_every_image_kubeadm_and_kind_start(docker: Docker, node_image: str) -> None:
    ran = docker.container(
        "--rm", "--privileged", "--entrypoint", "bash", node_image, "-c", LIST_PRELOADED, timeout=300
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    found = sections(ran.stdout)
    needed = found["kubeadm"] + found["manifests"] + found["sandbox"]
    assert any("kube-apiserver" in image for image in needed), ran.stdout
    assert any("kindnetd" in image for image in needed), ran.stdout
    assert any("local-path-helper" in image for image in needed), ran.stdout
    preloaded = set(found["preloaded"])
    # containerd names Docker Hub images in full; kubeadm's registry.k8s.io names are already full.
    missing = [image for image in needed if image not in preloaded]
    assert missing == [], f"not in the node's containerd: {missing}\n{ran.stdout}"
    versions = "\n".join(found["versions"])
    assert f"Kubernetes {K8S_VERSION}" in versions
    assert re.search(r"^containerd .* v2\.4\.2\b", versions, re.M), versions
    assert "runc version" in versions


def test_warm_build_is_cached(docker: Docker, node_image: str) -> None:
    started = time.monotonic()
    again = build_node_image(docker, 120)
    assert again.stdout.strip().splitlines()[-1] == node_image
    assert "preloading" not in again.stderr  # nothing was rebuilt
    assert time.monotonic() - started < 60  # seconds, even on a loaded machine
