"""An MM's view of the operator's decisions survives a watch that goes silent without closing.

A stand-in API server on loopback answers every list and then holds each watch open without a
byte: what a lost route to the API server looks like from the pod (no FIN, no RST). The source
must give up on such a watch once it outlasted the server's own end of it, list again and so pick
up what changed meanwhile, instead of keeping the table it had for ever.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from hybridmq.broker.kube_source import KubeAssignmentSource


class SilentWatchServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.partition_lists = 0
        self.closing = threading.Event()


class _Handler(BaseHTTPRequestHandler):
    server: SilentWatchServer
    protocol_version = "HTTP/1.1"

    def log_message(self, *_: Any) -> None:
        pass

    def do_GET(self) -> None:
        url = urlparse(self.path)
        if parse_qs(url.query).get("watch") == ["true"]:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.flush()
            self.server.closing.wait()  # silent: neither an event nor the end of the watch
            return
        items: list[dict[str, Any]] = []
        if url.path.endswith("/partitions"):
            self.server.partition_lists += 1
            items = [_partition(epoch=self.server.partition_lists)]
        body = json.dumps(
            {"metadata": {"resourceVersion": str(100 + self.server.partition_lists)}, "items": items}
        )
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())


def _partition(epoch: int) -> dict[str, Any]:
    """The Partition as the n-th listing shows it: its epoch is the listing's number."""
    return {
        "apiVersion": "hybridmq.io/v1alpha1",
        "kind": "Partition",
        "metadata": {
            "name": "demo-fixed-0",
            "namespace": "ns",
            "uid": "u0",
            "resourceVersion": str(100 + epoch),
        },
        "spec": {"cluster": "demo", "type": "fixed", "replicas": 2},
        "status": {
            "state": "Active",
            "epoch": epoch,
            "primary": f"demo-mm-{epoch % 2}",
            "replicas": ["demo-mm-0", "demo-mm-1"],
            "inSync": ["demo-mm-0", "demo-mm-1"],
        },
    }


@pytest.fixture
def server() -> Iterator[SilentWatchServer]:
    srv = SilentWatchServer()
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.closing.set()
    srv.shutdown()
    srv.server_close()


async def test_a_watch_silent_past_its_end_is_given_up_and_the_partitions_listed_again(
    server: SilentWatchServer,
) -> None:
    from kubernetes import client

    config = client.Configuration()
    config.host = f"http://127.0.0.1:{server.server_address[1]}"
    source = KubeAssignmentSource(
        "demo",
        "ns",
        api_client=client.ApiClient(config),
        watch_timeout_s=1,
        silence_slack_s=1.0,
        retry_backoff_s=0.1,
    )
    await source.start(sync_timeout_s=10)
    try:
        assert source.synced()
        first = source.partitions()["demo-fixed-0"].epoch
        assert first >= 1
        # The watch ends on the server's side after 1 s; silent 1 s past that, it is dead: the
        # source lists again and sees the Partition as it is now.
        changed = asyncio.Event()
        source.subscribe(changed.set)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(20):
                while source.partitions()["demo-fixed-0"].epoch == first:
                    changed.clear()
                    await changed.wait()
        assert source.partitions()["demo-fixed-0"].epoch > first, server.partition_lists
    finally:
        server.closing.set()
        await source.stop()
