package io.hybridmq.spark;

import org.apache.spark.sql.connector.metric.CustomMetric;
import org.apache.spark.sql.connector.metric.CustomSumMetric;
import org.apache.spark.sql.connector.metric.CustomTaskMetric;

/**
 * What a task's scan did with the record batches of its segments: read them, or skipped them
 * because their min/max statistics showed that no row could pass the filter. Shown with the scan
 * in the Spark UI's SQL tab (summed over tasks).
 */
final class ScanMetrics {
  static final String READ = "batchesRead";
  static final String SKIPPED = "batchesSkippedByStatistics";

  long read;
  long skipped;

  static CustomMetric[] supported() {
    return new CustomMetric[] {new Read(), new Skipped()};
  }

  CustomTaskMetric[] values() {
    return new CustomTaskMetric[] {value(READ, read), value(SKIPPED, skipped)};
  }

  private static CustomTaskMetric value(String name, long value) {
    return new CustomTaskMetric() {
      @Override
      public String name() {
        return name;
      }

      @Override
      public long value() {
        return value;
      }
    };
  }

  /** A summed metric; Spark instantiates the subclasses by class name (public, no arguments). */
  abstract static class Sum extends CustomSumMetric {
    private final String name;
    private final String description;

    Sum(String name, String description) {
      this.name = name;
      this.description = description;
    }

    @Override
    public String name() {
      return name;
    }

    @Override
    public String description() {
      return description;
    }
  }

  public static final class Read extends Sum {
    public Read() {
      super(READ, "record batches read");
    }
  }

  public static final class Skipped extends Sum {
    public Skipped() {
      super(SKIPPED, "record batches skipped by their statistics");
    }
  }
}
