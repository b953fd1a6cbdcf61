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
from pipelines.engine.lookback import POINT_KEYS, range_aggregates
from pipelines.engine.states import StateSpec
from pipelines.engine.units import (
    LONG_UNITS,
    UNITS_PER_ONE,
    average,
    limit_bounds,
    limit_sign,
    units_to_decimal,
)
from rules_cdc.rule_model import LimitOperator

_RULE_FIELDS = [
    StructField("stateId", StringType(), False),
    StructField("ruleId", LongType(), False),
    StructField("reach", LongType(), False),
    StructField("windowMinutes", IntegerType(), False),
    StructField("countsTransactions", BooleanType(), False),
    StructField("aggregatorFunctionType", StringType(), False),
    StructField("aggregator", IntegerType(), False),  # AGGREGATOR_CODES: compared per row, cheaper than the name
    StructField("limitOperatorType", StringType(), False),
    StructField("acceptedSigns", ArrayType(IntegerType(), False), False),
    StructField("limit", AGGREGATE_TYPE, False),
    StructField("cooldownMs", LongType(), False),
    StructField("ruleSnapshot", StringType(), False),
    StructField("ruleSourcePosition", StringType(), True),
    StructField("shadow", BooleanType(), False),  # a SHADOW rule: its alerts are recorded, never acted on
]
AGGREGATOR_CODES = {name: code for code, name in enumerate(("COUNT", "SUM", "AVG", "MIN", "MAX"))}


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


def rules_frame(
    spark: SparkSession, states: Sequence[StateSpec], *, bucket_seconds: int, units: DataType = LONG_UNITS
) -> DataFrame:
    """The evaluated (ACTIVE and SHADOW) rules as a small frame (``rules_schema(units)``), one row per rule."""
    rows = []
    for state in states:
        for live in state.evaluated_rules:
            rule = live.rule
            bounds = limit_bounds(rule.limit, units)
            rows.append(
                (
                    state.state_id,
                    rule.rule_id,
                    reach_buckets(rule.window_minutes, bucket_seconds),
                    rule.window_minutes,
                    rule.counts_transactions,
                    rule.aggregator_function_type.value,
                    AGGREGATOR_CODES[rule.aggregator_function_type.value],
                    rule.limit_operator_type.value,
                    _ACCEPTED_SIGNS[rule.limit_operator_type],
                    rule.limit,
                    (rule.cooldown_minutes or 0) * 60_000,
                    live.snapshot,
                    live.source_position,
                    live.shadow,
                    _unit_value(bounds.floor, units),
                    _unit_value(bounds.ceiling, units),
                    bounds.sign,
                )
            )
    return local_frame(spark, rows, rules_schema(units))  # no Python RDD: no Python worker


def _unit_value(value: int, units: DataType) -> int | Decimal:
    return value if isinstance(units, LongType) else Decimal(value)


