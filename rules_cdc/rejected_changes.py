"""Rule changes the lake refused: all of them (``fraudlake rules rejected``, ``rules history``), and those nothing
has replaced yet (what ``fraudlake rules list`` shows under the rules).

A change the database accepted but the rule model rejects (a window of 0, an unknown aggregate) is quarantined
by the rules CDC job, and the rule's last good version stays in force. Until a newer change of that rule is
applied, the database and the lake disagree about it: such a rejection is *pending*. One whose rule has since
changed again is resolved and no longer listed there (it stays in the quarantine table).

A *stale* change (older than its rule's row and never applied: "stale: position X is older than rule N's Y") is
never pending, since the rule has moved on past it; ``quarantined_changes`` lists it with every other refusal.

Example::

    for rejection in pending_rejections(spark, settings):
        print(rejection.rule_id, rejection.reason)
    print(rejections_text(quarantined_changes(spark, settings, rule_id=7), title="refused changes of rule 7"))
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from delta_tables.quarantine import QUARANTINE
from pipelines.base.settings import Settings
from rules_cdc.apply_changes import QUARANTINE_SOURCE, read_view
from rules_cdc.rule_rows import TRUNCATE_MARKER_ID
from rules_cdc.source_position import PositionError, position_of

MAX_LISTED = 1000
"""The newest quarantined rule changes looked at (rules change rarely; this bounds what reaches the driver)."""


@dataclass(frozen=True)
class Rejection:
    """One quarantined rule change: its rule (if the payload names one), position, reason and origin."""

    rule_id: int | None
    position: str | None
    reason: str
    source_offset: str | None
    quarantined_at: Any

    def text(self) -> str:
        rule = "-" if self.rule_id is None else str(self.rule_id)
        return f"{rule:>8}  {self.quarantined_at!s:<26}  {self.source_offset or '-'}  {self.reason}"


def rejection_of(raw: str | None, reason: str, source_offset: str | None, quarantined_at: Any) -> Rejection:
    """What a quarantined record says about its rule, read leniently (it was rejected for a reason)."""
    rule_id, position = None, None
    try:
        document = json.loads(raw) if raw else None
    except (ValueError, RecursionError):
        document = None
    if isinstance(document, dict) and set(document) == {"schema", "payload"}:
        document = document["payload"]
    if isinstance(document, dict):
        for side in ("after", "before"):
            row = document.get(side)
            value = row.get("rule_id", row.get("ruleId")) if isinstance(row, dict) else None
            if isinstance(value, int) and not isinstance(value, bool):
                rule_id = value
                break
        source = document.get("source")
        ts_ms = document.get("ts_ms")
        try:
            position = position_of(
                source if isinstance(source, dict) else None, ts_ms if isinstance(ts_ms, int) else None
            )
        except (PositionError, TypeError, ValueError):
            position = None
    return Rejection(rule_id, position, reason, source_offset, quarantined_at)


def quarantined_changes(spark: SparkSession, settings: Settings, *, rule_id: int | None = None) -> list[Rejection]:
    """The newest ``MAX_LISTED`` quarantined rule changes (of ``rule_id`` only, if given), newest first: invalid,
    forged or of another connector's kind, and stale ones."""
    rejections = [rejection_of(*row) for row in _newest_quarantined(spark, settings)]
    return [r for r in rejections if rule_id is None or r.rule_id == rule_id]


def _newest_quarantined(spark: SparkSession, settings: Settings) -> list[Any]:
    path = settings.table_path(QUARANTINE.name)
    if not DeltaTable.isDeltaTable(spark, path):
        return []
    frame = spark.read.format("delta").load(path)
    return (
        frame.where(F.col("source") == QUARANTINE_SOURCE)
        .orderBy(F.col("quarantinedAt").desc(), F.col("sourceOffset"))
        .limit(MAX_LISTED)
        .select("rawPayload", "reason", "sourceOffset", "quarantinedAt")
        .collect()
    )


def pending_rejections(spark: SparkSession, settings: Settings) -> list[Rejection]:
    """Quarantined rule changes newer than the rules table's row for their rule, oldest first."""
    rows = _newest_quarantined(spark, settings)
    if not rows:
        return []
    positions = read_view(spark, settings.table_path("rules")).positions
    watermark = positions.get(TRUNCATE_MARKER_ID, "")
    pending: dict[tuple[int, str], Rejection] = {}
    for row in rows:
        rejection = rejection_of(row["rawPayload"], row["reason"], row["sourceOffset"], row["quarantinedAt"])
        if rejection.rule_id is None or rejection.position is None:
            continue  # not a rule change (garbage, a bad truncate): the quarantine table has it
        applied = max(positions.get(rejection.rule_id, ""), watermark)
        if rejection.position > applied:  # one line per change, however often it was redelivered
            pending.setdefault((rejection.rule_id, rejection.position), rejection)
    return [pending[key] for key in sorted(pending, key=lambda k: (k[1], k[0]))]


def rejections_text(rejections: list[Rejection], title: str | None = None) -> str:
    """A plain-text block for people: under the rules list (the default title), or on its own."""
    if not rejections:
        return ""
    heading = title or "rejected changes"
    lines = [
        f"{heading} ({len(rejections)}; quarantined, each rule's last good version stays in force):",
        f"{'ruleId':>8}  {'quarantinedAt':<26}  source  reason",
    ]
    lines.extend(r.text() for r in rejections)
    return "\n".join(lines)
