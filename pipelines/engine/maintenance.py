"""The batch's intent and the state maintenance the rules in force call for.

``record_intent_for`` pins, before the batch writes anything, the versions it will read: the rules table (the
rules in force), the state registry, bronze (what a backfill may read), and, when no maintenance is needed, the
bucket state and cooldown memory too (status READY). Otherwise (status PLANNED) ``maintain_states`` drops the
states no live rule reads, rebuilds those whose widest window grew, backfills new ones from bronze, forgets
the cooldowns of rule ids that left, updates the registry, and then pins the state and cooldown versions.
Every write is idempotent per batch, and the plan is computed from pinned versions, so a re-run after a crash in
the middle redoes exactly the missing writes.

Example::

    progress = record_intent_for(spark, settings, "engine-1f2e", 7, started, batch_max_event_ms)
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession

from delta_tables.alert_cooldown import forget_rules
from delta_tables.bucket_state import append_tiles, delete_states
from delta_tables.engine_progress import PLANNED, READY, record_intent
from delta_tables.idempotent import Txn, table_version
from delta_tables.local_rows import local_frame
from delta_tables.rule_states import RULE_STATES_SCHEMA, replace_registry
from pipelines.engine.backfill import backfill_tiles
from pipelines.engine.retention import state_horizons
from pipelines.engine.states import RulesCache, StateSpec, plan_states, states_of
from pipelines.settings import Settings

DAY_MS = 86_400_000


@dataclass(frozen=True)
class EnginePaths:
    """Where the engine's tables live under the lakehouse root."""

    rules: str
    rule_states: str
    bucket_state: str
    alert_cooldown: str
    bronze: str
    alerts: str
    quarantine: str
    batch_log: str
    progress: str

    @classmethod
    def of(cls, settings: Settings) -> EnginePaths:
        path = settings.table_path
        return cls(
            rules=path("rules"),
            rule_states=path("rule_states"),
            bucket_state=path("bucket_state"),
            alert_cooldown=path("alert_cooldown"),
            bronze=path("bronze_transactions"),
            alerts=path("alerts"),
            quarantine=path("quarantine"),
            batch_log=path("batch_log"),
            progress=path("engine_progress"),
        )


def _forgotten_rule_ids(previous: dict[str, Any] | None, states: Sequence[StateSpec]) -> set[int]:
    """Rule ids live in the previous batch and not in this one: their cooldown memory goes."""
    live = {r.rule.rule_id for s in states for r in s.rules}
    return set(previous["liveRuleIds"] or []) - live if previous else set()


def record_intent_for(
    spark: SparkSession,
    settings: Settings,
    cache: RulesCache,
    *,
    app_id: str,
    batch_id: int,
    started: dt.datetime,
    previous: dict[str, Any] | None,
    batch_max_event_ms: int | None,
) -> dict[str, Any]:
    """Pin this batch's reads in ``engine_progress`` (first attempt only) and return the recorded row.

    ``previous`` is the ledger row of the batch before (None for the first batch).
    """
    paths = EnginePaths.of(settings)
    m_before = previous["maxEventTimeAfter"] if previous else None
    known = [m for m in (m_before, batch_max_event_ms) if m is not None]
    rules_version = table_version(spark, paths.rules)
    registry_version = table_version(spark, paths.rule_states)
    rules = cache.rules(spark, rules_version)
    states = states_of(rules)
    plan = plan_states(states, cache.registry(spark, registry_version))
    ready = not plan.has_work and not _forgotten_rule_ids(previous, states)
    row = {
        "appId": app_id,
        "batchId": batch_id,
        "status": READY if ready else PLANNED,
        "rulesVersion": rules_version,
        "registryVersion": registry_version,
        "bronzeVersion": table_version(spark, paths.bronze),
        "stateVersion": table_version(spark, paths.bucket_state) if ready else None,
        "cooldownVersion": table_version(spark, paths.alert_cooldown) if ready else None,
        "maxEventTimeBefore": m_before,
        "maxEventTimeAfter": max(known) if known else None,
        "liveRuleIds": sorted(r.rule.rule_id for r in rules),
        "startedAt": started,
    }
    return record_intent(spark, paths.progress, row, txn=Txn(app_id, batch_id).part(f"intent-{row['status']}"))


def maintain_states(
    spark: SparkSession,
    settings: Settings,
    cache: RulesCache,
    progress: dict[str, Any],
    states: Sequence[StateSpec],
    txn: Txn,
    *,
    previous: dict[str, Any] | None,
) -> dict[str, Any]:
    """Apply the PLANNED batch's state changes (each write idempotent), pin the versions to evaluate against,
    and return the READY ledger row. ``previous`` is the ledger row of the batch before."""
    paths, engine, batch_id = EnginePaths.of(settings), settings.engine, txn.version
    registry = cache.registry(spark, progress["registryVersion"])
    plan = plan_states(states, registry)
    delete_states(spark, paths.bucket_state, plan.dropped + plan.rebuilt, txn=txn.part("state-drop"))
    m_before = progress["maxEventTimeBefore"]
    backfilled = [s for s in states if s.state_id in plan.backfilled]
    if backfilled and m_before is not None:
        horizons = state_horizons(
            backfilled,
            high_water_ms=m_before,
            lateness_ms=engine.allowed_lateness_seconds * 1000,
            bucket_seconds=engine.bucket_seconds,
        )
        from_ms = max(min(horizons.values()), m_before - engine.backfill_retention_days * DAY_MS)
        bronze = spark.read.format("delta").option("versionAsOf", progress["bronzeVersion"]).load(paths.bronze)
        tiles = backfill_tiles(bronze, backfilled, bucket_ms=engine.bucket_seconds * 1000, from_ms=from_ms)
        append_tiles(tiles, paths.bucket_state, batch_id=batch_id, txn=txn.part("state-backfill"))
    forget_rules(
        spark,
        paths.alert_cooldown,
        _forgotten_rule_ids(previous, states),
        older_than_ms=None,
        txn=txn.part("cooldown-forget"),
    )
    if plan.windows or plan.dropped:
        now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
        rows = [
            (
                s.state_id,
                s.signature,
                s.window_minutes,
                registry[s.state_id].created_batch_id
                if s.state_id in registry and s.state_id not in plan.rebuilt
                else batch_id,
                batch_id if s.state_id in plan.windows else registry[s.state_id].updated_batch_id,
                now,
            )
            for s in states
        ]
        replace_registry(local_frame(spark, rows, RULE_STATES_SCHEMA), paths.rule_states, txn=txn.part("registry"))
    ready = progress | {
        "status": READY,
        "stateVersion": table_version(spark, paths.bucket_state),
        "cooldownVersion": table_version(spark, paths.alert_cooldown),
    }
    return record_intent(spark, paths.progress, ready, txn=txn.part(f"intent-{READY}"))