def running_in_bucket(tagged: DataFrame) -> DataFrame:
    """Add ``cSum, cCount, cValueCount, cMin, cMax``: the batch's rows of the same (state, key, bucket) up to
    and including this one, in (eventTimeMs, transactionId) order."""
    # The hash first: Spark sorts by the partition keys, then the order keys, comparing an 8-byte prefix of the first
    # key before the whole rows; a hash tells rows apart where the state id (a few values) and key texts would not.
    upto = (
        Window.partitionBy(F.xxhash64("stateId", "keyValue"), "stateId", "keyValue", "bucket")
        .orderBy("eventTimeMs", "transactionId")
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    return tagged.withColumns(
        {
            "cSum": F.sum("value").over(upto),
            "cCount": F.count(F.lit(1)).over(upto),
            "cValueCount": F.count("value").over(upto),
            "cMin": F.min("value").over(upto),
            "cMax": F.max("value").over(upto),
        }
    )


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


def aggregate_units(joined: DataFrame, units: DataType) -> DataFrame:
    """Add ``aggregateUnits`` (the aggregate in ``units``) from the range (``r*``) and running (``c*``) parts,
    all in units: COUNT from the counts, SUM the sums, AVG their quotient HALF_UP, MIN/MAX the least/greatest."""
    total_count = F.coalesce(F.col("rCount"), F.lit(0)) + F.col("cCount")
    value_count = F.coalesce(F.col("rValueCount"), F.lit(0)) + F.col("cValueCount")
    total_sum = _plus(F.col("rSum"), F.col("cSum"))
    code = F.col("aggregator")
    value = (
        F.when(F.col("countsTransactions"), (total_count * F.lit(UNITS_PER_ONE)).cast(units))
        .when(code == AGGREGATOR_CODES["SUM"], total_sum)
        .when(code == AGGREGATOR_CODES["AVG"], average(total_sum, value_count, units))
        .when(code == AGGREGATOR_CODES["MIN"], F.least("rMin", "cMin"))
        .when(code == AGGREGATOR_CODES["MAX"], F.greatest("rMax", "cMax"))
    )
    return joined.withColumn("aggregateUnits", value.cast(units))


LIMIT_CHECK_COLUMNS = ("countsTransactions", "aggregator", "acceptedSigns", "limitFloor", "limitCeiling", "limitSign")
"""The rule columns ``aggregate_units`` and ``holds`` read."""
RULE_EVALUATION_COLUMNS = ("stateId", "reach", "ruleId", *LIMIT_CHECK_COLUMNS, "cooldownMs")
"""What the fan-out of rows to rules carries per (row, rule); the rest of a rule's columns (its snapshot text
above all) join only the candidates that meet their limit."""
POINT_COLUMNS = (
    *POINT_KEYS,
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
)


def evaluate(points: DataFrame, ranges: DataFrame, rules: DataFrame) -> DataFrame:
    """Candidate alerts: every (transaction, evaluated rule of its state it counts for) whose aggregate meets the
    limit (``shadow`` tells a SHADOW rule's candidates).

    ``points``: in-time tagged rows with the running columns (values in units), once per distinct ``reach`` of
    their state's rules; ``ranges``: ``lookback.range_aggregates`` of those points; ``rules``: ``rules_frame``
    (small, broadcast). The candidates carry ``aggregateValue`` as decimal(38,6). Cooldowns are applied afterwards
    (``cooldown``).
    """
    # Ranges are per (point, reach), not per rule: they are joined to the rows once per reach, then the rows fan
    # out to the rules (a broadcast join, no shuffle). Joining the rules first would move rows x rules (5x more
    # with five rules per state: docs/benchmarks.md, profile). The fan-out is the widest frame of a batch
    # (rows x rules): it carries only the columns the limit check needs, and only numbers.
    units = rules.schema["limitFloor"].dataType
    lean = points.select(*[c for c in POINT_COLUMNS if c in points.columns])  # a backtest has no ingestedAt
    with_ranges = lean.join(ranges.hint("shuffle_hash"), list(POINT_KEYS), "left")  # no sort of either side
    per_rule = with_ranges.join(F.broadcast(rules.select(*RULE_EVALUATION_COLUMNS)), ["stateId", "reach"]).where(
        F.col("countsTransactions") | F.col("value").isNotNull()
    )
    met = aggregate_units(per_rule, units).where(holds(F.col("aggregateUnits")))
    described = rules.drop(*[c for c in RULE_EVALUATION_COLUMNS if c != "ruleId"])
    return met.join(F.broadcast(described), "ruleId").withColumn(
        "aggregateValue", units_to_decimal(F.col("aggregateUnits"))
    )


def candidate_alerts(
    running: DataFrame, rules: DataFrame, prior_tiles: DataFrame, batch_tiles: DataFrame, *, bucket_ms: int
) -> DataFrame:
    """``evaluate`` over the lookbacks of ``running``'s (state, key, bucket) points: the engine's and the backtest's
    one evaluation chain. ``running``: rows to evaluate with their running columns (``running_in_bucket``)."""
    points = running.join(F.broadcast(rules.select("stateId", "reach").distinct()), "stateId")
    ranges = range_aggregates(points.select(*POINT_KEYS).distinct(), prior_tiles, batch_tiles, bucket_ms=bucket_ms)
    return evaluate(points, ranges, rules)
