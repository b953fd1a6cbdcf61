"""State maintenance that the rules in force call for, before a micro-batch evaluates.

When the rules pinned for a batch need other states than the registry (``rule_states``) lists, the batch first
drops the states no live rule reads and those whose widest window grew (retention may have dropped buckets they
now need), backfills new and rebuilt states from bronze as if their rules had always existed (a drop and a backfill
in the same batch are one ``replaceWhere`` commit of the states' partitions, ``STATE_REPLACE``), forgets the cooldown
memory of rule ids that come back into force after leaving it, and records the new registry. Each write is tagged
with the batch (``delta_tables.idempotent``) and skipped when an earlier attempt of the batch committed it; the plan
is computed from the pinned rules, registry and bronze versions, so a replay redoes exactly the missing writes.

The engine's caches of the bucket state and the cooldown memory follow these writes (dropped states' rows filtered
out of the cache and the rest folded; the backfilled tiles taken as an appended frame; a forgotten rule's memory
removed by writing the cache's folded rows without it over the table, ``retention.rewrite_memory``) instead of
reloading both tables from Delta after a rule change: a reload is a snapshot reconstruction and a scan and fold of
the whole table.

The contract keeps a rule's cooldown memory while its id is in force and forgets it when the id leaves. No batch
reads the memory of a rule out of force, so the rows stay in the table while it is out (retention's age horizon
drops them if it never comes back), and the forgetting is done when the id comes back: the batch that has it in
force again, and not the batch before, removes its rows (``returning_rule_ids``, ``forget_memory``). A rule
deleted or disabled for good costs no memory write, and a new id has nothing to forget (a rewrite of the memory on
each departure cost ~1.5-2 s of a 40-row batch: an overwrite, Delta's snapshot reconstruction for it, a fold).

Example::

    if needs_maintenance(plan, returning):
        maintain_states(spark, settings, rules_cache, attempt, pins, states, returning=returning, caches=caches)
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Sequence

from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F

from delta_tables.bucket_state import append_tiles, compact_tiles, delete_states, with_batch_columns
from delta_tables.idempotent import CommitTag
from delta_tables.rule_states import replace_registry
from delta_tables.table_snapshot import table_version
from pipelines.base.settings import Settings
from pipelines.engine.backfill import backfill_tiles
from pipelines.engine.recovery import Attempt, EnginePaths, Pins
from pipelines.engine.retention import rewrite_memory, state_horizons
from pipelines.engine.states import RegistryEntry, RulesCache, StatePlan, StateSpec, plan_states
from pipelines.engine.table_cache import TableCache, materialize, release

DAY_MS = 86_400_000
STATE_REPLACE = "state-replace"
"""The write that drops states and backfills others in one ``replaceWhere`` commit of their partitions."""
StateCaches = tuple[TableCache, TableCache]
"""The engine's caches of the bucket state and of the cooldown memory."""


def _listed(column: str, values: Sequence[object]) -> Column:
    """``column`` is one of ``values``: one array literal, so the generated code is the same whatever the values
    (an ``isin`` compiles a comparison per value: new code, compiled again, for every other list)."""
    return F.array_contains(F.lit(list(values)), F.col(column))


def returning_rule_ids(previous_live: Collection[int] | None, states: Sequence[StateSpec]) -> set[int]:
    """Rule ids in force in this batch and not in the previous one (none before the lakehouse's first batch): new
    ids, and ids back after leaving, whose cooldown memory from before goes (``forget_memory``)."""
    if previous_live is None:
        return set()
    return {r.rule.rule_id for s in states for r in s.rules} - set(previous_live)


def needs_maintenance(plan: StatePlan, returning: Collection[int]) -> bool:
    return plan.has_work or bool(returning)


def forget_memory(
    spark: SparkSession, path: str, cache: TableCache, rule_ids: Collection[int], *, tag: CommitTag
) -> None:
    """Remove the cooldown memory the rules ``rule_ids`` left when they went out of force: all their rows, since
    none is of this batch (its own cooldown append comes after maintenance and carries the evaluating pins, so a
    replay that finds it committed skips maintenance: ``Attempt.recover``; batch ids are no guard, a new checkpoint
    starts them again at 0). Nothing is written when there are none (a new rule id), which one small job over the
    cached memory tells."""
    stale = _listed("ruleId", sorted(int(r) for r in rule_ids))
    cache.ensure(spark, table_version(spark, path))
    if cache.frame().where(stale).limit(1).count():
        rewrite_memory(spark, path, cache, keep=~stale, tag=tag)


