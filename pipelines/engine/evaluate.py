"""The alert condition: each evaluated transaction's aggregate under each evaluated (ACTIVE or SHADOW) rule of
its state, vs the limit. A SHADOW rule is evaluated exactly like an ACTIVE one; its candidates carry ``shadow``.

For transaction ``x`` in bucket ``b`` under rule ``r`` (reach ``R`` buckets), the lookback is

* prior state (earlier batches) over buckets ``[b - R, b]`` + the batch's buckets ``[b - R, b - 1]``
  (``lookback.range_aggregates``), plus
* the batch's transactions of bucket ``b`` up to and including ``x`` in (eventTime, transactionId) order
  (``running_in_bucket``: a ROWS window, so equal timestamps are split by transaction id).

Bucket order agrees with (eventTime, transactionId) order, so nothing that follows ``x`` is counted.
COUNT reads ``count``, SUM ``sum``, AVG ``sum / valueCount`` (HALF_UP to 6 decimals), MIN/MAX ``min``/``max``;
all of it in units (millionths, ``pipelines.engine.units``): exact, and integer arithmetic.

Example::

    rules = rules_frame(spark, states, bucket_seconds=60)
    candidates = candidate_alerts(running_in_bucket(in_time), rules, prior_tiles, batch_tiles, bucket_ms=60_000)
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from delta_tables.local_rows import local_frame
from delta_tables.transaction_types import AGGREGATE_TYPE
from pipelines.base.column_memo import per_jvm
from pipelines.engine.lookback import BASELINE_KEYS, NO_BASELINE, POINT_KEYS, range_aggregates
from pipelines.engine.states import StateSpec
from pipelines.engine.units import (
    LONG_UNITS,
    UNITS_PER_ONE,
    WIDE_UNITS,
    average,
    limit_bounds,
    limit_sign,
    units_to_decimal,
)
from rules_cdc.rule_model import COUNT_FIELD, LimitOperator, Rule

_RULE_FIELDS = [
    StructField("stateId", StringType(), False),
    StructField("ruleId", LongType(), False),
    StructField("reach", LongType(), False),
    StructField("windowMinutes", IntegerType(), False),
    StructField("countsTransactions", BooleanType(), False),
    StructField("aggregatorFunctionType", StringType(), False),
    StructField("aggregateIndex", IntegerType(), False),  # its value among a row's ``ROW_AGGREGATES`` (1-based)
    StructField("limitOperatorType", StringType(), False),
    StructField("acceptedSigns", ArrayType(IntegerType(), False), False),
    StructField("limit", AGGREGATE_TYPE, False),
    StructField("cooldownMs", LongType(), False),
    StructField("ruleSnapshot", StringType(), False),
    StructField("ruleSourcePosition", StringType(), True),
    StructField("shadow", BooleanType(), False),  # a SHADOW rule: its alerts are recorded, never acted on
    # A relative limit (``Rule.baseline``), null without: the baseline's reach, what it aggregates (its value among
    # a row's ``ROW_BASELINES``, 1-based), the history it needs, and the per-window scale W / W2 (1 / 1 without
    # perWindow).
    StructField("baselineReach", LongType(), True),
    StructField("baselineIndex", IntegerType(), True),
    StructField("baselineMinCount", LongType(), True),
    StructField("baselineScaleNum", LongType(), True),
    StructField("baselineScaleDen", LongType(), True),
]


def rules_schema(units: DataType) -> StructType:
    """The rules frame's columns: the rule, and its limit in units (``units.limit_bounds``)."""
    bounds = [
        StructField("limitFloor", units, False),
        StructField("limitCeiling", units, False),
        StructField("limitSign", IntegerType(), True),
    ]
    return StructType([*_RULE_FIELDS, *bounds])


def reach_buckets(window_minutes: int, bucket_seconds: int) -> int:
    """How many buckets before ``b`` a window reaches: ``floor(W*60 / bucket_seconds)``."""
    return (window_minutes * 60) // bucket_seconds


