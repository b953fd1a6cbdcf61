"""Alerts for the live list: filtered by rule, key and event time, newest first, and only those after a cursor.

The live page polls ``recent_alerts(..., after=<newest detectedAt it has>)``: alerts are appended once per
micro-batch with one ``detectedAt`` per batch, so "detected after the cursor" is exactly "new since the last poll"
(the page also drops an ``alertId`` it already shows, should a replayed batch append nothing twice anyway).

Example::

    query = AlertQuery.parse(rule="7", key="[1001]", since="2024-06-01", until="")
    alerts = recent_alerts(reader, query, limit=200)
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from delta_tables.alerts import ALERTS
from pipelines.console import params
from pipelines.console.lake_reader import Condition, LakeReader
from pipelines.engine.alert_rows import EXPORT_FIELDS

OPTIONAL_COLUMNS = ("baselineValue",)
"""Read only when the alerts table has them (a relative rule's ``B``: a table of an older release lacks the column
until the engine's next start adds it), whether or not ``EXPORT_FIELDS`` names them."""
BadQuery = params.BadParameter
"""A filter the page cannot use; the message says which and why."""


@dataclass(frozen=True)
class AlertQuery:
    """The live list's filters: a rule id, a key string (exact), an event-time range [since, until)."""

    rule_id: int | None = None
    key: str | None = None
    since: dt.datetime | None = None
    until: dt.datetime | None = None

    @classmethod
    def parse(
        cls, *, rule: str | None = None, key: str | None = None, since: str | None = None, until: str | None = None
    ) -> AlertQuery:
        """From form text (``params``: rule ids in the model's range, the documented instants, from before to);
        raises ``BadQuery`` with a message for people."""
        start, end = params.time_range(since, until)
        return cls(params.optional_rule_id(rule), params.text(key, "key"), start, end)

    def conditions(self) -> list[Condition]:
        where: list[Condition] = []
        if self.rule_id is not None:
            where.append(("ruleId", "=", self.rule_id))
        if self.key is not None:
            where.append(("keyValue", "=", self.key))
        if self.since is not None:
            where.append(("eventTime", ">=", self.since))
        if self.until is not None:
            where.append(("eventTime", "<", self.until))
        return where

    def as_params(self) -> dict[str, str]:
        """The query as URL parameters (what the form sends), for links and the poller."""
        return {
            "rule": "" if self.rule_id is None else str(self.rule_id),
            "key": self.key or "",
            "since": self.since.strftime("%Y-%m-%dT%H:%M") if self.since else "",
            "until": self.until.strftime("%Y-%m-%dT%H:%M") if self.until else "",
        }


def recent_alerts(
    reader: LakeReader, query: AlertQuery, *, after: dt.datetime | None = None, limit: int = 200
) -> list[dict[str, Any]]:
    """Matching alerts, newest detection first (then rule, transaction), at most ``limit``; each with the fields
    the alerts topic carries (``alert_rows.EXPORT_FIELDS``), and ``OPTIONAL_COLUMNS`` where the table has them."""
    where = query.conditions()
    if after is not None:
        where.append(("detectedAt", ">", after))
        # detectedDate partitions the table: skip the days before the cursor.
        where.append(("detectedDate", ">=", after.date() - dt.timedelta(days=1)))
    present = set(reader.columns(ALERTS.name))
    wanted = dict.fromkeys([*EXPORT_FIELDS, *OPTIONAL_COLUMNS, "shadow"])
    columns = [c for c in wanted if c in present or c not in OPTIONAL_COLUMNS]
    rows = reader.rows(ALERTS.name, columns=columns, where=where)
    rows = [r for r in rows if not r.pop("shadow")]  # a SHADOW rule's alerts are not live ones (null: older, live)
    rows.sort(key=lambda r: (r["detectedAt"], r["ruleId"], r["transactionId"]), reverse=True)
    return rows[:limit]


def find_alert(reader: LakeReader, rule_id: int, transaction_id: str) -> dict[str, Any] | None:
    """The alerts row of this rule and transaction (``params.alert_id`` parses ``<ruleId>:<transactionId>``), or
    None."""
    alert_id = f"{rule_id}:{transaction_id}"
    rows = reader.rows(ALERTS.name, where=[("ruleId", "=", rule_id), ("alertId", "=", alert_id)])
    return rows[0] if rows else None