def maintain_states(
    spark: SparkSession,
    settings: Settings,
    cache: RulesCache,
    attempt: Attempt,
    pins: Pins,
    states: Sequence[StateSpec],
    *,
    returning: Collection[int],
    caches: StateCaches,
) -> None:
    """Apply the batch's state changes; each write is skipped when an earlier attempt committed it. ``caches`` (the
    engine's bucket-state and cooldown-memory caches) follow the writes this call makes; a write it skips leaves
    them behind the table's version, which their next ``ensure`` reloads (a cache is trusted only at its version)."""
    paths, engine, batch_id = EnginePaths.of(settings), settings.engine, attempt.batch_id
    registry = cache.registry(spark, pins.registry)
    plan = plan_states(states, registry)
    state_cache, memory_cache = caches
    gone = plan.dropped + plan.rebuilt
    # One commit may have done both (STATE_REPLACE): a replay must neither drop nor backfill again.
    drop_due = bool(gone) and not attempt.done("state-drop") and not attempt.done(STATE_REPLACE)
    backfilled = [s for s in states if s.state_id in plan.backfilled]
    if (
        backfilled
        and pins.m_before is not None
        and not attempt.done("state-backfill")
        and not attempt.done(STATE_REPLACE)
    ):
        horizons = state_horizons(
            backfilled,
            high_water_ms=pins.m_before,
            lateness_ms=engine.allowed_lateness_seconds * 1000,
            bucket_seconds=engine.bucket_seconds,
        )
        from_ms = max(min(horizons.values()), pins.m_before - engine.backfill_retention_days * DAY_MS)
        bronze = spark.read.format("delta").option("versionAsOf", pins.bronze).load(paths.bronze)
        tiles = backfill_tiles(
            bronze,
            backfilled,
            bucket_ms=engine.bucket_seconds * 1000,
            from_ms=from_ms,
            distinct_cap=engine.distinct_cap,
        )
        written = materialize(with_batch_columns(tiles, batch_id))  # computed once, for the write and the cache
        try:
            read = table_version(spark, paths.bucket_state)
            if drop_due:
                # The drop and the backfill in one commit (replaceWhere on the states' partitions): a DELETE commit
                # of its own costs ~1.5 s more (Delta's DML reconstructs the table state for its metrics).
                replaced = sorted({*gone, *(s.state_id for s in backfilled)})
                compact_tiles(written, paths.bucket_state, tag=attempt.tag(STATE_REPLACE, pins), state_ids=replaced)
                state_cache.rewritten_rows(spark, written, removed=_listed("stateId", replaced), read_version=read)
                drop_due = False
            else:
                append_tiles(written, paths.bucket_state, batch_id=None, tag=attempt.tag("state-backfill", pins))
                state_cache.appended_rows(spark, written, read_version=read, states=[s.state_id for s in backfilled])
        finally:
            release(written)
    if drop_due:  # states dropped, none backfilled (or no bronze before this batch): a drop alone
        read = table_version(spark, paths.bucket_state)
        delete_states(spark, paths.bucket_state, gone, tag=attempt.tag("state-drop", pins))
        state_cache.deleted(spark, removed=_listed("stateId", sorted(gone)), read_version=read)
    if returning and not attempt.done("cooldown-forget"):
        tag = attempt.tag("cooldown-forget", pins)
        forget_memory(spark, paths.alert_cooldown, memory_cache, returning, tag=tag)
    if (plan.windows or plan.dropped) and not attempt.done("registry"):
        now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
        entries = {
            s.state_id: RegistryEntry(
                s.state_id,
                s.window_minutes,
                registry[s.state_id].created_batch_id
                if s.state_id in registry and s.state_id not in plan.rebuilt
                else batch_id,
                batch_id if s.state_id in plan.windows else registry[s.state_id].updated_batch_id,
            )
            for s in states
        }
        rows = [
            (e.state_id, s.signature, e.window_minutes, e.created_batch_id, e.updated_batch_id, now)
            for s, e in zip(states, entries.values(), strict=True)
        ]
        replace_registry(spark, rows, paths.rule_states, tag=attempt.tag("registry", pins))
        cache.registry_written(spark, entries, read_version=pins.registry)
