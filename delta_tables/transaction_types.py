"""Spark types of the transaction fields declared in conf (``transaction_schema``): one place, used everywhere."""

from __future__ import annotations

import re

from pyspark.sql.types import (
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from pipelines.base.settings import TransactionSchema

_DECIMAL = re.compile(r"^decimal\((\d+),\s*(\d+)\)$")
_SIMPLE: dict[str, DataType] = {
    "string": StringType(),
    "long": LongType(),
    "int": IntegerType(),
    "double": DoubleType(),
    "boolean": BooleanType(),
    "timestamp": TimestampType(),
    "date": DateType(),
}

AGGREGATE_TYPE = DecimalType(38, 6)
"""Type of every aggregate (sum, min, max, avg) and rule limit: exact, wide enough for 30 days of sums."""


def spark_type(field_type: str) -> DataType:
    """``'decimal(18,2)'`` -> ``DecimalType(18, 2)``; ``'long'`` -> ``LongType()``."""
    match = _DECIMAL.match(field_type)
    if match:
        return DecimalType(int(match.group(1)), int(match.group(2)))
    return _SIMPLE[field_type]


def transaction_struct(schema: TransactionSchema) -> StructType:
    """The typed transaction record as declared in conf (required fields are still nullable in Spark)."""
    return StructType([StructField(f.name, spark_type(f.type), True) for f in schema.fields])
