"""A stand-in broker for the operator's Kubernetes tests: ``stub_broker.py cm|mm``.

It does what the operator relies on and nothing else: serves ``/healthz`` and ``/readyz`` on
``$HYBRIDMQ_HOST:$HYBRIDMQ_HTTP_PORT`` (HTTPS with ``$HYBRIDMQ_TLS_DIR``, as the real brokers),
follows its assignments through ``KubeAssignmentSource``
and, as an MM, renews its Lease (``hybridmq.broker.lease``) with a report of the partitions it
holds (so the operator can release finalizers). Used when the real ``hybridmq cm|mm`` is not the
subject of the test: the operator's failover timing does not depend on the data path.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from typing import Any

from aiohttp import web

from hybridmq.api.lease_report import MMReport, PartitionReport
from hybridmq.broker.kube_source import KubeAssignmentSource
from hybridmq.broker.lease import renewer_from_env
from hybridmq.protocol.tls import BrokerTls


def report_of(source: KubeAssignmentSource, me: str) -> dict[str, Any]:
    parts = {}
    for a in source.partitions().values():
        if me in a.replicas:
            primary = a.primary == me
            parts[a.name] = PartitionReport(
                role="primary" if primary else "backup",
                epoch=a.epoch,
                log_end_offset=0,
                in_sync=list(a.replicas) if primary else [],
            )
    return MMReport(partitions=parts).compact()


async def run(role: str) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    host = os.environ.get("HYBRIDMQ_HOST", "127.0.0.1")
    port = int(os.environ.get("HYBRIDMQ_HTTP_PORT", "8080"))
    me = os.environ.get("HYBRIDMQ_POD_NAME", "stub")
    source = KubeAssignmentSource.from_env()
    await source.start()
    renewer = renewer_from_env(report=lambda: report_of(source, me)) if role == "mm" else None
    if renewer is not None:
        await renewer.start()

    async def ok(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def assignments(_: web.Request) -> web.Response:
        return web.json_response({n: a.model_dump(mode="json") for n, a in source.partitions().items()})

    app = web.Application()
    app.add_routes(
        [web.get("/healthz", ok), web.get("/readyz", ok), web.get("/admin/assignments", assignments)]
    )
    runner = web.AppRunner(app)
    await runner.setup()
    # HTTPS like the real brokers when the cluster has TLS on (the probes say scheme HTTPS).
    tls_dir = os.environ.get("HYBRIDMQ_TLS_DIR")
    ssl = BrokerTls(tls_dir).server(peer_cert=False) if tls_dir else None
    await web.TCPSite(runner, host, port, ssl_context=ssl).start()
    logging.info("stub %s %s serving on %s:%d", role, me, host, port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    if renewer is not None:
        await renewer.stop()
    await source.stop()
    await runner.cleanup()


if __name__ == "__main__":
    asyncio.run(run(sys.argv[1] if len(sys.argv) > 1 else "mm"))
