"""Why an alert fired: the transactions of its lookback window from bronze, the aggregate recomputed from them.

The rule is the one that fired (the alert's ``ruleSnapshot``, the rule as evaluated at its ``rulesVersion``), not
today's. The window is the contract's (``window_math``); which transactions *precede* the alert's depends on how
it was raised:

* ``engine``: every transaction of an earlier micro-batch, and those of the alert's own batch up to it in
  ``(eventTime, transactionId)`` order (bronze keeps each row's ``batchId``); late rows count;
* ``history`` (a backtest, docs of ``pipelines.engine.backtest``): the whole history is one batch, so everything up
  to it in ``(eventTime, transactionId)`` order, one copy per ``transactionId``.

Bronze is read with partition pruning (``eventDate``) and the key's values pushed down as filters; the rest is
plain Python over the window's rows.

The two newer kinds of rule (docs/engine.md, the contract):

* COUNT_DISTINCT: ``distinct`` lists the window's distinct values (text order, each with its transactions), and the
  aggregate is their number capped at ``engine.distinct_cap``; VALUE: the aggregate is the transaction's own value
  (its window is only the transaction);
* a relative limit (``rule.baseline``): bronze is read over the baseline's window too, and ``baseline`` holds its
  rows (the transaction itself excluded), ``n``, ``B``, ``B'`` and the threshold ``k * B'``
  (``window_math.baseline_figures``), beside the alert's stored ``baselineValue`` (None on an alerts table
  without that column).

Example::

    evidence = alert_evidence(reader, settings, alert_row)
    evidence.recomputed == alert_row["aggregateValue"]       # True when the lake is consistent
    evidence.baseline.figures.threshold                       # k * B' of a relative rule
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal

from delta_tables.bronze_transactions import bronze_spec
from pipelines.base.settings import Settings
from pipelines.console.lake_reader import Condition, LakeReader
from pipelines.console.window_math import (
    BaselineFigures,
    DistinctValue,
    aggregate,
    baseline_figures,
    bucket_index,
    counts_for,
    distinct_values,
    reach_buckets,
)
from pipelines.engine.keys import encode_key
from rules_cdc.rule_model import Aggregator, Rule

Precedence = Literal["engine", "history"]
SHOWN_ROWS = 1000
"""At most this many window transactions are listed on the page; the aggregate always uses all of them."""
BASELINE_COLUMN = "baselineValue"
"""The alerts table's ``B`` of a relative rule's alert (nullable; a table of an older release lacks it)."""


class EvidenceUnavailable(ValueError):
    """The alert carries too little to rebuild its window (e.g. no rule snapshot); the message says what."""


@dataclass(frozen=True)
class BaselineEvidence:
    """A relative limit's history: the baseline window's counting transactions of the key (the alerted one
    excluded), the figures recomputed from them, and what the alert stored as ``baselineValue``."""

    window_start: dt.datetime
    rows: list[dict[str, Any]]
    figures: BaselineFigures
    stored_value: Decimal | None

    @property
    def matches(self) -> bool:
        """The recomputed ``B`` equals the alert's ``baselineValue`` (False when the alert has none)."""
        return self.stored_value is not None and self.figures.value == self.stored_value

    @property
    def shown(self) -> list[dict[str, Any]]:
        return self.rows[-SHOWN_ROWS:]


@dataclass(frozen=True)
class Evidence:
    """An alert's window: its rule, bounds, the counting transactions, and the aggregate recomputed from them."""

    rule: Rule
    key_value: str
    window_start: dt.datetime
    window_end: dt.datetime
    rows: list[dict[str, Any]]
    recomputed: Decimal | None
    alert_value: Decimal | None
    own_row_found: bool
    columns: list[str] = field(default_factory=list)
    distinct: list[DistinctValue] = field(default_factory=list)  # COUNT_DISTINCT: the window's values, text order
    distinct_cap: int | None = None  # COUNT_DISTINCT: engine.distinct_cap
    baseline: BaselineEvidence | None = None  # a relative limit's history and figures

    @property
    def matches(self) -> bool:
        return self.recomputed is not None and self.recomputed == self.alert_value

    @property
    def holds(self) -> bool:
        """Whether the recomputed aggregate meets the rule's limit (a relative one: ``n >= minCount`` and
        ``aggregate OP k * B'``, exactly)."""
        if self.recomputed is None:
            return False
        if self.baseline is not None:
            return self.baseline.figures.allows(self.rule.limit_operator_type, self.recomputed)
        return self.rule.limit_operator_type.holds(self.recomputed, self.rule.limit)

    @property
    def saturated(self) -> bool:
        """COUNT_DISTINCT: more distinct values than the cap (the aggregate reads "at least the cap")."""
        return self.distinct_cap is not None and len(self.distinct) >= self.distinct_cap

    @property
    def shown(self) -> list[dict[str, Any]]:
        return self.rows[-SHOWN_ROWS:]


def rule_of_alert(alert: Mapping[str, Any]) -> Rule:
    """The rule as it was evaluated for this alert."""
    snapshot = alert.get("ruleSnapshot")
    if not snapshot:
        raise EvidenceUnavailable(f"alert {alert.get('alertId')} has no rule snapshot: its window cannot be rebuilt")
    return Rule.model_validate(json.loads(snapshot))


