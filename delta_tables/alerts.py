"""Alerts: one row per (rule, transaction) whose lookback aggregate met the rule's limit.

``alertId`` is deterministic (rule id + transaction id), so a replayed batch cannot duplicate an alert.

``shadow`` is true for the alerts of a SHADOW rule (evaluated like an ACTIVE one, never acted on: not published,
not counted as live). The engine writes it true or false; it is nullable only so that an alerts table of an older
release gets it through ``table_spec.add_missing_columns`` (which adds nullable columns only), and there null (an
alert written before shadow mode existed) means live. Readers select with ``live_alerts`` / ``shadow_alerts``,
which also accept a frame without the column.

Example::

    alerts = spark.read.format("delta").load(settings.table_path("alerts"))
    live_alerts(alerts).groupBy("ruleId").count()      # what the dashboards count
    shadow_alerts(alerts).groupBy("ruleId").count()    # rules on trial
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
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
        StructField("shadow", BooleanType(), True),  # a SHADOW rule's alert; null (older rows) = live
        # A relative limit's baseline B (the key's history aggregate the limit multiplies); null for a fixed limit.
        StructField("baselineValue", AGGREGATE_TYPE, True),
    ]
)

SHADOW_COLUMN = "shadow"


def is_shadow(alerts: DataFrame) -> Column:
    """True for a shadow alert; false for a live one, also where the column is null or absent (older tables)."""
    if SHADOW_COLUMN not in alerts.columns:
        return F.lit(False)
    return F.coalesce(F.col(SHADOW_COLUMN), F.lit(False))


def live_alerts(alerts: DataFrame) -> DataFrame:
    """The alerts that are acted on: every alert but a SHADOW rule's."""
    return alerts if SHADOW_COLUMN not in alerts.columns else alerts.where(~is_shadow(alerts))


def shadow_alerts(alerts: DataFrame) -> DataFrame:
    """The alerts of SHADOW rules (recorded, never acted on)."""
    return alerts.where(is_shadow(alerts))


ALERTS = TableSpec(
    name="alerts",
    schema=ALERTS_SCHEMA,
    comment="Rule violations: rule as evaluated, key, transaction, aggregate vs limit, detection latency.",
    partition_by=("detectedDate",),
    properties={"delta.enableChangeDataFeed": "true"},
    checkpoint_every=17,
)
