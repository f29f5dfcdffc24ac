"""``hybridmq audit`` against a live ``hybridmq local`` cluster, compared with the producers' send logs."""

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from hybridmq.cli.main import main as cli_main
from hybridmq.client import BlockingProducer
from hybridmq.local.runner import LocalCluster

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path_factory.mktemp("audit-cluster"), mms=2)
    with c:
        yield c


def audit(argv: list[str]) -> tuple[int, dict[str, object]]:
    with pytest.raises(SystemExit) as exited:
        cli_main(["audit", *argv])
    report = argv[argv.index("--report") + 1]
    return int(exited.value.code or 0), json.loads(Path(report).read_text())


def test_audit_of_a_live_cluster_against_send_logs(
    spark: SparkSession, cluster: LocalCluster, tmp_path: Path
) -> None:
    logs = tmp_path / "send-logs"
    for name, kwargs in (("fixed", {"partition_type": "fixed", "key": "audit-a"}), ("od", {})):
        with BlockingProducer(cluster.bootstrap, send_log=logs / f"{name}.csv", **kwargs) as producer:
            for i in range(150):
                assert producer.try_send("queue:audited", f"{name}-{i}".encode())
    lines = [line for f in logs.iterdir() for line in f.read_text().splitlines()]
    assert len(lines) == 300

    common = ["--bootstrap", cluster.bootstrap, "--send-log", str(logs), "--first-sequence", "0"]
    code, report = audit([*common, "--report", str(tmp_path / "ok.json")])
    assert code == 0 and report["verdict"] == "PASS", report
    assert report["totals"]["records"] == 300  # type: ignore[index]
    assert report["totals"]["producers"] == 2  # type: ignore[index]

    # an acknowledged message the cluster does not have is reported
    (tmp_path / "extra.csv").write_text(lines[0].split(",")[0] + ",100000\n")
    code, report = audit(
        [*common, "--send-log", str(tmp_path / "extra.csv"), "--report", str(tmp_path / "bad.json")]
    )
    assert code == 1 and report["verdict"] == "FAIL"
