package io.hybridmq.spark;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.List;
import java.util.stream.Collectors;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.connector.metric.CustomMetric;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.types.StructType;

/** The scan of the segments that may hold matching rows, in about one group per core, as columnar batches. */
final class ExportScan implements Scan, Batch {
  private final ExportOptions options;
  private final StructType schema;
  private final RowFilter filter;

  ExportScan(ExportOptions options, StructType schema, RowFilter filter) {
    this.options = options;
    this.schema = schema;
    this.filter = filter;
  }

  /** The segments whose partition and offsets (from their names) may hold rows passing {@code filter}. */
  static List<Segment> matchingSegments(ExportOptions options, RowFilter filter) throws IOException {
    return ExportLayout.open(options.path).segments().stream()
        .filter(s -> filter.mayMatch(s.partition, s.partitionType, s.base, s.end))
        .collect(Collectors.toList());
  }

  @Override
  public StructType readSchema() {
    return schema;
  }

  @Override
  public String description() {
    return ExportSource.NAME + " " + options.path + " " + schema.simpleString()
        + " PushedFilters: " + java.util.Arrays.toString(filter.used);
  }

  @Override
  public CustomMetric[] supportedCustomMetrics() {
    return ScanMetrics.supported();
  }

  @Override
  public Batch toBatch() {
    return this;
  }

  @Override
  public InputPartition[] planInputPartitions() {
    try {
      List<Segment> segments = matchingSegments(options, filter);
      int cores = SparkSession.active().sparkContext().defaultParallelism();
      return SegmentGroup.pack(segments, cores).toArray(new InputPartition[0]);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return new SegmentReaderFactory(schema, filter);
  }
}
