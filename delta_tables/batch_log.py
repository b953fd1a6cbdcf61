"""Batch log: one row per micro-batch a job committed (the ledger that makes replays idempotent).

``(job, batchId)`` is unique. A batch that finds its row already present was fully applied before a crash
and skips its writes; the engine records the rules version it pinned and its counts here.
"""

from __future__ import annotations

from pyspark.sql.types import (
    DoubleType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from delta_tables.table_spec import TableSpec

BATCH_LOG_SCHEMA = StructType(
    [
        StructField("job", StringType(), False),
        StructField("batchId", LongType(), False),
        StructField("rulesVersion", LongType(), True),
        StructField("startedAt", TimestampType(), False),
        StructField("finishedAt", TimestampType(), False),
        StructField("durationMs", DoubleType(), True),
        StructField("counts", MapType(StringType(), LongType()), True),
        StructField("metrics", MapType(StringType(), DoubleType()), True),
    ]
)

BATCH_LOG = TableSpec(
    name="batch_log",
    schema=BATCH_LOG_SCHEMA,
    comment="One row per committed micro-batch per job: pinned rules version, counts, timings.",
)
