"""Engine progress: the intent ledger of the streaming engine, one row per (appId, batchId).

Before a micro-batch writes anything it records what it *will* read: the rules-table version it pinned, the
registry and state versions, the max event time of earlier batches. A re-run of the batch (a crash before the
checkpoint commit) finds the row and reads exactly the same snapshots, so it computes exactly the same writes,
which Delta then skips as already committed (see delta_tables/idempotent.py).

Append-only: a batch has a PLANNED row (rules pinned; state maintenance follows) and then a READY row
(state/cooldown versions to evaluate against pinned too), or only a READY row when there is nothing to maintain.
Each append is idempotent (``txnAppId``), so a row is never written twice. A batch is complete when its
``batch_log`` row exists (its last write).
``appId`` is ``engine-<streaming query id>``: a new checkpoint starts a new series of batch ids without colliding
with an old one.

Example::

    row = read_progress(spark, path, "engine-1f2e", 7)   # None the first time
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from delta_tables.idempotent import Txn, append_idempotent
from delta_tables.local_rows import local_frame
from delta_tables.table_spec import TableSpec

PLANNED, READY = "PLANNED", "READY"

ENGINE_PROGRESS_SCHEMA = StructType(
    [
        StructField("appId", StringType(), False),
        StructField("batchId", LongType(), False),
        StructField("status", StringType(), False),
        StructField("rulesVersion", LongType(), True),
        StructField("registryVersion", LongType(), True),
        StructField("bronzeVersion", LongType(), True),  # bronze before this batch: what a backfill reads
        StructField("stateVersion", LongType(), True),
        StructField("cooldownVersion", LongType(), True),
        StructField("maxEventTimeBefore", LongType(), True),  # epoch ms, null before the first batch
        StructField("maxEventTimeAfter", LongType(), True),
        StructField("liveRuleIds", ArrayType(LongType(), False), True),
        StructField("startedAt", TimestampType(), False),
        StructField("recordedAt", TimestampType(), False),
    ]
)

ENGINE_PROGRESS = TableSpec(
    name="engine_progress",
    schema=ENGINE_PROGRESS_SCHEMA,
    comment="Streaming engine intent ledger: pinned snapshot versions and high-water mark per micro-batch.",
)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


def read_progress(spark: SparkSession, path: str, app_id: str, batch_id: int) -> dict[str, Any] | None:
    """The ledger row of one batch (READY if there is one, else PLANNED), or None."""
    rows = (
        spark.read.format("delta")
        .load(path)
        .where((F.col("appId") == app_id) & (F.col("batchId") == batch_id))
        .orderBy(F.col("status").desc())  # READY > PLANNED
        .limit(1)
        .collect()
    )
    return rows[0].asDict() if rows else None


def previous_progress(spark: SparkSession, path: str, app_id: str, batch_id: int) -> dict[str, Any] | None:
    """The newest ledger row of this app before ``batch_id``; else the newest row of any app (a new checkpoint)."""
    table = spark.read.format("delta").load(path)
    rows = (
        table.where((F.col("appId") == app_id) & (F.col("batchId") < batch_id))
        .orderBy(F.col("batchId").desc(), F.col("status").desc())
        .limit(1)
        .collect()
    )
    if not rows:
        rows = table.orderBy(F.col("recordedAt").desc()).limit(1).collect()
    return rows[0].asDict() if rows else None


def record_intent(spark: SparkSession, path: str, row: dict[str, Any], *, txn: Txn) -> dict[str, Any]:
    """Append the batch's ledger row (PLANNED or READY); return it as written.

    Call it only when the batch has no row of that status yet (``read_progress``); ``txn`` (one app id per
    status) makes Delta skip a second append of it anyway.
    """
    full = {field.name: None for field in ENGINE_PROGRESS_SCHEMA.fields} | {"recordedAt": _now()} | row
    append_idempotent(local_frame(spark, [full], ENGINE_PROGRESS_SCHEMA), path, txn)
    return full


def trim_progress(spark: SparkSession, path: str, app_id: str, keep_from_batch: int) -> None:
    """Drop this app's rows older than ``keep_from_batch`` (the ledger only needs the recent ones)."""
    DeltaTable.forPath(spark, path).delete((F.col("appId") == app_id) & (F.col("batchId") < keep_from_batch))
