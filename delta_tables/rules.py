"""Rules: the current state of every rule id ever seen, with tombstones (never a physical delete).

One row per ``ruleId``. ``ruleState`` is ACTIVE, PAUSED, DELETED or DISABLED; the last two are tombstones
that keep the source position of the event that made them, so that a stale event cannot resurrect a rule.
A rule with a relative limit keeps its ``baseline`` as canonical JSON (null: a fixed limit).
``ruleId = -1`` is the truncate watermark (a DELETED row at the newest truncate's position; never live).
Written only by the CDC MERGE (``delta_tables.rules_merge``); see docs/rules-cdc.md.
Change Data Feed is on: the engine and audits read rule changes from it.
"""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from delta_tables.table_spec import TableSpec
from delta_tables.transaction_types import AGGREGATE_TYPE

RULE_CONTENT_COLUMNS = (
    "ruleName",
    "groupingKeyNames",
    "aggregateFieldName",
    "aggregatorFunctionType",
    "limitOperatorType",
    "limit",
    "windowMinutes",
    "filter",
    "cooldownMinutes",
    "baseline",
)
"""The columns a rule's definition lives in: what a tombstone clears (besides ruleId, ruleState and disabled)."""

RULES_SCHEMA = StructType(
    [
        StructField("ruleId", LongType(), False),
        StructField("ruleName", StringType(), True),
        StructField("ruleState", StringType(), False),  # ACTIVE | PAUSED | DELETED | DISABLED
        StructField("groupingKeyNames", ArrayType(StringType(), False), True),
        StructField("aggregateFieldName", StringType(), True),
        StructField("aggregatorFunctionType", StringType(), True),
        StructField("limitOperatorType", StringType(), True),
        StructField("limit", AGGREGATE_TYPE, True),
        StructField("windowMinutes", IntegerType(), True),
        StructField("filter", StringType(), True),  # canonical JSON of the filter, or null
        StructField("cooldownMinutes", IntegerType(), True),
        StructField("disabled", BooleanType(), False),
        StructField("sourcePosition", StringType(), False),  # sortable key; see rules_cdc.source_position
        StructField("sourceOp", StringType(), False),
        StructField("sourceTsMs", LongType(), True),
        StructField("tombstonedAt", TimestampType(), True),
        StructField("updatedAt", TimestampType(), False),
        # A relative limit's baseline, canonical JSON like filter (sorted keys, no spaces), or null: a fixed limit.
        # Last, as add_missing_columns appends it to the rules table of an older release (its rows: null).
        StructField("baseline", StringType(), True),
    ]
)

RULES = TableSpec(
    name="rules",
    schema=RULES_SCHEMA,
    comment="Current rules keyed by ruleId; deleted/disabled rules stay as tombstones.",
    properties={"delta.enableChangeDataFeed": "true"},
)
