"""Rows <-> ``Rule``: the one place a rule becomes a row, of the Delta rules table or of the rules database's
``fraud_rules`` table (``database_row``), and back.

Example::

    row = rule_to_row(rule, source_position="pg:...", source_op="c", source_ts_ms=1700000000000)
    rules = [rule_from_row(r.asDict()) for r in live_rules(spark.read.format("delta").load(path)).collect()]
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from delta_tables.rules import RULE_CONTENT_COLUMNS
from rules_cdc.rule_model import Rule, RuleState

RULE_FIELDS = ("ruleId", "ruleState", *RULE_CONTENT_COLUMNS, "disabled")
"""The rules-table columns that make up a rule (the rest are CDC bookkeeping)."""

LIVE_STATES = (RuleState.ACTIVE.value, RuleState.PAUSED.value, RuleState.SHADOW.value)
"""The states of rules in force (not tombstones): their state, window and cooldown memory are kept."""

TRUNCATE_MARKER_ID = -1
"""``ruleId`` of the row holding the newest truncate's position (a DELETED row, so never live).

Events older than it become tombstones at its position, so a truncate is order-independent too."""
TRUNCATE_MARKER_NAME = "(truncate watermark)"


def rule_to_row(
    rule: Rule,
    *,
    source_position: str,
    source_op: str,
    source_ts_ms: int | None,
    state: RuleState | None = None,
    now: dt.datetime | None = None,
) -> dict[str, Any]:
    """A rules-table row for ``rule``; ``state`` overrides the rule's own (DELETED/DISABLED tombstones)."""
    now = now or dt.datetime.now(dt.UTC).replace(tzinfo=None)
    effective = state or (RuleState.DISABLED if rule.disabled else rule.rule_state)
    return {
        "ruleId": rule.rule_id,
        "ruleName": rule.rule_name,
        "ruleState": effective.value,
        "groupingKeyNames": list(rule.grouping_key_names),
        "aggregateFieldName": rule.aggregate_field_name,
        "aggregatorFunctionType": rule.aggregator_function_type.value,
        "limitOperatorType": rule.limit_operator_type.value,
        "limit": rule.limit,
        "windowMinutes": rule.window_minutes,
        "filter": rule.filter_json,
        "cooldownMinutes": rule.cooldown_minutes,
        "disabled": rule.disabled,
        "baseline": rule.baseline_json,
        "sourcePosition": source_position,
        "sourceOp": source_op,
        "sourceTsMs": source_ts_ms,
        "tombstonedAt": now if effective in (RuleState.DELETED, RuleState.DISABLED) else None,
        "updatedAt": now,
    }


def tombstone_row(
    rule_id: int,
    *,
    source_position: str,
    source_op: str,
    source_ts_ms: int | None,
    now: dt.datetime | None = None,
) -> dict[str, Any]:
    """A DELETED row: no rule content (the change log keeps it), only the id and the deleting event."""
    now = now or dt.datetime.now(dt.UTC).replace(tzinfo=None)
    row: dict[str, Any] = dict.fromkeys(RULE_FIELDS)
    row.update(
        {
            "ruleId": rule_id,
            "ruleName": TRUNCATE_MARKER_NAME if rule_id == TRUNCATE_MARKER_ID else None,
            "ruleState": RuleState.DELETED.value,
            "disabled": False,
            "sourcePosition": source_position,
            "sourceOp": source_op,
            "sourceTsMs": source_ts_ms,
            "tombstonedAt": now,
            "updatedAt": now,
        }
    )
    return row


def rule_from_row(row: dict[str, Any]) -> Rule:
    """The ``Rule`` of a live (ACTIVE, PAUSED or SHADOW) rules-table row."""
    if row["ruleState"] not in LIVE_STATES:
        raise ValueError(f"rule {row['ruleId']} is a tombstone ({row['ruleState']}), not a live rule")
    # ``get``: a row read from a table of an older release (before ``baseline``) has a fixed limit.
    return Rule.model_validate({name: row.get(name) for name in RULE_FIELDS})


def live_rules(rules: DataFrame) -> DataFrame:
    """The ACTIVE, PAUSED and SHADOW rows of a rules-table frame (tombstones excluded)."""
    return rules.where(F.col("ruleState").isin(*LIVE_STATES))


def rule_snapshot_json(rule: Rule) -> str:
    """The rule as evaluated, for the alerts table: camelCase JSON with sorted keys."""
    return json.dumps(rule.to_json_dict(), sort_keys=True, separators=(",", ":"))


DATABASE_COLUMNS = (
    "rule_id",
    "rule_name",
    "rule_state",
    "grouping_key_names",
    "aggregate_field_name",
    "aggregator_function_type",
    "limit_operator_type",
    "limit_value",
    "window_minutes",
    "filter",
    "cooldown_minutes",
    "disabled",
    "baseline",
)
"""The ``fraud_rules`` columns a rule fills (``updated_at`` is the database's own; ``baseline``: schema version 8,
conf/rulesdb/008_rule_kinds.sql)."""


def database_row(rule: Rule) -> dict[str, Any]:
    """A validated rule as a ``fraud_rules`` row (snake_case; the filter and the baseline as JSON objects, for the
    jsonb columns: a writer passing parameters sends them as JSON text with a ``::jsonb`` cast)."""
    return {
        "rule_id": rule.rule_id,
        "rule_name": rule.rule_name,
        "rule_state": rule.rule_state.value,
        "grouping_key_names": list(rule.grouping_key_names),
        "aggregate_field_name": rule.aggregate_field_name,
        "aggregator_function_type": rule.aggregator_function_type.value,
        "limit_operator_type": rule.limit_operator_type.value,
        "limit_value": format(rule.limit.normalize(), "f"),
        "window_minutes": rule.window_minutes,
        "filter": json.loads(rule.filter_json) if rule.filter_json else None,
        "cooldown_minutes": rule.cooldown_minutes,
        "disabled": rule.disabled,
        "baseline": json.loads(rule.baseline_json) if rule.baseline_json else None,
    }
