package io.hybridmq.spark;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.arrow.vector.BaseIntVector;
import org.apache.arrow.vector.BigIntVector;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.ValueVector;
import org.apache.arrow.vector.VarCharVector;
import org.apache.spark.sql.sources.And;
import org.apache.spark.sql.sources.EqualTo;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.sources.GreaterThan;
import org.apache.spark.sql.sources.GreaterThanOrEqual;
import org.apache.spark.sql.sources.In;
import org.apache.spark.sql.sources.IsNotNull;
import org.apache.spark.sql.sources.LessThan;
import org.apache.spark.sql.sources.LessThanOrEqual;

/**
 * The simple conjuncts of a query's filters that the scan can check itself: ranges of {@code offset}
 * and {@code sequence}, string equality or membership of {@code partition}, {@code partition_type},
 * {@code producer_id} and {@code destination}, and {@code IS NOT NULL}. Segments whose partition or
 * offset range cannot match are not read, nor batches whose statistics rule them out; in the others
 * only matching rows reach Spark. A filter checked wholly is checked exactly (Spark does not evaluate
 * it again); Spark evaluates the others ({@link #inexact}, e.g. an AND with one half checked here).
 */
final class RowFilter implements Serializable {
  private static final long serialVersionUID = 1L;
  private static final List<String> LONGS = Arrays.asList("offset", "sequence");
  private static final List<String> STRINGS =
      Arrays.asList("partition", "partition_type", "producer_id", "destination");

  /** One conjunct: {@code values != null}: a string set; else the long range [lo, hi]. */
  private static final class Test implements Serializable {
    private static final long serialVersionUID = 1L;
    final String column;
    final Set<String> values;
    final long lo;
    final long hi;

    Test(String column, Set<String> values, long lo, long hi) {
      this.column = column;
      this.values = values;
      this.lo = lo;
      this.hi = hi;
    }
  }

  private final List<Test> tests;
  final Filter[] used;
  final Filter[] inexact; // not checked wholly by the scan (e.g. one half of an AND): Spark must

  private RowFilter(List<Test> tests, Filter[] used, Filter[] inexact) {
    this.tests = tests;
    this.used = used;
    this.inexact = inexact;
  }

  static RowFilter of(Filter[] filters) {
    List<Test> tests = new ArrayList<>();
    List<Filter> used = new ArrayList<>();
    List<Filter> inexact = new ArrayList<>();
    for (Filter filter : filters) {
      if (convert(filter, tests)) {
        used.add(filter);
      }
      if (!exact(filter)) {
        inexact.add(filter);
      }
    }
    return new RowFilter(tests, used.toArray(new Filter[0]), inexact.toArray(new Filter[0]));
  }

  /** True if the scan's check keeps exactly the rows {@code filter} keeps. */
  private static boolean exact(Filter filter) {
    if (filter instanceof And) {
      return exact(((And) filter).left()) && exact(((And) filter).right());
    }
    return convert(filter, new ArrayList<>());
  }

  /**
   * True if every test is settled by segment names or batch statistics, or reads only a long
   * column: a count of such rows is cheap enough for one task.
   */
  boolean cheapToCount() {
    for (Test t : tests) {
      if (t.values != null && !t.column.equals("partition") && !t.column.equals("partition_type")) {
        return false;
      }
    }
    return true;
  }

  /** Adds the tests of {@code filter} (the convertible half of an AND); true if it added any. */
  private static boolean convert(Filter filter, List<Test> tests) {
    if (filter instanceof And) {
      boolean left = convert(((And) filter).left(), tests);
      return convert(((And) filter).right(), tests) || left;
    }
    if (filter instanceof IsNotNull) {
      String column = ((IsNotNull) filter).attribute();
      if (LONGS.contains(column)) {
        return tests.add(new Test(column, null, Long.MIN_VALUE, Long.MAX_VALUE));
      }
      return column.equals("partition") || column.equals("partition_type"); // never null: nothing to check
    }
    if (filter instanceof In && STRINGS.contains(((In) filter).attribute())) {
      Set<String> values = new HashSet<>();
      for (Object value : ((In) filter).values()) {
        if (!(value instanceof String)) {
          return false;
        }
        values.add((String) value);
      }
      return tests.add(new Test(((In) filter).attribute(), values, 0, 0));
    }
    String column;
    Object value;
    if (filter instanceof EqualTo) {
      column = ((EqualTo) filter).attribute();
      value = ((EqualTo) filter).value();
      if (STRINGS.contains(column) && value instanceof String) {
        return tests.add(new Test(column, new HashSet<>(List.of((String) value)), 0, 0));
      }
    } else if (filter instanceof LessThan) {
      column = ((LessThan) filter).attribute();
      value = ((LessThan) filter).value();
    } else if (filter instanceof LessThanOrEqual) {
      column = ((LessThanOrEqual) filter).attribute();
      value = ((LessThanOrEqual) filter).value();
    } else if (filter instanceof GreaterThan) {
      column = ((GreaterThan) filter).attribute();
      value = ((GreaterThan) filter).value();
    } else if (filter instanceof GreaterThanOrEqual) {
      column = ((GreaterThanOrEqual) filter).attribute();
      value = ((GreaterThanOrEqual) filter).value();
    } else {
      return false;
    }
    if (!LONGS.contains(column) || !(value instanceof Long || value instanceof Integer)) {
      return false;
    }
    long v = ((Number) value).longValue();
    long lo = Long.MIN_VALUE;
    long hi = Long.MAX_VALUE;
    if (filter instanceof EqualTo) {
      lo = v;
      hi = v;
    } else if (filter instanceof LessThan) {
      if (v == Long.MIN_VALUE) {
        lo = 1; // nothing is below the smallest long: an empty range
        hi = 0;
      } else {
        hi = v - 1;
      }
    } else if (filter instanceof LessThanOrEqual) {
      hi = v;
    } else if (filter instanceof GreaterThan) {
      if (v == Long.MAX_VALUE) {
        lo = 1;
        hi = 0;
      } else {
        lo = v + 1;
      }
    } else {
      lo = v;
    }
    return tests.add(new Test(column, null, lo, hi));
  }

