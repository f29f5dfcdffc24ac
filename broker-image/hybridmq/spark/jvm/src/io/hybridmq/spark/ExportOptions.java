package io.hybridmq.spark;

import java.io.Serializable;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.Map;

import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/** The options of {@code hybridmq-export}; anything else is refused with the list of known ones. */
final class ExportOptions implements Serializable {
  private static final long serialVersionUID = 1L;
  static final List<String> KNOWN = Arrays.asList("path", "includeHeaders");

  final String path;
  final boolean includeHeaders;

  private ExportOptions(String path, boolean includeHeaders) {
    this.path = path;
    this.includeHeaders = includeHeaders;
  }

  static ExportOptions parse(CaseInsensitiveStringMap options) {
    for (Map.Entry<String, String> entry : options.entrySet()) {
      String key = entry.getKey();
      boolean known = KNOWN.stream().anyMatch(k -> k.equalsIgnoreCase(key));
      if (!known) {
        throw new IllegalArgumentException(
            ExportSource.NAME + ": unknown option '" + key + "'; known options: " + KNOWN
                + " (offset ranges, partitions and streams: format(\"hybridmq\"))");
      }
    }
    String path = options.get("path");
    if (path == null || path.isBlank()) {
      throw new IllegalArgumentException(
          ExportSource.NAME + ": option path (the exported log directory) is required");
    }
    String headers = options.getOrDefault("includeHeaders", "false").trim().toLowerCase(Locale.ROOT);
    if (!headers.equals("true") && !headers.equals("false")) {
      throw new IllegalArgumentException(
          ExportSource.NAME + ": option includeHeaders must be true or false, got '"
              + options.get("includeHeaders") + "'");
    }
    return new ExportOptions(path, headers.equals("true"));
  }
}
