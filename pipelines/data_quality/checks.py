"""Cross-row and cross-table checks that GX cannot express directly, computed with Spark as boolean columns.

Each table's frame is returned with its own columns plus one ``dq_*`` boolean column per ``DerivedCheck``;
the suites then expect every ``dq_*`` value to be ``True``, so all checks land in one GX report. A check
whose inputs are missing or malformed computes ``False`` (it fails), never null (which GX would skip).

Example::

    checked = alerts_checked(alerts_df, known_rule_ids(rules_df, rule_changes_df))
    checked.where(~F.col("dq_operator_holds"))          # the alerts whose value does not meet their limit
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import reduce

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType

from pipelines.base.settings import QualitySettings
from rules_cdc.rule_model import TOMBSTONE_STATES, LimitOperator
from rules_cdc.rule_rows import LIVE_STATES

CHECK_PREFIX = "dq_"


@dataclass(frozen=True)
class DerivedCheck:
    """One computed boolean column and what it guards (shown in the suite and the report)."""

    column: str
    description: str


EVENT_TIME_NOT_IN_FUTURE = DerivedCheck(
    "dq_event_time_not_in_future",
    "eventTime is at most quality.max_future_skew_minutes after ingestedAt (no clock-skewed or forged times)",
)
BRONZE_CHECKS = (EVENT_TIME_NOT_IN_FUTURE,)

TOMBSTONE_CONSISTENT = DerivedCheck(
    "dq_tombstone_consistent",
    "tombstonedAt is set exactly on DELETED/DISABLED rows, and disabled=true rows are tombstones",
)
LIVE_RULE_COMPLETE = DerivedCheck(
    "dq_live_rule_complete",
    "ACTIVE/PAUSED rules have an aggregate field, aggregator, operator, limit and window (the engine needs them)",
)
RULES_CHECKS = (TOMBSTONE_CONSISTENT, LIVE_RULE_COMPLETE)

SUM_WITHIN_COUNT_BOUNDS = DerivedCheck(
    "dq_sum_within_count_bounds",
    "with n = valueCount (else count): n * min <= sum <= n * max, n = 1 gives sum = min = max, n = 0 no sum",
)
WITHIN_RETENTION = DerivedCheck(
    "dq_within_retention",
    "no tile starts more than engine.backfill_retention_days plus one day tile before the newest (retention runs)",
)
BUCKET_STATE_CHECKS = (SUM_WITHIN_COUNT_BOUNDS, WITHIN_RETENTION)

OPERATOR_HOLDS = DerivedCheck(
    "dq_operator_holds",
    "aggregateValue <limitOperatorType> limit really holds (an alert is never raised for a value that passes)",
)
REFERS_TO_KNOWN_RULE = DerivedCheck(
    "dq_refers_to_known_rule",
    "the alert's ruleId is in the rules table (tombstones included) or the rule change log: the rule existed",
)
SNAPSHOT_MATCHES = DerivedCheck(
    "dq_snapshot_matches",
    "ruleSnapshot (when present) names the same ruleId, aggregator, operator and window as the alert's columns",
)
ALERTS_CHECKS = (OPERATOR_HOLDS, REFERS_TO_KNOWN_RULE, SNAPSHOT_MATCHES)

DERIVED_CHECKS: dict[str, tuple[DerivedCheck, ...]] = {
    "bronze_transactions": BRONZE_CHECKS,
    "rules": RULES_CHECKS,
    "bucket_state": BUCKET_STATE_CHECKS,
    "alerts": ALERTS_CHECKS,
}

_COMPARE: dict[LimitOperator, Callable[[Column, Column], Column]] = {
    LimitOperator.GREATER: lambda value, limit: value > limit,
    LimitOperator.GREATER_EQUAL: lambda value, limit: value >= limit,
    LimitOperator.LESS: lambda value, limit: value < limit,
    LimitOperator.LESS_EQUAL: lambda value, limit: value <= limit,
    LimitOperator.EQUAL: lambda value, limit: value == limit,
    LimitOperator.NOT_EQUAL: lambda value, limit: value != limit,
}
if set(_COMPARE) != set(LimitOperator):  # a new operator needs its comparison here, or its alerts would all fail
    raise RuntimeError(f"data_quality.checks has no comparison for {set(LimitOperator) - set(_COMPARE)}")


def _true_or_false(condition: Column) -> Column:
    """Null (missing or malformed input) counts as a failed check, because GX skips nulls in value sets."""
    return F.coalesce(condition, F.lit(False))


def operator_holds(value: Column, operator: Column, limit: Column) -> Column:
    """``value <operator> limit`` for an operator name column, as ``LimitOperator.holds`` does; False if unknown."""
    cases = [F.when(operator == op.value, compare(value, limit)) for op, compare in _COMPARE.items()]
    return _true_or_false(F.coalesce(*cases))


_SCALE = 10**6


def _alert_condition_holds(alerts: DataFrame, snap: Callable[[str], Column]) -> Column:
    """An alert's condition: ``aggregateValue OP limit``, or, with a relative limit (``baselineValue`` set), ``value
    OP limit * B * W / W2`` (``perWindow``) or ``limit * B``, compared exactly as 38-digit integers of millionths
    like the engine (``value * 10^6 * den`` vs ``limit * 10^6 * B * 10^6 * num``)."""
    fixed = operator_holds(F.col("aggregateValue"), F.col("limitOperatorType"), F.col("limit"))
    if "baselineValue" not in alerts.columns:
        return fixed
    wide = "decimal(38,0)"
    per_window = F.coalesce(snap("baseline.perWindow") == "true", F.lit(False))
    num = F.when(per_window, F.col("windowMinutes")).otherwise(F.lit(1)).cast(wide)
    den = F.when(per_window, snap("baseline.windowMinutes").cast("int")).otherwise(F.lit(1)).cast(wide)
    units = F.lit(_SCALE).cast(wide)
    left = (F.col("aggregateValue") * F.lit(_SCALE)).cast(wide) * units * den
    right = (F.col("limit") * F.lit(_SCALE)).cast(wide) * (F.col("baselineValue") * F.lit(_SCALE)).cast(wide) * num
    relative = operator_holds(left, F.col("limitOperatorType"), right)
    return F.when(F.col("baselineValue").isNull(), fixed).otherwise(relative)


def bronze_checked(bronze: DataFrame, quality: QualitySettings) -> DataFrame:
    """Bronze transactions plus ``dq_event_time_not_in_future``."""
    skew = F.expr(f"INTERVAL {int(quality.max_future_skew_minutes)} MINUTES")
    return bronze.withColumn(
        EVENT_TIME_NOT_IN_FUTURE.column, _true_or_false(F.col("eventTime") <= F.col("ingestedAt") + skew)
    )


def rules_checked(rules: DataFrame) -> DataFrame:
    """Rules plus ``dq_tombstone_consistent`` and ``dq_live_rule_complete``."""
    state = F.col("ruleState")
    is_tombstone = state.isin(*sorted(s.value for s in TOMBSTONE_STATES))
    tombstone_consistent = (is_tombstone == F.col("tombstonedAt").isNotNull()) & (~F.col("disabled") | is_tombstone)
    required = ("aggregateFieldName", "aggregatorFunctionType", "limitOperatorType", "limit", "windowMinutes")
    complete = reduce(lambda acc, name: acc & F.col(name).isNotNull(), required, F.lit(True))
    live_complete = ~state.isin(*LIVE_STATES) | complete
    return rules.withColumn(TOMBSTONE_CONSISTENT.column, _true_or_false(tombstone_consistent)).withColumn(
        LIVE_RULE_COMPLETE.column, _true_or_false(live_complete)
    )


def bucket_state_checked(buckets: DataFrame, retention_ms: int) -> DataFrame:
    """Bucket state plus ``dq_sum_within_count_bounds`` and ``dq_within_retention``.

    ``sum``/``min``/``max`` aggregate the ``valueCount`` transactions whose field is not null (``count`` on a
    table without ``valueCount``): with n of them, ``n * min <= sum <= n * max``, n = 1 means sum = min = max,
    and n = 0 means no sum, min or max. A tile may start at most ``retention_ms`` before the newest
    ``bucketStart`` in the table: measured in event time, not by the wall clock, so a lakehouse replayed from old
    data is judged like a live one.
    """
    has_value_count = "valueCount" in buckets.columns
    n = F.col("valueCount" if has_value_count else "count")
    total, low, high = F.col("sum"), F.col("min"), F.col("max")
    known = total.isNotNull() & low.isNotNull() & high.isNotNull()
    n_dec = n.cast("decimal(20,0)")
    bounded = (n_dec * low <= total) & (total <= n_dec * high) & ((n != 1) | ((total == low) & (low == high)))
    if has_value_count:
        absent = total.isNull() & low.isNull() & high.isNull()
        sum_ok = F.when(n == 0, absent).otherwise(known & bounded)
    else:  # a COUNT-only state has no sum/min/max to compare
        sum_ok = ~known | bounded
    horizon = buckets.agg(F.max("bucketStart").alias("_dq_horizon"))
    within = F.col("bucketStart") >= F.col("_dq_horizon") - F.lit(int(retention_ms))
    return (
        buckets.crossJoin(F.broadcast(horizon))
        .withColumn(SUM_WITHIN_COUNT_BOUNDS.column, _true_or_false(sum_ok))
        .withColumn(WITHIN_RETENTION.column, _true_or_false(within))
        .drop("_dq_horizon")
    )


def known_rule_ids(spark: SparkSession, *sources: DataFrame | None) -> DataFrame:
    """Distinct ``ruleId`` of every given frame (rules table, rule change log); an empty frame if none exist."""
    frames = [frame.select(F.col("ruleId").cast(LongType()).alias("ruleId")) for frame in sources if frame is not None]
    if not frames:
        return spark.createDataFrame([], StructType([StructField("ruleId", LongType(), True)]))
    return reduce(DataFrame.unionByName, frames).distinct()


def alerts_checked(alerts: DataFrame, rule_ids: DataFrame) -> DataFrame:
    """Alerts plus ``dq_operator_holds``, ``dq_refers_to_known_rule`` and ``dq_snapshot_matches``."""
    known = rule_ids.select("ruleId").distinct().withColumn("_dq_known", F.lit(True))
    snapshot = F.col("ruleSnapshot")

    def snap(field: str) -> Column:
        return F.get_json_object(snapshot, f"$.{field}")

    matches = snapshot.isNull() | (
        (snap("ruleId").cast(LongType()) == F.col("ruleId"))
        & (snap("aggregatorFunctionType") == F.col("aggregatorFunctionType"))
        & (snap("limitOperatorType") == F.col("limitOperatorType"))
        & (snap("windowMinutes").cast("int") == F.col("windowMinutes"))
    )
    return (
        alerts.join(F.broadcast(known), on="ruleId", how="left")
        .withColumn(OPERATOR_HOLDS.column, _alert_condition_holds(alerts, snap))
        .withColumn(REFERS_TO_KNOWN_RULE.column, _true_or_false(F.col("_dq_known")))
        .withColumn(SNAPSHOT_MATCHES.column, _true_or_false(matches))
        .drop("_dq_known")
    )
