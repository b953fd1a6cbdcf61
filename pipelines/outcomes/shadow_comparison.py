"""A SHADOW rule beside the rule it would replace: alerts per day, the transactions each flags, each one's precision.

Both rules are read from the same alerts table (a SHADOW rule's alerts are rows with ``shadow = true``, evaluated on
the same traffic as the live rules), over a range of whole days (UTC) of the transactions' event time — as
``accuracy`` and the backtests count days and weeks. The **compared** rule is any rule the analyst names; by default
``counterparts`` picks the ACTIVE rule with the same grouping keys and aggregate field. Per day: the alerts of each.
Per transaction either rule alerted on: flagged by ``both``, ``shadow_only`` or ``compared_only``, and whether it was
fraud (a fraud label, or an alert of it confirmed: ``accuracy.alert_outcomes``). Per rule: alerts, decided, fraud,
not fraud and precision = fraud / decided, exactly as ``accuracy.rule_accuracy`` but over the range.

The DataFrame functions are pure (frames in, frame out); ``compare_rules`` collects their small results (one row per
day, per category and per rule, and the first ``sample`` transactions of each category), never the alerts.

Example::

    alerts, dispositions, labels, _ = outcome_tables(spark, settings)
    days = default_days(alerts, [3, 1], today=dt.date.today())
    result = compare_rules(alerts, dispositions, labels, shadow_rule_id=3, compared_rule_id=1, days=days)
    result.groups["shadow_only"].transactions, result.sides["compared"].precision
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from delta_tables.rules import RULES
from pipelines.base.settings import Settings
from pipelines.outcomes.accuracy import alert_outcomes, outcome_tables
from rules_cdc.rule_model import RuleState

DEFAULT_DAYS = 14
"""The default range: the 14 days ending with the newest alert of either rule."""
MAX_DAYS = 92
"""The widest range (a quarter, as a backtest): one row per day is shown."""
SAMPLE = 20
"""Transactions listed per category."""

SHADOW, COMPARED = "shadow", "compared"
SIDES = (SHADOW, COMPARED)
BOTH, SHADOW_ONLY, COMPARED_ONLY = "both", "shadow_only", "compared_only"
CATEGORIES = (BOTH, SHADOW_ONLY, COMPARED_ONLY)


class ComparisonError(ValueError):
    """A comparison that cannot be made (a range backwards or too wide, a rule compared with itself)."""


@dataclass(frozen=True)
class DayRange:
    """Whole days of event time, UTC, ``first`` to ``last`` inclusive, at most ``MAX_DAYS``.

    >>> DayRange.ending(dt.date(2024, 3, 3)).first
    datetime.date(2024, 2, 19)
    """

    first: dt.date
    last: dt.date

    def __post_init__(self) -> None:
        if self.first > self.last:
            raise ComparisonError(f"from ({self.first}) must not be after to ({self.last})")
        if self.days > MAX_DAYS:
            raise ComparisonError(
                f"a comparison covers at most {MAX_DAYS} days, {self.first} to {self.last} is {self.days}"
            )

    @property
    def days(self) -> int:
        return (self.last - self.first).days + 1

    @classmethod
    def ending(cls, last: dt.date, days: int = DEFAULT_DAYS) -> DayRange:
        return cls(last - dt.timedelta(days=days - 1), last)


def counterparts(shadow_rule: Mapping[str, Any], rules: Sequence[Mapping[str, Any]]) -> list[int]:
    """The ACTIVE rules a SHADOW rule would replace, best first: the same grouping keys (in any order) and aggregate
    field; those with the same aggregator before the others, then by rule id. ``rules`` are rules-table rows.

    >>> shadow = {"ruleId": 3, "groupingKeyNames": ["payerId"], "aggregateFieldName": "paymentAmount",
    ...           "aggregatorFunctionType": "SUM"}
    >>> counterparts(shadow, [{**shadow, "ruleId": 9, "ruleState": "ACTIVE", "aggregatorFunctionType": "MAX"},
    ...                       {**shadow, "ruleId": 12, "ruleState": "ACTIVE"}])
    [12, 9]
    """

    def keys(row: Mapping[str, Any]) -> list[str]:
        return sorted(row.get("groupingKeyNames") or [])

    matching = [
        r
        for r in rules
        if r.get("ruleState") == RuleState.ACTIVE.value
        and int(r["ruleId"]) != int(shadow_rule["ruleId"])
        and keys(r) == keys(shadow_rule)
        and r.get("aggregateFieldName") == shadow_rule.get("aggregateFieldName")
    ]
    same_aggregator = shadow_rule.get("aggregatorFunctionType")
    ranked = sorted(matching, key=lambda r: (r.get("aggregatorFunctionType") != same_aggregator, int(r["ruleId"])))
    return [int(r["ruleId"]) for r in ranked]


def default_days(alerts: DataFrame, rule_ids: Sequence[int], *, today: dt.date) -> DayRange:
    """``DEFAULT_DAYS`` ending with the newest alert day (event time) of these rules; ending ``today`` without one.
    Ending at the newest alert rather than today, so that a rule that went quiet still shows its last two weeks."""
    newest = alerts.where(F.col("ruleId").isin(list(rule_ids))).agg(F.max(F.to_date("eventTime"))).first()
    return DayRange.ending(newest[0] if newest is not None and newest[0] is not None else today)


def resolve_days(
    first: dt.date | None, last: dt.date | None, alerts: DataFrame, rule_ids: Sequence[int], *, today: dt.date
) -> DayRange:
    """The range a person asked for: both ends as given; only ``last``: the ``DEFAULT_DAYS`` ending there; only
    ``first``: the ``DEFAULT_DAYS`` from there; neither: ``default_days`` (a Spark job, only then)."""
    if first is not None and last is not None:
        return DayRange(first, last)
    if last is not None:
        return DayRange.ending(last)
    if first is not None:
        return DayRange(first, first + dt.timedelta(days=DEFAULT_DAYS - 1))
    return default_days(alerts, rule_ids, today=today)


def pair_alerts(alerts: DataFrame, *, shadow_rule_id: int, compared_rule_id: int, days: DayRange) -> DataFrame:
    """The two rules' alerts in the range: ``alertId, ruleId, transactionId, eventTime, day, side``."""
    if shadow_rule_id == compared_rule_id:
        raise ComparisonError(f"rule {shadow_rule_id} cannot be compared with itself: name another rule")
    day = F.to_date("eventTime")  # the session's time zone is UTC (pipelines.base.spark_session)
    return alerts.where(
        F.col("ruleId").isin(shadow_rule_id, compared_rule_id) & day.between(F.lit(days.first), F.lit(days.last))
    ).select(
        "alertId",
        "ruleId",
        "transactionId",
        "eventTime",
        day.alias("day"),
        F.when(F.col("ruleId") == shadow_rule_id, F.lit(SHADOW)).otherwise(F.lit(COMPARED)).alias("side"),
    )


