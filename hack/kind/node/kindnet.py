#!/usr/bin/env python3
"""The pod network of kind nodes built here, in place of kindnetd (whose source is not published as
a Go module, so it cannot be built offline).

It does the two things kindnetd does that a kind cluster needs: it writes this node's CNI
configuration (ptp + host-local over the node's pod CIDR, portmap) so the kubelet turns Ready, and
it keeps a route to every other node's pod CIDR through that node's address on the shared docker
network. It runs in kind's own kindnet DaemonSet (host network, NET_ADMIN), polling the node list.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

SA = Path("/var/run/secrets/kubernetes.io/serviceaccount")
CNI_FILE = Path("/etc/cni/net.d/10-kindnet.conflist")
POLL_SECONDS = 5.0


def nodes() -> list[dict[str, Any]]:
    host = os.environ["KUBERNETES_SERVICE_HOST"]
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    request = urllib.request.Request(
        f"https://{host}:{port}/api/v1/nodes",
        headers={"Authorization": "Bearer " + (SA / "token").read_text().strip()},
    )
    context = ssl.create_default_context(cafile=str(SA / "ca.crt"))
    with urllib.request.urlopen(request, context=context, timeout=10) as response:
        return list(json.load(response)["items"])


def internal_ip(node: dict[str, Any]) -> str | None:
    for address in node.get("status", {}).get("addresses", []):
        if address.get("type") == "InternalIP" and ":" not in address["address"]:
            return str(address["address"])
    return None


def pod_cidr(node: dict[str, Any]) -> str | None:
    cidr = node.get("spec", {}).get("podCIDR")
    return str(cidr) if cidr and ":" not in cidr else None


def cni_config(cidr: str) -> str:
    return json.dumps(
        {
            "cniVersion": "0.4.0",
            "name": "kindnet",
            "plugins": [
                {
                    "type": "ptp",
                    "ipMasq": False,
                    "ipam": {
                        "type": "host-local",
                        "dataDir": "/run/cni-ipam-state",
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "ranges": [[{"subnet": cidr}]],
                    },
                    "mtu": 1500,
                },
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        },
        indent=2,
    )


def sync(host_ip: str) -> None:
    for node in nodes():
        ip, cidr = internal_ip(node), pod_cidr(node)
        if ip is None or cidr is None:
            continue
        if ip == host_ip:
            wanted = cni_config(cidr)
            if not CNI_FILE.exists() or CNI_FILE.read_text() != wanted:
                tmp = CNI_FILE.with_suffix(".tmp")
                tmp.write_text(wanted)
                tmp.replace(CNI_FILE)  # the kubelet must never read half a file
                print(f"CNI configuration written for {cidr}", flush=True)
        else:
            subprocess.run(["ip", "route", "replace", cidr, "via", ip], check=True)


def main() -> None:
    host_ip = os.environ["HOST_IP"]
    while True:
        try:
            sync(host_ip)
        except Exception as error:  # the API server may not answer yet: try again
            print(f"sync failed: {error}", file=sys.stderr, flush=True)
        time.sleep(POLL_SECONDS)


if __name__ == "__main__":
    main()
