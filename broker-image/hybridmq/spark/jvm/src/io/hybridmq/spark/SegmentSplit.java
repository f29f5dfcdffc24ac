package io.hybridmq.spark;

import org.apache.spark.sql.connector.read.InputPartition;

/** One segment file of one broker partition (its name and type fill the constant columns). */
final class SegmentSplit implements InputPartition {
  private static final long serialVersionUID = 1L;

  final String path;
  final String partition;
  final String partitionType;

  SegmentSplit(String path, String partition, String partitionType) {
    this.path = path;
    this.partition = partition;
    this.partitionType = partitionType;
  }
}