@per_jvm
def rules_frame(
    spark: SparkSession, states: Sequence[StateSpec], *, bucket_seconds: int, units: DataType = LONG_UNITS
) -> DataFrame:
    """The evaluated (ACTIVE and SHADOW) rules as a small frame (``rules_schema(units)``), one row per rule.

    Data, not a plan over other frames: the engine's batches with the same rules (``states`` a tuple) share it
    (``column_memo``)."""
    rows = []
    for state in states:
        for live in state.evaluated_rules:
            rule = live.rule
            bounds = limit_bounds(rule.limit, units)
            baseline = rule.baseline
            rows.append(
                (
                    state.state_id,
                    rule.rule_id,
                    reach_buckets(rule.window_minutes, bucket_seconds),
                    rule.window_minutes,
                    rule.counts_transactions,
                    rule.aggregator_function_type.value,
                    aggregate_index(rule),
                    rule.limit_operator_type.value,
                    _ACCEPTED_SIGNS[rule.limit_operator_type],
                    rule.limit,
                    (rule.cooldown_minutes or 0) * 60_000,
                    live.snapshot,
                    live.source_position,
                    live.shadow,
                    None if baseline is None else reach_buckets(baseline.window_minutes, bucket_seconds),
                    None if baseline is None else baseline_index(rule),
                    None if baseline is None else baseline.min_count,
                    None if baseline is None else (rule.window_minutes if baseline.per_window else 1),
                    None if baseline is None else (baseline.window_minutes if baseline.per_window else 1),
                    _unit_value(bounds.floor, units),
                    _unit_value(bounds.ceiling, units),
                    bounds.sign,
                )
            )
    return local_frame(spark, rows, rules_schema(units))  # no Python RDD: no Python worker


def aggregate_index(rule: Rule) -> int:
    """Where the rule's aggregate is among a row's ``ROW_AGGREGATES`` (1-based, for ``element_at``)."""
    if rule.counts_transactions:
        return ROW_AGGREGATES.index("aCount") + 1
    return ROW_AGGREGATES.index(_AGGREGATE_OF[rule.aggregator_function_type.value]) + 1


def baseline_index(rule: Rule) -> int:
    """Where the rule's baseline is among a row's ``ROW_BASELINES`` (1-based); over the COUNT pseudo-field a SUM is
    the count."""
    assert rule.baseline is not None
    name = rule.baseline.aggregator.value
    if name == "COUNT" or (name == "SUM" and rule.aggregate_field_name == COUNT_FIELD):
        return ROW_BASELINES.index("bCountAll" if rule.counts_transactions else "bCountValues") + 1
    return ROW_BASELINES.index("bTotal" if name == "SUM" else "bAvg") + 1


def has_baselines(states: Sequence[StateSpec]) -> bool:
    """Whether an evaluated rule of these states has a relative limit (the evaluation then joins baselines)."""
    return any(live.rule.baseline is not None for state in states for live in state.evaluated_rules)


def _unit_value(value: int, units: DataType) -> int | Decimal:
    return value if isinstance(units, LongType) else Decimal(value)


