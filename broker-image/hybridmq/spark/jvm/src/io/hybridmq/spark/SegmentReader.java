package io.hybridmq.spark;

import java.io.IOException;
import java.nio.channels.FileChannel;
import java.nio.file.NoSuchFileException;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.apache.arrow.flatbuf.KeyValue;
import org.apache.arrow.flatbuf.Message;
import org.apache.arrow.flatbuf.RecordBatch;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.BaseIntVector;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.ValueVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.complex.MapVector;
import org.apache.arrow.vector.dictionary.Dictionary;
import org.apache.arrow.vector.ipc.ArrowFileReader;
import org.apache.arrow.vector.ipc.ReadChannel;
import org.apache.arrow.vector.ipc.message.ArrowBlock;
import org.apache.arrow.vector.ipc.message.MessageMetadataResult;
import org.apache.arrow.vector.ipc.message.MessageSerializer;
import org.apache.arrow.vector.types.pojo.DictionaryEncoding;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.execution.vectorized.ConstantColumnVector;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ArrowColumnVector;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Reads one segment file (an Arrow IPC file) batch by batch into Spark columnar batches that wrap
 * the Arrow vectors without copying (rows that fail the scan's filter check are dropped, by copying
 * the rest). A batch whose min/max statistics show that no row can pass the filter's ranges is
 * skipped before any of its buffers is read. Only the wanted columns' buffers are read; the partition name
 * and type are constants of the split, so with no stored column wanted (a count) only each batch's
 * metadata is read.
 */
final class SegmentReader implements PartitionReader<ColumnarBatch> {
  private static final String MIN = "hybridmq.min."; // as long as MAX
  private static final String MAX = "hybridmq.max.";
  private final Segment split;
  private final StructType schema;
  private final BufferAllocator allocator;
  private final FileChannel channel;
  private final ArrowFileReader reader;
  private final List<ArrowBlock> blocks;
  private final ColumnLoader loader; // null when only constant columns (or none) are wanted
  private final RowFilter filter;
  private final ScanMetrics metrics;
  private final List<FieldVector> owned = new ArrayList<>(); // the current batch's compacted columns
  private int next;
  private ColumnarBatch batch;

  SegmentReader(Segment split, StructType schema, RowFilter filter, ScanMetrics metrics) throws IOException {
    this.split = split;
    this.schema = schema;
    this.filter = filter;
    this.metrics = metrics;
    try {
      channel = FileChannel.open(Paths.get(split.path), StandardOpenOption.READ);
    } catch (NoSuchFileException e) {
      throw new IOException(
          ExportSource.NAME + ": segment " + split.path + " of partition " + split.partition
              + " is gone (garbage collected or trimmed after the query was planned)", e);
    }
    allocator = new RootAllocator();
    reader = new ArrowFileReader(channel, allocator);
    blocks = reader.getRecordBlocks();
    List<String> stored = new ArrayList<>();
    for (String name : schema.fieldNames()) {
      if (!name.equals("partition") && !name.equals("partition_type")) {
        stored.add(name);
      }
    }
    for (String name : filter.rowColumns()) {
      if (!stored.contains(name)) {
        stored.add(name); // checked by the scan, not output
      }
    }
    loader = stored.isEmpty() ? null : new ColumnLoader(channel, allocator, reader.getVectorSchemaRoot(), stored);
  }

  @Override
  public boolean next() throws IOException {
    releaseOwned();
    while (next < blocks.size()) {
      ArrowBlock block = blocks.get(next++);
      int rows;
      VectorSchemaRoot root = reader.getVectorSchemaRoot();
      Message header = null;
      if (filter.checksRanges()) {
        header = header(block);
        if (!filter.mayMatch(statistics(header))) {
          metrics.skipped++;
          continue; // no row of this batch can match: its buffers are not read at all
        }
      }
      metrics.read++;
      if (loader == null) {
        rows = rowCount(header == null ? header(block) : header);
      } else {
        rows = loader.load(block);
        if (rows < 0) {
          reader.loadRecordBatch(block);
          rows = root.getRowCount();
        }
      }
      int[] selected = loader == null ? null : select(root, rows);
      if (selected != null) {
        rows = selected.length;
      }
      if (rows > 0) {
        batch = new ColumnarBatch(columns(root, rows, selected), rows);
        return true;
      }
    }
    return false;
  }

