"""Rules in force -> shared states, and what the bucket state must change for them (new, rebuilt, dropped).

Rules with the same (grouping keys, aggregate field, filter) share one state (``Rule.state_id``): their buckets
are the same whatever their aggregator, limit, window or rule state. A rule's state (ACTIVE, PAUSED, SHADOW) is not
part of ``state_id``, so promoting a SHADOW rule to ACTIVE (or demoting, pausing, resuming it) keeps its buckets:
nothing is rebuilt. Rules are few, so this module works on Python lists
(collected once per batch, at the pinned rules-table version), never on transactions.

Example::

    rules = read_live_rules(spark, settings.table_path("rules"), version=12, schema=settings.transaction_schema)
    states = states_of(rules)
    plan = plan_states(states, read_registry(spark, settings.table_path("rule_states"), version=3))
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession

from delta_tables.arrow_reads import newest_version_at, table_rows
from delta_tables.table_snapshot import table_version
from pipelines.base.settings import TransactionSchema
from rules_cdc.filter_expr import All, AnyOf, Leaf, Not
from rules_cdc.rule_model import COUNT_FIELD, Rule, RuleState
from rules_cdc.rule_rows import LIVE_STATES, rule_from_row, rule_snapshot_json

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LiveRule:
    """A rule in force for a batch, with where it came from in the rules table."""

    rule: Rule
    source_position: str | None

    @property
    def active(self) -> bool:
        return self.rule.rule_state is RuleState.ACTIVE

    @property
    def evaluated(self) -> bool:
        """ACTIVE or SHADOW: evaluated alike; only what happens to the alerts differs (``shadow``)."""
        return self.rule.evaluated

    @property
    def shadow(self) -> bool:
        return self.rule.shadow

    @property
    def snapshot(self) -> str:
        return rule_snapshot_json(self.rule)


@dataclass(frozen=True)
class StateSpec:
    """One shared state: what its rows aggregate, and the live rules that read it."""

    state_id: str
    signature: str
    grouping_key_names: tuple[str, ...]
    aggregate_field: str | None  # None: the COUNT pseudo-field (the state only counts)
    filter: All | AnyOf | Not | Leaf | None
    rules: tuple[LiveRule, ...]

    @property
    def window_minutes(self) -> int:
        """The widest window (or baseline window) of its live (ACTIVE, PAUSED and SHADOW) rules: how much history the
        state keeps."""
        return max(r.rule.history_minutes for r in self.rules)

    @property
    def distinct(self) -> bool:
        """A COUNT_DISTINCT state: its tiles keep the field's distinct values (``distinctValues``)."""
        return self.rules[0].rule.counts_distinct

    @property
    def active_rules(self) -> tuple[LiveRule, ...]:
        return tuple(r for r in self.rules if r.active)

    @property
    def evaluated_rules(self) -> tuple[LiveRule, ...]:
        """The rules evaluated against this state: ACTIVE and SHADOW (not PAUSED)."""
        return tuple(r for r in self.rules if r.evaluated)

    @property
    def shadow_rules(self) -> tuple[LiveRule, ...]:
        return tuple(r for r in self.rules if r.shadow)


@dataclass(frozen=True)
class RegistryEntry:
    state_id: str
    window_minutes: int
    created_batch_id: int
    updated_batch_id: int


@dataclass(frozen=True)
class StatePlan:
    """What this batch must do to the bucket state before evaluating (all empty: nothing)."""

    new: tuple[str, ...]  # no rows yet: backfill from bronze
    rebuilt: tuple[str, ...]  # window grew beyond what retention kept: drop and backfill
    dropped: tuple[str, ...]  # no live rule reads it any more: drop
    windows: Mapping[str, int]  # registry windowMinutes to record (new, rebuilt or changed)

    @property
    def backfilled(self) -> tuple[str, ...]:
        return self.new + self.rebuilt

    @property
    def has_work(self) -> bool:
        return bool(self.new or self.rebuilt or self.dropped or self.windows)


def read_live_rules(spark: SparkSession, path: str, *, version: int, schema: TransactionSchema) -> list[LiveRule]:
    """The live (ACTIVE, PAUSED, SHADOW) rules of the rules table at ``version``; a row that fails validation is
    skipped."""
    rules: list[LiveRule] = []
    for data in table_rows(spark, path, version=version):  # rules, not transactions: a few hundred rows at most
        if data["ruleState"] not in LIVE_STATES:
            continue
        try:
            rule = rule_from_row(data)
            rule.check_against(schema)
        except ValueError as error:
            log.warning("rule %s at rules version %s is skipped: %s", data.get("ruleId"), version, error)
            continue
        rules.append(LiveRule(rule, data.get("sourcePosition")))
    return sorted(rules, key=lambda r: r.rule.rule_id)


