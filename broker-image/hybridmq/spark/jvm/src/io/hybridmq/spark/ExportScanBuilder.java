package io.hybridmq.spark;

import org.apache.spark.sql.connector.expressions.aggregate.AggregateFunc;
import org.apache.spark.sql.connector.expressions.aggregate.Aggregation;
import org.apache.spark.sql.connector.expressions.aggregate.CountStar;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.SupportsPushDownAggregates;
import org.apache.spark.sql.connector.read.SupportsPushDownFilters;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

/**
 * Keeps only the columns the query uses (the others are never read from the segment files) and the
 * simple filters the scan can check itself (see RowFilter); Spark applies again only those the scan
 * does not check exactly. A {@code COUNT(*)} with no grouping, over filters the scan checks exactly
 * and cheaply, is answered on the driver (see CountScan): no task reads the segments, and no
 * exchange sums partial counts.
 */
final class ExportScanBuilder
    implements SupportsPushDownRequiredColumns, SupportsPushDownFilters, SupportsPushDownAggregates {
  private final ExportOptions options;
  private StructType required;
  private RowFilter filter = RowFilter.of(new Filter[0]);
  private int counts; // COUNT(*) columns pushed down (0: none)

  ExportScanBuilder(ExportOptions options, StructType schema) {
    this.options = options;
    this.required = schema;
  }

  @Override
  public void pruneColumns(StructType requiredSchema) {
    required = requiredSchema;
  }

  @Override
  public Filter[] pushFilters(Filter[] filters) {
    filter = RowFilter.of(filters);
    return filter.inexact;
  }

  @Override
  public Filter[] pushedFilters() {
    return filter.used;
  }

  @Override
  public boolean supportCompletePushDown(Aggregation aggregation) {
    return countStars(aggregation) > 0;
  }

  @Override
  public boolean pushAggregation(Aggregation aggregation) {
    counts = countStars(aggregation);
    return counts > 0;
  }

  /** How many {@code COUNT(*)} the aggregation is made of, or 0 if it is anything else. */
  private int countStars(Aggregation aggregation) {
    if (aggregation.groupByExpressions().length != 0 || filter.inexact.length != 0 || !filter.cheapToCount()) {
      return 0;
    }
    for (AggregateFunc function : aggregation.aggregateExpressions()) {
      if (!(function instanceof CountStar)) {
        return 0;
      }
    }
    return aggregation.aggregateExpressions().length;
  }

  @Override
  public Scan build() {
    if (counts == 0) {
      return new ExportScan(options, required, filter);
    }
    StructType schema = new StructType();
    for (int i = 0; i < counts; i++) {
      schema = schema.add("count" + i, DataTypes.LongType, false);
    }
    return new CountScan(options, schema, filter);
  }
}