def running_in_bucket(tagged: DataFrame) -> DataFrame:
    """Add ``cSum, cCount, cValueCount, cMin, cMax`` (and ``cDistinct`` where rows carry ``distinct``): the batch's
    rows of the same (state, key, bucket) up to and including this one, in (eventTimeMs, transactionId) order."""
    # The hash first: Spark sorts by the partition keys, then the order keys, comparing an 8-byte prefix of the first
    # key before the whole rows; a hash tells rows apart where the state id (a few values) and key texts would not.
    upto = (
        Window.partitionBy(F.xxhash64("stateId", "keyValue"), "stateId", "keyValue", "bucket")
        .orderBy("eventTimeMs", "transactionId")
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    running = {
        "cSum": F.sum("value").over(upto),
        "cCount": F.count(F.lit(1)).over(upto),
        "cValueCount": F.count("value").over(upto),
        "cMin": F.min("value").over(upto),
        "cMax": F.max("value").over(upto),
    }
    if "distinct" in tagged.columns:  # a COUNT_DISTINCT state in force: its values so far (not capped: one bucket)
        running["cDistinct"] = F.collect_set("distinct").over(upto)
    return tagged.withColumns(running)


def _plus(a: Column, b: Column) -> Column:
    """Null-aware sum of two nullable numbers (null only when both are)."""
    return F.when(a.isNull(), b).when(b.isNull(), a).otherwise(a + b)


_ACCEPTED_SIGNS = {
    LimitOperator.GREATER: [1],
    LimitOperator.GREATER_EQUAL: [0, 1],
    LimitOperator.LESS: [-1],
    LimitOperator.LESS_EQUAL: [-1, 0],
    LimitOperator.EQUAL: [0],
    LimitOperator.NOT_EQUAL: [-1, 1],
}
"""``value OP limit`` holds iff ``sign(value - limit)`` is one of these (one comparison per row, whatever OP)."""


def holds(units: Column) -> Column:
    """Whether the aggregate (in units) meets the rule's limit (columns of ``rules_frame``); null never does."""
    sign = limit_sign(units, F.col("limitFloor"), F.col("limitCeiling"), F.col("limitSign"))
    return F.coalesce(F.array_contains(F.col("acceptedSigns"), sign), F.lit(False))


ROW_AGGREGATES = ("aCount", "aSum", "aAvg", "aMin", "aMax", "aValue", "aDistinct")
"""What a row's lookback aggregates to under each aggregator, in units (``row_aggregates``); a rule picks its one by
``aggregateIndex`` (COUNT and the COUNT pseudo-field: ``aCount``; VALUE: the row's own value)."""
_AGGREGATE_OF = {
    "SUM": "aSum",
    "AVG": "aAvg",
    "MIN": "aMin",
    "MAX": "aMax",
    "VALUE": "aValue",
    "COUNT_DISTINCT": "aDistinct",
}
ROW_BASELINES = ("bCountAll", "bCountValues", "bTotal", "bAvg")
"""What a row's baseline history aggregates to, in units (``row_baselines``), picked by ``baselineIndex``."""


def row_aggregates(joined: DataFrame, units: DataType, *, distinct_cap: int | None = None) -> DataFrame:
    """Add ``aggregates``: the array of ``ROW_AGGREGATES`` of each row, from the range (``r*``) and running (``c*``)
    parts, all in units: COUNT from the counts, SUM the sums, AVG their quotient HALF_UP, MIN/MAX the least/greatest,
    VALUE the row's own value, COUNT_DISTINCT the size of the union of the distinct values (with ``distinct_cap``:
    saturating at it; null without).

    Once per row and reach, before the rows fan out to the rules, where each rule picks its one with ``element_at``
    (``picked_aggregate``). Computed per (row, rule) inside the fan-out's join condition (Spark pushes the limit
    check there and inlines the aggregate into it, twice over), the aggregates made one generated method larger
    than HotSpot compiles (8,000 bytes of bytecode): the evaluation ran interpreted (docs/engine.md)."""
    total_count = F.coalesce(F.col("rCount"), F.lit(0)) + F.col("cCount")
    value_count = F.coalesce(F.col("rValueCount"), F.lit(0)) + F.col("cValueCount")
    total_sum = _plus(F.col("rSum"), F.col("cSum"))
    distinct: Column = F.lit(None)
    if distinct_cap is not None:
        union = F.array_distinct(F.concat(F.coalesce(F.col("rDistinct"), F.array()), F.col("cDistinct")))
        distinct = F.least(F.size(union), F.lit(distinct_cap)).cast("long") * F.lit(UNITS_PER_ONE)
    values = {
        "aCount": total_count * F.lit(UNITS_PER_ONE),
        "aSum": total_sum,
        "aAvg": average(total_sum, value_count, units),
        "aMin": F.least("rMin", "cMin"),
        "aMax": F.greatest("rMax", "cMax"),
        "aValue": F.col("value"),
        "aDistinct": distinct,
    }
    return joined.withColumn("aggregates", F.array(*[values[name].cast(units) for name in ROW_AGGREGATES]))


def picked_aggregate(with_rules: DataFrame) -> DataFrame:
    """Add ``aggregateUnits``: the rule's own among the row's ``aggregates`` (``aggregateIndex``)."""
    return with_rules.withColumn("aggregateUnits", F.element_at(F.col("aggregates"), F.col("aggregateIndex")))


def aggregate_units(joined: DataFrame, units: DataType, *, distinct_cap: int | None = None) -> DataFrame:
    """Add ``aggregateUnits`` (the aggregate in ``units``) to rows that carry their rule's columns: ``row_aggregates``
    then ``picked_aggregate`` (the per-event baseline's one step; the engine fans out in between)."""
    return picked_aggregate(row_aggregates(joined, units, distinct_cap=distinct_cap)).drop("aggregates")


def row_baselines(joined: DataFrame, units: DataType) -> DataFrame:
    """Add ``baselines``, the array of ``ROW_BASELINES``, and ``baselineCounts`` (all transactions, those with a
    value) to the rows of a relative evaluation, once per row before the fan-out (see ``row_aggregates``): the
    baseline range (``b*``, prior and batch tiles over the baseline's reach) plus the running part, **the row itself
    taken out** (its value and its count), i.e. the history before the evaluated transaction."""
    own_value = F.col("value").isNotNull().cast("long")
    value_count = F.coalesce(F.col("bValueCount"), F.lit(0)) + F.col("cValueCount") - own_value
    all_rows = F.coalesce(F.col("bCount"), F.lit(0)) + F.col("cCount") - F.lit(1)
    total = F.coalesce(_plus(F.col("bSum"), F.col("cSum")), F.lit(0).cast(units)) - F.coalesce(
        F.col("value"), F.lit(0).cast(units)
    )
    values = {
        "bCountAll": all_rows * F.lit(UNITS_PER_ONE),
        "bCountValues": value_count * F.lit(UNITS_PER_ONE),
        "bTotal": total,
        "bAvg": average(total, value_count, units),
    }
    return joined.withColumns(
        {
            "baselines": F.array(*[values[name].cast(units) for name in ROW_BASELINES]),
            "baselineCounts": F.array(all_rows, value_count),
        }
    )


def baseline_units(joined: DataFrame) -> DataFrame:
    """Add ``baselineCount`` (n) and ``baselineUnits`` (B in units) of the relative rules' rows, picked from their
    ``row_baselines``; null for rules without a baseline. ``n`` counts the transactions that count for the rule: all
    of them for a rule that counts transactions, else those with a value of its field (the state's rows without one
    count for its COUNT rules only)."""
    relative = F.col("baselineIndex").isNotNull()
    counted = F.when(F.col("countsTransactions"), F.lit(1)).otherwise(F.lit(2))
    return joined.withColumns(
        {
            "baselineCount": F.when(relative, F.element_at(F.col("baselineCounts"), counted)),
            "baselineUnits": F.element_at(F.col("baselines"), F.col("baselineIndex")),  # null index: null
        }
    )


def holds_relative(units: Column) -> Column:
    """A relative rule's condition: ``n >= minCount`` and ``aggregate OP k * B * num / den``, compared exactly as
    ``aggregate * den * 10^6  vs  k_units * B_units * num`` in 38-digit integers (k in units is exact: a limit has
    at most 6 decimals). Null (no baseline value) never holds."""
    wide = WIDE_UNITS
    left = units.cast(wide) * F.col("baselineScaleDen").cast(wide) * F.lit(UNITS_PER_ONE).cast(wide)
    right = F.col("limitFloor").cast(wide) * F.col("baselineUnits").cast(wide) * F.col("baselineScaleNum").cast(wide)
    sign = F.when(left > right, F.lit(1)).when(left < right, F.lit(-1)).when(left == right, F.lit(0))
    enough = F.col("baselineCount") >= F.col("baselineMinCount")
    return F.coalesce(enough & F.array_contains(F.col("acceptedSigns"), sign), F.lit(False))


LIMIT_CHECK_COLUMNS = (
    "countsTransactions",
    "aggregateIndex",
    "acceptedSigns",
    "limitFloor",
    "limitCeiling",
    "limitSign",
)
"""The rule columns ``aggregate_units`` and ``holds`` read."""
BASELINE_COLUMNS = (
    "baselineReach",
    "baselineIndex",
    "baselineMinCount",
    "baselineScaleNum",
    "baselineScaleDen",
)
"""The rule columns of a relative limit (carried by the fan-out only when a rule in force has one)."""
RULE_EVALUATION_COLUMNS = ("stateId", "reach", "ruleId", *LIMIT_CHECK_COLUMNS, "cooldownMs")
"""What the fan-out of rows to rules carries per (row, rule); the rest of a rule's columns (its snapshot text
above all) join only the candidates that meet their limit."""
POINT_COLUMNS = (
    *BASELINE_KEYS,  # baselineReach: only the points of a relative evaluation carry it
    "transactionId",
    "eventTime",
    "eventTimeMs",
    "ingestedAt",
    "value",
    "cSum",
    "cCount",
    "cValueCount",
    "cMin",
    "cMax",
    "distinct",
    "cDistinct",
)


def evaluate(
    points: DataFrame,
    ranges: DataFrame,
    rules: DataFrame,
    *,
    distinct_cap: int | None = None,
    relative: bool = False,
) -> DataFrame:
    """Candidate alerts: every (transaction, evaluated rule of its state it counts for) whose aggregate meets the
    limit (``shadow`` tells a SHADOW rule's candidates).

    ``points``: in-time tagged rows with the running columns (values in units), once per distinct ``reach`` of
    their state's rules (with ``relative``: per distinct (``reach``, ``baselineReach``) of its rules, keyed by
    ``_baseline_key``); ``ranges``: ``lookback.range_aggregates`` of those points (with ``relative``,
    ``baseline=True``: the baseline's range too); ``rules``: ``rules_frame`` (small, broadcast). ``distinct_cap``:
    a COUNT_DISTINCT rule is in force (points and ranges carry distinct values). The candidates carry
    ``aggregateValue`` (and ``baselineValue``, null without a baseline) as decimal(38,6). Cooldowns are applied
    afterwards (``cooldown``).
    """
    # Ranges are per (point, reach), not per rule: they are joined to the rows once per reach, then the rows fan
    # out to the rules (a broadcast join, no shuffle). Joining the rules first would move rows x rules (5x more
    # with five rules per state: docs/benchmarks.md, profile). The fan-out is the widest frame of a batch
    # (rows x rules): it carries only the columns the limit check needs, and only numbers.
    units = rules.schema["limitFloor"].dataType
    lean = points.select(*[c for c in POINT_COLUMNS if c in points.columns])  # a backtest has no ingestedAt
    keys = BASELINE_KEYS if relative else POINT_KEYS
    with_ranges = row_aggregates(
        lean.join(ranges.hint("shuffle_hash"), list(keys), "left"),  # no sort of either side
        units,
        distinct_cap=distinct_cap,
    )
    if relative:
        with_ranges = row_baselines(with_ranges, units)
    rule_columns = [*RULE_EVALUATION_COLUMNS, *(BASELINE_COLUMNS if relative else ())]
    counts = F.col("countsTransactions") | F.col("value").isNotNull()
    if "distinct" in points.columns:
        counts = counts | F.col("distinct").isNotNull()
    fanned = rules.select(*rule_columns)
    if relative:
        fanned = fanned.withColumn("baselineReach", _baseline_key())
    rule_keys = ["stateId", "reach", *(["baselineReach"] if relative else [])]
    per_rule = with_ranges.join(F.broadcast(fanned), rule_keys).where(counts)
    aggregated = picked_aggregate(per_rule)
    if relative:
        aggregated = baseline_units(aggregated)
        met = aggregated.where(
            F.when(F.col("baselineIndex").isNull(), holds(F.col("aggregateUnits"))).otherwise(
                holds_relative(F.col("aggregateUnits"))
            )
        ).withColumn("baselineValue", units_to_decimal(F.col("baselineUnits")))
    else:
        met = aggregated.where(holds(F.col("aggregateUnits"))).withColumn(
            "baselineValue", F.lit(None).cast(AGGREGATE_TYPE)
        )
    described = rules.drop(*[c for c in (*RULE_EVALUATION_COLUMNS, *BASELINE_COLUMNS) if c != "ruleId"])
    picked = met.drop("aggregates", "baselines", "baselineCounts")  # each row's arrays: its rule took its values
    return picked.join(F.broadcast(described), "ruleId").withColumn(
        "aggregateValue", units_to_decimal(F.col("aggregateUnits"))
    )


def _baseline_key() -> Column:
    """A rule's ``baselineReach`` as a join key (over the rules frame). A rule without a baseline shares the point
    of a rule of its (state, reach) that has one (the smallest such reach), whose ``r*`` range is its own too, so the
    range is not probed twice; ``NO_BASELINE`` when no rule of its (state, reach) has one (null never joins)."""
    same_reach = Window.partitionBy("stateId", "reach")
    return F.coalesce(F.col("baselineReach"), F.min("baselineReach").over(same_reach), F.lit(NO_BASELINE).cast("long"))


def candidate_alerts(
    running: DataFrame,
    rules: DataFrame,
    prior_tiles: DataFrame,
    batch_tiles: DataFrame,
    *,
    bucket_ms: int,
    distinct_cap: int | None = None,
    relative: bool = False,
) -> DataFrame:
    """``evaluate`` over the lookbacks of ``running``'s (state, key, bucket) points: the engine's and the backtest's
    one evaluation chain. ``running``: rows to evaluate with their running columns (``running_in_bucket``).
    ``distinct_cap``: a COUNT_DISTINCT rule is in force (``engine.distinct_cap``); ``relative``: a rule with a
    baseline is (its ranges are computed at the baseline's reach too)."""
    reaches = rules.select("stateId", "reach", *([_baseline_key().alias("baselineReach")] if relative else []))
    points = running.join(F.broadcast(reaches.distinct()), "stateId")
    keys = BASELINE_KEYS if relative else POINT_KEYS
    ranges = range_aggregates(
        points.select(*keys).distinct(),
        prior_tiles,
        batch_tiles,
        bucket_ms=bucket_ms,
        distinct_cap=distinct_cap,
        baseline=relative,
    )
    return evaluate(points, ranges, rules, distinct_cap=distinct_cap, relative=relative)
