"""Reading the rules table and the change log: current or past rules (time travel), a rule's history, export.

Example::

    rows = read_rules(spark, settings, as_of="3")            # the rules table at version 3
    rules_json(rows)                                           # live rules, camelCase, with their state
    rule_history(spark, settings, 2)                           # every applied change of rule 2, oldest first
    rule_history(spark, settings, 7, at="2024-11-03")          # the change in force at the end of the 3rd: who, why
    display(rules_frame(spark, settings, include_tombstones=False))   # the live rules as a DataFrame
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Sequence
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from delta_tables.rule_changes import RULE_CHANGES
from delta_tables.rules import RULES
from pipelines.base.settings import Settings
from rules_cdc.rule_model import Rule, RuleState
from rules_cdc.rule_rows import LIVE_STATES, RULE_FIELDS, TRUNCATE_MARKER_ID, rule_from_row

_VERSION = re.compile(r"^\d+$")


def rules_frame(
    spark: SparkSession, settings: Settings, as_of: str | None = None, *, include_tombstones: bool = True
) -> DataFrame:
    """The rules rows by rule id (the truncate marker excluded; tombstones unless ``include_tombstones=False``);
    ``as_of`` is a table version (digits) or a timestamp (``2024-11-22 08:00:00``, UTC), as Delta time travel
    takes it."""
    reader = spark.read.format("delta")
    if as_of is not None:
        reader = reader.option("versionAsOf" if _VERSION.match(as_of.strip()) else "timestampAsOf", as_of.strip())
    frame = reader.load(settings.table_path(RULES.name)).where(F.col("ruleId") != TRUNCATE_MARKER_ID)
    if not include_tombstones:
        frame = frame.where(F.col("ruleState").isin(*LIVE_STATES))
    return frame.orderBy("ruleId")


def read_rules(spark: SparkSession, settings: Settings, as_of: str | None = None) -> list[dict[str, Any]]:
    """Every rules row (tombstones included, the truncate marker excluded), by rule id; ``as_of`` as in
    ``rules_frame``."""
    return [r.asDict(recursive=True) for r in rules_frame(spark, settings, as_of).collect()]


def rules_table_version(spark: SparkSession, settings: Settings) -> int:
    """The rules table's current version (0 right after it was created)."""
    latest = DeltaTable.forPath(spark, settings.table_path(RULES.name)).history(1).select("version").first()
    return 0 if latest is None else int(latest["version"])


def rule_json(row: dict[str, Any]) -> dict[str, Any]:
    """A rules row in the seeds' camelCase vocabulary, with its state (a DELETED tombstone has only its id)."""
    if row["ruleState"] in LIVE_STATES:
        return rule_from_row(row).to_json_dict()
    if row["ruleState"] == RuleState.DISABLED.value:
        fields = {name: row.get(name) for name in RULE_FIELDS} | {"ruleState": RuleState.ACTIVE.value}
        return Rule.model_validate(fields).to_json_dict() | {"ruleState": RuleState.DISABLED.value}
    return {"ruleId": row["ruleId"], "ruleState": row["ruleState"]}


def rules_json(rows: list[dict[str, Any]], *, include_tombstones: bool = False) -> list[dict[str, Any]]:
    return [rule_json(r) for r in rows if include_tombstones or r["ruleState"] in LIVE_STATES]


def rules_table_text(rows: list[dict[str, Any]]) -> str:
    """A plain-text table of rules rows, for people (the rule as ``rule_text`` writes it)."""
    lines = [f"{'ruleId':>8}  {'state':<8}  {'rule':<72}  position"]
    for row in rows:
        lines.append(f"{row['ruleId']:>8}  {row['ruleState']:<8}  {rule_text(row):<72}  {row['sourcePosition']}")
    return "\n".join(lines)


TIMES = "\N{MULTIPLICATION SIGN}"
_OPERATORS = {"GREATER": ">", "GREATER_EQUAL": ">=", "LESS": "<", "LESS_EQUAL": "<=", "EQUAL": "=", "NOT_EQUAL": "!="}


def rule_text(row: dict[str, Any]) -> str:
    """A rules row's condition in one line (a tombstone without content: ``-``), e.g.::

        SUM(paymentAmount) > 1000000 in 7 days by [payerId,beneficiaryId]
        COUNT_DISTINCT(beneficiaryId) > 5 in 60 min by [payerId]
        VALUE(paymentAmount) > 5 x AVG over 30 days (min 5 tx) by [payerId]
        SUM(paymentAmount) in 60 min > 3 x SUM per 60 min over 7 days (min 10 tx) by [payerId]

    ``VALUE`` is the transaction's own value: its window sizes nothing, so it is not shown. With a baseline the
    limit is a factor of the key's own history aggregate (``perWindow``: scaled to the rule's window); the factor's
    ``x`` is printed as the multiplication sign (U+00D7)."""
    aggregator = row.get("aggregatorFunctionType")
    if aggregator is None:
        return "-"
    operator = _OPERATORS.get(row.get("limitOperatorType") or "", row.get("limitOperatorType") or "?")
    value = f"{aggregator}({row.get('aggregateFieldName')})"
    window = "" if aggregator == "VALUE" or row.get("windowMinutes") is None else f" in {span(row['windowMinutes'])}"
    baseline = baseline_of(row.get("baseline"))
    if baseline is None:
        text = f"{value} {operator} {_plain(row.get('limit'))}{window}"
    else:
        scaled = f" per {span(row.get('windowMinutes'))}" if baseline.get("perWindow") else ""
        text = (
            f"{value}{window} {operator} {_plain(row.get('limit'))} {TIMES} {baseline.get('aggregatorFunctionType')}"
            f"{scaled} over {span(baseline.get('windowMinutes'))} (min {baseline.get('minCount', 1)} tx)"
        )
    keys = row.get("groupingKeyNames") or []
    return f"{text} by [{','.join(keys)}]" if keys else text


