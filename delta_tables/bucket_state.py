"""Bucket state: pre-aggregated transactions per (state, key, tile) — sum, count, value count, min, max.

A *state* is what rules with the same (grouping keys, aggregate field, filter) share (``Rule.state_id``).
Level-0 tiles are the buckets (``bucket_seconds`` wide, conf, default 60 s); level 1 groups 60 buckets (an hour
by default) and level 2 groups 24 level-1 tiles (a day): every batch adds its contribution to all three levels,
so a lookback of any width is answered from a bounded number of rows (see pipelines/engine/lookback.py).
``bucketStart`` is the tile's start in epoch milliseconds.

``count`` counts the transactions that pass the state's filter; ``valueCount`` those of them whose aggregate
field is not null (``sum``/``min``/``max`` are over those). COUNT rules read ``count``, AVG reads
``sum / valueCount``. A COUNT_DISTINCT state keeps ``distinctValues`` instead (its field may be any type): the
tile's distinct values as text, sorted, at most the cap's smallest. Keeping the smallest ``D`` of each part is
enough to count any union of tiles exactly up to ``D``: the ``D`` smallest values of a union are among the ``D``
smallest of its parts, so ``min(|union of the kept|, D) = min(|union|, D)``.

**Append-only**: each micro-batch *appends* its partial tiles (``append_tiles``), so one tile may have several
rows, one per batch that touched it; a tile's value is the fold of its rows (``fold_tiles``: sums added, min of
mins, max of maxes). Every reader folds (the engine's lookback sums the rows it joins anyway). Compaction
(``compact_tiles``, on the retention cadence) replaces the table with its folded rows minus the tiles before each
state's horizon, in one commit. A MERGE per batch would cost a join with the table and rewritten files on every
micro-batch; an append is one small file.

Example::

    append_tiles(tiles, settings.table_path("bucket_state"), batch_id=7, tag=CommitTag("engine-x", 7, "state"))
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, IntegerType, LongType, StringType, StructField, StructType, TimestampType

from delta_tables.arrow_writes import overwrite_frame_at
from delta_tables.idempotent import CommitTag, append_tagged, overwrite_tagged, tagged_dml
from delta_tables.table_snapshot import table_row_counts
from delta_tables.table_spec import TableSpec
from delta_tables.transaction_types import AGGREGATE_TYPE

TILE_COLUMNS = (
    "stateId",
    "keyValue",
    "level",
    "bucketStart",
    "sum",
    "count",
    "valueCount",
    "min",
    "max",
    "distinctValues",
)
"""The columns of a tiles frame (what the engine computes; the table adds bookkeeping)."""

DISTINCT_VALUES_TYPE = ArrayType(StringType(), False)

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
        # COUNT_DISTINCT states only (null elsewhere): the tile's distinct values of the field as text, sorted, at
        # most ``engine.distinct_cap`` of them (the smallest): see ``fold_distinct``. Last, and nullable, so that an
        # older table gets it through ``table_spec.add_missing_columns``.
        StructField("distinctValues", DISTINCT_VALUES_TYPE, True),
    ]
)

BUCKET_STATE = TableSpec(
    name="bucket_state",
    schema=BUCKET_STATE_SCHEMA,
    comment="Bucket, hour and day tiles of sum/count/min/max per shared rule state and grouping key.",
    partition_by=("stateId",),
    # A drop of states rewrites nothing (whole partitions); appends and compaction never update in place.
    properties={
        "delta.enableDeletionVectors": "true",
        "delta.autoOptimize.optimizeWrite": "false",
    },
    checkpoint_every=11,
)


def _in_list(column: str, values: Collection[str]) -> str:
    quoted = ", ".join("'" + v.replace("'", "''") + "'" for v in sorted(values))
    return f"{column} IN ({quoted})"


TILE_KEY = ("stateId", "keyValue", "level", "bucketStart")
DEFAULT_DISTINCT_CAP = 100
"""``engine.distinct_cap``'s default (the engine passes the conf's value)."""


def capped_distinct(values: Column, cap: int) -> Column:
    """The distinct values of an array column, sorted, the ``cap`` smallest kept (null stays null)."""
    return F.slice(F.array_sort(F.array_distinct(values)), 1, cap)


def fold_distinct(arrays: Column, cap: int) -> Column:
    """Aggregate: the union of a group's ``distinctValues`` arrays, capped (null when every array is null)."""
    return F.when(F.count(arrays) > 0, capped_distinct(F.flatten(F.collect_list(arrays)), cap))


