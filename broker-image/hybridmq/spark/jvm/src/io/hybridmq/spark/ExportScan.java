package io.hybridmq.spark;

import java.io.IOException;
import java.io.UncheckedIOException;

import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.types.StructType;

/** The scan: one input partition per segment file, read as columnar batches. */
final class ExportScan implements Scan, Batch {
  private final ExportOptions options;
  private final StructType schema;

  ExportScan(ExportOptions options, StructType schema) {
    this.options = options;
    this.schema = schema;
  }

  @Override
  public StructType readSchema() {
    return schema;
  }

  @Override
  public String description() {
    return ExportSource.NAME + " " + options.path + " " + schema.simpleString();
  }

  @Override
  public Batch toBatch() {
    return this;
  }

  @Override
  public InputPartition[] planInputPartitions() {
    try {
      return ExportLayout.open(options.path).splits().toArray(new InputPartition[0]);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return new SegmentReaderFactory(schema);
  }
}
