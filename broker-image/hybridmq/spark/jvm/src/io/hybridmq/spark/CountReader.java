package io.hybridmq.spark;

import java.io.IOException;
import java.util.List;

import org.apache.spark.sql.types.StructType;

/**
 * A pushed-down {@code COUNT(*)}: the number of rows of {@code segments} that pass the filter, the
 * rows a scan of no column would return (only batch lengths, and the filter's columns where the
 * batches' statistics do not settle them).
 */
final class CountReader {
  private CountReader() {}

  static long count(List<Segment> segments, RowFilter filter) throws IOException {
    long total = 0;
    try (GroupReader rows = new GroupReader(new SegmentGroup(segments), new StructType(), filter)) {
      while (rows.next()) {
        total += rows.get().numRows();
      }
    }
    return total;
  }
}