  /** The columns the row tests read (they must be loaded even when the query does not output them). */
  List<String> rowColumns() {
    List<String> columns = new ArrayList<>();
    for (Test t : tests) {
      if (!t.column.equals("partition") && !t.column.equals("partition_type") && !columns.contains(t.column)) {
        columns.add(t.column);
      }
    }
    return columns;
  }

  /** False when no row of this segment can match (its partition, type or offset range). */
  boolean mayMatch(String partition, String partitionType, long base, long end) {
    for (Test t : tests) {
      if (t.column.equals("partition") && !t.values.contains(partition)) {
        return false;
      }
      if (t.column.equals("partition_type") && !t.values.contains(partitionType)) {
        return false;
      }
      if (t.column.equals("offset") && (end <= t.lo || base > t.hi || t.lo > t.hi)) {
        return false;
      }
    }
    return true;
  }

  /** True if some test is a range of a long column (batch statistics may then rule batches out). */
  boolean checksRanges() {
    for (Test t : tests) {
      if (t.values == null) {
        return true;
      }
    }
    return false;
  }

  /**
   * False when no row of a batch whose non-null values of each column lie in {@code stats.get(column)}
   * ({min, max}) can pass the range tests. A null never passes one, so a batch is ruled out by the
   * range of the values it has; columns without statistics rule nothing out.
   */
  boolean mayMatch(Map<String, long[]> stats) {
    for (Test t : tests) {
      long[] bounds = t.values == null ? stats.get(t.column) : null;
      if (bounds != null && (bounds[1] < t.lo || bounds[0] > t.hi || t.lo > t.hi)) {
        return false;
      }
    }
    return true;
  }

  /** A check of rows of one loaded batch. */
  interface Rows {
    boolean keep(int row);
  }

  /**
   * The row check over a batch's vectors ({@code vectors.get(name)}; dictionary columns with their
   * dictionary), or null when every row passes.
   */
  Rows rows(VectorSource vectors) throws java.io.IOException {
    List<Rows> checks = new ArrayList<>();
    for (Test t : tests) {
      if (t.column.equals("partition") || t.column.equals("partition_type")) {
        continue; // constants of the segment: settled by mayMatch
      }
      FieldVector vector = vectors.vector(t.column);
      if (t.values == null) {
        BigIntVector longs = (BigIntVector) vector;
        long lo = t.lo;
        long hi = t.hi;
        checks.add(row -> !longs.isNull(row) && longs.get(row) >= lo && longs.get(row) <= hi);
      } else {
        ValueVector dictionary = vectors.dictionary(t.column);
        if (dictionary != null) {
          boolean[] allowed = allowed((VarCharVector) dictionary, t.values);
          BaseIntVector indices = (BaseIntVector) vector;
          checks.add(row -> !indices.isNull(row) && allowed[(int) indices.getValueAsLong(row)]);
        } else {
          VarCharVector strings = (VarCharVector) vector;
          checks.add(row -> !strings.isNull(row) && t.values.contains(strings.getObject(row).toString()));
        }
      }
    }
    if (checks.isEmpty()) {
      return null;
    }
    if (checks.size() == 1) {
      return checks.get(0);
    }
    Rows[] all = checks.toArray(new Rows[0]);
    return row -> {
      for (Rows check : all) {
        if (!check.keep(row)) {
          return false;
        }
      }
      return true;
    };
  }

  private static boolean[] allowed(VarCharVector dictionary, Set<String> values) {
    boolean[] allowed = new boolean[dictionary.getValueCount()];
    for (int i = 0; i < allowed.length; i++) {
      allowed[i] = !dictionary.isNull(i) && values.contains(dictionary.getObject(i).toString());
    }
    return allowed;
  }

  /** Where {@link #rows} finds a batch's vectors. */
  interface VectorSource {
    FieldVector vector(String column) throws java.io.IOException;

    /** The dictionary of a dictionary-encoded column, else null. */
    ValueVector dictionary(String column) throws java.io.IOException;
  }
}