def with_outcomes(pair: DataFrame, dispositions: DataFrame, labels: DataFrame) -> DataFrame:
    """``pair_alerts`` with each alert's ``outcome`` (fraud, not_fraud, unknown: ``accuracy.alert_outcomes``)."""
    outcomes = alert_outcomes(pair, dispositions, labels).select("alertId", "outcome")
    return pair.join(outcomes, "alertId", "left")


def alerts_per_day(pair: DataFrame, days: DayRange) -> DataFrame:
    """Every day of the range (days without alerts too), by day: ``day, shadowAlerts, comparedAlerts``."""
    calendar = pair.sparkSession.range(days.days).select(
        F.date_add(F.lit(days.first), F.col("id").cast("int")).alias("day")
    )
    counts = pair.groupBy("day").agg(
        F.sum((F.col("side") == SHADOW).cast("long")).alias("shadowAlerts"),
        F.sum((F.col("side") == COMPARED).cast("long")).alias("comparedAlerts"),
    )
    return calendar.join(counts, "day", "left").fillna(0, ["shadowAlerts", "comparedAlerts"]).orderBy("day")


def flagged_transactions(judged: DataFrame) -> DataFrame:
    """One row per transaction either rule alerted on (``judged`` is ``with_outcomes(...)``): ``transactionId,
    eventTime, shadowAlertId, comparedAlertId, flaggedBy`` (both, shadow_only, compared_only) and ``fraud``
    (any of its alerts' outcome is fraud)."""
    shadow_id = F.max(F.when(F.col("side") == SHADOW, F.col("alertId")))
    compared_id = F.max(F.when(F.col("side") == COMPARED, F.col("alertId")))
    per_transaction = judged.groupBy("transactionId").agg(
        F.min("eventTime").alias("eventTime"),
        shadow_id.alias("shadowAlertId"),
        compared_id.alias("comparedAlertId"),
        F.max(F.col("outcome") == "fraud").alias("fraud"),
    )
    flagged_by = (
        F.when(F.col("shadowAlertId").isNotNull() & F.col("comparedAlertId").isNotNull(), F.lit(BOTH))
        .when(F.col("shadowAlertId").isNotNull(), F.lit(SHADOW_ONLY))
        .otherwise(F.lit(COMPARED_ONLY))
    )
    return per_transaction.withColumn("flaggedBy", flagged_by)


