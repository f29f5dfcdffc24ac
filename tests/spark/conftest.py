"""One small local SparkSession for the whole test session (the machine has 2 shared cores)."""

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from hybridmq.spark.session import build_session


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = build_session(
        app_name="hybridmq-tests",
        shuffle_partitions=2,
        extra={"spark.driver.memory": "1g", "spark.sql.execution.arrow.maxRecordsPerBatch": "1000"},
    )
    yield session
    session.stop()