  /** The rows that pass the scan's own filter check, or null when all do. */
  private int[] select(VectorSchemaRoot root, int rows) throws IOException {
    RowFilter.Rows check = filter.rows(new RowFilter.VectorSource() {
      @Override
      public FieldVector vector(String column) {
        return root.getVector(column);
      }

      @Override
      public ValueVector dictionary(String column) throws IOException {
        DictionaryEncoding encoding = root.getVector(column).getField().getDictionary();
        return encoding == null ? null : reader.getDictionaryVectors().get(encoding.getId()).getVector();
      }
    });
    if (check == null) {
      return null;
    }
    int[] selected = new int[rows];
    int n = 0;
    for (int row = 0; row < rows; row++) {
      if (check.keep(row)) {
        selected[n++] = row;
      }
    }
    return n == rows ? null : Arrays.copyOf(selected, n);
  }

  /** The batch's message metadata alone (not its buffers). */
  private Message header(ArrowBlock block) throws IOException {
    channel.position(block.getOffset());
    MessageMetadataResult message = MessageSerializer.readMessage(new ReadChannel(channel));
    return message.getMessage();
  }

  private static int rowCount(Message header) {
    RecordBatch batch = (RecordBatch) header.header(new RecordBatch());
    return Math.toIntExact(batch.length());
  }

  /**
   * The batch's min/max statistics by column ({@code hybridmq.min.<column>} and {@code
   * hybridmq.max.<column>} in its custom metadata): {min, max}, a missing or unreadable bound
   * open; empty for batches written without statistics.
   */
  private static Map<String, long[]> statistics(Message header) {
    Map<String, long[]> stats = new HashMap<>();
    for (int i = 0; i < header.customMetadataLength(); i++) {
      KeyValue kv = header.customMetadata(i);
      String key = kv.key();
      int bound = key == null ? -1 : key.startsWith(MIN) ? 0 : key.startsWith(MAX) ? 1 : -1;
      if (bound < 0) {
        continue;
      }
      long[] bounds =
          stats.computeIfAbsent(key.substring(MIN.length()), k -> new long[] {Long.MIN_VALUE, Long.MAX_VALUE});
      try {
        bounds[bound] = Long.parseLong(kv.value());
      } catch (NumberFormatException e) {
        // not written by us: that bound stays open
      }
    }
    return stats;
  }

  private ColumnVector[] columns(VectorSchemaRoot root, int rows, int[] selected) throws IOException {
    StructField[] fields = schema.fields();
    ColumnVector[] columns = new ColumnVector[fields.length];
    for (int i = 0; i < fields.length; i++) {
      String name = fields[i].name();
      if (name.equals("partition")) {
        columns[i] = constant(split.partition, rows);
      } else if (name.equals("partition_type")) {
        columns[i] = constant(split.partitionType, rows);
      } else {
        FieldVector vector = root.getVector(name);
        if (vector == null) {
          throw new IllegalStateException(split.path + " has no column " + name);
        }
        columns[i] = column(selected == null ? vector : compacted(vector, selected));
      }
    }
    return columns;
  }

  /** A new vector of the selected rows of {@code vector} (freed when the next batch is read). */
  private FieldVector compacted(FieldVector vector, int[] selected) {
    FieldVector out = vector.getField().createVector(allocator);
    owned.add(out);
    out.setInitialCapacity(selected.length);
    out.allocateNew();
    for (int i = 0; i < selected.length; i++) {
      out.copyFromSafe(selected[i], i, vector);
    }
    out.setValueCount(selected.length);
    return out;
  }

  private void releaseOwned() {
    for (FieldVector vector : owned) {
      vector.close();
    }
    owned.clear();
  }

  private ColumnVector column(FieldVector vector) throws IOException {
    DictionaryEncoding encoding = vector.getField().getDictionary();
    if (encoding != null) {
      Dictionary dictionary = reader.getDictionaryVectors().get(encoding.getId());
      return new DictionaryStringVector((BaseIntVector) vector, dictionary.getVector());
    }
    if (vector instanceof MapVector) {
      throw new IllegalStateException(
          split.path + " stores headers as a map (an export written before headers were binary):"
              + " read it with format(\"hybridmq\"), which converts them");
    }
    return new ArrowColumnVector(vector);
  }

  private static ColumnVector constant(String value, int rows) {
    ConstantColumnVector vector = new ConstantColumnVector(rows, DataTypes.StringType);
    vector.setUtf8String(UTF8String.fromString(value));
    return vector;
  }

  @Override
  public ColumnarBatch get() {
    return batch;
  }

  @Override
  public void close() throws IOException {
    releaseOwned();
    try {
      reader.close(); // closes the vectors, the dictionaries and the channel
    } finally {
      allocator.close();
    }
  }
}
