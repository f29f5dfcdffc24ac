"""A loopback TCP relay for broker tests: copies both ways, keeps a copy of every byte, can damage
the next chunk it passes from the target back to the connecting side, and can cut its connections
and close new ones at once (a peer that goes away during the handshake)."""

from __future__ import annotations

import socket
import threading


class Relay:
    """Accepts on ``port`` and copies both ways to ``target``, keeping a copy of every byte."""

    def __init__(self, port: int, target: int) -> None:
        self.target = target
        self.seen = bytearray()
        self.connections = 0  # accepted so far
        self._lock = threading.Lock()
        self._corrupt = threading.Event()
        self.refusing = False  # close new connections at once
        self._server = socket.create_server(("127.0.0.1", port))
        self._threads: list[threading.Thread] = []
        self._socks: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def port(self) -> int:
        return int(self._server.getsockname()[1])

    def corrupt_next_reply(self) -> None:
        """Flip one byte of the next chunk sent from the target back through the relay."""
        self._corrupt.set()

    def cut(self) -> None:
        """End every connection relayed so far."""
        for s in list(self._socks):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            if self.refusing:
                client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target))
            except OSError:  # the target is not listening (stopped): the caller sees a closed connection
                client.close()
                continue
            self._socks += [client, upstream]
            self.connections += 1
            for a, b, back in ((client, upstream, False), (upstream, client, True)):
                t = threading.Thread(target=self._pump, args=(a, b, back), daemon=True)
                t.start()
                self._threads.append(t)

    def _pump(self, src: socket.socket, dst: socket.socket, back: bool) -> None:
        try:
            while chunk := src.recv(65536):
                with self._lock:
                    self.seen += chunk
                if back and self._corrupt.is_set():
                    self._corrupt.clear()
                    chunk = chunk[:-1] + bytes([chunk[-1] ^ 0xFF])
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def bytes(self) -> bytes:
        with self._lock:
            return bytes(self.seen)

    def close(self) -> None:
        self._server.close()
        for s in self._socks:
            s.close()
