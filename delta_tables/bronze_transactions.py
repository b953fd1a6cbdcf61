"""Bronze transactions: every accepted transaction, as typed by conf, with where and when it arrived.

Partitioned by ``eventDate`` so that backfills and retention read only the days they need.
Unknown extra fields of a record are kept verbatim in ``extraFields`` (a JSON object string).
"""

from __future__ import annotations

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
from delta_tables.transaction_types import transaction_struct
from pipelines.base.settings import TransactionSchema

SYSTEM_FIELDS = StructType(
    [
        StructField("extraFields", StringType(), True),
        StructField("eventDate", DateType(), False),
        StructField("ingestedAt", TimestampType(), False),
        StructField("source", StringType(), False),  # 'kafka' | 'files' | 'delta'
        StructField("sourceOffset", StringType(), True),
        StructField("kafkaPartition", IntegerType(), True),
        StructField("kafkaOffset", LongType(), True),
        StructField("batchId", LongType(), False),
        StructField("isLate", BooleanType(), False),
    ]
)


def bronze_schema(schema: TransactionSchema) -> StructType:
    return StructType(transaction_struct(schema).fields + SYSTEM_FIELDS.fields)


def bronze_spec(schema: TransactionSchema) -> TableSpec:
    return TableSpec(
        name="bronze_transactions",
        schema=bronze_schema(schema),
        comment="Accepted transactions with ingestion time, source offset and lateness flag.",
        partition_by=("eventDate",),
        checkpoint_every=10,
    )
