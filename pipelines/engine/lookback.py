"""Range aggregates over buckets ``[b - reach, b]`` without a cost that grows with the window.

A lookback of bucket ``b`` with ``reach = floor(W*60 / bucket_seconds)`` buckets is cut into at most
``2*len(LEVEL_FANOUT) + 1`` *probes*, from the fine edges inwards::

    level 0: the buckets of [lo, hi] in lo's hour, and (if different) in hi's hour
    level 1: the hours strictly between those, in the first one's day and (if different) the last one's day
    level 2: the days strictly between those

A probe is (level, parent tile, from, to): it matches the tiles of that level whose parent is ``parent`` and
whose index is in [from, to], so it joins the tiles by *equality* on (state, key, level, parent) and touches at
most 60 buckets, 24 hours or the days of the window: a 7-day window costs about what a 1-hour one does.

Prior state and the batch's own tiles are probed together over ``[b - reach, b - 1]``; the bucket ``b`` itself is
probed in the prior state only (``priorOnly``), because within the batch the transactions of bucket ``b`` count
only up to the evaluated one (``evaluate.running_in_bucket``).

A point with a relative limit's ``baselineReach`` (``NO_BASELINE`` without) is probed at both reaches in the same
join and aggregation (``isBaseline`` tells the probes apart): the rule's range (``r*``) and the baseline's (``b*``)
come out of one pass over the tiles, not two.

Example::

    ranges = range_aggregates(points, prior_tiles, batch_tiles, bucket_ms=60_000)
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from delta_tables.bucket_state import fold_distinct
from pipelines.base.column_memo import Projection, per_jvm
from pipelines.engine.buckets import LEVEL_FANOUT, LEVEL_SIZES, TOP_LEVEL, floor_div

POINT_KEYS = ("stateId", "keyValue", "bucket", "reach")
BASELINE_KEYS = (*POINT_KEYS, "baselineReach")
"""A point of a relative evaluation: ``baselineReach`` is a baseline's reach, ``NO_BASELINE`` for a point whose
rules have none."""
NO_BASELINE = -1
RANGE_COLUMNS = ("rSum", "rCount", "rValueCount", "rMin", "rMax")
BASELINE_RANGE_COLUMNS = ("bSum", "bCount", "bValueCount")


def _probe(level: int, parent: Column, lo: Column, hi: Column, *, prior_only: bool = False) -> Column:
    return F.struct(
        F.lit(level).alias("level"),
        parent.cast("long").alias("parent"),
        lo.alias("lo"),
        hi.alias("hi"),
        F.lit(prior_only).alias("priorOnly"),
    )


def probes(points: DataFrame, *, reach: str = "reach", keys: tuple[str, ...] = POINT_KEYS) -> DataFrame:
    """One row per non-empty probe of each point over its ``reach`` column: ``keys`` + level, parent, lo, hi,
    priorOnly.

    The range limits of each level are columns that name the level before them (lateral column aliases, on by
    default: ``spark.sql.lateralColumnAlias.enableImplicitResolution``; Spark resolves them into one projection per
    level, so that the plan stays linear in the number of levels; nested
    expressions would be copied at every level), all in one ``select``: two DataFrame steps where one per level
    took seven, each of them an analysis of the whole plan on the driver (~15 ms each, on the batch's critical path).
    """
    limits, explode = _probe_projections(reach, tuple(keys))
    return points.select(*keys, *limits).select(*explode)


@per_jvm
def _probe_projections(reach: str, keys: tuple[str, ...]) -> tuple[Projection, Projection]:
    """``probes``' two projections: the range limits of each level, then the probes exploded into rows (built once
    per JVM: ``column_memo``)."""
    limits: list[Column] = [(F.col("bucket") - F.col(reach)).alias("_lo0"), (F.col("bucket") - F.lit(1)).alias("_hi0")]
    items: list[Column] = []
    for level, fan in enumerate(LEVEL_FANOUT):
        lo, hi, first, last = (F.col(f"_{name}{level}") for name in ("lo", "hi", "first", "last"))
        limits += [floor_div(lo, fan).alias(f"_first{level}"), floor_div(hi, fan).alias(f"_last{level}")]
        items.append(_probe(level, first, lo, hi))
        items.append(F.when(last > first, _probe(level, last, lo, hi)))
        # The parents strictly inside the range are whole tiles one level up.
        limits += [(first + F.lit(1)).alias(f"_lo{level + 1}"), (last - F.lit(1)).alias(f"_hi{level + 1}")]
    top = len(LEVEL_FANOUT)
    items.append(_probe(TOP_LEVEL, F.lit(0), F.col(f"_lo{top}"), F.col(f"_hi{top}")))
    items.append(
        _probe(0, floor_div(F.col("bucket"), LEVEL_FANOUT[0]), F.col("bucket"), F.col("bucket"), prior_only=True)
    )
    kept = F.filter(F.array(*items), lambda p: p.isNotNull() & (p["lo"] <= p["hi"]))
    return tuple(limits), (*keys, F.inline(kept))


COORDINATES = ("tile", "parent")


def with_coordinates(tiles: DataFrame, *, bucket_ms: int) -> DataFrame:
    """``tiles`` plus their ``tile`` index at their level and the ``parent`` index one level up (0 at the top).

    Both are declared non-null (they never are null): as join keys, nullable columns would make Spark filter
    them in each child of a union of cached frames, which loses the union's partitioning (``co_partitioned``).
    """
    size_ms = F.lit(bucket_ms) * F.element_at(F.array(*[F.lit(s) for s in LEVEL_SIZES]), F.col("level") + 1)
    fans = F.array(*[F.lit(f) for f in LEVEL_FANOUT], F.lit(0))
    # bucketStart is a multiple of the tile size: the division is exact.
    with_tile = tiles.withColumn("tile", F.coalesce((F.col("bucketStart") / size_ms).cast("long"), F.lit(0)))
    fan = F.element_at(fans, F.col("level") + 1)
    parent = F.when(fan > 0, floor_div(F.col("tile"), fan)).otherwise(F.lit(0).cast("long"))
    return with_tile.withColumn("parent", F.coalesce(parent, F.lit(0).cast("long")))


def tile_coordinates(tiles: DataFrame, *, bucket_ms: int, prior: bool, distinct: bool = False) -> DataFrame:
    """The probe-join side of tiles: key, level, ``tile``, ``parent``, the aggregates (``distinctValues`` too with
    ``distinct``) and ``isPrior``. Tiles that already carry their coordinates (the engine's cached state) are not
    computed again."""
    if not set(COORDINATES) <= set(tiles.columns):
        tiles = with_coordinates(tiles, bucket_ms=bucket_ms)
    return tiles.select(
        "stateId",
        "keyValue",
        "level",
        "tile",
        "parent",
        "sum",
        "count",
        "valueCount",
        "min",
        "max",
        *(["distinctValues"] if distinct else []),
        F.lit(prior).alias("isPrior"),
    )


def _sides(points: DataFrame) -> DataFrame:
    """Each BASELINE_KEYS point once per reach to probe: ``sideReach`` = its ``reach`` (``isBaseline`` false) and,
    unless ``NO_BASELINE``, its ``baselineReach`` (true). One pass over the points: they are not computed twice."""

    def side(reach: str, is_baseline: bool) -> Column:
        return F.struct(F.col(reach).alias("sideReach"), F.lit(is_baseline).alias("isBaseline"))

    both = F.array(side("reach", False), F.when(F.col("baselineReach") != NO_BASELINE, side("baselineReach", True)))
    return points.select(*BASELINE_KEYS, F.explode(F.filter(both, lambda s: s.isNotNull())).alias("side")).select(
        *BASELINE_KEYS, "side.sideReach", "side.isBaseline"
    )


def range_aggregates(
    points: DataFrame,
    prior_tiles: DataFrame,
    batch_tiles: DataFrame,
    *,
    bucket_ms: int,
    distinct_cap: int | None = None,
    baseline: bool = False,
) -> DataFrame:
    """Per query point (POINT_KEYS): sum, count, valueCount, min, max over prior buckets ``[b - reach, b]`` and
    the batch's buckets ``[b - reach, b - 1]``; with ``distinct_cap``, also ``rDistinct``, the union of the tiles'
    distinct values (capped). Points with nothing in range are absent (read them as zero).

    With ``baseline``, the points are BASELINE_KEYS and each also gets ``bSum, bCount, bValueCount`` over the same
    range at its ``baselineReach`` (null for ``NO_BASELINE``), in the same join and aggregation.

    A hash join built on the probes, the tiles streamed through it: a sort-merge join would sort the whole state.
    When the tiles are laid out by (state, key) (``buckets.co_partitioned``), only the probes are shuffled.
    """
    distinct = distinct_cap is not None
    tiles = tile_coordinates(prior_tiles, bucket_ms=bucket_ms, prior=True, distinct=distinct).unionByName(
        tile_coordinates(batch_tiles, bucket_ms=bucket_ms, prior=False, distinct=distinct)
    )
    keys = BASELINE_KEYS if baseline else POINT_KEYS
    own: Column | None = None  # which probes are the rule's own range (all of them without baselines)
    if baseline:
        probed = probes(_sides(points), reach="sideReach", keys=(*keys, "isBaseline"))
        own = ~F.col("isBaseline")
    else:
        probed = probes(points, keys=keys)
    matched = (
        probed.hint("shuffle_hash")
        .join(tiles, ["stateId", "keyValue", "level", "parent"])
        .where(F.col("tile").between(F.col("lo"), F.col("hi")) & (~F.col("priorOnly") | F.col("isPrior")))
    )

    def part(column: str, of: Column | None = own) -> Column:
        """``column`` where the probe is of the side ``of`` (null elsewhere: the aggregates skip it)."""
        return F.col(column) if of is None else F.when(of, F.col(column))

    aggregates = [
        F.sum(part("sum")).alias("rSum"),
        F.sum(part("count")).alias("rCount"),
        F.sum(part("valueCount")).alias("rValueCount"),
        F.min(part("min")).alias("rMin"),
        F.max(part("max")).alias("rMax"),
        *([fold_distinct(part("distinctValues"), distinct_cap).alias("rDistinct")] if distinct_cap else []),
    ]
    if baseline:
        of = F.col("isBaseline")
        aggregates += [
            F.sum(part(c, of)).alias(b)
            for c, b in zip(("sum", "count", "valueCount"), BASELINE_RANGE_COLUMNS, strict=True)
        ]
    return matched.groupBy(*keys).agg(*aggregates)