def flag_summary(flagged: DataFrame) -> DataFrame:
    """Per category: ``flaggedBy, transactions, fraud`` (how many of them were fraud)."""
    return (
        flagged.groupBy("flaggedBy")
        .agg(F.count("*").alias("transactions"), F.sum(F.col("fraud").cast("long")).alias("fraud"))
        .orderBy("flaggedBy")
    )


def side_accuracy(judged: DataFrame) -> DataFrame:
    """Per rule of the pair: ``side, ruleId, alerts, decided, fraud, notFraud, precision`` (null while nothing is
    decided), the figures of ``accuracy.rule_accuracy`` over the range."""
    per_side = judged.groupBy("side", "ruleId").agg(
        F.count("*").alias("alerts"),
        F.sum((F.col("outcome") != "unknown").cast("long")).alias("decided"),
        F.sum((F.col("outcome") == "fraud").cast("long")).alias("fraud"),
        F.sum((F.col("outcome") == "not_fraud").cast("long")).alias("notFraud"),
    )
    precision = F.when(F.col("decided") > 0, F.col("fraud") / F.col("decided"))
    return per_side.select("*", precision.alias("precision")).orderBy(F.col("side").desc())  # shadow first


@dataclass(frozen=True)
class FlagGroup:
    """The transactions of one category: how many, how many were fraud, the first ones (by event time)."""

    transactions: int = 0
    fraud: int = 0
    first: tuple[dict[str, Any], ...] = ()  # transactionId, eventTime, shadowAlertId, comparedAlertId, fraud


@dataclass(frozen=True)
class SideAccuracy:
    rule_id: int
    alerts: int = 0
    decided: int = 0
    fraud: int = 0
    not_fraud: int = 0
    precision: float | None = None


@dataclass(frozen=True)
class ShadowComparison:
    shadow_rule_id: int
    compared_rule_id: int
    days: DayRange
    per_day: list[dict[str, Any]]
    """``alerts_per_day``'s rows: day, shadowAlerts, comparedAlerts."""
    groups: dict[str, FlagGroup]
    """By category (``CATEGORIES``)."""
    sides: dict[str, SideAccuracy]
    """By side (``SIDES``)."""


