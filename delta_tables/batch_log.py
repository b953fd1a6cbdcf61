"""Batch log: one row per micro-batch a job committed (the ledger that makes replays idempotent).

``(job, batchId)`` is unique: rows are appended with Delta's idempotent ``txnAppId/txnVersion``, so a replayed
batch does not log twice. The engine (``job = engine-<query id>``) records the rules version it pinned, its row
counts (``rows``, ``late``, ``quarantined``, ``alerts``, ...) and step timings in ms (``metrics``) here; its
replay ledger proper is ``engine_progress``.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    DoubleType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from delta_tables.idempotent import Txn, append_idempotent
from delta_tables.local_rows import local_frame
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


def log_batch(spark: SparkSession, path: str, row: dict[str, Any], *, txn: Txn | None) -> None:
    """Append the batch's row (BATCH_LOG_SCHEMA fields); with ``txn`` a replayed batch does not add a second one."""
    source = local_frame(spark, [row], BATCH_LOG_SCHEMA)  # literals: no Python worker for one row
    append_idempotent(source, path, txn)


def batch_logged(spark: SparkSession, path: str, job: str, batch_id: int) -> bool:
    """Whether ``job`` has logged ``batch_id`` (for the engine: the batch completed, a replay has nothing to do)."""
    frame = spark.read.format("delta").load(path)
    return bool(frame.where((F.col("job") == job) & (F.col("batchId") == batch_id)).limit(1).count())
