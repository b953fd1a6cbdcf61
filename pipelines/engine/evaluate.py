"""The alert condition: each evaluated transaction's aggregate under each ACTIVE rule of its state, vs the limit.

For transaction ``x`` in bucket ``b`` under rule ``r`` (reach ``R`` buckets), the lookback is

* prior state (earlier batches) over buckets ``[b - R, b]`` + the batch's buckets ``[b - R, b - 1]``
  (``lookback.range_aggregates``), plus
* the batch's transactions of bucket ``b`` up to and including ``x`` in (eventTime, transactionId) order
  (``running_in_bucket``: a ROWS window, so equal timestamps are split by transaction id).

Bucket order agrees with (eventTime, transactionId) order, so nothing that follows ``x`` is counted.
COUNT reads ``count``, SUM ``sum``, AVG ``sum / valueCount`` (HALF_UP to 6 decimals), MIN/MAX ``min``/``max``.

Example::

    rules = rules_frame(spark, states, bucket_seconds=60)
    candidates = candidate_alerts(running_in_bucket(in_time), rules, prior_tiles, batch_tiles, bucket_ms=60_000)
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
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
from rules_cdc.rule_model import LimitOperator

RULES_FRAME_SCHEMA = StructType(
    [
        StructField("stateId", StringType(), False),
        StructField("ruleId", LongType(), False),
        StructField("reach", LongType(), False),
        StructField("windowMinutes", IntegerType(), False),
        StructField("countsTransactions", BooleanType(), False),
        StructField("aggregatorFunctionType", StringType(), False),
        StructField("limitOperatorType", StringType(), False),
        StructField("acceptedSigns", ArrayType(IntegerType(), False), False),
        StructField("limit", AGGREGATE_TYPE, False),
        StructField("cooldownMs", LongType(), False),
        StructField("ruleSnapshot", StringType(), False),
        StructField("ruleSourcePosition", StringType(), True),
    ]
)


def reach_buckets(window_minutes: int, bucket_seconds: int) -> int:
    """How many buckets before ``b`` a window reaches: ``floor(W*60 / bucket_seconds)``."""
    return (window_minutes * 60) // bucket_seconds


def rules_frame(spark: SparkSession, states: Sequence[StateSpec], *, bucket_seconds: int) -> DataFrame:
    """The ACTIVE rules as a small frame (RULES_FRAME_SCHEMA), one row per rule."""
    rows = [
        (
            state.state_id,
            live.rule.rule_id,
            reach_buckets(live.rule.window_minutes, bucket_seconds),
            live.rule.window_minutes,
            live.rule.counts_transactions,
            live.rule.aggregator_function_type.value,
            live.rule.limit_operator_type.value,
            _ACCEPTED_SIGNS[live.rule.limit_operator_type],
            live.rule.limit,
            (live.rule.cooldown_minutes or 0) * 60_000,
            live.snapshot,
            live.source_position,
        )
        for state in states
        for live in state.active_rules
    ]
    return local_frame(spark, rows, RULES_FRAME_SCHEMA)  # literals, not a Python RDD: no Python worker


def running_in_bucket(tagged: DataFrame) -> DataFrame:
    """Add ``cSum, cCount, cValueCount, cMin, cMax``: the batch's rows of the same (state, key, bucket) up to
    and including this one, in (eventTimeMs, transactionId) order."""
    upto = (
        Window.partitionBy("stateId", "keyValue", "bucket")
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
    """Null-aware sum of two nullable decimals (null only when both are)."""
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


def _holds(value: Column, limit: Column, accepted_signs: Column) -> Column:
    difference = F.try_subtract(value, limit)  # null (no alert) rather than an overflow error near 1e32
    return F.coalesce(F.array_contains(accepted_signs, F.signum(difference).cast("int")), F.lit(False))


def aggregate_values(joined: DataFrame) -> DataFrame:
    """Add ``aggregateValue`` (decimal(38,6)) from the range (``r*``) and running (``c*``) parts."""
    total_count = F.coalesce(F.col("rCount"), F.lit(0)) + F.col("cCount")
    value_count = F.coalesce(F.col("rValueCount"), F.lit(0)) + F.col("cValueCount")
    total_sum = _plus(F.col("rSum"), F.col("cSum"))
    agg = F.col("aggregatorFunctionType")
    value = (
        F.when(F.col("countsTransactions"), total_count.cast(AGGREGATE_TYPE))
        .when(agg == "SUM", total_sum)
        .when(agg == "AVG", total_sum / value_count)
        .when(agg == "MIN", F.least("rMin", "cMin"))
        .when(agg == "MAX", F.greatest("rMax", "cMax"))
    )
    return joined.withColumn("aggregateValue", value.cast(AGGREGATE_TYPE))


RULE_EVALUATION_COLUMNS = (
    "stateId",
    "reach",
    "ruleId",
    "countsTransactions",
    "aggregatorFunctionType",
    "acceptedSigns",
    "limit",
    "cooldownMs",
)
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
    """Candidate alerts: every (transaction, ACTIVE rule of its state it counts for) whose aggregate meets the limit.

    ``points``: in-time tagged rows with the running columns, once per distinct ``reach`` of their state's rules;
    ``ranges``: ``lookback.range_aggregates`` of those points; ``rules``: ``rules_frame`` (small, broadcast).
    Cooldowns are applied afterwards (``cooldown``).
    """
    # Ranges are per (point, reach), not per rule: they are joined to the rows once per reach (a shuffle join over
    # rows x reaches), then the rows fan out to the rules (a broadcast join, no shuffle). Joining the rules first
    # would shuffle rows x rules (5x more with five rules per state: docs/benchmarks.md, profile). The fan-out is
    # the widest frame of a batch (rows x rules): it carries only the columns the limit check needs.
    lean = points.select(*POINT_COLUMNS)
    with_ranges = lean.join(ranges.hint("shuffle_hash"), list(POINT_KEYS), "left")  # no sort of either side
    per_rule = with_ranges.join(F.broadcast(rules.select(*RULE_EVALUATION_COLUMNS)), ["stateId", "reach"]).where(
        F.col("countsTransactions") | F.col("value").isNotNull()
    )
    valued = aggregate_values(per_rule)
    met = valued.where(_holds(F.col("aggregateValue"), F.col("limit"), F.col("acceptedSigns")))
    described = rules.drop(*[c for c in RULE_EVALUATION_COLUMNS if c != "ruleId"])
    return met.join(F.broadcast(described), "ruleId")


def candidate_alerts(
    running: DataFrame, rules: DataFrame, prior_tiles: DataFrame, batch_tiles: DataFrame, *, bucket_ms: int
) -> DataFrame:
    """``evaluate`` over the lookbacks of ``running``'s (state, key, bucket) points: the engine's and the backtest's
    one evaluation chain. ``running``: rows to evaluate with their running columns (``running_in_bucket``)."""
    points = running.join(F.broadcast(rules.select("stateId", "reach").distinct()), "stateId")
    ranges = range_aggregates(points.select(*POINT_KEYS).distinct(), prior_tiles, batch_tiles, bucket_ms=bucket_ms)
    return evaluate(points, ranges, rules)
