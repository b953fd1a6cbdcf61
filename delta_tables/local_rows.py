"""Small driver-side rows (a ledger row, a batch-log row, the rules of a batch) as a DataFrame of literals.

``spark.createDataFrame(list_of_rows, schema)`` builds a Python RDD: every action on it starts Python workers to
unpickle the rows (seconds per call on a loaded 2-core machine, several calls per micro-batch). A projection of
literals over ``spark.range(1)`` stays in the JVM. Values are converted the way ``createDataFrame`` would:
``None`` -> typed null, ``list`` -> array, ``dict`` -> map, ``Decimal``/``datetime``/``bool``/``int``/``str`` ->
literals, each cast to its field's type.

Example::

    frame = local_frame(spark, [{"appId": "engine-1", "batchId": 7, ...}], ENGINE_PROGRESS_SCHEMA)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DataType, MapType, StructType


def literal(value: Any, data_type: DataType) -> Column:
    """``value`` as a Column of ``data_type`` (arrays and maps element by element)."""
    if value is None:
        return F.lit(None).cast(data_type)
    if isinstance(data_type, ArrayType):
        items = [literal(v, data_type.elementType) for v in value]
        return (F.array(*items) if items else F.array()).cast(data_type)
    if isinstance(data_type, MapType):
        pairs = [c for k, v in value.items() for c in (literal(k, data_type.keyType), literal(v, data_type.valueType))]
        return (F.create_map(*pairs) if pairs else F.create_map()).cast(data_type)
    return F.lit(value).cast(data_type)


def local_frame(
    spark: SparkSession, rows: Sequence[Mapping[str, Any] | Sequence[Any]], schema: StructType
) -> DataFrame:
    """``rows`` (dicts by field name, or tuples in field order) as a DataFrame with exactly ``schema``'s columns."""
    fields = schema.fields

    def row_struct(row: Mapping[str, Any] | Sequence[Any]) -> Column:
        values = [row.get(f.name) for f in fields] if isinstance(row, Mapping) else list(row)
        if len(values) != len(fields):
            raise ValueError(f"a row has {len(values)} values for {len(fields)} fields")
        return F.struct(*[literal(v, f.dataType).alias(f.name) for v, f in zip(values, fields, strict=True)])

    if not rows:
        return spark.range(0).select(*[F.lit(None).cast(f.dataType).alias(f.name) for f in fields])
    if len(rows) == 1:
        return spark.range(1).select(row_struct(rows[0]).alias("_r")).select("_r.*")
    return spark.range(1).select(F.inline(F.array(*[row_struct(r) for r in rows]))).select(*[f.name for f in fields])
