"""Each process's HTTP side (aiohttp): ``/healthz``, ``/readyz``, ``/metrics``, ``/admin``.

``/metrics`` is Prometheus text from a per-process registry whose collector flattens the numeric
leaves of the process's ``stats()`` into gauges (``hybridmq_<path>``) at scrape time, so the hot
paths never touch a metrics object.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Callable, Iterator
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

_BAD = re.compile(r"[^a-zA-Z0-9_]")


class _StatsCollector(Collector):
    def __init__(self, stats: Callable[[], dict[str, Any]]) -> None:
        self.stats = stats

    def collect(self) -> Iterator[GaugeMetricFamily]:
        flat: dict[str, float] = {}
        _flatten("hybridmq", self.stats(), flat)
        for name, value in sorted(flat.items()):
            g = GaugeMetricFamily(name, name)
            g.add_metric([], value)
            yield g


def _flatten(prefix: str, value: Any, out: dict[str, float]) -> None:
    if isinstance(value, bool | int | float):
        out[prefix] = float(value)
    elif isinstance(value, dict):
        for k, v in value.items():
            _flatten(_BAD.sub("_", f"{prefix}_{k}"), v, out)


def make_app(stats: Callable[[], dict[str, Any]], ready: Callable[[], bool]) -> web.Application:
    registry = CollectorRegistry()
    registry.register(_StatsCollector(stats))

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        return web.Response(text="ready\n") if ready() else web.Response(status=503, text="not ready\n")

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=generate_latest(registry), content_type="text/plain")

    async def admin(_: web.Request) -> web.Response:
        return web.json_response(stats())

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/admin", admin)
    return app


async def start_http(
    host: str,
    port: int,
    stats: Callable[[], dict[str, Any]],
    ready: Callable[[], bool],
    ssl_context: ssl.SSLContext | None = None,
) -> web.AppRunner:
    """Serve on ``host:port``, over HTTPS with ``ssl_context`` (the broker's listener context)."""
    runner = web.AppRunner(make_app(stats, ready), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port, ssl_context=ssl_context).start()
    return runner
