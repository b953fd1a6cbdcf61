"""Alerts: one row per (rule, transaction) whose lookback aggregate met the rule's limit.

``alertId`` is deterministic (rule id + transaction id), so a replayed batch cannot duplicate an alert.
"""

from __future__ import annotations

from pyspark.sql.types import (
    DateType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from delta_tables.table_spec import TableSpec
from delta_tables.transaction_types import AGGREGATE_TYPE

ALERTS_SCHEMA = StructType(
    [
        StructField("alertId", StringType(), False),
        StructField("ruleId", LongType(), False),
        StructField("ruleSourcePosition", StringType(), True),
        StructField("ruleSnapshot", StringType(), True),  # JSON of the rule as evaluated
        StructField("rulesVersion", LongType(), True),
        StructField("keyValue", StringType(), False),
        StructField("transactionId", StringType(), False),
        StructField("eventTime", TimestampType(), False),
        StructField("aggregateValue", AGGREGATE_TYPE, True),
        StructField("aggregatorFunctionType", StringType(), False),
        StructField("limitOperatorType", StringType(), False),
        StructField("limit", AGGREGATE_TYPE, False),
        StructField("windowMinutes", IntegerType(), False),
        StructField("detectedAt", TimestampType(), False),
        StructField("batchId", LongType(), False),
        StructField("ingestedAt", TimestampType(), True),
        StructField("latencyMs", LongType(), True),
        StructField("detectedDate", DateType(), False),
    ]
)

ALERTS = TableSpec(
    name="alerts",
    schema=ALERTS_SCHEMA,
    comment="Rule violations: rule as evaluated, key, transaction, aggregate vs limit, detection latency.",
    partition_by=("detectedDate",),
    properties={"delta.enableChangeDataFeed": "true"},
)
