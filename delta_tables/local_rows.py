"""Small driver-side rows (a batch-log row, the rules of a batch, the state registry) as a DataFrame.

``spark.createDataFrame(list_of_rows, schema)`` builds a Python RDD: every action on it starts Python workers to
unpickle the rows (seconds per call on a loaded 2-core machine). A projection of literals stays in the JVM but
costs a Py4J round trip per value and per cast (thousands for the rules of a batch). So the rows travel as *one*
JSON text per row in a local relation, parsed in the JVM by ``from_json`` against the schema: a few Py4J calls per
row, exact for every type the tables use (decimals are parsed from their digits, not through a double).

Values are encoded the way ``createDataFrame`` would take them: ``None`` -> null, ``list``/``tuple`` -> array,
``dict`` -> map or struct, ``Decimal`` -> its digits (a JSON string), ``datetime`` -> ISO text in UTC (naive =
UTC), ``date`` -> ISO date, ``bool``/``int``/``float``/``str`` as JSON.

Example::

    frame = local_frame(spark, [{"job": "engine-1", "batchId": 7, ...}], BATCH_LOG_SCHEMA)
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, StringType, StructField, StructType

from pipelines.base.column_memo import per_jvm
from pipelines.base.jvm_classes import jvm_class


def _plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        return format(value, "f")  # a JSON string: from_json reads a decimal's digits exactly from it
    if isinstance(value, dt.datetime):
        aware = value if value.tzinfo is None else value.astimezone(dt.UTC).replace(tzinfo=None)
        return aware.isoformat(timespec="microseconds") + "Z"
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{value!r} cannot be a column value here")
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def row_json(row: Mapping[str, Any] | Sequence[Any], schema: StructType) -> str:
    """One row as a JSON object keyed by the schema's field names."""
    names = [f.name for f in schema.fields]
    values = [row.get(name) for name in names] if isinstance(row, Mapping) else list(row)
    if len(values) != len(names):
        raise ValueError(f"a row has {len(values)} values for {len(names)} fields")
    plain = {name: _plain(value) for name, value in zip(names, values, strict=True)}
    return json.dumps(plain, allow_nan=False, separators=(",", ":"))


def local_frame(
    spark: SparkSession, rows: Sequence[Mapping[str, Any] | Sequence[Any]], schema: StructType
) -> DataFrame:
    """``rows`` (dicts by field name, or tuples in field order) as a DataFrame with exactly ``schema``'s columns.

    The frame is a ``LocalRelation`` (one JSON text per row, parsed by a projection that the optimizer evaluates
    once): it runs no job of its own, and joined to other frames its values are data, not literals compiled into
    the generated code.
    """
    gateway: Any = spark.sparkContext._gateway
    java_object, row_factory = jvm_class(spark, "java.lang.Object"), jvm_class(spark, "org.apache.spark.sql.RowFactory")
    java_rows = []
    for row in rows:
        values = gateway.new_array(java_object, 1)
        values[0] = row_json(row, schema)
        java_rows.append(row_factory.create(values))
    text = spark._jsparkSession.parseDataType(_TEXT_SCHEMA.json())
    frame = DataFrame(spark._jsparkSession.createDataFrame(java_rows, text), spark)
    parsed, declared = _projections(schema)
    return frame.select(parsed).select(*declared)


@per_jvm
def _projections(schema: StructType) -> tuple[Column, tuple[Column, ...]]:
    """``local_frame``'s parse of the JSON texts and its typed columns (built once per JVM: ``column_memo``)."""
    parsed = F.from_json("json", schema, {"timestampFormat": _TIMESTAMP_FORMAT}).alias("r")
    return parsed, tuple(_declared(F.col(f"r.{f.name}"), f).alias(f.name) for f in schema.fields)


def _declared(column: Column, field: StructField) -> Column:
    """``from_json`` reads every array as one that may hold nulls; an array declared without them is compacted (a
    no-op on its values) to get that type back: a MERGE or append into the table would not cast it otherwise."""
    if isinstance(field.dataType, ArrayType) and not field.dataType.containsNull:
        return F.array_compact(column)
    return column


_TIMESTAMP_FORMAT = "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"
_TEXT_SCHEMA = StructType([StructField("json", StringType(), False)])
