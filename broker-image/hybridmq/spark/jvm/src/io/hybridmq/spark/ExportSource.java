package io.hybridmq.spark;

import java.util.Map;

import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * {@code spark.read.format("hybridmq-export")}: batch reads of an exported log directory, columnar
 * and with column pruning (the Python source {@code hybridmq} reads live clusters and streams).
 */
public final class ExportSource implements TableProvider, DataSourceRegister {
  public static final String NAME = "hybridmq-export";

  @Override
  public String shortName() {
    return NAME;
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    return RowSchema.of(ExportOptions.parse(options).includeHeaders);
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    return new ExportTable(ExportOptions.parse(new CaseInsensitiveStringMap(properties)), schema);
  }
}
