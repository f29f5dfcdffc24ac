package io.hybridmq.spark;

import java.io.EOFException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.util.ArrayList;
import java.util.List;

import org.apache.arrow.flatbuf.Buffer;
import org.apache.arrow.flatbuf.FieldNode;
import org.apache.arrow.flatbuf.MessageHeader;
import org.apache.arrow.flatbuf.RecordBatch;
import org.apache.arrow.memory.ArrowBuf;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.TypeLayout;
import org.apache.arrow.vector.VectorLoader;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ReadChannel;
import org.apache.arrow.vector.ipc.message.ArrowBlock;
import org.apache.arrow.vector.ipc.message.ArrowFieldNode;
import org.apache.arrow.vector.ipc.message.ArrowRecordBatch;
import org.apache.arrow.vector.ipc.message.MessageMetadataResult;
import org.apache.arrow.vector.ipc.message.MessageSerializer;
import org.apache.arrow.vector.types.pojo.Field;

/**
 * Loads some columns of an Arrow IPC file's record batches, reading only their buffers from the
 * file (Arrow's own file reader reads every column of a batch). A batch whose layout it does not
 * handle (compressed, variadic buffers) is left to the caller: {@link #load} returns -1.
 */
final class ColumnLoader {
  private final FileChannel channel;
  private final BufferAllocator allocator;
  private final int[] wanted; // file field index of each loaded column, in load order
  private final int[] firstNode;
  private final int[] nodeCount;
  private final int[] firstBuffer;
  private final int[] bufferCount;
  private final int totalNodes;
  private final int totalBuffers;
  private final VectorLoader loader;

  /** {@code root}: the file reader's root (memory format: dictionary columns hold indices). */
  ColumnLoader(FileChannel channel, BufferAllocator allocator, VectorSchemaRoot root, List<String> names) {
    this.channel = channel;
    this.allocator = allocator;
    List<Field> fields = root.getSchema().getFields();
    firstNode = new int[fields.size()];
    nodeCount = new int[fields.size()];
    firstBuffer = new int[fields.size()];
    bufferCount = new int[fields.size()];
    int nodes = 0;
    int buffers = 0;
    for (int i = 0; i < fields.size(); i++) {
      firstNode[i] = nodes;
      firstBuffer[i] = buffers;
      nodeCount[i] = nodes(fields.get(i));
      bufferCount[i] = buffers(fields.get(i));
      nodes += nodeCount[i];
      buffers += bufferCount[i];
    }
    totalNodes = nodes;
    totalBuffers = buffers;
    wanted = new int[names.size()];
    List<FieldVector> vectors = new ArrayList<>();
    for (int i = 0; i < names.size(); i++) {
      wanted[i] = indexOf(fields, names.get(i));
      vectors.add(root.getVector(wanted[i]));
    }
    // Shares the wanted vectors of the file reader's root, which owns (and closes) them.
    loader = new VectorLoader(new VectorSchemaRoot(vectors));
  }

  private static int indexOf(List<Field> fields, String name) {
    for (int i = 0; i < fields.size(); i++) {
      if (fields.get(i).getName().equals(name)) {
        return i;
      }
    }
    throw new IllegalStateException("the segment has no column " + name);
  }

  private static int nodes(Field field) {
    int n = 1;
    for (Field child : field.getChildren()) {
      n += nodes(child);
    }
    return n;
  }

  private static int buffers(Field field) {
    int n = TypeLayout.getTypeBufferCount(field.getType());
    for (Field child : field.getChildren()) {
      n += buffers(child);
    }
    return n;
  }

  /** Loads the wanted columns of one batch into the shared vectors; its row count, or -1. */
  int load(ArrowBlock block) throws IOException {
    channel.position(block.getOffset());
    MessageMetadataResult message = MessageSerializer.readMessage(new ReadChannel(channel));
    if (message == null || message.getMessage().headerType() != MessageHeader.RecordBatch) {
      throw new IOException("no record batch at offset " + block.getOffset());
    }
    RecordBatch header = (RecordBatch) message.getMessage().header(new RecordBatch());
    if (header.compression() != null
        || header.variadicBufferCountsLength() > 0
        || header.nodesLength() != totalNodes
        || header.buffersLength() != totalBuffers) {
      return -1;
    }
    long body = block.getOffset() + block.getMetadataLength();
    List<ArrowFieldNode> nodes = new ArrayList<>();
    List<ArrowBuf> buffers = new ArrayList<>();
    List<ArrowBuf> ranges = new ArrayList<>();
    try {
      for (int field : wanted) {
        for (int n = firstNode[field]; n < firstNode[field] + nodeCount[field]; n++) {
          FieldNode node = header.nodes(n);
          nodes.add(new ArrowFieldNode(node.length(), node.nullCount()));
        }
        // A column's buffers are contiguous in the body: one read per column.
        long lo = Long.MAX_VALUE;
        long hi = 0;
        for (int b = firstBuffer[field]; b < firstBuffer[field] + bufferCount[field]; b++) {
          Buffer buffer = header.buffers(b);
          lo = Math.min(lo, buffer.offset());
          hi = Math.max(hi, buffer.offset() + buffer.length());
        }
        ArrowBuf range = allocator.buffer(Math.max(0, hi - lo));
        ranges.add(range);
        if (hi > lo) {
          readFully(body + lo, range.nioBuffer(0, Math.toIntExact(hi - lo)));
        }
        for (int b = firstBuffer[field]; b < firstBuffer[field] + bufferCount[field]; b++) {
          Buffer buffer = header.buffers(b);
          buffers.add(buffer.length() == 0 ? allocator.getEmpty() : range.slice(buffer.offset() - lo, buffer.length()));
        }
      }
      int rows = Math.toIntExact(header.length());
      try (ArrowRecordBatch batch = new ArrowRecordBatch(rows, nodes, buffers)) {
        loader.load(batch);
      }
      return rows;
    } finally {
      for (ArrowBuf range : ranges) {
        range.close();
      }
    }
  }

  private void readFully(long position, ByteBuffer target) throws IOException {
    long at = position;
    while (target.hasRemaining()) {
      int n = channel.read(target, at);
      if (n < 0) {
        throw new EOFException("segment file ends inside a record batch at " + at);
      }
      at += n;
    }
  }
}
