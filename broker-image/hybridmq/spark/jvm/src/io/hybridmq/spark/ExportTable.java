package io.hybridmq.spark;

import java.util.EnumSet;
import java.util.Set;

import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/** One exported log directory as a read-only batch table. */
final class ExportTable implements SupportsRead {
  private final ExportOptions options;
  private final StructType schema;

  ExportTable(ExportOptions options, StructType schema) {
    this.options = options;
    this.schema = schema;
  }

  @Override
  public String name() {
    return ExportSource.NAME + ":" + options.path;
  }

  @Override
  public StructType schema() {
    return schema;
  }

  @Override
  public Set<TableCapability> capabilities() {
    return EnumSet.of(TableCapability.BATCH_READ);
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap scanOptions) {
    return new ExportScanBuilder(options, schema);
  }
}
