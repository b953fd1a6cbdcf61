"""What the console shows and records of alerts' outcomes (pipelines/outcomes): an alert's dispositions, a new one,
each rule's accuracy per week and the watch list. Every function here blocks (Delta reads, Spark jobs): the pages
call them on the console's lake pool, never on the event loop.

Example::

    history = await console.lake.run(disposition_history, console.reader, "7:tx-1")
    report = await console.lake.run(accuracy_report, console.spark, console.reader, query, now)
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession

from delta_tables.alert_dispositions import ALERT_DISPOSITIONS, DISPOSITIONS
from delta_tables.alerts import ALERTS
from pipelines.base.settings import Settings
from pipelines.console.lake_reader import LakeReader, TableMissing
from pipelines.console.rules_data import rules_rows
from pipelines.outcomes.accuracy import WatchItem, alert_outcomes, outcome_tables, rule_accuracy, watch_list
from pipelines.outcomes.dispositions import record_disposition
from rules_cdc.rule_rows import LIVE_STATES

LABELS = {"CONFIRMED_FRAUD": "confirmed fraud", "FALSE_POSITIVE": "false positive", "UNSURE": "unsure"}
"""How the console names each disposition (the table's values are DISPOSITIONS)."""
assert set(LABELS) == set(DISPOSITIONS)


def disposition_history(reader: LakeReader, alert_id: str) -> list[dict[str, Any]]:
    """The alert's dispositions, the one in force first (latest ``decidedAt``, then greatest id, as
    ``current_dispositions``); empty when none was recorded (or the table does not exist yet)."""
    if not reader.exists(ALERT_DISPOSITIONS.name):
        return []
    rows = reader.rows(
        ALERT_DISPOSITIONS.name,
        columns=["dispositionId", "disposition", "decidedBy", "decidedAt", "note"],
        where=[("alertId", "=", alert_id)],
    )
    return sorted(rows, key=lambda r: (r["decidedAt"], r["dispositionId"]), reverse=True)


def mark_alert(
    spark: Callable[[], SparkSession], settings: Settings, alert_id: str, disposition: str, user: str, note: str | None
) -> str:
    """Record ``user``'s disposition of the alert (``record_disposition``: refuses an unknown alert)."""
    return record_disposition(spark(), settings, alert_id=alert_id, disposition=disposition, decided_by=user, note=note)


@dataclass(frozen=True)
class AccuracyQuery:
    silent_days: int = 7
    min_precision: float = 0.5
    min_decided: int = 5


@dataclass(frozen=True)
class AccuracyReport:
    weeks: list[dict[str, Any]]
    """``rule_accuracy``'s rows (rule, ISO week, counts, ratios), by rule then week."""
    watch: list[WatchItem]
    live_rules: int


def accuracy_report(
    spark: Callable[[], SparkSession], reader: LakeReader, query: AccuracyQuery, now: dt.datetime
) -> AccuracyReport:
    """Per rule and week: alerts, precision, fraud caught share, alert rate; and the rules that need a look.
    The weekly aggregate is small (rules x weeks): it is collected, the alerts and transactions are not."""
    if not reader.exists(ALERTS.name):
        raise TableMissing(ALERTS.name, reader.path(ALERTS.name))
    alerts, dispositions, labels, bronze = outcome_tables(spark(), reader.settings)
    weeks = [row.asDict() for row in rule_accuracy(alerts, dispositions, labels, bronze).collect()]
    live = [int(r["ruleId"]) for r in rules_rows(reader) if r["ruleState"] in LIVE_STATES]
    watch = watch_list(
        live,
        alerts,
        alert_outcomes(alerts, dispositions, labels),
        now=now,
        silent_days=query.silent_days,
        min_precision=query.min_precision,
        min_decided=query.min_decided,
    )
    return AccuracyReport(weeks=weeks, watch=watch, live_rules=len(live))
