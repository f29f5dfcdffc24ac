package io.hybridmq.spark;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.Arrays;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.read.LocalScan;
import org.apache.spark.sql.types.StructType;

/**
 * A {@code COUNT(*)} without grouping over filters the scan checks exactly and cheaply, answered
 * on the driver while the query is planned: the batches' lengths and statistics settle nearly every
 * batch, so reading them costs less than scheduling any Spark task. Spark plans a {@link LocalScan}
 * as a local table (one task of no I/O); with {@link ExportExtensions} the query runs no job at all.
 */
final class CountScan implements LocalScan {
  private final ExportOptions options;
  private final StructType schema; // one LongType column per COUNT(*)
  private final RowFilter filter;
  private InternalRow[] rows; // counted once, when first planned

  CountScan(ExportOptions options, StructType schema, RowFilter filter) {
    this.options = options;
    this.schema = schema;
    this.filter = filter;
  }

  @Override
  public StructType readSchema() {
    return schema;
  }

  @Override
  public String description() {
    return ExportSource.NAME + " " + options.path + " PushedFilters: " + Arrays.toString(filter.used)
        + " PushedAggregation: [COUNT(*)]";
  }

  @Override
  public synchronized InternalRow[] rows() {
    if (rows == null) {
      long total;
      try {
        total = CountReader.count(ExportScan.matchingSegments(options, filter), filter);
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
      Object[] values = new Object[schema.size()];
      Arrays.fill(values, total);
      rows = new InternalRow[] {new GenericInternalRow(values)};
    }
    return rows;
  }
}
