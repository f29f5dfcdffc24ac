package io.hybridmq.spark;

import org.apache.arrow.vector.BaseIntVector;
import org.apache.arrow.vector.ValueVector;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.vectorized.ArrowColumnVector;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.sql.vectorized.ColumnarMap;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * A dictionary-encoded string column seen as a string column without decoding it: each row looks
 * its string up in the dictionary (Spark's ArrowColumnVector would show the indices).
 */
final class DictionaryStringVector extends ColumnVector {
  private final BaseIntVector indices;
  private final ArrowColumnVector dictionary;

  DictionaryStringVector(BaseIntVector indices, ValueVector dictionary) {
    super(DataTypes.StringType);
    this.indices = indices;
    this.dictionary = new ArrowColumnVector(dictionary);
  }

  @Override
  public void close() {
    // the vectors belong to the segment reader, which closes them
  }

  @Override
  public boolean hasNull() {
    return indices.getNullCount() > 0;
  }

  @Override
  public int numNulls() {
    return indices.getNullCount();
  }

  @Override
  public boolean isNullAt(int rowId) {
    return indices.isNull(rowId);
  }

  @Override
  public UTF8String getUTF8String(int rowId) {
    return indices.isNull(rowId) ? null : dictionary.getUTF8String((int) indices.getValueAsLong(rowId));
  }

  private static UnsupportedOperationException notString() {
    return new UnsupportedOperationException("a dictionary-encoded string column holds strings only");
  }

  @Override
  public byte[] getBinary(int rowId) {
    throw notString();
  }

  @Override
  public boolean getBoolean(int rowId) {
    throw notString();
  }

  @Override
  public byte getByte(int rowId) {
    throw notString();
  }

  @Override
  public short getShort(int rowId) {
    throw notString();
  }

  @Override
  public int getInt(int rowId) {
    throw notString();
  }

  @Override
  public long getLong(int rowId) {
    throw notString();
  }

  @Override
  public float getFloat(int rowId) {
    throw notString();
  }

  @Override
  public double getDouble(int rowId) {
    throw notString();
  }

  @Override
  public ColumnarArray getArray(int rowId) {
    throw notString();
  }

  @Override
  public ColumnarMap getMap(int ordinal) {
    throw notString();
  }

  @Override
  public Decimal getDecimal(int rowId, int precision, int scale) {
    throw notString();
  }

  @Override
  public ColumnVector getChild(int ordinal) {
    throw notString();
  }
}
