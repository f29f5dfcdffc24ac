"""Kopf peering for operator HA: the CRDs Kopf needs and the peering object HybridMQ uses.

Operators that share a peering object see each other's records (identity -> priority, lifetime,
last seen): the highest-priority live operator works, lower ones pause until its record expires
(``--peering-lifetime``, default 15 s), and operators of *equal* priority all pause as possible
conflicts until the others' records expire. Two choices keep a restarted operator from pausing:

* the identity is stable per pod (``POD_ID``, else ``POD_NAME``: the pod's name from the downward
  API), so an operator whose container crashed and restarted finds its own record, not a rival;
* the default priority is ``auto``: the operator's start time in microseconds, times 1,000, plus a
  tie-breaker below 1,000 drawn from the identity (random without one). An operator in a new pod
  outranks the dead one it replaces and works at once (an older live one pauses in its favour
  instead of both pausing), and two replicas started in the same instant still differ: with equal
  priorities Kopf would pause both for as long as both live, and nothing would be reconciled. An
  explicit integer still works for fixed roles.

``python -m hybridmq_operator.peering`` prints the manifests (CRDs + a namespaced and a
cluster-wide peering object) for the chart.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
import zlib
from collections.abc import Mapping
from typing import Any

import yaml
from kopf._core.engines.peering import Identity

PEERING_NAME = "hybridmq"
AUTO = "auto"
DEFAULT_LIFETIME_S = 15
TIE_BREAKERS = 1_000


def parse_priority(value: str) -> int:
    """``auto`` (see :func:`auto_priority`) or an integer."""
    if value.strip().lower() == AUTO:
        return auto_priority(identity(), time.time_ns())
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"priority must be an integer or {AUTO!r}, not {value!r}") from None


def auto_priority(who: str | None, now_ns: int) -> int:
    """The start time in µs times ``TIE_BREAKERS`` plus a draw below it: later starts rank higher,
    and operators of the same instant differ unless their identities' draws collide (1 in 1,000).

    Fits Kubernetes' int64 JSON numbers until the year 2262 (µs since 1970 times 1,000 < 2**63).
    """
    draw = zlib.crc32(who.encode()) if who else random.getrandbits(32)
    return (now_ns // 1_000) * TIE_BREAKERS + draw % TIE_BREAKERS


def parse_lifetime(value: str) -> int:
    try:
        seconds = int(value)
    except ValueError:
        seconds = 0
    if seconds < 1:
        raise argparse.ArgumentTypeError(
            f"peering lifetime must be a whole number of seconds >= 1, not {value!r}"
        )
    return seconds


def identity(environ: Mapping[str, str] | None = None) -> Identity | None:
    """The peering identity: the pod's name when known (stable across container restarts)."""
    env = os.environ if environ is None else environ
    value = env.get("POD_ID") or env.get("POD_NAME")
    return Identity(value) if value else None


def _crd(kind: str, plural: str, scope: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.kopf.dev"},
        "spec": {
            "scope": scope,
            "group": "kopf.dev",
            "names": {"kind": kind, "plural": plural, "singular": plural[:-1]},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                            },
                        }
                    },
                }
            ],
        },
    }


PEERING_CRDS: list[dict[str, Any]] = [
    _crd("ClusterKopfPeering", "clusterkopfpeerings", "Cluster"),
    _crd("KopfPeering", "kopfpeerings", "Namespaced"),
]


def peering_object(namespace: str | None = None, name: str = PEERING_NAME) -> dict[str, Any]:
    """A KopfPeering in ``namespace`` (namespaced operators) or a ClusterKopfPeering."""
    if namespace is None:
        return {"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering", "metadata": {"name": name}}
    return {
        "apiVersion": "kopf.dev/v1",
        "kind": "KopfPeering",
        "metadata": {"name": name, "namespace": namespace},
    }


if __name__ == "__main__":
    yaml.safe_dump_all([*PEERING_CRDS, peering_object()], sys.stdout, sort_keys=False)
