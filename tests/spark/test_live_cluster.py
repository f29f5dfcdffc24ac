"""The data source against a live ``hybridmq local`` cluster (1 CM + 2 MMs on loopback)."""

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from hybridmq.client import BlockingProducer
from hybridmq.local.ports import PortReservations
from hybridmq.spark.live import LiveClusterSource

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    held = PortReservations()  # until the CM listens: nobody else can take the port meanwhile
    port = held.reserve()
    workdir: Path = tmp_path_factory.mktemp("local")
    log = (workdir / "local.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "hybridmq.cli.main", "local", "--mms", "2", "--dir", str(workdir / "data"),
         "--port", str(port)],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    bootstrap = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if LiveClusterSource(bootstrap, timeout=5).list_partitions():
                    break
            except Exception:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise
            time.sleep(0.5)
        held.close()
        yield bootstrap
    finally:
        held.close()
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def produce(bootstrap: str, count: int, **kwargs: str) -> str:
    producer = BlockingProducer(bootstrap, **kwargs)
    try:
        for i in range(count):
            producer.send("queue:audit", f"m{i}".encode())
        return producer.partition
    finally:
        producer.close()


def test_lists_partitions_with_their_ends(cluster: str) -> None:
    before = {p.name: p for p in LiveClusterSource(cluster).list_partitions()}
    assert {p.type for p in before.values()} == {"fixed", "on-demand"}
    fixed = produce(cluster, 7, partition_type="fixed", key="k-list")
    after = {p.name: p for p in LiveClusterSource(cluster).list_partitions()}
    assert after[fixed].end == before[fixed].end + 7


def test_batch_and_streaming_reads(spark: SparkSession, cluster: str, tmp_path: Path) -> None:
    fixed = produce(cluster, 20, partition_type="fixed", key="k-read")
    ondemand = produce(cluster, 10)
    df = spark.read.format("hybridmq").option("bootstrap", cluster).load()
    rows = (
        df.where(df.partition.isin(fixed, ondemand))
        .select("partition", "offset", "producer_id", "sequence")
        .collect()
    )
    by_part = {p: sorted(r.sequence for r in rows if r.partition == p) for p in (fixed, ondemand)}
    assert by_part[fixed][-20:] == list(range(by_part[fixed][-20], by_part[fixed][-20] + 20))
    assert len(by_part[ondemand]) >= 10

    seen: list[tuple[str, int]] = []

    def run() -> None:
        query = (
            spark.readStream.format("hybridmq").option("bootstrap", cluster).option("maxRecordsPerBatch", "8")
            .option("columns", "partition,offset").load()
            .writeStream.foreachBatch(lambda b, _: seen.extend((r.partition, r.offset) for r in b.collect()))
            .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start()
        )  # fmt: skip
        query.awaitTermination(120)

    run()
    first = len(seen)
    produce(cluster, 5, partition_type="fixed", key="k-read")
    run()
    assert len(seen) == first + 5 and len(set(seen)) == len(seen)
