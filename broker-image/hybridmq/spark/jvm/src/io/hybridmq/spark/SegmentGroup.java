package io.hybridmq.spark;

import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.connector.read.InputPartition;

/**
 * One Spark input partition: consecutive segments (in partition and offset order) of about equal
 * size. A task costs tens of milliseconds however little it reads, so a scan makes about as many
 * groups as the cluster has cores rather than one task per segment file.
 */
final class SegmentGroup implements InputPartition {
  private static final long serialVersionUID = 1L;

  final List<Segment> segments;

  SegmentGroup(List<Segment> segments) {
    this.segments = segments;
  }

  /** Cuts {@code segments} into at most {@code groups} runs of about equal bytes. */
  static List<SegmentGroup> pack(List<Segment> segments, int groups) {
    long total = 0;
    for (Segment s : segments) {
      total += s.bytes;
    }
    long target = Math.max(1, (total + groups - 1) / Math.max(1, groups));
    List<SegmentGroup> packed = new ArrayList<>();
    List<Segment> current = new ArrayList<>();
    long size = 0;
    for (Segment s : segments) {
      if (!current.isEmpty() && size + s.bytes > target && packed.size() < groups - 1) {
        packed.add(new SegmentGroup(current));
        current = new ArrayList<>();
        size = 0;
      }
      current.add(s);
      size += s.bytes;
    }
    if (!current.isEmpty()) {
      packed.add(new SegmentGroup(current));
    }
    return packed;
  }
}
