"""Reading the rules table and the change log: current or past rules (time travel), a rule's history, export.

Example::

    rows = read_rules(spark, settings, as_of="3")            # the rules table at version 3
    rules_json(rows)                                           # live rules, camelCase, with their state
    rule_history(spark, settings, 2)                           # every applied change of rule 2, oldest first
"""

from __future__ import annotations

import json
import re
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from delta_tables.rule_changes import RULE_CHANGES
from delta_tables.rules import RULES
from pipelines.settings import Settings
from rules_cdc.rule_model import Rule, RuleState
from rules_cdc.rules_table import LIVE_STATES, RULE_FIELDS, TRUNCATE_MARKER_ID, rule_from_row

_VERSION = re.compile(r"^\d+$")


def read_rules(spark: SparkSession, settings: Settings, as_of: str | None = None) -> list[dict[str, Any]]:
    """Every rules row (tombstones included, the truncate marker excluded), by rule id; ``as_of`` is a
    table version (digits) or a timestamp (``2024-11-22 08:00:00``, UTC), as Delta time travel takes it."""
    reader = spark.read.format("delta")
    if as_of is not None:
        reader = reader.option("versionAsOf" if _VERSION.match(as_of.strip()) else "timestampAsOf", as_of.strip())
    frame = reader.load(settings.table_path(RULES.name)).where(F.col("ruleId") != TRUNCATE_MARKER_ID)
    return [r.asDict(recursive=True) for r in frame.orderBy("ruleId").collect()]


def rule_json(row: dict[str, Any]) -> dict[str, Any]:
    """A rules row in the seeds' camelCase vocabulary, with its state (a DELETED tombstone has only its id)."""
    if row["ruleState"] in LIVE_STATES:
        return rule_from_row(row).to_json_dict()
    if row["ruleState"] == RuleState.DISABLED.value:
        fields = {name: row[name] for name in RULE_FIELDS} | {"ruleState": RuleState.ACTIVE.value}
        return Rule.model_validate(fields).to_json_dict() | {"ruleState": RuleState.DISABLED.value}
    return {"ruleId": row["ruleId"], "ruleState": row["ruleState"]}


def rules_json(rows: list[dict[str, Any]], *, include_tombstones: bool = False) -> list[dict[str, Any]]:
    return [rule_json(r) for r in rows if include_tombstones or r["ruleState"] in LIVE_STATES]


def rules_table_text(rows: list[dict[str, Any]]) -> str:
    """A plain-text table of rules rows, for people."""
    lines = [f"{'ruleId':>8}  {'state':<8}  {'rule':<58}  {'window':>7}  position"]
    for row in rows:
        if row["aggregatorFunctionType"] is None:
            what = "-"
        else:
            keys = ",".join(row["groupingKeyNames"] or [])
            what = (
                f"{row['aggregatorFunctionType']}({row['aggregateFieldName']}) by [{keys}] "
                f"{row['limitOperatorType']} {_plain(row['limit'])}"
            )
        window = "-" if row["windowMinutes"] is None else f"{row['windowMinutes']}m"
        lines.append(f"{row['ruleId']:>8}  {row['ruleState']:<8}  {what:<58}  {window:>7}  {row['sourcePosition']}")
    return "\n".join(lines)


def rule_history(spark: SparkSession, settings: Settings, rule_id: int) -> list[dict[str, Any]]:
    """The rule's applied changes, oldest first (by source position, then when they were applied)."""
    frame = spark.read.format("delta").load(settings.table_path(RULE_CHANGES.name))
    rows = frame.where(F.col("ruleId") == rule_id).orderBy("sourcePosition", "appliedAt").collect()
    return [r.asDict(recursive=True) for r in rows]


def history_text(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'appliedAt':<26}  op  {'resulting':<9}  {'version':>7}  {'position':<46}  after"]
    for row in rows:
        after = row["after"] or "-"
        lines.append(
            f"{row['appliedAt']!s:<26}  {row['op']:<2}  {row['resultingState'] or '-':<9}  "
            f"{row['rulesVersion'] if row['rulesVersion'] is not None else '-':>7}  {row['sourcePosition']:<46}  "
            f"{after[:80]}"
        )
    return "\n".join(lines)


def to_json_text(value: Any) -> str:
    return json.dumps(value, indent=2, default=str)


def _plain(value: Any) -> str:
    text = format(value, "f") if value is not None else "-"
    return text.rstrip("0").rstrip(".") if "." in text else text
