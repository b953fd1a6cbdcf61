"""Batch log: one row per micro-batch the engine completed — its metrics, and what the next batch starts from.

``(job, batchId)`` is unique: the row is the batch's last write, tagged like the others
(``delta_tables.idempotent``), so a replayed batch that finds it has nothing left to do. The engine
(``job = engine-<query id>``) records the rules version it pinned, its row counts (``rows``, ``late``,
``quarantined``, ``alerts``, ...), step timings and latency in ms (``metrics``), the max event time seen so far
(``maxEventTimeMs``: the next batch's lateness bound) and the snapshot versions it read (``pins``).
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

from delta_tables.arrow_writes import append_rows_at
from delta_tables.idempotent import CommitTag, append_tagged
from delta_tables.local_rows import local_frame
from delta_tables.table_snapshot import table_file_count
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
        StructField("maxEventTimeMs", LongType(), True),  # max event time of this and all earlier batches
        StructField("pins", MapType(StringType(), LongType()), True),  # versions read: rules, state, ...
    ]
)

BATCH_LOG = TableSpec(
    name="batch_log",
    schema=BATCH_LOG_SCHEMA,
    comment="One row per committed micro-batch per job: pinned rules version, counts, timings.",
    checkpoint_every=13,
)


def log_batch(spark: SparkSession, path: str, row: dict[str, Any], *, tag: CommitTag | None) -> None:
    """Append the batch's row (BATCH_LOG_SCHEMA fields) in one commit carrying ``tag``: by delta-rs where it applies
    (``arrow_writes``: no Spark job), else by Spark."""
    values = tuple(row.get(field.name) for field in BATCH_LOG_SCHEMA.fields)
    if not append_rows_at(path, [values], BATCH_LOG_SCHEMA, user_metadata=tag.to_json() if tag else None):
        append_tagged(local_frame(spark, [row], BATCH_LOG_SCHEMA), path, tag)  # literals: no Python worker


def previous_batch(spark: SparkSession, path: str, job: str, batch_id: int) -> dict[str, Any] | None:
    """The newest row of ``job`` before ``batch_id``; else the newest engine row of any job (a new checkpoint
    continues from the lakehouse's last batch); None for a new lakehouse."""
    if table_file_count(spark, path) == 0:
        return None
    table = spark.read.format("delta").load(path)
    rows = (
        table.where((F.col("job") == job) & (F.col("batchId") < batch_id))
        .orderBy(F.col("batchId").desc())
        .limit(1)
        .collect()
    )
    if not rows:
        rows = table.where(F.col("job").startswith("engine-")).orderBy(F.col("finishedAt").desc()).limit(1).collect()
    return rows[0].asDict() if rows else None
