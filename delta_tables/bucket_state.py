"""Bucket state: pre-aggregated transactions per (state, key, tile) — sum, count, value count, min, max.

A *state* is what rules with the same (grouping keys, aggregate field, filter) share (``Rule.state_id``).
Level-0 tiles are the buckets (``bucket_seconds`` wide, conf, default 60 s); level 1 groups 60 buckets (an hour
by default) and level 2 groups 24 level-1 tiles (a day): every batch adds its contribution to all three levels,
so a lookback of any width is answered from a bounded number of rows (see pipelines/engine/lookback.py).
``bucketStart`` is the tile's start in epoch milliseconds.

``count`` counts the transactions that pass the state's filter; ``valueCount`` those of them whose aggregate
field is not null (``sum``/``min``/``max`` are over those). COUNT rules read ``count``, AVG reads
``sum / valueCount``.

Example::

    merge_tiles(spark, settings.table_path("bucket_state"), tiles, batch_id=7, txn=Txn("engine-x:state", 7))
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType, TimestampType

from delta_tables.idempotent import Txn, append_idempotent, idempotent_dml
from delta_tables.table_spec import TableSpec
from delta_tables.transaction_types import AGGREGATE_TYPE

TILE_COLUMNS = ("stateId", "keyValue", "level", "bucketStart", "sum", "count", "valueCount", "min", "max")
"""The columns of a tiles frame (what the engine computes; the table adds bookkeeping)."""

BUCKET_STATE_SCHEMA = StructType(
    [
        StructField("stateId", StringType(), False),
        StructField("keyValue", StringType(), False),
        StructField("level", IntegerType(), False),
        StructField("bucketStart", LongType(), False),
        StructField("sum", AGGREGATE_TYPE, True),
        StructField("count", LongType(), False),
        StructField("valueCount", LongType(), False),
        StructField("min", AGGREGATE_TYPE, True),
        StructField("max", AGGREGATE_TYPE, True),
        StructField("lastBatchId", LongType(), False),
        StructField("updatedAt", TimestampType(), False),
    ]
)

BUCKET_STATE = TableSpec(
    name="bucket_state",
    schema=BUCKET_STATE_SCHEMA,
    comment="Bucket, hour and day tiles of sum/count/min/max per shared rule state and grouping key.",
    partition_by=("stateId",),
    # Every MERGE updates a few rows in many files: deletion vectors avoid rewriting those files.
    properties={"delta.enableDeletionVectors": "true"},
)


def _in_list(column: str, values: Collection[str]) -> str:
    quoted = ", ".join("'" + v.replace("'", "''") + "'" for v in sorted(values))
    return f"{column} IN ({quoted})"


def merge_tiles(
    spark: SparkSession,
    path: str,
    tiles: DataFrame,
    *,
    state_ids: Collection[str],
    lowest_starts: Mapping[int, int],
    batch_id: int,
    txn: Txn | None,
) -> None:
    """Add a batch's tiles to the state: MERGE, additive on match, insert otherwise.

    Condition: ``t.stateId = s.stateId AND t.keyValue = s.keyValue AND t.level = s.level AND
    t.bucketStart = s.bucketStart``, narrowed by ``t.stateId IN state_ids`` (partition pruning) and, per level,
    ``t.bucketStart >= lowest_starts[level]`` (file skipping). Clauses, in this order:

    1. ``whenMatchedUpdate`` — ``sum/count/valueCount`` add up (a null sum stays the other side's),
       ``min``/``max`` take the least/greatest, ``lastBatchId``/``updatedAt`` are set.
    2. ``whenNotMatchedInsert`` — a new tile.

    Additive, so not idempotent by itself: ``txn`` makes Delta skip it when the batch already committed it.
    ``tiles`` has TILE_COLUMNS and one row per (stateId, keyValue, level, bucketStart).
    """
    if not state_ids:
        return
    levels = " OR ".join(f"(t.level = {lvl} AND t.bucketStart >= {start})" for lvl, start in lowest_starts.items())
    condition = (
        f"{_in_list('t.stateId', state_ids)} AND ({levels or 'true'}) AND t.stateId = s.stateId"
        " AND t.keyValue = s.keyValue AND t.level = s.level AND t.bucketStart = s.bucketStart"
    )
    # The batch id comes in as a source column, not a literal: the MERGE's generated code is then the same for
    # every batch and compiled once.
    tiles = tiles.withColumn("lastBatchId", F.lit(batch_id).cast("long"))
    stamp: dict[str, str | Column] = {"lastBatchId": F.col("s.lastBatchId"), "updatedAt": F.current_timestamp()}
    update: dict[str, str | Column] = {
        "sum": F.expr("CASE WHEN t.sum IS NULL THEN s.sum WHEN s.sum IS NULL THEN t.sum ELSE t.sum + s.sum END"),
        "count": F.expr("t.count + s.count"),
        "valueCount": F.expr("t.valueCount + s.valueCount"),
        "min": F.expr("least(t.min, s.min)"),
        "max": F.expr("greatest(t.max, s.max)"),
        **stamp,
    }
    insert: dict[str, str | Column] = {name: F.col(f"s.{name}") for name in TILE_COLUMNS}
    with idempotent_dml(spark, txn):
        (
            DeltaTable.forPath(spark, path)
            .alias("t")
            .merge(tiles.alias("s"), condition)
            .whenMatchedUpdate(set=update)
            .whenNotMatchedInsert(values=insert | stamp)
            .execute()
        )


def append_tiles(tiles: DataFrame, path: str, *, batch_id: int, txn: Txn | None) -> None:
    """Append tiles of states that have no rows yet (a backfill); idempotent with ``txn``."""
    frame = tiles.select(*TILE_COLUMNS).withColumns(
        {"lastBatchId": F.lit(batch_id).cast("long"), "updatedAt": F.current_timestamp()}
    )
    append_idempotent(frame, path, txn)


def delete_states(spark: SparkSession, path: str, state_ids: Collection[str], *, txn: Txn | None) -> None:
    """Drop every tile of these states (whole partitions: a metadata-only delete); idempotent with ``txn``."""
    if not state_ids:
        return
    with idempotent_dml(spark, txn):
        DeltaTable.forPath(spark, path).delete(_in_list("stateId", state_ids))


def trim_states(spark: SparkSession, path: str, cutoffs: Mapping[str, int], *, txn: Txn | None) -> None:
    """Retention: delete the tiles of each state that start before its cutoff (epoch ms)."""
    if not cutoffs:
        return
    condition = " OR ".join(
        f"(stateId = '{state}' AND bucketStart < {cutoff})" for state, cutoff in sorted(cutoffs.items())
    )
    with idempotent_dml(spark, txn):
        DeltaTable.forPath(spark, path).delete(condition)
