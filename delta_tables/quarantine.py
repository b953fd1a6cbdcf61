"""Quarantine: every record that could not be applied, with its raw payload, the reason and where it came from.

Written by the rules CDC job (``source = 'rules_cdc'``) and the engine (``source = 'transactions'``).
Nothing is dropped silently: records in = applied + quarantined.
"""

from __future__ import annotations

from pyspark.sql.types import DateType, LongType, StringType, StructField, StructType, TimestampType

from delta_tables.table_spec import TableSpec

QUARANTINE_SCHEMA = StructType(
    [
        StructField("quarantineId", StringType(), False),  # sha-256 of (source, sourceOffset, rawPayload)
        StructField("source", StringType(), False),  # 'rules_cdc' | 'transactions'
        StructField("sourceOffset", StringType(), True),  # e.g. 'kafka:topic/2/1043' or 'file:/x.jsonl:17'
        StructField("rawPayload", StringType(), True),
        StructField("reason", StringType(), False),
        StructField("batchId", LongType(), True),
        StructField("quarantinedAt", TimestampType(), False),
        StructField("quarantineDate", DateType(), False),
    ]
)

QUARANTINE = TableSpec(
    name="quarantine",
    schema=QUARANTINE_SCHEMA,
    comment="Invalid CDC events and transactions: raw payload, reason, source offset.",
    partition_by=("quarantineDate",),
)
