"""Loopback ports held for a ``LocalCluster`` from the moment it picks them until it stops.

Picking a free port by binding port 0 and closing the socket leaves the port free again until the
broker process binds it, seconds later on a busy machine (and again between a kill and a restart).
Any other program picking a free port meanwhile can get the same one; the broker then fails to bind
and whatever took the port answers in its place. So each port stays bound by a socket of ours with
``SO_REUSEADDR`` that never listens: the kernel neither hands it out to anyone else (port 0, or a
bind without ``SO_REUSEADDR``) nor uses it as the source port of a connection, while our brokers,
which bind with ``SO_REUSEADDR`` (asyncio's and aiohttp's default), can listen on it.
"""

from __future__ import annotations

import socket

HOST = "127.0.0.1"


class PortInUse(OSError):
    """A port asked for by number is already served by another program."""


class PortReservations:
    def __init__(self) -> None:
        self._held: dict[int, socket.socket] = {}

    def reserve(self, port: int = 0) -> int:
        """Hold ``port`` (a free one when 0) and return its number."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError as exc:
            sock.close()
            raise PortInUse(exc.errno, f"port {HOST}:{port} is already in use by another program") from None
        number = int(sock.getsockname()[1])
        self._held[number] = sock
        return number

    def release(self, port: int) -> None:
        sock = self._held.pop(port, None)
        if sock is not None:
            sock.close()

    def close(self) -> None:
        for port in list(self._held):
            self.release(port)

    @property
    def held(self) -> frozenset[int]:
        return frozenset(self._held)
