"""Each rule's accuracy per week, from the alerts, the analysts' dispositions and the imported fraud labels.

An alert's **outcome**: ``fraud`` when its transaction carries a fraud label (chargebacks are the ground truth, so a
label wins over an analyst's "false positive") or its disposition in force is CONFIRMED_FRAUD; ``not_fraud`` when
that disposition is FALSE_POSITIVE and no label says otherwise; ``unknown`` otherwise (UNSURE, or not reviewed).

Per rule and ISO week (Monday 00:00 UTC) of the transaction's event time:

* ``alerts``; ``decided`` = alerts whose outcome is known; ``fraud``, ``notFraud``;
* ``precision`` = fraud / decided (null while nothing is decided);
* ``labelledFraud`` = labelled-fraud transactions of that week (in bronze); ``caught`` = those the rule alerted
  on; ``fraudCaughtShare`` = caught / labelledFraud (null without labelled fraud that week);
* ``transactions`` of the week and ``alertRate`` = alerts / transactions.

Example::

    weekly = rule_accuracy(alerts, dispositions, labels, bronze)
    weekly.where("precision < 0.2").show()
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from delta_tables.alert_dispositions import ALERT_DISPOSITIONS, ALERT_DISPOSITIONS_SCHEMA
from delta_tables.alerts import ALERTS
from delta_tables.bronze_transactions import bronze_spec
from delta_tables.fraud_labels import FRAUD_LABELS, FRAUD_LABELS_SCHEMA
from pipelines.base.settings import Settings
from pipelines.outcomes.dispositions import current_dispositions

WEEK = "week"


def alert_outcomes(alerts: DataFrame, dispositions: DataFrame, labels: DataFrame) -> DataFrame:
    """One row per alert: ``ruleId, alertId, transactionId, eventTime, week, outcome``."""
    labelled = labels.select("transactionId").distinct().withColumn("_labelled", F.lit(True))
    decided = current_dispositions(dispositions).select("alertId", F.col("disposition").alias("_decision"))
    outcome = (
        F.when(F.col("_labelled"), F.lit("fraud"))
        .when(F.col("_decision") == "CONFIRMED_FRAUD", F.lit("fraud"))
        .when(F.col("_decision") == "FALSE_POSITIVE", F.lit("not_fraud"))
        .otherwise(F.lit("unknown"))
    )
    return (
        alerts.select("ruleId", "alertId", "transactionId", "eventTime")
        .join(labelled, "transactionId", "left")
        .join(decided, "alertId", "left")
        .select(
            "ruleId",
            "alertId",
            "transactionId",
            "eventTime",
            F.date_trunc(WEEK, "eventTime").alias(WEEK),
            outcome.alias("outcome"),
        )
    )


def rule_accuracy(alerts: DataFrame, dispositions: DataFrame, labels: DataFrame, transactions: DataFrame) -> DataFrame:
    """Per ``(ruleId, week)``: the counts and ratios of the module doc, ordered by rule and week."""
    outcomes = alert_outcomes(alerts, dispositions, labels)
    per_rule = outcomes.groupBy("ruleId", WEEK).agg(
        F.count("*").alias("alerts"),
        F.sum((F.col("outcome") != "unknown").cast("long")).alias("decided"),
        F.sum((F.col("outcome") == "fraud").cast("long")).alias("fraud"),
        F.sum((F.col("outcome") == "not_fraud").cast("long")).alias("notFraud"),
    )
    weekly = transactions.select("transactionId", F.date_trunc(WEEK, "eventTime").alias(WEEK)).dropDuplicates(
        ["transactionId"]
    )
    volume = weekly.groupBy(WEEK).agg(F.count("*").alias("transactions"))
    fraud_tx = weekly.join(labels.select("transactionId").distinct(), "transactionId")
    labelled = fraud_tx.groupBy(WEEK).agg(F.count("*").alias("labelledFraud"))
    caught = (
        fraud_tx.join(alerts.select("ruleId", "transactionId").distinct(), "transactionId")
        .groupBy("ruleId", WEEK)
        .agg(F.count("*").alias("caught"))
    )
    return (
        per_rule.join(volume, WEEK, "left")
        .join(labelled, WEEK, "left")
        .join(caught, ["ruleId", WEEK], "left")
        .fillna(0, ["transactions", "labelledFraud", "caught"])
        .select(
            "ruleId",
            WEEK,
            "alerts",
            "decided",
            "fraud",
            "notFraud",
            F.when(F.col("decided") > 0, F.col("fraud") / F.col("decided")).alias("precision"),
            "labelledFraud",
            "caught",
            F.when(F.col("labelledFraud") > 0, F.col("caught") / F.col("labelledFraud")).alias("fraudCaughtShare"),
            "transactions",
            F.when(F.col("transactions") > 0, F.col("alerts") / F.col("transactions")).alias("alertRate"),
        )
        .orderBy("ruleId", WEEK)
    )


@dataclass(frozen=True)
class WatchItem:
    """A rule that needs a look: silent for too long, or too imprecise."""

    rule_id: int
    reason: str


def watch_list(
    live_rule_ids: list[int],
    alerts: DataFrame,
    outcomes_by_rule: DataFrame,
    *,
    now: dt.datetime,
    silent_days: int,
    min_precision: float,
    min_decided: int = 5,
) -> list[WatchItem]:
    """Live rules without an alert in ``silent_days`` days, and rules whose precision over all their decided alerts
    (at least ``min_decided`` of them) is under ``min_precision``. ``outcomes_by_rule`` is ``alert_outcomes(...)``."""
    cutoff = (now - dt.timedelta(days=silent_days)).replace(tzinfo=None)
    last = {r["ruleId"]: r["last"] for r in alerts.groupBy("ruleId").agg(F.max("eventTime").alias("last")).collect()}
    items = [
        WatchItem(rule_id, f"no alert in {silent_days} days (last: {last[rule_id] if rule_id in last else 'never'})")
        for rule_id in sorted(live_rule_ids)
        if rule_id not in last or last[rule_id] < cutoff
    ]
    decided = outcomes_by_rule.where(F.col("outcome") != "unknown").groupBy("ruleId")
    is_fraud = (F.col("outcome") == "fraud").cast("double")
    for row in decided.agg(F.count("*").alias("n"), F.avg(is_fraud).alias("p")).orderBy("ruleId").collect():
        if row["n"] >= min_decided and row["p"] < min_precision:
            items.append(WatchItem(int(row["ruleId"]), f"precision {row['p']:.2f} over {row['n']} decided alerts"))
    return items


def outcome_tables(spark: SparkSession, settings: Settings) -> tuple[DataFrame, DataFrame, DataFrame, DataFrame]:
    """``(alerts, dispositions, labels, bronze)`` of a lakehouse; an outcome table not yet created reads as empty."""

    def read(name: str, schema: StructType) -> DataFrame:
        path = settings.table_path(name)
        if DeltaTable.isDeltaTable(spark, path):
            return spark.read.format("delta").load(path)
        return spark.createDataFrame([], schema)  # nothing decided or imported yet

    alerts = spark.read.format("delta").load(settings.table_path(ALERTS.name))
    bronze = spark.read.format("delta").load(settings.table_path(bronze_spec(settings.transaction_schema).name))
    return (
        alerts,
        read(ALERT_DISPOSITIONS.name, ALERT_DISPOSITIONS_SCHEMA),
        read(FRAUD_LABELS.name, FRAUD_LABELS_SCHEMA),
        bronze,
    )
