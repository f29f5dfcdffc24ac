"""``hybridmq-operator``: run the Kopf operator with HybridMQ's handlers.

Options (each also from an environment variable, for the chart's Deployment):

* ``--namespace NS`` (repeatable; ``HYBRIDMQ_OPERATOR_NAMESPACES``, comma-separated) or
  ``--all-namespaces`` (``HYBRIDMQ_OPERATOR_CLUSTERWIDE=1``): what to serve (default: all);
* ``--peering NAME`` (``HYBRIDMQ_OPERATOR_PEERING``): Kopf peering object for HA (the KopfPeering
  or ClusterKopfPeering CRD must be installed), ``--standalone`` to run without peering,
  ``--priority N|auto`` (``HYBRIDMQ_OPERATOR_PRIORITY``, default ``auto``: the start time,
  with a tie-breaker, so the newest operator works and an older one pauses, see ``peering.py``),
  ``--peering-lifetime S`` (``HYBRIDMQ_OPERATOR_PEERING_LIFETIME``, default 15); the peering
  identity is ``$POD_ID`` (the pod's name, from the downward API) when set;
* ``--liveness URL`` (``HYBRIDMQ_OPERATOR_LIVENESS``, e.g. ``http://0.0.0.0:8080/healthz``);
* ``--metrics-address HOST:PORT`` (``HYBRIDMQ_OPERATOR_METRICS``, default ``127.0.0.1:9090``; port 0
  disables it);
* ``--verbose`` / ``--debug``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Sequence

import kopf

from hybridmq_operator import peering


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    env = os.environ
    parser = argparse.ArgumentParser("hybridmq-operator", description="Run the HybridMQ operator.")
    parser.add_argument(
        "-n",
        "--namespace",
        action="append",
        default=[n for n in env.get("HYBRIDMQ_OPERATOR_NAMESPACES", "").split(",") if n],
        help="namespace to serve (repeatable); default: all namespaces",
    )
    parser.add_argument(
        "-A",
        "--all-namespaces",
        action="store_true",
        default=env.get("HYBRIDMQ_OPERATOR_CLUSTERWIDE", "") == "1",
    )
    parser.add_argument("--peering", default=env.get("HYBRIDMQ_OPERATOR_PEERING") or None)
    parser.add_argument(
        "--standalone", action="store_true", default=env.get("HYBRIDMQ_OPERATOR_STANDALONE", "") == "1"
    )
    parser.add_argument(
        "--priority",
        type=peering.parse_priority,
        default=env.get("HYBRIDMQ_OPERATOR_PRIORITY") or peering.AUTO,
        help="peering priority: an integer, or 'auto' (the start time: the newest operator works)",
    )
    parser.add_argument(
        "--peering-lifetime",
        type=peering.parse_lifetime,
        default=env.get("HYBRIDMQ_OPERATOR_PEERING_LIFETIME") or str(peering.DEFAULT_LIFETIME_S),
        help="seconds a dead operator's peering record keeps a standby paused",
    )
    parser.add_argument("--liveness", default=env.get("HYBRIDMQ_OPERATOR_LIVENESS") or None)
    parser.add_argument("--metrics-address", default=env.get("HYBRIDMQ_OPERATOR_METRICS", "127.0.0.1:9090"))
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument("--debug", action="store_true")
    args = parser.parse_args(argv)
    # argparse converts string defaults (the environment) with `type` too: bad values fail here.
    if args.peering and args.standalone:
        parser.error("--peering and --standalone exclude each other")
    return args


def cluster_config_error() -> str | None:
    """Why no Kubernetes API can be reached from here, or None when a configuration exists.

    Kopf would otherwise retry its login handlers and end in a stack of tracebacks; the same lookup as
    the operator's client (in-cluster service account, else $KUBECONFIG or ~/.kube/config).
    """
    import pykube

    try:
        pykube.KubeConfig.from_env()
    except (pykube.exceptions.PyKubeError, OSError) as exc:
        return str(exc)
    return None


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    reason = cluster_config_error()
    if reason is not None:
        print(
            "hybridmq-operator: no Kubernetes cluster configured: not in a pod (no service account) "
            f"and no kubeconfig (KUBECONFIG or ~/.kube/config): {reason}",
            file=sys.stderr,
        )
        return 2
    kopf.configure(verbose=args.verbose, debug=args.debug)
    logging.getLogger("hybridmq_operator").setLevel(logging.DEBUG if args.debug else logging.INFO)

    # Register the handlers (import side effect) before the operator starts.
    import hybridmq_operator.handlers  # noqa: F401
    from hybridmq_operator import metrics

    metrics.serve(args.metrics_address)
    clusterwide = args.all_namespaces or not args.namespace
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    try:
        kopf.run(
            clusterwide=clusterwide,
            namespaces=() if clusterwide else tuple(args.namespace),
            standalone=args.standalone or None,
            peering_name=args.peering,
            priority=args.priority,
            identity=peering.identity(),
            memo=kopf.Memo(peering_lifetime=args.peering_lifetime),
            liveness_endpoint=args.liveness,
        )
    except (KeyboardInterrupt, asyncio.CancelledError):
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
