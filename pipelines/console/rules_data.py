"""What the rules pages show, read from the lakehouse: rules in force and tombstones, versions, history, alert counts,
and rule changes the lake refused that nothing has replaced yet.

Example::

    overview = rules_overview(reader)
    [(r.rule_id, r.state, r.version, r.alerts) for r in overview.live]
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from delta_tables.alerts import ALERTS
from delta_tables.quarantine import QUARANTINE
from delta_tables.rule_changes import RULE_CHANGES
from delta_tables.rules import RULES
from pipelines.console.lake_reader import LakeReader
from rules_cdc.apply_changes import QUARANTINE_SOURCE
from rules_cdc.plan_changes import TableView, Watermark
from rules_cdc.rejected_changes import MAX_LISTED, Rejection, rejection_of
from rules_cdc.rule_model import Rule
from rules_cdc.rule_rows import LIVE_STATES, TRUNCATE_MARKER_ID, rule_from_row
from rules_cdc.rules_views import rule_json, rule_text


@dataclass(frozen=True)
class RuleEntry:
    """One rules-table row with what the console adds: its version, alert counts and a readable definition."""

    row: dict[str, Any]
    version: int | None  # the rules-table version that last changed this rule (from the change log)
    alerts: int = 0
    last_alert: dt.datetime | None = None

    @property
    def rule_id(self) -> int:
        return int(self.row["ruleId"])

    @property
    def state(self) -> str:
        return str(self.row["ruleState"])

    @property
    def live(self) -> bool:
        return self.state in LIVE_STATES

    @property
    def rule(self) -> Rule | None:
        return rule_from_row(self.row) if self.live else None

    @property
    def document(self) -> dict[str, Any]:
        return rule_json(self.row)

    @property
    def definition(self) -> str:
        return describe(self.row)


@dataclass(frozen=True)
class RulesOverview:
    live: list[RuleEntry]
    tombstones: list[RuleEntry]
    table_version: int
    rejections: list[Rejection] = field(default_factory=list)


def describe(row: Mapping[str, Any]) -> str:
    """A rule for people: the condition as ``fraudlake rules list`` writes it (``rules_views.rule_text``), then its
    filter and cooldown (a tombstone without content: ``-``)::

        SUM(paymentAmount) > 100 in 10 min by [payerId]
        VALUE(paymentAmount) > 5 x AVG over 30 days (min 5 tx) by [payerId], cooldown 10 min
    """
    text = rule_text(dict(row))
    if text == "-":
        return text
    if row.get("filter"):
        text += f" where {row['filter']}"
    if row.get("cooldownMinutes"):
        text += f", cooldown {row['cooldownMinutes']} min"
    return text


def plain_number(value: Any) -> str:
    """A decimal without trailing zeros: ``100.000000`` -> ``100``."""
    if value is None:
        return "-"
    text = format(value, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def rules_rows(reader: LakeReader) -> list[dict[str, Any]]:
    """Every rules row but the truncate marker, by rule id."""
    rows = reader.rows(RULES.name, where=[("ruleId", "!=", TRUNCATE_MARKER_ID)])
    return sorted(rows, key=lambda r: int(r["ruleId"]))


def table_view(reader: LakeReader) -> TableView:
    """The rules table as the CLI publisher needs it (``rules_cdc.apply_changes.read_view``, without Spark)."""
    rows = reader.rows(RULES.name)
    marker = next((r for r in rows if r["ruleId"] == TRUNCATE_MARKER_ID), None)
    return TableView(
        positions={int(r["ruleId"]): str(r["sourcePosition"]) for r in rows},
        live_rows={int(r["ruleId"]): _naive_times(r) for r in rows if r["ruleState"] in LIVE_STATES},
        watermark=Watermark(marker["sourcePosition"], marker["sourceTsMs"]) if marker else None,
    )


def rule_versions(reader: LakeReader) -> dict[int, int]:
    """Per rule, the newest rules-table version its applied changes committed."""
    if not reader.exists(RULE_CHANGES.name):
        return {}
    table = reader.read(RULE_CHANGES.name, columns=["ruleId", "rulesVersion"])
    grouped = table.group_by("ruleId").aggregate([("rulesVersion", "max")])
    return {
        int(r["ruleId"]): int(r["rulesVersion_max"]) for r in grouped.to_pylist() if r["rulesVersion_max"] is not None
    }


def alert_counts(reader: LakeReader) -> dict[int, tuple[int, dt.datetime | None]]:
    """Per rule: how many alerts, and the newest one's detection time."""
    if not reader.exists(ALERTS.name):
        return {}
    table: pa.Table = reader.read(ALERTS.name, columns=["ruleId", "detectedAt", "shadow"])
    table = table.filter(pc.invert(pc.fill_null(table["shadow"], False)))  # live alerts only: not SHADOW rules'
    grouped = table.group_by("ruleId").aggregate([("ruleId", "count"), ("detectedAt", "max")])
    return {int(r["ruleId"]): (int(r["ruleId_count"]), r["detectedAt_max"]) for r in grouped.to_pylist()}


