"""Build a SparkSession whose Python workers run this interpreter, with both data sources: the
Python ``hybridmq`` (registered) and the JVM ``hybridmq-export`` (its jar on ``spark.jars``)."""

import logging
import os
import sys

from pyspark.sql import SparkSession

from hybridmq.spark.datasource import HybridMQDataSource
from hybridmq.spark.jar import JarBuildError, ensure_jar

log = logging.getLogger("hybridmq.spark")
EXTENSIONS = "io.hybridmq.spark.ExportExtensions"


def build_session(
    master: str = "local[2]",
    app_name: str = "hybridmq",
    shuffle_partitions: int = 2,
    extra: dict[str, str] | None = None,
    log_level: str = "ERROR",
) -> SparkSession:
    # Workers must import hybridmq: use this interpreter (a venv), not whatever `python3` is.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.default.parallelism", str(shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "65536")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
    )
    settings = dict(extra or {})
    try:
        jars = [settings.get("spark.jars", ""), str(ensure_jar())]
        settings["spark.jars"] = ",".join(j for j in jars if j)
        # Counts the export's statistics answer are planned as their one row: no Spark job runs.
        extensions = [settings.get("spark.sql.extensions", ""), EXTENSIONS]
        settings["spark.sql.extensions"] = ",".join(e for e in extensions if e)
    except JarBuildError as err:
        log.warning("format('hybridmq-export') is unavailable: %s", err)
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(log_level)
    session.dataSource.register(HybridMQDataSource)
    return session