def states_of(rules: Sequence[LiveRule]) -> list[StateSpec]:
    """Group rules by ``state_id``; states sorted by id, rules by rule id."""
    grouped: dict[str, list[LiveRule]] = {}
    for live in rules:
        grouped.setdefault(live.rule.state_id, []).append(live)
    states = []
    for state_id, members in sorted(grouped.items()):
        first = members[0].rule
        field = None if first.aggregate_field_name == COUNT_FIELD else first.aggregate_field_name
        states.append(
            StateSpec(
                state_id=state_id,
                signature=first.state_signature,
                grouping_key_names=first.grouping_key_names,
                aggregate_field=field,
                filter=first.filter,
                rules=tuple(sorted(members, key=lambda r: r.rule.rule_id)),
            )
        )
    return states


def read_registry(spark: SparkSession, path: str, *, version: int) -> dict[str, RegistryEntry]:
    """The state registry at ``version`` (one small row per state)."""
    columns = ("stateId", "windowMinutes", "createdBatchId", "updatedBatchId")
    rows = table_rows(spark, path, version=version, columns=columns)
    return {row["stateId"]: RegistryEntry(*(row[c] for c in columns)) for row in rows}


def plan_states(states: Sequence[StateSpec], registry: Mapping[str, RegistryEntry]) -> StatePlan:
    """Compare the states the rules need with the registered ones.

    A state whose widest window grew past its registered one is rebuilt: retention may already have dropped
    the older buckets it now needs. A narrower window is only recorded (retention then keeps less).
    """
    wanted = {s.state_id: s.window_minutes for s in states}
    new = tuple(sorted(sid for sid in wanted if sid not in registry))
    rebuilt = tuple(sorted(sid for sid, w in wanted.items() if sid in registry and w > registry[sid].window_minutes))
    dropped = tuple(sorted(sid for sid in registry if sid not in wanted))
    windows = {sid: w for sid, w in wanted.items() if sid not in registry or registry[sid].window_minutes != w}
    return StatePlan(new=new, rebuilt=rebuilt, dropped=dropped, windows=windows)


class RulesCache:
    """The rules in force and the state registry by table version: each version read once, not once per batch
    (the last few versions are kept: a batch after a rule change also looks at the previous batch's rules)."""

    KEPT = 4

    def __init__(self, rules_path: str, registry_path: str, schema: TransactionSchema) -> None:
        self._paths = (rules_path, registry_path)
        self._schema = schema
        self._rules: dict[int, list[LiveRule]] = {}
        self._registry: dict[int, dict[str, RegistryEntry]] = {}

    def rules(self, spark: SparkSession, version: int) -> list[LiveRule]:
        if version not in self._rules:
            self._rules[version] = read_live_rules(spark, self._paths[0], version=version, schema=self._schema)
            _trim(self._rules, self.KEPT)
        return self._rules[version]

    def registry(self, spark: SparkSession, version: int) -> dict[str, RegistryEntry]:
        if version not in self._registry:
            self._registry[version] = read_registry(spark, self._paths[1], version=version)
            _trim(self._registry, self.KEPT)
        return self._registry[version]

    def registry_version(self, spark: SparkSession) -> int:
        """The registry's newest version: by delta-rs where it writes the table (``arrow_writes``; Spark would load
        each version delta-rs wrote with a Spark job), else Spark's."""
        version = newest_version_at(self._paths[1])
        return table_version(spark, self._paths[1]) if version is None else version

    def registry_written(self, spark: SparkSession, entries: Mapping[str, RegistryEntry], *, read_version: int) -> None:
        """After the engine replaced the registry with ``entries``: if that write is the version after
        ``read_version`` (nobody else wrote in between), remember it as that version's content, so the next batch
        does not read back what this one wrote."""
        if self.registry_version(spark) == read_version + 1:
            self._registry[read_version + 1] = dict(entries)
            _trim(self._registry, self.KEPT)


def _trim(by_version: dict[int, Any], kept: int) -> None:
    for version in sorted(by_version)[:-kept]:
        del by_version[version]
