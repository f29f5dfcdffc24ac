package io.hybridmq.spark;

import java.io.Serializable;

/** One segment file of one broker partition (its name and type fill the constant columns). */
final class Segment implements Serializable {
  private static final long serialVersionUID = 1L;

  final String path;
  final String partition;
  final String partitionType;
  final long base; // offsets in [base, end), from the file name
  final long end;
  final long bytes;

  Segment(String path, String partition, String partitionType, long base, long end, long bytes) {
    this.path = path;
    this.partition = partition;
    this.partitionType = partitionType;
    this.base = base;
    this.end = end;
    this.bytes = bytes;
  }
}
