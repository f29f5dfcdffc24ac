package io.hybridmq.spark;

import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.SupportsPushDownFilters;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.StructType;

/**
 * Keeps only the columns the query uses (the others are never read from the segment files) and the
 * simple filters the scan can check itself (see RowFilter); Spark still applies every filter.
 */
final class ExportScanBuilder implements SupportsPushDownRequiredColumns, SupportsPushDownFilters {
  private final ExportOptions options;
  private StructType required;
  private RowFilter filter = RowFilter.of(new Filter[0]);

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
    return filters; // all evaluated again after the scan: the scan's own check may keep extra rows
  }

  @Override
  public Filter[] pushedFilters() {
    return filter.used;
  }

  @Override
  public Scan build() {
    return new ExportScan(options, required, filter);
  }
}
