"""Pod IPs: one loopback address per pod from a 127.x.0.0/16 (Linux routes all of 127/8 to lo).

Each cluster gets its own /16 (chosen by `pick_pod_cidr` at startup, so that two local clusters on
one machine never hand out the same address).
"""

from __future__ import annotations

import contextlib
import ipaddress
import random
import threading

import psutil

POD_CIDR = ipaddress.IPv4Network("127.1.0.0/16")


class IPAllocator:
    """Hands out addresses round-robin so that a released address is not reused soon."""

    def __init__(self, network: ipaddress.IPv4Network = POD_CIDR) -> None:
        self._hosts = [str(ip) for ip in network.hosts()]
        self._next = 1  # skip 127.1.0.1
        self._used: set[str] = set()
        self._lock = threading.Lock()

    def reserve(self, ip: str) -> None:
        with self._lock:
            self._used.add(ip)

    def allocate(self) -> str:
        with self._lock:
            for _ in range(len(self._hosts)):
                ip = self._hosts[self._next % len(self._hosts)]
                self._next += 1
                if ip not in self._used:
                    self._used.add(ip)
                    return ip
        raise RuntimeError(f"no free pod IP left in {POD_CIDR}")

    def release(self, ip: str) -> None:
        with self._lock:
            self._used.discard(ip)


def pick_pod_cidr() -> str:
    """A random 127.x.0.0/16 (x in 1..254) where nothing listens right now.

    Random rather than a preferred one: clusters that start while another has no pod listening
    yet would otherwise pick the same range, and their first pods the same address and ports.
    """
    busy: set[int] = set()
    with contextlib.suppress(psutil.Error):
        for conn in psutil.net_connections(kind="inet4"):
            if conn.laddr and conn.laddr.ip.startswith("127."):
                busy.add(int(conn.laddr.ip.split(".")[1]))
    candidates = random.sample(range(1, 255), 254)
    for octet in candidates:
        if octet not in busy:
            return f"127.{octet}.0.0/16"
    return "127.1.0.0/16"