def compare_rules(
    alerts: DataFrame,
    dispositions: DataFrame,
    labels: DataFrame,
    *,
    shadow_rule_id: int,
    compared_rule_id: int,
    days: DayRange,
    sample: int = SAMPLE,
) -> ShadowComparison:
    """The comparison, collected: three small Spark jobs (per day, per category with its first ``sample``
    transactions, per rule)."""
    pair = pair_alerts(alerts, shadow_rule_id=shadow_rule_id, compared_rule_id=compared_rule_id, days=days)
    judged = with_outcomes(pair, dispositions, labels)
    per_day = [r.asDict() for r in alerts_per_day(pair, days).collect()]

    in_category = Window.partitionBy("flaggedBy")
    ordered = in_category.orderBy("eventTime", "transactionId")
    first = (
        flagged_transactions(judged)
        .select(
            "*",
            F.row_number().over(ordered).alias("_n"),
            F.count("*").over(in_category).alias("_transactions"),
            F.sum(F.col("fraud").cast("long")).over(in_category).alias("_fraud"),
        )
        .where(F.col("_n") <= max(sample, 1))
        .orderBy("flaggedBy", "_n")
        .collect()
    )
    groups = {}
    for category in CATEGORIES:
        rows = [r.asDict() for r in first if r["flaggedBy"] == category]
        if rows:
            shown = tuple({k: v for k, v in r.items() if not k.startswith("_")} for r in rows[:sample])
            groups[category] = FlagGroup(int(rows[0]["_transactions"]), int(rows[0]["_fraud"] or 0), shown)
        else:
            groups[category] = FlagGroup()

    found = {r["side"]: r for r in side_accuracy(judged).collect()}
    sides = {}
    for side, rule_id in ((SHADOW, shadow_rule_id), (COMPARED, compared_rule_id)):
        row = found.get(side)
        sides[side] = (
            SideAccuracy(
                rule_id,
                int(row["alerts"]),
                int(row["decided"]),
                int(row["fraud"]),
                int(row["notFraud"]),
                None if row["precision"] is None else float(row["precision"]),
            )
            if row is not None
            else SideAccuracy(rule_id)
        )
    return ShadowComparison(shadow_rule_id, compared_rule_id, days, per_day, groups, sides)


def with_rule_states(weekly: DataFrame, rules: DataFrame) -> DataFrame:
    """``rule_accuracy``'s rows with the rule's current ``ruleState`` and ``shadow`` (a SHADOW rule: its alerts
    were never acted on), so a table of accuracy tells rules on trial from live ones."""
    states = rules.select("ruleId", "ruleState")
    return weekly.join(states, "ruleId", "left").select(
        "ruleId",
        "ruleState",
        F.coalesce(F.col("ruleState") == RuleState.SHADOW.value, F.lit(False)).alias("shadow"),
        *[c for c in weekly.columns if c != "ruleId"],
    )


def lakehouse_comparison(
    spark: SparkSession,
    settings: Settings,
    *,
    shadow_rule_id: int | None = None,
    compared_rule_id: int | None = None,
    first: dt.date | None = None,
    last: dt.date | None = None,
    today: dt.date | None = None,
) -> ShadowComparison | None:
    """The comparison over a lakehouse's tables (what notebook 06 calls): the SHADOW rule given, else the one with
    the lowest id; the compared rule given, else its first ``counterparts``; the range given, else
    ``default_days``. None when there is no SHADOW rule or no rule to compare it with."""
    rules = [r.asDict() for r in spark.read.format("delta").load(settings.table_path(RULES.name)).collect()]
    by_id = {int(r["ruleId"]): r for r in rules}
    if shadow_rule_id is None:
        shadows = sorted(i for i, r in by_id.items() if r["ruleState"] == RuleState.SHADOW.value)
        if not shadows:
            return None
        shadow_rule_id = shadows[0]
    if shadow_rule_id not in by_id:
        raise ComparisonError(f"the rules table has no rule {shadow_rule_id}")
    if compared_rule_id is None:
        candidates = counterparts(by_id[shadow_rule_id], rules)
        if not candidates:
            return None
        compared_rule_id = candidates[0]
    alerts, dispositions, labels, _ = outcome_tables(spark, settings)
    today = today or dt.datetime.now(dt.UTC).date()
    days = resolve_days(first, last, alerts, [shadow_rule_id, compared_rule_id], today=today)
    return compare_rules(
        alerts,
        dispositions,
        labels,
        shadow_rule_id=shadow_rule_id,
        compared_rule_id=compared_rule_id,
        days=days,
    )