def span(minutes: Any) -> str:
    """``60 min``, ``1 day``, ``30 days`` (whole days as days)."""
    if not isinstance(minutes, int) or minutes <= 0 or minutes % 1440:
        return f"{minutes} min"
    days = minutes // 1440
    return "1 day" if days == 1 else f"{days} days"


def baseline_of(value: Any) -> dict[str, Any] | None:
    """A rules row's ``baseline`` (canonical JSON text) as a dict; None when absent (or not an object)."""
    if isinstance(value, str) and value.strip():
        try:
            value = json.loads(value)
        except ValueError:
            return None
    return value if isinstance(value, dict) else None


UNATTRIBUTED = "unattributed"
"""How a change without an author shows (an edit typed in SQL that did not say who, a CLI event, a truncate)."""


def history_frame(
    spark: SparkSession, settings: Settings, rule_ids: Sequence[int] = (), *, at: str | None = None
) -> DataFrame:
    """The rules' applied changes (every rule's when ``rule_ids`` is empty), per rule oldest first (by source
    position, then when they were applied), with ``changedBy`` null shown as ``"unattributed"``.

    ``at`` (an ISO time, UTC, e.g. ``2024-11-03`` or ``2024-11-03T14:00:00``) keeps, per rule, only the change in
    force then: the newest one applied to the lake at or before ``at`` ("who made rule 7 what it was on the
    3rd"). Example::

        display(history_frame(spark, settings, [7], at="2024-11-03T23:59:59"))
    """
    frame = spark.read.format("delta").load(settings.table_path(RULE_CHANGES.name))
    frame = frame.where(F.col("ruleId") != TRUNCATE_MARKER_ID)
    if rule_ids:
        frame = frame.where(F.col("ruleId").isin(*rule_ids))
    frame = frame.withColumn("changedBy", F.coalesce(F.col("changedBy"), F.lit(UNATTRIBUTED)))
    if at is not None:
        frame = frame.where(F.col("appliedAt") <= F.lit(parse_at(at)))
        newest = Window.partitionBy("ruleId").orderBy(F.col("sourcePosition").desc(), F.col("appliedAt").desc())
        frame = frame.withColumn("_n", F.row_number().over(newest)).where(F.col("_n") == 1).drop("_n")
    return frame.orderBy("ruleId", "sourcePosition", "appliedAt")


def parse_at(text: str) -> dt.datetime:
    """An ISO date or date-time (``Z`` or an offset allowed; naive is UTC) as a naive UTC datetime; a date alone
    means the end of that day. Raises ``ValueError`` with the accepted forms."""
    value = text.strip()
    try:
        if len(value) == 10:
            return dt.datetime.combine(dt.date.fromisoformat(value), dt.time.max)
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"--at {text!r}: expected an ISO date or time, e.g. 2024-11-03 or 2024-11-03T14:00:00Z"
        ) from None
    return parsed.astimezone(dt.UTC).replace(tzinfo=None) if parsed.tzinfo else parsed


def rule_history(
    spark: SparkSession, settings: Settings, rule_id: int | None = None, *, at: str | None = None
) -> list[dict[str, Any]]:
    """The rule's (every rule's when None) applied changes, oldest first; ``at`` as in ``history_frame``."""
    ids = [] if rule_id is None else [rule_id]
    return [r.asDict(recursive=True) for r in history_frame(spark, settings, ids, at=at).collect()]


def history_text(rows: list[dict[str, Any]]) -> str:
    """A plain-text table of change-log rows: when, what, who, who approved, why."""
    lines = [
        f"{'appliedAt':<26}  {'ruleId':>6}  op  {'resulting':<9}  {'version':>7}  {'changed by':<14}  "
        f"{'approved by':<14}  {'reason':<30}  after"
    ]
    for row in rows:
        after = row["after"] or "-"
        version = row["rulesVersion"] if row["rulesVersion"] is not None else "-"
        lines.append(
            f"{row['appliedAt']!s:<26}  {row['ruleId']:>6}  {row['op']:<2}  {row['resultingState'] or '-':<9}  "
            f"{version:>7}  {_cell(row.get('changedBy') or UNATTRIBUTED, 14)}  {_cell(row.get('approvedBy'), 14)}  "
            f"{_cell(row.get('changeReason'), 30)}  {after[:80]}"
        )
    return "\n".join(lines)


def _cell(value: Any, width: int) -> str:
    text = " ".join(str(value).split()) if value is not None else "-"
    return (text if len(text) <= width else text[: width - 1] + "~").ljust(width)


def to_json_text(value: Any) -> str:
    return json.dumps(value, indent=2, default=str)


def _plain(value: Any) -> str:
    text = format(value, "f") if value is not None else "-"
    return text.rstrip("0").rstrip(".") if "." in text else text
