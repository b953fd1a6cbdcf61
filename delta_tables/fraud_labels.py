"""Fraud labels: transactions known to be fraud, from outside the engine (chargebacks, case management).

Labels arrive weeks after the payment, keyed by transaction id. One row per (transaction, source): importing the
same file or table again adds nothing (a MERGE that only inserts), and a label never changes afterwards.
"""

from __future__ import annotations

from pyspark.sql.types import StringType, StructField, StructType, TimestampType

from delta_tables.table_spec import TableSpec

FRAUD_LABELS_SCHEMA = StructType(
    [
        StructField("transactionId", StringType(), False),
        StructField("labelSource", StringType(), False),  # e.g. "chargebacks" (the importer's --source)
        StructField("labelledAt", TimestampType(), True),  # when the source says it became known, if it says
        StructField("importedAt", TimestampType(), False),
        StructField("importedBy", StringType(), False),
        StructField("reason", StringType(), True),  # the source's reason code, verbatim
    ]
)

FRAUD_LABELS = TableSpec(
    name="fraud_labels",
    schema=FRAUD_LABELS_SCHEMA,
    comment="Confirmed-fraud labels by transaction id (chargebacks, case outcomes); one row per transaction+source.",
)
