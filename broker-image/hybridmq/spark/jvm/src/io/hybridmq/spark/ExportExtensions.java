package io.hybridmq.spark;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.execution.SparkStrategy;

import scala.runtime.AbstractFunction1;
import scala.runtime.BoxedUnit;

/**
 * {@code spark.sql.extensions=io.hybridmq.spark.ExportExtensions} (set by build_session): plans a
 * count the scan answered on the driver (see CountScan) as a table of its one row, so the query runs
 * no Spark job. Without it such a count is still right and runs one task that reads nothing.
 */
public final class ExportExtensions extends AbstractFunction1<SparkSessionExtensions, BoxedUnit> {
  @Override
  public BoxedUnit apply(SparkSessionExtensions extensions) {
    extensions.injectPlannerStrategy(
        new AbstractFunction1<SparkSession, SparkStrategy>() {
          @Override
          public SparkStrategy apply(SparkSession session) {
            return new CountStrategy();
          }
        });
    return BoxedUnit.UNIT;
  }
}
