"""Finding the Kubernetes binaries: KUBEBUILDER_ASSETS, the build cache, or `hack/k8sbin/build.sh`."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
K8S_VERSION = os.environ.get("K8S_VERSION", "1.35.4")
CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")


def _complete(directory: Path, names: tuple[str, ...]) -> bool:
    return all(os.access(directory / name, os.X_OK) for name in names)


def cache_dir() -> Path:
    """Where `hack/k8sbin/build.sh` puts the binaries (same rules as the script)."""
    root = os.environ.get("HYBRIDMQ_CACHE") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hybridmq"
    )
    return Path(root) / "k8s" / f"v{K8S_VERSION}"


def find_bin_dir(names: tuple[str, ...] = CONTROL_PLANE) -> Path:
    """The directory holding `names`; builds them with hack/k8sbin/build.sh if nothing has them."""
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    if assets:
        return Path(assets)
    cached = cache_dir()
    if _complete(cached, names):
        return cached
    script = REPO_ROOT / "hack" / "k8sbin" / "build.sh"
    out = subprocess.run([str(script)], check=True, stdout=subprocess.PIPE, text=True).stdout
    directory = Path(out.strip().splitlines()[-1])
    if not _complete(directory, names):
        raise RuntimeError(f"{script} did not produce {', '.join(names)} in {directory}")
    return directory
