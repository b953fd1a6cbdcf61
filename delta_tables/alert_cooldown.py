"""Alert cooldown memory: per (rule, key) the latest event time of an *emitted* alert.

A rule with ``cooldownMinutes = C`` suppresses an alert for a transaction at ``t`` when its pair has an earlier
emitted alert at ``t_a`` with ``t < t_a + C``. A rule's memory lives while its id is in force: when the id comes
back into force after leaving it, and on the retention cadence to drop rows older than any possible cooldown, the
engine writes the table over from its cache without those rows (``compact_memory``;
``pipelines.engine.retention.rewrite_memory``; ``pipelines.engine.state_rebuild.forget_memory``).

Example::

    append_last_alerts(last_alerts, settings.table_path("alert_cooldown"), batch_id=7, tag=tag)
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from delta_tables.arrow_reads import table_columns_at
from delta_tables.arrow_writes import overwrite_frame_at
from delta_tables.idempotent import CommitTag, append_tagged, overwrite_tagged
from delta_tables.table_spec import TableSpec

ALERT_COOLDOWN_SCHEMA = StructType(
    [
        StructField("ruleId", LongType(), False),
        StructField("keyValue", StringType(), False),
        StructField("lastAlertTimeMs", LongType(), False),
        StructField("lastBatchId", LongType(), False),
        StructField("updatedAt", TimestampType(), False),
    ]
)

ALERT_COOLDOWN = TableSpec(
    name="alert_cooldown",
    schema=ALERT_COOLDOWN_SCHEMA,
    comment="Latest emitted alert event time per (rule, key), for rule cooldowns.",
    properties={"delta.enableDeletionVectors": "true"},
    checkpoint_every=19,
)


def append_last_alerts(
    last_alerts: DataFrame,
    path: str,
    *,
    batch_id: int | None,
    tag: CommitTag | None,
    files: int | None = None,
    rows_at_most: int | None = None,
) -> None:
    """Append a batch's latest emitted alert per (ruleId, keyValue) (columns ruleId, keyValue, lastAlertTimeMs).

    Append-only, like the bucket state: a pair may have a row per batch with alerts; its memory is the greatest
    ``lastAlertTimeMs`` (``fold_memory``), so an older row never moves it back. ``rows_at_most``: see
    ``append_tagged`` (a bound known: delta-rs may write it from the driver).
    """
    frame = last_alerts
    if batch_id is not None:  # else last_alerts has them (columns: no per-batch literal in the generated code)
        frame = frame.withColumns({"lastBatchId": F.lit(batch_id).cast("long"), "updatedAt": F.current_timestamp()})
    frame = frame.select(*[f.name for f in ALERT_COOLDOWN_SCHEMA.fields])
    append_tagged(frame, path, tag, files=files, rows_at_most=rows_at_most)


def fold_memory(rows: DataFrame) -> DataFrame:
    """One row per (ruleId, keyValue) with the greatest lastAlertTimeMs (and the newest lastBatchId and updatedAt
    when ``rows`` has them)."""
    extra = [c for c in ("lastBatchId", "updatedAt") if c in rows.columns]
    return rows.groupBy("ruleId", "keyValue").agg(
        F.max("lastAlertTimeMs").alias("lastAlertTimeMs"), *[F.max(c).alias(c) for c in extra]
    )


@dataclass(frozen=True)
class MemoryCounts:
    """What folding the cooldown memory at a version would do: its rows, its (rule, key) pairs (the folded rows), and
    the pairs whose latest alert is before a horizon (dropped by the fold)."""

    rows: int
    pairs: int
    dropped: int


def memory_counts_at(path: str, *, version: int, horizon_ms: int) -> MemoryCounts | None:
    """``MemoryCounts`` of the table at ``version`` against ``horizon_ms``, from its three key columns read on the
    driver (``arrow_reads.table_columns_at``: no Spark job, no cache loaded); None where they cannot be read so."""
    rows = table_columns_at(path, version=version, columns=["ruleId", "keyValue", "lastAlertTimeMs"])
    if rows is None:
        return None
    latest = rows.group_by(["ruleId", "keyValue"]).aggregate([("lastAlertTimeMs", "max")])
    dropped = pc.sum(pc.less(latest["lastAlertTimeMs_max"], horizon_ms).cast(pa.int64())).as_py() or 0
    return MemoryCounts(rows.num_rows, latest.num_rows, int(dropped))


def compact_memory(
    folded: DataFrame,
    path: str,
    *,
    tag: CommitTag | None,
    read_version: int | None = None,
    rows_at_most: int | None = None,
) -> None:
    """Replace the table with ``folded`` (ALERT_COOLDOWN_SCHEMA columns, one row per pair) in one commit.

    Given the version the fold was read at and a bound on its rows within ``DRIVER_OVERWRITE_ROWS``, delta-rs writes
    it from the driver where it applies (``arrow_writes.overwrite_frame_at``), else Spark."""
    table = folded.select(*[f.name for f in ALERT_COOLDOWN_SCHEMA.fields])
    if overwrite_frame_at(
        table,
        path,
        partition=None,
        read_version=read_version,
        rows_at_most=rows_at_most,
        user_metadata=tag.to_json() if tag else None,
    ):
        return
    overwrite_tagged(table, path, tag)
