"""Transactions -> per-state rows -> bucket tiles at three levels.

``tag_rows`` turns each transaction into one row per state whose filter it passes (``stateId``, ``keyValue``,
``bucket`` index, ``value`` of the aggregate field as decimal(38,6), null for the COUNT pseudo-field or a null
field). ``tiles`` pre-aggregates such rows into level-0 tiles (the buckets, ``bucket_seconds`` wide), level-1
tiles (``LEVEL_SIZES[1]`` = 60 buckets: an hour with one-minute buckets) and level-2 tiles (1440 buckets: a day),
each state up to the level its widest window can read (``top_level``); each tile holds sum, count, valueCount,
min, max (decimal(38,6) and longs: exact).

Example::

    tagged = tag_rows(transactions, states, bucket_ms=60_000, keep=("transactionId", "eventTimeMs"))
    tiles(tagged, bucket_ms=60_000)        # TILE_COLUMNS, one row per (state, key, level, tile)
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DataType

from delta_tables.bucket_state import DEFAULT_DISTINCT_CAP, DISTINCT_VALUES_TYPE, TILE_COLUMNS, capped_distinct
from delta_tables.transaction_types import AGGREGATE_TYPE
from pipelines.base.column_memo import Projection, per_jvm
from pipelines.engine.keys import key_column
from pipelines.engine.states import StateSpec
from pipelines.engine.units import to_units
from rules_cdc.filter_expr import compile_filter

LEVEL_FANOUT = (60, 24)
"""How many tiles of level ``i`` make one tile of level ``i + 1``."""
LEVEL_SIZES = (1, 60, 1440)
"""Tile widths in buckets, per level."""
TOP_LEVEL = len(LEVEL_SIZES) - 1


def top_level(reach: int) -> int:
    """The coarsest level a lookback of ``reach`` buckets can probe, and so the coarsest a state keeps tiles at.

    A probe of level ``L >= 1`` reads whole level-``L`` tiles strictly inside the range (``lookback.probes``), so
    only a range longer than one level-``L`` tile has one: ``reach > LEVEL_SIZES[L]`` (the exact bound is a little
    higher: 62 buckets for an hour, 1,562 for a day). A state whose widest window is an hour or less keeps its
    buckets only, a third of the rows; a state widened past a level is rebuilt from bronze (``states.plan_states``),
    which writes the new level's tiles for the whole window.
    """
    return max(level for level, size in enumerate(LEVEL_SIZES) if level == 0 or reach > size)


def state_top_level(state: StateSpec, bucket_ms: int) -> int:
    """``top_level`` of the state's widest window (or baseline window) in buckets."""
    return top_level(state.window_minutes * 60_000 // bucket_ms)


def floor_div(value: Column, divisor: int | Column) -> Column:
    """``floor(value / divisor)`` as a long, exact for negative values too (epoch ms fit a double exactly).

    ``value`` appears twice: pass a column reference, not a large expression.
    """
    divisor_column = divisor if isinstance(divisor, Column) else F.lit(divisor)
    return ((value - F.pmod(value, divisor_column)) / divisor_column).cast("long")


def bucket_index(event_time_ms: Column, bucket_ms: int) -> Column:
    """The index of the bucket a time falls in: ``floor(t / bucket_ms)``."""
    return floor_div(event_time_ms, bucket_ms)


def _state_entry(
    state: StateSpec, types: Mapping[str, DataType], units: DataType | None, bucket_ms: int, *, with_distinct: bool
) -> Column:
    value_type = AGGREGATE_TYPE if units is None else units
    distinct: list[Column] = []
    if with_distinct:
        text = F.col(state.aggregate_field).cast("string") if state.distinct and state.aggregate_field else None
        distinct = [(text if text is not None else F.lit(None).cast("string")).alias("distinct")]
    if state.aggregate_field is None or state.distinct:  # a distinct state's field may be of any type: no value
        value = F.lit(None).cast(value_type)
    elif units is None:
        value = F.col(state.aggregate_field).cast(AGGREGATE_TYPE)
    else:
        value = to_units(F.col(state.aggregate_field), units)
    entry = F.struct(
        F.lit(state.state_id).alias("stateId"),
        key_column(state.grouping_key_names, types).alias("keyValue"),
        value.alias("value"),
        F.lit(state_top_level(state, bucket_ms)).alias("topLevel"),
        *distinct,
    )
    return F.when(compile_filter(state.filter), entry)


def tag_rows(
    transactions: DataFrame,
    states: Sequence[StateSpec],
    *,
    bucket_ms: int,
    keep: Sequence[str],
    units: DataType | None = None,
) -> DataFrame:
    """One row per (transaction, state whose filter it passes): ``keep`` columns + stateId, keyValue, bucket, value,
    topLevel (the state's ``state_top_level``: the coarsest tiles ``tiles`` makes of the row) (and ``distinct`` when
    a state is a COUNT_DISTINCT one: the field's value as text there, null elsewhere).

    ``transactions`` needs ``eventTimeMs`` and every field the states name. A transaction passing no filter
    yields no row; one whose aggregate field is null still counts (``value`` null) for COUNT rules. ``value`` is
    decimal(38,6) (the tables' type), or, with ``units``, in units of that type (``pipelines.engine.units``).
    """
    if not states:
        raise ValueError("tag_rows needs at least one state")
    types = tuple((field.name, field.dataType) for field in transactions.schema.fields)
    tagging, tagged = _tag_projections(tuple(states), types, units, bucket_ms, tuple(keep))
    return transactions.select(*tagging).select(*tagged)


@per_jvm
def _tag_projections(
    states: tuple[StateSpec, ...],
    types: tuple[tuple[str, DataType], ...],
    units: DataType | None,
    bucket_ms: int,
    keep: tuple[str, ...],
) -> tuple[Projection, Projection]:
    """``tag_rows``'s two projections (built once per JVM and rule set: ``column_memo``)."""
    by_name = dict(types)
    with_distinct = any(s.distinct for s in states)
    entries = F.filter(
        F.array(*[_state_entry(s, by_name, units, bucket_ms, with_distinct=with_distinct) for s in states]),
        lambda e: e.isNotNull(),
    )
    exploded: Projection = (*keep, "eventTimeMs", F.explode(entries).alias("_s"))
    tagged: Projection = (
        *keep,
        "eventTimeMs",
        # Never null (a literal and a concatenation), but typed nullable through the struct: declared non-null so
        # that a join on them infers no null filter (see ``co_partitioned``).
        F.coalesce(F.col("_s.stateId"), F.lit("")).alias("stateId"),
        F.coalesce(F.col("_s.keyValue"), F.lit("")).alias("keyValue"),
        bucket_index(F.col("eventTimeMs"), bucket_ms).alias("bucket"),
        F.col("_s.value").alias("value"),
        F.coalesce(F.col("_s.topLevel"), F.lit(TOP_LEVEL)).alias("topLevel"),
        *([F.col("_s.distinct").alias("distinct")] if with_distinct else []),
    )
    return exploded, tagged


STATE_KEY = ("stateId", "keyValue")
"""What the engine's frames of a batch are hash-partitioned by (``co_partitioned``)."""


def co_partitioned(frame: DataFrame, partitions: int) -> DataFrame:
    """``frame`` hash-partitioned by (stateId, keyValue) into ``partitions``.

    Every frame of the hot path that is keyed by state and key — the batch's tagged rows, its tiles, the cached
    prior state — is laid out this way with the same number of partitions. Spark then plans the tiles
    aggregation, the running window, the lookback join with the state and the join of the ranges back to the
    rows without a shuffle (with ``spark.sql.requireAllClusterKeysForCoPartition`` off, a join on more keys
    than these accepts this layout): only the probes move. A union of such frames keeps the layout (Spark 4.1's
    partitioning-aware union) as long as their join keys are declared non-null: Spark would otherwise push an
    ``isnotnull`` filter into each child, and the union then loses its partitioning.
    """
    return frame.repartition(partitions, *STATE_KEY)


def tiles(tagged: DataFrame, *, bucket_ms: int, distinct_cap: int = DEFAULT_DISTINCT_CAP) -> DataFrame:
    """Sum, count, valueCount, min, max per (state, key, level, tile) (TILE_COLUMNS) for every level up to the
    row's ``topLevel`` (``tag_rows``; every level without that column); the distinct values (capped:
    ``bucket_state.fold_distinct``) where ``tagged`` has a ``distinct`` column, else null.

    One aggregation: each row is counted once per level (``explode`` of its tile at each level).
    """
    with_distinct = "distinct" in tagged.columns
    value_type = tagged.schema["value"].dataType  # decimal(38,6) or units: sums stay in it (ANSI: no wrapping)
    leveled = "topLevel" in tagged.columns
    exploded, keys, aggregates, bucket_start = _tile_expressions(
        bucket_ms, distinct_cap, value_type, with_distinct, leveled
    )
    grouped = tagged.select(*exploded).groupBy(*keys)
    return grouped.agg(*aggregates).withColumn("bucketStart", bucket_start).select(*TILE_COLUMNS)


@per_jvm
def _tile_expressions(
    bucket_ms: int, distinct_cap: int, value_type: DataType, with_distinct: bool, leveled: bool
) -> tuple[Projection, Projection, tuple[Column, ...], Column]:
    """``tiles``' projection, grouping keys, aggregates and tile start (built once per JVM: ``column_memo``)."""
    levels = F.array(
        *[
            F.struct(F.lit(lvl).alias("level"), floor_div(F.col("bucket"), size).alias("tile"))
            for lvl, size in enumerate(LEVEL_SIZES)
        ]
    )
    if leveled:  # levels 0..topLevel (a slice, not a filter: a higher-order function would not be compiled)
        levels = F.slice(levels, F.lit(1), F.col("topLevel") + F.lit(1))
    carried = ["distinct"] if with_distinct else []
    exploded: Projection = ("stateId", "keyValue", "value", *carried, F.explode(levels).alias("_t"))
    # level and tile are never null; declared so (see ``co_partitioned``).
    level, tile = F.coalesce(F.col("_t.level"), F.lit(0)), F.coalesce(F.col("_t.tile"), F.lit(0).cast("long"))
    keys: Projection = ("stateId", "keyValue", level.alias("level"), tile.alias("tile"))
    sizes = F.element_at(F.array(*[F.lit(size * bucket_ms) for size in LEVEL_SIZES]), F.col("level") + 1)
    aggregates: tuple[Column, ...] = (
        F.sum("value").cast(value_type).alias("sum"),
        F.count(F.lit(1)).alias("count"),
        F.count("value").alias("valueCount"),
        F.min("value").alias("min"),
        F.max("value").alias("max"),
        (
            F.when(F.count("distinct") > 0, capped_distinct(F.collect_set("distinct"), distinct_cap))
            if with_distinct
            else F.lit(None).cast(DISTINCT_VALUES_TYPE)
        ).alias("distinctValues"),
    )
    return exploded, keys, aggregates, F.col("tile") * sizes


def lowest_tile_starts(earliest_ms: int, *, bucket_ms: int) -> dict[int, int]:
    """Per level, the start (epoch ms) of the tile that holds ``earliest_ms``: no tile of that level that holds
    a later time starts before it."""
    bucket = earliest_ms // bucket_ms
    return {level: bucket // size * size * bucket_ms for level, size in enumerate(LEVEL_SIZES)}


def reachable_tiles(earliest_ms: int, *, bucket_ms: int) -> Column:
    """A condition on a tiles table: the tiles that hold any time from ``earliest_ms`` on (file skipping)."""
    starts = lowest_tile_starts(earliest_ms, bucket_ms=bucket_ms)
    return functools.reduce(
        lambda a, b: a | b,
        [(F.col("level") == level) & (F.col("bucketStart") >= start) for level, start in starts.items()],
    )
