"""What the shadow comparison page reads: a rule (usually SHADOW) beside the rule it would replace, over a range of
days (``pipelines.outcomes.shadow_comparison``). Blocking (Delta reads, Spark jobs): the page calls ``shadow_page``
on the console's lake pool, never on the event loop.

Example::

    query = ShadowQuery.parse(request.query_params)          # BadParameter: 400 with the message
    page = await console.lake.run(shadow_page, console.spark, console.reader, 3, query, today)
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import SparkSession

from delta_tables.alerts import ALERTS
from pipelines.console import params
from pipelines.console.lake_reader import LakeReader, TableMissing
from pipelines.console.rules_data import describe, rules_rows
from pipelines.outcomes.accuracy import outcome_tables
from pipelines.outcomes.shadow_comparison import (
    ComparisonError,
    DayRange,
    ShadowComparison,
    compare_rules,
    counterparts,
    resolve_days,
)
from rules_cdc.rule_rows import LIVE_STATES

_DAY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", re.ASCII)


class NoSuchRule(LookupError):
    """A well-formed rule id the rules table does not have (the page answers 404)."""


def day(text: str | None, name: str) -> dt.date | None:
    """A day ``2024-06-01`` (UTC), or None when blank; a real date within ``params``' bounds.

    >>> day("2024-03-01", "from")
    datetime.date(2024, 3, 1)
    """
    value = (text or "").strip()
    if not value:
        return None
    if not _DAY.fullmatch(value):
        shown = repr(value if len(value) <= 60 else value[:60] + "…")
        raise params.BadParameter(f"{name} must be a date such as 2024-06-01, got {shown}")
    instant = params.instant(value, name)  # a real date (not 2024-02-30), within the bounds every page uses
    assert instant is not None
    return instant.date()


@dataclass(frozen=True)
class ShadowQuery:
    """The page's parameters: ``compared`` (a rule id; blank: the default counterpart), ``from``/``to`` (days,
    inclusive; blank: the 14 days ending with the newest alert of either rule)."""

    compared: int | None = None
    first: dt.date | None = None
    last: dt.date | None = None

    @classmethod
    def parse(cls, query: Mapping[str, str]) -> ShadowQuery:
        compared = params.optional_rule_id(query.get("compared"), "compared")
        first, last = day(query.get("from"), "from"), day(query.get("to"), "to")
        if first is not None and last is not None:
            try:
                DayRange(first, last)  # backwards or too wide: refused before anything is read
            except ComparisonError as error:
                raise params.BadParameter(str(error)) from None
        return cls(compared, first, last)


@dataclass(frozen=True)
class RuleFacts:
    """A rules-table row as the page shows it."""

    rule_id: int
    state: str
    name: str
    definition: str

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> RuleFacts:
        return cls(int(row["ruleId"]), str(row["ruleState"]), str(row.get("ruleName") or ""), describe(row))


@dataclass(frozen=True)
class ShadowPage:
    rule: RuleFacts
    compared: RuleFacts | None
    choices: list[tuple[RuleFacts, bool]]
    """Rules to compare with, for the form: the counterparts (True) first, then the other live rules."""
    comparison: ShadowComparison | None = None
    values: dict[str, str] = field(default_factory=dict)
    """The form's values as typed (blank stays blank)."""


def shadow_page(
    spark: Callable[[], SparkSession], reader: LakeReader, rule_id: int, query: ShadowQuery, today: dt.date
) -> ShadowPage:
    """The rule, the rule it is compared with and the comparison; NoSuchRule for an id the rules table lacks.
    Without a compared rule (none given and no counterpart) there is no comparison, only the form."""
    rows = rules_rows(reader)
    by_id = {int(r["ruleId"]): r for r in rows}
    if rule_id not in by_id:
        raise NoSuchRule(f"There is no rule {rule_id} in the rules table of this lakehouse.")
    if query.compared == rule_id:
        raise params.BadParameter(f"compared must be another rule than {rule_id}: a rule is not compared with itself")
    if query.compared is not None and query.compared not in by_id:
        raise NoSuchRule(f"There is no rule {query.compared} to compare with in the rules table of this lakehouse.")
    matching = counterparts(by_id[rule_id], rows)
    others = [i for i, r in by_id.items() if i != rule_id and i not in matching and r["ruleState"] in LIVE_STATES]
    compared_id = query.compared if query.compared is not None else (matching[0] if matching else None)
    if compared_id is not None and compared_id not in matching and compared_id not in others:
        others.append(compared_id)  # a tombstone named in the address: comparable, its alerts are kept
    choices = [(RuleFacts.of(by_id[i]), True) for i in matching] + [(RuleFacts.of(by_id[i]), False) for i in others]
    values = {
        "compared": "" if query.compared is None else str(query.compared),
        "from": "" if query.first is None else query.first.isoformat(),
        "to": "" if query.last is None else query.last.isoformat(),
    }
    page = ShadowPage(RuleFacts.of(by_id[rule_id]), None, choices, values=values)
    if compared_id is None:
        return page
    if not reader.exists(ALERTS.name):
        raise TableMissing(ALERTS.name, reader.path(ALERTS.name))
    session = spark()
    alerts, dispositions, labels, _ = outcome_tables(session, reader.settings)
    try:
        days = resolve_days(query.first, query.last, alerts, [rule_id, compared_id], today=today)
        comparison = compare_rules(
            alerts, dispositions, labels, shadow_rule_id=rule_id, compared_rule_id=compared_id, days=days
        )
    except ComparisonError as error:  # compared with itself: the address is wrong, not the lakehouse
        raise params.BadParameter(str(error)) from None
    return ShadowPage(page.rule, RuleFacts.of(by_id[compared_id]), choices, comparison, values)
