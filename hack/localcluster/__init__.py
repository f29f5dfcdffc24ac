"""localcluster: a real Kubernetes control plane on loopback, plus a node agent standing in for the kubelet.

    python -m localcluster up --dir .localcluster     # start in the background, print KUBECONFIG
    python -m localcluster down --dir .localcluster   # stop everything, no process left behind

From Python: `LocalCluster(directory).up()` / `.down()`, or the pytest fixture `local_cluster`
from `localcluster.pytest_plugin`.
"""

from localcluster.controlplane import ClusterOptions, LocalCluster

__all__ = ["ClusterOptions", "LocalCluster"]