def window_evidence(
    reader: LakeReader,
    settings: Settings,
    *,
    rule: Rule,
    key_value: str,
    transaction_id: str,
    event_time: dt.datetime,
    batch_id: int | None,
    alert_value: Decimal | None,
    precedence: Precedence,
    baseline_value: Decimal | None = None,
) -> Evidence:
    """The lookback window of ``transaction_id`` under ``rule`` (see the module docstring); ``baseline_value`` is
    what the alert stored as its baseline (a relative rule's)."""
    bucket_seconds = settings.engine.bucket_seconds
    x_ms = _epoch_ms(event_time)
    x_bucket = bucket_index(x_ms, bucket_seconds)

    def bucket_start(window_minutes: int) -> dt.datetime:
        return dt.datetime.fromtimestamp(
            (x_bucket - reach_buckets(window_minutes, bucket_seconds)) * bucket_seconds, tz=dt.UTC
        )

    def within(row: Mapping[str, Any], window_minutes: int) -> bool:
        return bucket_index(_epoch_ms(row["eventTime"]), bucket_seconds) >= x_bucket - reach_buckets(
            window_minutes, bucket_seconds
        )

    start = bucket_start(rule.window_minutes)
    history_start = bucket_start(rule.baseline.window_minutes) if rule.baseline is not None else None
    # VALUE needs only the transaction itself (its window sizes nothing); a baseline reads its own, longer window.
    own_only = rule.aggregator_function_type is Aggregator.VALUE
    read_from = history_start or (bucket_start(0) if own_only else start)
    # An earlier micro-batch's row later than x in x's own bucket precedes x too: read to the bucket's end.
    bucket_end = dt.datetime.fromtimestamp((x_bucket + 1) * bucket_seconds, tz=dt.UTC)
    key_values = json.loads(key_value, parse_float=Decimal)
    names = list(rule.grouping_key_names)
    if not isinstance(key_values, list) or len(key_values) != len(names):
        raise EvidenceUnavailable(f"key {key_value} does not fit the rule's grouping keys {names}")
    where: list[Condition] = [
        ("eventDate", ">=", read_from.date() - dt.timedelta(days=1)),
        ("eventDate", "<=", event_time.date() + dt.timedelta(days=1)),
        ("eventTime", ">=", read_from),
        ("eventTime", "<", bucket_end),
    ]
    where += [(name, "=", value) for name, value in zip(names, key_values, strict=True) if value is not None]
    if precedence == "engine" and batch_id is not None:
        where.append(("batchId", "<=", batch_id))
    table = bronze_spec(settings.transaction_schema).name
    candidates = reader.rows(table, where=where)
    x_order = (event_time, transaction_id)
    if precedence == "engine":
        chosen = [
            r for r in candidates if r["batchId"] < (batch_id or 0) or (r["eventTime"], r["transactionId"]) <= x_order
        ]
    else:
        chosen = _first_copies([r for r in candidates if (r["eventTime"], r["transactionId"]) <= x_order])
    history = [r for r in chosen if encode_key([r.get(n) for n in names]) == key_value and counts_for(rule, r)]
    history.sort(key=lambda r: (r["batchId"] if precedence == "engine" else 0, r["eventTime"], r["transactionId"]))

    def is_own(row: Mapping[str, Any]) -> bool:
        return row["transactionId"] == transaction_id and (precedence == "history" or row["batchId"] == batch_id)

    own_rows = [r for r in history if is_own(r)]
    own_row = own_rows[-1] if own_rows else None
    if own_only:
        window = own_rows[-1:]
        start = bucket_start(0)
    else:
        window = [r for r in history if within(r, rule.window_minutes)]
    columns = [*settings.transaction_schema.names(), "batchId", "isLate", "ingestedAt"]
    cap = settings.engine.distinct_cap
    counts_distinct = rule.aggregator_function_type is Aggregator.COUNT_DISTINCT
    baseline = None
    if history_start is not None and rule.baseline is not None:
        baseline_rows = [r for r in history if within(r, rule.baseline.window_minutes) and not is_own(r)]
        baseline = BaselineEvidence(
            window_start=history_start,
            rows=[{c: r.get(c) for c in columns} for r in baseline_rows],
            figures=baseline_figures(rule, baseline_rows),
            stored_value=baseline_value,
        )
    return Evidence(
        rule=rule,
        key_value=key_value,
        window_start=start,
        window_end=event_time,
        rows=[{c: r.get(c) for c in columns} for r in window],
        recomputed=aggregate(rule, window, own=own_row, distinct_cap=cap),
        alert_value=alert_value,
        own_row_found=own_row is not None,
        columns=columns,
        distinct=distinct_values(rule, window) if counts_distinct else [],
        distinct_cap=cap if counts_distinct else None,
        baseline=baseline,
    )


def alert_evidence(reader: LakeReader, settings: Settings, alert: Mapping[str, Any]) -> Evidence:
    """The evidence of an engine alert (a row of the alerts table)."""
    return window_evidence(
        reader,
        settings,
        rule=rule_of_alert(alert),
        key_value=str(alert["keyValue"]),
        transaction_id=str(alert["transactionId"]),
        event_time=alert["eventTime"],
        batch_id=int(alert["batchId"]),
        alert_value=alert.get("aggregateValue"),
        precedence="engine",
        baseline_value=alert.get(BASELINE_COLUMN),  # absent on an alerts table of an older release
    )


def _first_copies(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per transactionId: the first by (eventTime, batchId, sourceOffset), as the backtest keeps it."""
    ordered = sorted(rows, key=lambda r: (r["eventTime"], r["batchId"], r.get("sourceOffset") or ""))
    seen: dict[str, dict[str, Any]] = {}
    for row in ordered:
        seen.setdefault(row["transactionId"], row)
    return list(seen.values())


def _epoch_ms(instant: dt.datetime) -> int:
    aware = instant if instant.tzinfo else instant.replace(tzinfo=dt.UTC)
    return (aware - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(milliseconds=1)
