"""A frozen primary (SIGSTOP) is fenced: once the new epoch is in place it gets no write acknowledged,
and after SIGCONT it steps down. The signals go through the local controller's HTTP API."""

from __future__ import annotations

import asyncio
import urllib.request
from pathlib import Path

from failover_workload import check, start_load, stop_all, until, wait_consumed

from hybridmq.api.frames import PROTOCOL_VERSION, ErrorCode, FrameType
from hybridmq.local.runner import LocalCluster
from hybridmq.protocol import RemoteError, open_connection

DEST = "queue:frozen"


def _signal(cluster: LocalCluster, mm: str, sig: str) -> None:
    req = urllib.request.Request(
        f"{cluster.controller_url}/kill/{mm}?signal={sig}",
        method="POST",
        headers={"Authorization": f"Bearer {cluster.cluster_secret}"},
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200


async def test_sigstop_primary_is_fenced_then_steps_down(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, mms=3, replicas=2, fixed=2, on_demand_per_mm=0, log_level="INFO")
    with cluster:
        fixed = cluster.table()["local-fixed-0"]
        victim = fixed.primary
        assert victim is not None
        load, consumer, stop_producing, stop_consuming, consuming, task = await start_load(
            cluster.bootstrap, fixed.name, DEST
        )
        producing = [task]
        await asyncio.sleep(1.0)

        _signal(cluster, victim, "STOP")
        await until(lambda: cluster.table()[fixed.name].epoch > fixed.epoch, 10, "the new epoch")
        new = cluster.table()[fixed.name]
        assert new.primary != victim
        loop = asyncio.get_running_loop()
        fenced_at = loop.time()
        await asyncio.sleep(1.5)
        _signal(cluster, victim, "CONT")

        def stepped_down() -> bool:
            stats = cluster.mm_stats(victim)
            role = stats["replicas"].get(fixed.name, {}).get("role")
            return role != "primary" and fixed.name not in stats["partitions"]

        await until(stepped_down, 10, f"{victim} stepping down")
        # The old primary refuses a produce at its old epoch outright (as a CM would send it).
        conn, _ = await open_connection(
            "127.0.0.1",
            cluster.mm_ports[victim],
            {
                "t": FrameType.HELLO,
                "v": PROTOCOL_VERSION,
                "id": "test",
                "role": "cm",
                "user": "cm",
                "password": cluster.cluster_secret,
            },
        )
        runner = asyncio.create_task(conn.run())
        try:
            await conn.request(
                {
                    "t": FrameType.PRODUCE,
                    "p": fixed.name,
                    "d": DEST,
                    "n": 1,
                    "b": b"\x91\x94\xa1x\xc0\xc0\x00",
                    "e": fixed.epoch,
                },
                timeout=5,
            )
            raise AssertionError("the stepped-down primary accepted a write")
        except RemoteError as exc:
            assert exc.code in (ErrorCode.NOT_PRIMARY, ErrorCode.STALE_EPOCH), exc
        finally:
            conn.close()
            runner.cancel()

        await asyncio.sleep(0.5)
        await stop_all(stop_producing, producing)
        await wait_consumed([load], consumer)
        await stop_all(stop_consuming, [consuming])
        figures = check([load], consumer)
        assert not load.failed, load.failed[:3]
        assert load.acked_after(fenced_at) > 0, "nothing acknowledged by the new primary"
        assert figures["acked"] > 50, figures
        await load.producer.close()
        await consumer.consumer.close()
