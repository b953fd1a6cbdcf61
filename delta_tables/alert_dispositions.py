"""Alert dispositions: what an analyst decided an alert was — confirmed fraud, false positive or unsure.

Append-only: a later disposition of the same alert supersedes an earlier one (``decidedAt``, then
``dispositionId`` break ties), and every one says who made it. Nothing is updated or deleted, so the table is the
audit trail of the decisions as well as their current state.
"""

from __future__ import annotations

from pyspark.sql.types import DateType, LongType, StringType, StructField, StructType, TimestampType

from delta_tables.table_spec import TableSpec

DISPOSITIONS = ("CONFIRMED_FRAUD", "FALSE_POSITIVE", "UNSURE")
"""The decisions an analyst can record for an alert."""

ALERT_DISPOSITIONS_SCHEMA = StructType(
    [
        StructField("dispositionId", StringType(), False),  # uuid4: ties between equal decidedAt
        StructField("alertId", StringType(), False),
        StructField("ruleId", LongType(), False),
        StructField("transactionId", StringType(), False),
        StructField("disposition", StringType(), False),  # one of DISPOSITIONS
        StructField("decidedBy", StringType(), False),
        StructField("decidedAt", TimestampType(), False),
        StructField("note", StringType(), True),
        StructField("decidedDate", DateType(), False),
    ]
)

ALERT_DISPOSITIONS = TableSpec(
    name="alert_dispositions",
    schema=ALERT_DISPOSITIONS_SCHEMA,
    comment="Append-only analyst decisions on alerts (a later one wins): confirmed fraud, false positive, unsure.",
    partition_by=("decidedDate",),
)
