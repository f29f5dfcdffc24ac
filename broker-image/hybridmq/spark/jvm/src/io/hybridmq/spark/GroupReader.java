package io.hybridmq.spark;

import java.io.IOException;

import org.apache.spark.sql.connector.metric.CustomTaskMetric;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/** Reads the segments of a group one after the other (one file open at a time). */
final class GroupReader implements PartitionReader<ColumnarBatch> {
  private final SegmentGroup group;
  private final StructType schema;
  private final RowFilter filter;
  private final ScanMetrics metrics = new ScanMetrics();
  private int next;
  private SegmentReader current;

  GroupReader(SegmentGroup group, StructType schema, RowFilter filter) {
    this.group = group;
    this.schema = schema;
    this.filter = filter;
  }

  @Override
  public boolean next() throws IOException {
    while (true) {
      if (current != null && current.next()) {
        return true;
      }
      if (current != null) {
        current.close();
        current = null;
      }
      if (next >= group.segments.size()) {
        return false;
      }
      current = new SegmentReader(group.segments.get(next++), schema, filter, metrics);
    }
  }

  @Override
  public CustomTaskMetric[] currentMetricsValues() {
    return metrics.values();
  }

  @Override
  public ColumnarBatch get() {
    return current.get();
  }

  @Override
  public void close() throws IOException {
    if (current != null) {
      current.close();
      current = null;
    }
  }
}
