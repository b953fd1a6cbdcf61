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

Example::

    evidence = alert_evidence(reader, settings, alert_row)
    evidence.recomputed == alert_row["aggregateValue"]       # True when the lake is consistent
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
from pipelines.console.window_math import aggregate, bucket_index, counts_for, reach_buckets
from pipelines.engine.keys import encode_key
from rules_cdc.rule_model import Rule

Precedence = Literal["engine", "history"]
SHOWN_ROWS = 1000
"""At most this many window transactions are listed on the page; the aggregate always uses all of them."""


class EvidenceUnavailable(ValueError):
    """The alert carries too little to rebuild its window (e.g. no rule snapshot); the message says what."""


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

    @property
    def matches(self) -> bool:
        return self.recomputed is not None and self.recomputed == self.alert_value

    @property
    def holds(self) -> bool:
        """Whether the recomputed aggregate meets the rule's limit."""
        return self.recomputed is not None and self.rule.limit_operator_type.holds(self.recomputed, self.rule.limit)

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
) -> Evidence:
    """The lookback window of ``transaction_id`` under ``rule`` (see the module docstring)."""
    bucket_seconds = settings.engine.bucket_seconds
    x_ms = _epoch_ms(event_time)
    x_bucket = bucket_index(x_ms, bucket_seconds)
    start = dt.datetime.fromtimestamp(
        (x_bucket - reach_buckets(rule.window_minutes, bucket_seconds)) * bucket_seconds, tz=dt.UTC
    )
    # An earlier micro-batch's row later than x in x's own bucket precedes x too: read to the bucket's end.
    bucket_end = dt.datetime.fromtimestamp((x_bucket + 1) * bucket_seconds, tz=dt.UTC)
    key_values = json.loads(key_value, parse_float=Decimal)
    names = list(rule.grouping_key_names)
    if not isinstance(key_values, list) or len(key_values) != len(names):
        raise EvidenceUnavailable(f"key {key_value} does not fit the rule's grouping keys {names}")
    where: list[Condition] = [
        ("eventDate", ">=", start.date() - dt.timedelta(days=1)),
        ("eventDate", "<=", event_time.date() + dt.timedelta(days=1)),
        ("eventTime", ">=", start),
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
    window = [r for r in chosen if encode_key([r.get(n) for n in names]) == key_value and counts_for(rule, r)]
    window.sort(key=lambda r: (r["batchId"] if precedence == "engine" else 0, r["eventTime"], r["transactionId"]))
    own = any(
        r["transactionId"] == transaction_id and (precedence == "history" or r["batchId"] == batch_id) for r in window
    )
    columns = [*settings.transaction_schema.names(), "batchId", "isLate", "ingestedAt"]
    return Evidence(
        rule=rule,
        key_value=key_value,
        window_start=start,
        window_end=event_time,
        rows=[{c: r.get(c) for c in columns} for r in window],
        recomputed=aggregate(rule, window),
        alert_value=alert_value,
        own_row_found=own,
        columns=columns,
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
