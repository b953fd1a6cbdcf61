"""Rule change log: every CDC event that was applied to the rules table, for audit and ``rules history``.

One row per event newer than the table's row for its rule (events superseded within their batch included,
with their own position); a truncate logs ``ruleId = -1`` and one row per live rule it tombstoned.
``rulesVersion`` is the rules-table version the batch's MERGE committed; ``changedBy``/``approvedBy``/
``changeReason``/``proposalId`` say who made the change, who approved it and why (null: unattributed, e.g. an
edit typed in SQL, a CLI event, a truncate). See docs/rules-cdc.md.
"""

from __future__ import annotations

from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from delta_tables.table_spec import TableSpec

RULE_CHANGES_SCHEMA = StructType(
    [
        StructField("ruleId", LongType(), False),
        StructField("op", StringType(), False),  # c | u | d | r | t
        StructField("sourcePosition", StringType(), False),
        StructField("sourceOffset", StringType(), True),
        StructField("before", StringType(), True),  # JSON
        StructField("after", StringType(), True),  # JSON
        StructField("resultingState", StringType(), True),
        StructField("appliedAt", TimestampType(), False),
        StructField("rulesVersion", LongType(), True),
        StructField("batchId", LongType(), True),
        # Who wrote the change, who approved it, why, from which proposal (fraud_rules' attribution columns,
        # conf/rulesdb/005_attribution.sql); null: unattributed. Added to older tables by add_missing_columns.
        StructField("changedBy", StringType(), True),
        StructField("approvedBy", StringType(), True),
        StructField("changeReason", StringType(), True),
        StructField("proposalId", LongType(), True),
    ]
)

RULE_CHANGES = TableSpec(
    name="rule_changes",
    schema=RULE_CHANGES_SCHEMA,
    comment="Append-only log of applied rule CDC events with the resulting rules-table version.",
)
