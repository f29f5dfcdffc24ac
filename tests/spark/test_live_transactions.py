"""The ``hybridmq`` source and the audit over partitions that hold transactions: committed ones,
rolled back ones whose records were prepared (inside ``TxPrepare`` control records) and then
aborted, and the control records of both.

A read-committed read returns each committed record exactly once, no aborted record and no
control record; the audit passes against the plain producer's send log (aborted records are
not lost ones). The expected rows are what the test sent, not what the broker reports."""

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import Row, SparkSession

from hybridmq.cli.main import main as cli_main
from hybridmq.client import Fetcher, Producer, Session, TransactionRolledBack
from hybridmq.local.runner import LocalCluster
from hybridmq.spark.export import export_source
from hybridmq.spark.live import LiveClusterSource

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("tx-spark"), mms=2, fixed_per_mm=1, on_demand_per_mm=0) as c:
        yield c


async def write(bootstrap: str, p0: str, p1: str, send_log: Path) -> tuple[list[str], list[str]]:
    """Committed and aborted transactions over ``p0`` and ``p1``, plain sends between them;
    (values that must be read, values that must not)."""
    plain = await Producer.connect(bootstrap, partition_type="fixed", partition=p0, send_log=send_log)
    session = await Session.connect(bootstrap, transacted=True)
    source = await session.consumer("queue:in")
    good: list[str] = []
    bad: list[str] = []
    for i in range(3):
        await plain.send("queue:in", f"plain-{i}".encode())
        good.append(f"plain-{i}")
        # Committed (two-phase): two records to p1, one to p0, and the consumed job.
        msg = await session.receive(source, timeout=10)
        for value, p in ((f"ok-{i}-a", p1), (f"ok-{i}-b", p1), (f"ok-{i}-c", p0)):
            await session.send("topic:out", value.encode(), partition=p)
            good.append(value)
        await session.commit()
        # Aborted after p1 prepared: p0 refuses (its consumed message was given back meanwhile).
        await plain.send("queue:in", f"plain-{i}-again".encode())
        good.append(f"plain-{i}-again")
        msg = await session.receive(source, timeout=10)
        for value, p in ((f"no-{i}-a", p1), (f"no-{i}-b", p0)):
            await session.send("topic:out", value.encode(), partition=p)
            bad.append(value)
        source.nack(msg)
        await asyncio.sleep(0.3)
        with pytest.raises(TransactionRolledBack):
            await session.commit()
        await session.rollback()
        msg = await session.receive(source, timeout=10)  # the job again: consumed, nothing sent
        await session.commit()
    # One-phase: one partition only.
    await session.send("queue:one", b"one-phase", partition=p1)
    await session.commit()
    good.append("one-phase")
    await session.send("queue:one", b"rolled-back", partition=p1)
    await session.rollback()
    bad.append("rolled-back")
    await session.close()
    await plain.close()
    return good, bad


async def control_batches(bootstrap: str, partition: str) -> int:
    """Control batches in ``partition``'s log (the test's own reading, by offset)."""
    fetcher = await Fetcher.connect(bootstrap)
    found, offset = 0, 0
    while True:
        result = await fetcher.fetch(partition, offset)
        found += sum(1 for b in result.batches if b.control)
        if result.next_offset >= result.end_offset:
            break
        offset = result.next_offset
    await fetcher.close()
    return found


def check_rows(rows: list[Row], good: list[str], bad: list[str]) -> None:
    values = sorted(bytes(r["value"]).decode() for r in rows)
    assert values == sorted(good), values
    assert not set(values) & set(bad)
    offsets = [(r["partition"], r["offset"]) for r in rows]
    assert len(offsets) == len(set(offsets))


def test_a_read_returns_committed_records_once_and_nothing_aborted(
    spark: SparkSession, cluster: LocalCluster, tmp_path: Path
) -> None:
    p0, p1 = sorted(cluster.table())
    logs = tmp_path / "send-logs"
    logs.mkdir()
    good, bad = asyncio.run(write(cluster.bootstrap, p0, p1, logs / "plain.csv"))
    # p1 holds a TxPrepare and a TxEnd of each of the 6 two-phase transactions (at least)
    assert asyncio.run(control_batches(cluster.bootstrap, p1)) >= 12

    live = spark.read.format("hybridmq").option("bootstrap", cluster.bootstrap).load()
    check_rows(live.select("partition", "offset", "destination", "value").collect(), good, bad)
    # An export of the cluster (read through the same source) holds the same rows.
    export_source(LiveClusterSource(cluster.bootstrap), tmp_path / "export")
    exported = spark.read.format("hybridmq-export").option("path", str(tmp_path / "export")).load()
    check_rows(exported.select("partition", "offset", "destination", "value").collect(), good, bad)

    report_path = tmp_path / "report.json"
    with pytest.raises(SystemExit) as exited:
        cli_main(
            ["audit", "--bootstrap", cluster.bootstrap, "--send-log", str(logs), "--first-sequence", "0",
             "--report", str(report_path)]
        )  # fmt: skip
    report = json.loads(report_path.read_text())
    assert exited.value.code in (0, None) and report["verdict"] == "PASS", report
    # Transacted records carry no producer id: the audit checks the plain producer's alone.
    assert report["totals"]["records"] == sum(v.startswith("plain") for v in good), report