def fold_tiles(rows: DataFrame, *, distinct_cap: int = DEFAULT_DISTINCT_CAP, distinct: bool = True) -> DataFrame:
    """One row per tile (TILE_KEY): the fold of its rows (sums, counts added; min of mins; max of maxes; the union of
    distinct values, capped), with the newest ``lastBatchId`` and ``updatedAt`` when ``rows`` has them.

    ``distinct=False`` (no COUNT_DISTINCT state in force: the engine knows) folds ``distinctValues`` to null: the
    fold stays a plain hash aggregation (an array aggregate makes Spark fall back to a sort-based one past a few
    hundred keys)."""
    extra = [c for c in ("lastBatchId", "updatedAt") if c in rows.columns]
    value_type = rows.schema["sum"].dataType  # decimal(38,6) in the table; the engine's cache folds units
    folded_distinct = (
        fold_distinct(F.col("distinctValues"), distinct_cap)
        if distinct and "distinctValues" in rows.columns  # absent: a table of an older release
        else F.lit(None).cast(DISTINCT_VALUES_TYPE)
    )
    return rows.groupBy(*TILE_KEY).agg(
        F.sum("sum").cast(value_type).alias("sum"),
        F.sum("count").alias("count"),
        F.sum("valueCount").alias("valueCount"),
        F.min("min").alias("min"),
        F.max("max").alias("max"),
        folded_distinct.alias("distinctValues"),
        *[F.max(c).alias(c) for c in extra],
    )


def append_tiles(
    tiles: DataFrame,
    path: str,
    *,
    batch_id: int | None,
    tag: CommitTag | None,
    files: int | None = None,
    rows_at_most: int | None = None,
) -> None:
    """Append a batch's partial tiles (TILE_COLUMNS) in one commit; ``tag`` names the write for replays.

    ``batch_id`` None: ``tiles`` already has ``lastBatchId`` and ``updatedAt`` (the engine's hot path brings them as
    columns, so that no per-batch literal changes the generated code). ``rows_at_most``: see ``append_tagged`` (a
    bound known: delta-rs may write them from the driver)."""
    frame = tiles if batch_id is None else with_batch_columns(tiles, batch_id)
    columns = [f.name for f in BUCKET_STATE_SCHEMA.fields]
    append_tagged(frame.select(*columns), path, tag, files=files, rows_at_most=rows_at_most)


def with_batch_columns(tiles: DataFrame, batch_id: int) -> DataFrame:
    """``tiles`` (TILE_COLUMNS) as table rows written by batch ``batch_id`` (BUCKET_STATE_SCHEMA's columns)."""
    frame = tiles.withColumns({"lastBatchId": F.lit(batch_id).cast("long"), "updatedAt": F.current_timestamp()})
    return frame.select(*[f.name for f in BUCKET_STATE_SCHEMA.fields])


def compact_tiles(
    folded: DataFrame,
    path: str,
    *,
    tag: CommitTag | None,
    state_ids: Collection[str] | None = None,
    read_version: int | None = None,
    rows_at_most: int | None = None,
) -> None:
    """Replace the whole table (or, with ``state_ids``, those states' partitions: ``folded`` holds only their rows)
    with ``folded`` (BUCKET_STATE_SCHEMA columns, one row per tile) in one commit.

    With ``state_ids``, the version the fold was read at (``read_version``) and ``rows_at_most`` (a bound on
    ``folded``'s rows) within ``DRIVER_OVERWRITE_ROWS``, the rows come to the driver as Arrow and delta-rs replaces the
    partitions on top of that version, where it applies: no reconstruction of the table's state by Spark."""
    table = folded.select(*[f.name for f in BUCKET_STATE_SCHEMA.fields])
    if state_ids and overwrite_frame_at(
        table,
        path,
        partition="stateId",
        values=state_ids,
        read_version=read_version,
        rows_at_most=rows_at_most,
        user_metadata=tag.to_json() if tag else None,
    ):
        return
    where = None if state_ids is None else _in_list("stateId", state_ids)
    overwrite_tagged(table, path, tag, replace_where=where)


def delete_states(spark: SparkSession, path: str, state_ids: Collection[str], *, tag: CommitTag | None) -> None:
    """Drop every tile of these states (whole partitions: a metadata-only delete)."""
    if not state_ids:
        return
    with tagged_dml(spark, tag):
        DeltaTable.forPath(spark, path).delete(_in_list("stateId", state_ids))


def rows_per_state(spark: SparkSession, path: str, version: int, state_ids: Collection[str]) -> dict[str, int]:
    """How many rows each of these states has in the table at ``version`` (states with none are absent): from the
    version's checksum where it lists the table's files, else a count over the partitions' Parquet footers
    (``table_row_counts``)."""
    counts = table_row_counts(spark, path, version, "stateId", state_ids)
    return {str(state_id): rows for state_id, rows in counts.items()}


def trim_condition(cutoffs: Mapping[str, int]) -> Column:
    """The tiles to keep at retention: of a state in ``cutoffs``, starting at or after its cutoff (epoch ms)."""
    keep = F.lit(False)
    for state, cutoff in sorted(cutoffs.items()):
        keep = keep | ((F.col("stateId") == state) & (F.col("bucketStart") >= F.lit(cutoff)))
    return keep
