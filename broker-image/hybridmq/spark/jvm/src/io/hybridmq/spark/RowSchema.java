package io.hybridmq.spark;

import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/** The row schema, the same as the {@code hybridmq} Python source's (hybridmq.spark.schema). */
final class RowSchema {
  private RowSchema() {}

  static final StructType HEADER =
      new StructType()
          .add("key", DataTypes.StringType)
          .add("value", DataTypes.BinaryType);

  static StructType of(boolean includeHeaders) {
    StructType schema =
        new StructType()
            .add("partition", DataTypes.StringType)
            .add("partition_type", DataTypes.StringType)
            .add("offset", DataTypes.LongType)
            .add("destination", DataTypes.StringType)
            .add("key", DataTypes.BinaryType)
            .add("producer_id", DataTypes.StringType)
            .add("sequence", DataTypes.LongType)
            .add("timestamp", DataTypes.TimestampType);
    if (includeHeaders) {
      schema = schema.add(new StructField("headers", DataTypes.createArrayType(HEADER), true,
          org.apache.spark.sql.types.Metadata.empty()));
    }
    return schema.add("value", DataTypes.BinaryType);
  }
}
