"""Rule edits for people (notebook 01, ``fraudlake rules upsert|pause|resume|delete``): to the rules database, or
the CLI publisher's CDC events, applied here at once or published.

``publish_to="rulesdb"`` writes the edit to ``fraud_rules`` (``rulesdb_edits``; the connection from ``conninfo``,
else ``FRAUDLAKE_RULESDB_DSN``): Debezium streams it with its real position, so the database's log orders it with
every other change. That is the only way to edit a rules table fed by a database. Where there is none (an empty
or ``ts`` table), ``publish_to="apply"`` runs the CLI publisher's events (``publisher.edit_events``) through
``apply_records``, the rules job's own parse, plan, MERGE and change-log path, without a broker (local runs, or a
workspace without Kafka), and ``publish_to="kafka"`` produces them to the rules topic, for the rules job.

Example::

    rules = parse_rules_text(seed_rule_text(), settings)
    outcome = edit_rules(spark, settings, "upsert", rules=rules)           # applied now: rules version 1
    outcome = edit_rules(spark, settings, "pause", rule_id=1, publish_to="kafka")
    print(outcome.summary())

    # A distinct count, and a relative limit (the payment against the payer's own 30-day average):
    rules = parse_rules_text(json.dumps([
        {"ruleId": 21, "groupingKeyNames": ["payerId"], "aggregateFieldName": "beneficiaryId",
         "aggregatorFunctionType": "COUNT_DISTINCT", "limitOperatorType": "GREATER", "limit": 5, "windowMinutes": 60},
        {"ruleId": 22, "groupingKeyNames": ["payerId"], "aggregateFieldName": "paymentAmount",
         "aggregatorFunctionType": "VALUE", "limitOperatorType": "GREATER", "limit": 5, "windowMinutes": 1,
         "baseline": {"aggregatorFunctionType": "AVG", "windowMinutes": 43200, "minCount": 5}},
    ]), settings)
    edit_rules(spark, settings, "upsert", rules=rules, publish_to="rulesdb")   # fraud_rules.baseline: jsonb
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from pyspark.sql import SparkSession

from delta_tables.rules import RULES
from pipelines.base.settings import REPO_ROOT, Settings, resolve_conf_path
from rules_cdc.apply_changes import ApplyResult, apply_records, ensure_rules_tables, read_view
from rules_cdc.parse_events import RawRecord
from rules_cdc.publisher import PublishRefused, edit_events, publish
from rules_cdc.rule_model import Rule, parse_rule
from rules_cdc.rules_views import rules_table_version
from rules_cdc.rulesdb_edits import DatabaseEdit, dsn_from_environment, write_edit
from rules_cdc.source_position import TS

Action = Literal["upsert", "pause", "resume", "delete"]
Destination = Literal["apply", "kafka", "rulesdb"]
ACTIONS: tuple[Action, ...] = ("upsert", "pause", "resume", "delete")
DESTINATIONS: tuple[Destination, ...] = ("apply", "kafka", "rulesdb")
SAMPLE_RULES_FILE = "sample_rules.json"
_Choice = TypeVar("_Choice", bound=str)


@dataclass(frozen=True)
class EditOutcome:
    """What an edit did: the database write, or its events and either the apply result or the topic."""

    action: Action
    publish_to: Destination
    events: tuple[dict[str, Any], ...]
    applied: ApplyResult | None = None
    topic: str | None = None
    database: DatabaseEdit | None = None

    @property
    def rule_ids(self) -> list[int]:
        """The rules the edit touches, in order, each once."""
        if self.database is not None:
            return list(dict.fromkeys(self.database.rule_ids))
        ids = [int((e["after"] or e["before"])["rule_id"]) for e in self.events if e["after"] or e["before"]]
        return list(dict.fromkeys(ids))

    @property
    def version_before(self) -> int | None:
        """The rules-table version just before the applied edit (None when published or nothing was merged)."""
        if self.applied is None or self.applied.rules_version is None:
            return None
        return max(self.applied.rules_version - 1, 0)

    def summary(self) -> str:
        what = f"rules {self.action} of rule(s) {self.rule_ids}"
        if self.database is not None:
            return (
                f"{what}: written to the rules database ({self.database.detail}; WAL insert position before it "
                f"{self.database.wal_lsn}); Debezium streams it and the rules job applies it"
            )
        if self.applied is not None:
            return f"{what}, applied: {self.applied.summary()}"
        return f"{what}: published {len(self.events)} event(s) to {self.topic}; the rules job applies them"


def sample_rules_path(conf: str | None = None) -> Path | None:
    """``sample_rules.json`` next to the settings file, else in the repository's ``conf/``, else in ``../conf``
    (a Databricks notebook runs in its own folder, beside the bundle's ``conf/``); None when none exists."""
    candidates = (
        resolve_conf_path(conf).parent / SAMPLE_RULES_FILE,
        REPO_ROOT / "conf" / SAMPLE_RULES_FILE,
        Path.cwd().parent / "conf" / SAMPLE_RULES_FILE,
    )
    return next((path for path in candidates if path.is_file()), None)


def seed_rule_text(conf: str | None = None) -> str:
    """The seed rule (the first sample rule) as one line of JSON, e.g. a widget's default ("" without samples)."""
    path = sample_rules_path(conf)
    if path is None:
        return ""
    rules: list[dict[str, Any]] = json.loads(path.read_text())
    return json.dumps(rules[0])


def parse_rules_text(text: str, settings: Settings) -> list[Rule]:
    """A JSON rule object or an array of them (blank: none), validated against the transaction schema."""
    if not text.strip():
        return []
    raw = json.loads(text)
    return [parse_rule(item, settings.transaction_schema) for item in (raw if isinstance(raw, list) else [raw])]


def edit_rules(
    spark: SparkSession,
    settings: Settings,
    action: str,
    *,
    rules: Sequence[Rule] = (),
    rule_id: int | None = None,
    publish_to: str = "apply",
    conninfo: str | None = None,
) -> EditOutcome:
    """Write ``action`` to the rules database (``publish_to="rulesdb"``), or build its events against the rules
    table as it is now and apply or publish them.

    ``upsert`` creates or updates ``rules``; ``pause``/``resume``/``delete`` act on ``rule_id``, or on the one
    rule in ``rules`` when no id is given. Raises ``PublishRefused`` for an edit that cannot apply (pausing a
    paused rule, deleting an absent one, CLI events on a table fed by a database, a database edit on a table
    fed by the CLI), ``RulesDbUnavailable`` when the database cannot be reached, and ``ValueError`` for an
    unknown action or destination.
    """
    checked_action = _checked(action, ACTIONS, "action")
    destination = _checked(publish_to, DESTINATIONS, "publish_to")
    if checked_action != "upsert" and rule_id is None:
        if len(rules) != 1:
            raise ValueError(f"{action} needs a rule id (or exactly one rule), got {len(rules)} rules")
        rule_id = rules[0].rule_id
    ensure_rules_tables(spark, settings)
    view = read_view(spark, settings.table_path(RULES.name))
    if checked_action == "upsert" and not rules:
        raise ValueError("upsert needs at least one rule")
    if destination == "rulesdb":
        return _to_database(view.kinds, checked_action, rules, rule_id, conninfo or dsn_from_environment())
    if checked_action == "upsert":
        events = edit_events(view, "upsert", rules=rules)
    else:
        events = edit_events(view, checked_action, rule_id=rule_id)
    if destination == "kafka":
        publish(settings, events)
        return EditOutcome(checked_action, destination, tuple(events), topic=settings.kafka.topics.rules)
    records = [RawRecord(json.dumps(e), f"notebook:{action}:{n}") for n, e in enumerate(events, start=1)]
    result = apply_records(spark, settings, records)
    if result.quarantined:
        raise PublishRefused(f"event(s) quarantined (see the quarantine table): {result.summary()}")
    return EditOutcome(checked_action, destination, tuple(events), applied=result)


def _to_database(
    kinds: frozenset[str], action: Action, rules: Sequence[Rule], rule_id: int | None, conninfo: str | None
) -> EditOutcome:
    if conninfo is None:
        raise ValueError("publish_to='rulesdb' needs a rules database: set FRAUDLAKE_RULESDB_DSN (or rulesdb in conf)")
    if kinds == {TS}:
        raise PublishRefused(
            "the rules table holds ts positions (fed by the CLI publisher, without a database): a change written to "
            "the rules database would reach it as another connector's kind and be quarantined; start the database "
            "path on a fresh lakehouse (docs/rules-cdc.md), or publish this edit to kafka"
        )
    edit = write_edit(conninfo, action, rules=rules, rule_id=None if action == "upsert" else rule_id)
    return EditOutcome(action, "rulesdb", (), database=edit)


def default_as_of(spark: SparkSession, settings: Settings, outcome: EditOutcome | None = None) -> str:
    """A version to time-travel to: the one before ``outcome``'s edit, else the one before the current."""
    before = outcome.version_before if outcome is not None else None
    if before is None:
        before = max(rules_table_version(spark, settings) - 1, 0)
    return str(before)


def _checked(value: str, allowed: tuple[_Choice, ...], name: str) -> _Choice:
    for option in allowed:
        if value == option:
            return option
    raise ValueError(f"{name} {value!r} is not one of {list(allowed)}")
