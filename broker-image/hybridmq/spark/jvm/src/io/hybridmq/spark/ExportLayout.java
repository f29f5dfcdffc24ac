package io.hybridmq.spark;

import java.io.IOException;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

/**
 * The exported log's directory layout (described in hybridmq.spark.exported): a marker file, one
 * directory per partition with its {@code _partition.json}, segments {@code <base>-<end>.arrow}.
 */
final class ExportLayout {
  static final String MARKER = "_hybridmq_export.json";
  static final String PARTITION_FILE = "_partition.json";
  static final String SUFFIX = ".arrow";
  static final String FORMAT = "hybridmq-export";
  static final int VERSION = 1;
  private static final ObjectMapper JSON = new ObjectMapper();

  private final Path root;

  private ExportLayout(Path root) {
    this.root = root;
  }

  static ExportLayout open(String path) throws IOException {
    Path root = Paths.get(path);
    Path marker = root.resolve(MARKER);
    if (!Files.isRegularFile(marker)) {
      throw new IllegalArgumentException(
          ExportSource.NAME + ": " + root + " is not a hybridmq exported log (no " + MARKER + ")");
    }
    JsonNode meta = JSON.readTree(marker.toFile());
    if (!FORMAT.equals(meta.path("format").asText()) || meta.path("version").asInt(0) > VERSION) {
      throw new IllegalArgumentException(
          ExportSource.NAME + ": " + marker + ": unsupported export format " + meta);
    }
    return new ExportLayout(root);
  }

  /** Every segment of every partition, partitions by name and segments in offset order. */
  List<Segment> segments() throws IOException {
    List<Path> dirs = new ArrayList<>();
    try (DirectoryStream<Path> entries = Files.newDirectoryStream(root)) {
      for (Path entry : entries) {
        if (Files.isDirectory(entry) && !entry.getFileName().toString().startsWith(".")) {
          dirs.add(entry);
        }
      }
    }
    List<Partition> partitions = new ArrayList<>();
    for (Path dir : dirs) {
      try {
        JsonNode meta = JSON.readTree(dir.resolve(PARTITION_FILE).toFile());
        partitions.add(new Partition(meta.path("name").asText(), meta.path("type").asText(), dir));
      } catch (NoSuchFileException | java.io.FileNotFoundException e) {
        // being created or just garbage collected: not part of the log yet (or any more)
      }
    }
    partitions.sort(Comparator.comparing(p -> p.name));
    List<Segment> splits = new ArrayList<>();
    for (Partition p : partitions) {
      for (Path segment : files(p.dir)) {
        String name = segment.getFileName().toString();
        long end = Long.parseLong(name.substring(name.indexOf('-') + 1, name.length() - SUFFIX.length()));
        long bytes;
        try {
          bytes = Files.size(segment);
        } catch (NoSuchFileException e) {
          continue; // trimmed meanwhile
        }
        splits.add(new Segment(segment.toString(), p.name, p.type, base(segment), end, bytes));
      }
    }
    return splits;
  }

  private static List<Path> files(Path dir) throws IOException {
    List<Path> found = new ArrayList<>();
    try (DirectoryStream<Path> entries = Files.newDirectoryStream(dir)) {
      for (Path entry : entries) {
        String name = entry.getFileName().toString();
        if (!name.startsWith(".") && name.endsWith(SUFFIX)) {
          found.add(entry);
        }
      }
    } catch (NoSuchFileException e) {
      return found; // garbage collected while listing
    }
    found.sort(Comparator.comparingLong(ExportLayout::base));
    return found;
  }

  private static long base(Path segment) {
    String name = segment.getFileName().toString();
    return Long.parseLong(name.substring(0, name.indexOf('-')));
  }

  private static final class Partition {
    final String name;
    final String type;
    final Path dir;

    Partition(String name, String type, Path dir) {
      this.name = name;
      this.type = type;
      this.dir = dir;
    }
  }
}
