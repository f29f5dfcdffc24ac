package io.hybridmq.spark;

import java.io.IOException;

import org.apache.spark.sql.connector.metric.CustomTaskMetric;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * A pushed-down {@code COUNT(*)}: one row, the number of rows of the group's segments that pass the
 * filter, in each of {@code columns} columns. The rows are those a scan of no column would return
 * (only batch lengths, and the filter's columns where statistics do not settle a batch).
 */
final class CountReader implements PartitionReader<ColumnarBatch> {
  private final GroupReader rows;
  private final int columns;
  private ColumnarBatch batch;

  CountReader(SegmentGroup group, RowFilter filter, int columns) {
    this.rows = new GroupReader(group, new StructType(), filter);
    this.columns = columns;
  }

  @Override
  public boolean next() throws IOException {
    if (batch != null) {
      return false;
    }
    long total = 0;
    while (rows.next()) {
      total += rows.get().numRows();
    }
    ColumnVector[] vectors = new ColumnVector[columns];
    for (int i = 0; i < columns; i++) {
      OnHeapColumnVector vector = new OnHeapColumnVector(1, DataTypes.LongType);
      vector.putLong(0, total);
      vectors[i] = vector;
    }
    batch = new ColumnarBatch(vectors, 1);
    return true;
  }

  @Override
  public ColumnarBatch get() {
    return batch;
  }

  @Override
  public CustomTaskMetric[] currentMetricsValues() {
    return rows.currentMetricsValues();
  }

  @Override
  public void close() throws IOException {
    rows.close();
    if (batch != null) {
      batch.close();
    }
  }
}