def rules_overview(reader: LakeReader) -> RulesOverview:
    """The rules page: live rules and tombstones with versions and alert counts, plus pending rejections."""
    versions, counts = rule_versions(reader), alert_counts(reader)
    entries = []
    for row in rules_rows(reader):
        rule_id = int(row["ruleId"])
        count, last = counts.get(rule_id, (0, None))
        entries.append(RuleEntry(row, versions.get(rule_id), count, last))
    return RulesOverview(
        live=[e for e in entries if e.live],
        tombstones=[e for e in entries if not e.live],
        table_version=reader.version(RULES.name),
        rejections=pending_rejections(reader),
    )


def rule_entry(reader: LakeReader, rule_id: int) -> RuleEntry | None:
    """One rule's row (tombstone or live) with its version and alert count; None when the table never had it."""
    rows = reader.rows(RULES.name, where=[("ruleId", "=", rule_id)])
    if not rows or rule_id == TRUNCATE_MARKER_ID:
        return None
    count, last = alert_counts(reader).get(rule_id, (0, None))
    return RuleEntry(rows[0], rule_versions(reader).get(rule_id), count, last)


def rule_history(reader: LakeReader, rule_id: int) -> list[dict[str, Any]]:
    """Every applied change of the rule, oldest first (by source position, then when it was applied)."""
    if not reader.exists(RULE_CHANGES.name):
        return []
    rows = reader.rows(RULE_CHANGES.name, where=[("ruleId", "=", rule_id)])
    return sorted(rows, key=lambda r: (r["sourcePosition"], r["appliedAt"]))


def pending_rejections(reader: LakeReader) -> list[Rejection]:
    """Quarantined rule changes newer than the rules table's row for their rule (``rejected_changes``)."""
    if not reader.exists(QUARANTINE.name):
        return []
    rows = reader.rows(
        QUARANTINE.name,
        columns=["rawPayload", "reason", "sourceOffset", "quarantinedAt"],
        where=[("source", "=", QUARANTINE_SOURCE)],
    )
    rows = sorted(rows, key=lambda r: r["quarantinedAt"], reverse=True)[:MAX_LISTED]
    positions = {int(r["ruleId"]): str(r["sourcePosition"]) for r in reader.rows(RULES.name)}
    watermark = positions.get(TRUNCATE_MARKER_ID, "")
    pending: dict[tuple[int, str], Rejection] = {}
    for row in rows:
        rejection = rejection_of(row["rawPayload"], row["reason"], row["sourceOffset"], row["quarantinedAt"])
        if rejection.rule_id is None or rejection.position is None:
            continue
        if rejection.position > max(positions.get(rejection.rule_id, ""), watermark):
            pending.setdefault((rejection.rule_id, rejection.position), rejection)
    return [pending[key] for key in sorted(pending, key=lambda k: (k[1], k[0]))]


def _naive_times(row: dict[str, Any]) -> dict[str, Any]:
    """Timestamps as Spark's collect gives them (naive UTC), so that rows from both readers look the same."""
    return {
        k: (v.astimezone(dt.UTC).replace(tzinfo=None) if isinstance(v, dt.datetime) and v.tzinfo else v)
        for k, v in row.items()
    }
