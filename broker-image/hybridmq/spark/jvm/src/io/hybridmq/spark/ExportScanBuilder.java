package io.hybridmq.spark;

import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.types.StructType;

/** Keeps only the columns the query uses: the others are never read from the segment files. */
final class ExportScanBuilder implements SupportsPushDownRequiredColumns {
  private final ExportOptions options;
  private StructType required;

  ExportScanBuilder(ExportOptions options, StructType schema) {
    this.options = options;
    this.required = schema;
  }

  @Override
  public void pruneColumns(StructType requiredSchema) {
    required = requiredSchema;
  }

  @Override
  public Scan build() {
    return new ExportScan(options, required);
  }
}
