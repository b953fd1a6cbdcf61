"""How far back a state must keep (and a backfill must read) buckets: the horizon.

Every transaction evaluated from now on has ``t >= M - L`` (``M`` the max event time seen so far, ``L`` the
allowed lateness): anything older is late and not evaluated. Its lookback starts at bucket
``index(t) - reach >= index(M - L) - reach``, so a state needs no tile starting before

    horizon = (floor((M - L) / bucket) - reach(widest live window of the state)) * bucket      [epoch ms]

Retention deletes a state's tiles older than its horizon every ``retention_every_batches`` batches; a new or
rebuilt state is backfilled from bronze from its horizon on. Both are per state (the widest window of *its*
ACTIVE and PAUSED rules), which is never less than what the contract needs and often far less than the global
widest window. The cooldown memory needs no row older than ``M - L - 30 days`` (the longest cooldown).

``compact_state`` is that retention, run by the handler on the cadence: the state and the cooldown memory each
rewritten folded (one row per tile, per rule and key) without what is beyond its horizon, in one tagged commit,
their executor caches then holding exactly what was written.

Example::

    horizon_ms(high_water_ms=1_700_000_000_000, lateness_ms=300_000, bucket_ms=60_000, reach=60)
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import functions as F

from delta_tables.alert_cooldown import compact_memory, fold_memory
from delta_tables.bucket_state import compact_tiles, fold_tiles, trim_condition
from delta_tables.idempotent import table_version
from pipelines.engine.batch_run import BatchRun
from pipelines.engine.evaluate import reach_buckets
from pipelines.engine.lookback import with_coordinates
from pipelines.engine.states import StateSpec
from pipelines.engine.table_cache import TableCache, materialize
from pipelines.engine.units import tiles_to_table
from rules_cdc.rule_model import MAX_WINDOW_MINUTES


def horizon_ms(*, high_water_ms: int, lateness_ms: int, bucket_ms: int, reach: int) -> int:
    """Start (epoch ms) of the oldest bucket any future in-time lookback of that reach can touch."""
    return ((high_water_ms - lateness_ms) // bucket_ms - reach) * bucket_ms


def state_horizons(
    states: Sequence[StateSpec], *, high_water_ms: int, lateness_ms: int, bucket_seconds: int
) -> dict[str, int]:
    """Per state id, the horizon of its widest live window."""
    return {
        s.state_id: horizon_ms(
            high_water_ms=high_water_ms,
            lateness_ms=lateness_ms,
            bucket_ms=bucket_seconds * 1000,
            reach=reach_buckets(s.window_minutes, bucket_seconds),
        )
        for s in states
    }


def cooldown_horizon_ms(*, high_water_ms: int, lateness_ms: int) -> int:
    """Cooldown memory older than this cannot suppress any future in-time alert, whatever the cooldown."""
    return high_water_ms - lateness_ms - MAX_WINDOW_MINUTES * 60_000


def retention_due(batch_id: int, every: int) -> bool:
    """Whether this batch runs retention: every ``every`` batches (batch ids ``every-1``, ``2*every-1``, ...)."""
    return (batch_id + 1) % every == 0


def compact_state(run: BatchRun, *, state_cache: TableCache, memory_cache: TableCache, high_water_ms: int) -> None:
    """Retention: rewrite the state and the cooldown memory folded, without what no lookback can reach; each is
    skipped when an earlier attempt of the batch committed it, and its cache then holds what was written."""
    lateness_ms = run.settings.engine.allowed_lateness_seconds * 1000
    if not run.attempt.done("state-compact"):
        horizons = state_horizons(
            run.states,
            high_water_ms=high_water_ms,
            lateness_ms=lateness_ms,
            bucket_seconds=run.settings.engine.bucket_seconds,
        )
        compact_state_tiles(run, state_cache, horizons)
    if not run.attempt.done("cooldown-compact"):
        horizon = cooldown_horizon_ms(high_water_ms=high_water_ms, lateness_ms=lateness_ms)
        compact_cooldown_memory(run, memory_cache, horizon)


def compact_state_tiles(run: BatchRun, cache: TableCache, horizons: dict[str, int]) -> None:
    """The bucket state folded (one row per tile), each state's tiles before its horizon dropped, in one commit."""
    spark, path = run.spark, run.paths.bucket_state
    read = table_version(spark, path)
    cache.ensure(spark, read)
    engine = run.settings.engine
    distinct = any(s.distinct for s in run.states)
    folded = with_coordinates(
        fold_tiles(cache.frame(), distinct_cap=engine.distinct_cap, distinct=distinct),
        bucket_ms=engine.bucket_seconds * 1000,
    )
    folded = folded.where(trim_condition(horizons))
    folded = materialize(folded.withColumn("updatedAt", F.current_timestamp()))
    compact_tiles(tiles_to_table(folded), path, tag=run.tag("state-compact"))
    cache.reset(spark, folded, written_version=read + 1)


def compact_cooldown_memory(run: BatchRun, cache: TableCache, horizon_ms: int) -> None:
    """The cooldown memory folded (one row per rule and key), without rows older than ``horizon_ms``."""
    spark, path = run.spark, run.paths.alert_cooldown
    read = table_version(spark, path)
    cache.ensure(spark, read)
    recent = fold_memory(cache.frame()).where(F.col("lastAlertTimeMs") >= F.lit(horizon_ms))
    recent = materialize(recent.withColumn("updatedAt", F.current_timestamp()))
    compact_memory(recent, path, tag=run.tag("cooldown-compact"))
    cache.reset(spark, recent, written_version=read + 1)
