"""Bucket state: pre-aggregated transactions per (state, key, bucket) — sum, count, min, max.

A *state* is what rules with the same (grouping keys, aggregate field, filter) share. Buckets are
``bucket_seconds`` wide (conf, default 60 s); ``bucketStart`` is epoch milliseconds.
"""

from __future__ import annotations

from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from delta_tables.table_spec import TableSpec
from delta_tables.transaction_types import AGGREGATE_TYPE

BUCKET_STATE_SCHEMA = StructType(
    [
        StructField("stateId", StringType(), False),
        StructField("keyValue", StringType(), False),
        StructField("bucketStart", LongType(), False),
        StructField("sum", AGGREGATE_TYPE, True),
        StructField("count", LongType(), False),
        StructField("min", AGGREGATE_TYPE, True),
        StructField("max", AGGREGATE_TYPE, True),
        StructField("lastBatchId", LongType(), False),
        StructField("updatedAt", TimestampType(), False),
    ]
)

BUCKET_STATE = TableSpec(
    name="bucket_state",
    schema=BUCKET_STATE_SCHEMA,
    comment="Minute buckets of sum/count/min/max per shared rule state and grouping key.",
    partition_by=("stateId",),
)
