"""A micro-batch's evaluation: its tiles, the alerts against the cached state plus the batch, the cooldown memory.

``evaluate_batch`` tags the batch's valid rows by state and key, builds its tiles (appended to the state in the
background), evaluates the ACTIVE and SHADOW rules against the state cached at the pinned version (``table_cache``)
plus the batch itself, applies the cooldowns, and appends the alerts (+ Kafka: live ones only) and the new cooldown
memory, each through ``BatchWrites``. A SHADOW rule's alerts go through every step an ACTIVE rule's do (its own
cooldown memory included) and are written with ``shadow = true``; they are counted apart (``shadow_alerts``) and
never sent to the alerts topic. Without SHADOW rules the batch runs the same actions and commits as before.
After the appends, ``take_over_appends`` moves the caches to the versions just written, and ``batch_latency``
measures the batch's latency from the alerts' commit.

Example::

    with BatchWrites(run.attempt, run.pins, after=crash_point) as writes:
        evaluated = evaluate_batch(run, writes, state_cache=state, memory_cache=memory, to_kafka=False)
    take_over_appends(run, evaluated, state_cache=state, memory_cache=memory)
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType, TimestampType

from delta_tables.alert_cooldown import append_last_alerts, fold_memory
from delta_tables.bucket_state import append_tiles
from delta_tables.idempotent import CommitTag, append_tagged, files_for
from delta_tables.local_rows import local_frame
from pipelines.engine.alert_rows import alert_rows, write_alerts_to_kafka
from pipelines.engine.batch_run import BatchRun, BatchStats, utcnow
from pipelines.engine.batch_writes import BatchWrites
from pipelines.engine.buckets import co_partitioned, tag_rows, tiles
from pipelines.engine.cooldown import apply_cooldown, last_alert_times
from pipelines.engine.evaluate import candidate_alerts, has_baselines, rules_frame, running_in_bucket
from pipelines.engine.latency import (
    ALERT_PREFIX,
    COMMITTED_AT,
    EVALUATED_PREFIX,
    ingestion_percentiles,
    latency_metrics,
)
from pipelines.engine.lookback import with_coordinates
from pipelines.engine.states import StateSpec
from pipelines.engine.table_cache import TableCache, kept, materialize, planned, release, storing
from pipelines.engine.units import tiles_to_table

TAGGED_KEEP = ("transactionId", "eventTime", "isLate", "ingestedAt", "batchId", "batchStartedAt")
DETECTION_CONSTANTS = StructType(
    [
        StructField("_detectedAt", TimestampType(), False),
        StructField("_rulesVersion", LongType(), False),
        StructField("_batchId", LongType(), False),
    ]
)


@dataclass
class Evaluated:
    """What the evaluation hands back: the batch's tiles and cooldown rows (materialized; appended in the
    background, then taken over by the caches), its alert count, and what its latency is measured from."""

    tiles: DataFrame
    alerts: int = 0  # live alerts: ACTIVE rules'
    shadow_alerts: int = 0  # SHADOW rules' alerts (recorded, never acted on)
    memory: DataFrame | None = None
    alerts_ingest_ms: list[int] | None = None  # ingestion quantiles of the batch's live alerts
    alerts_committed_ms: float | None = None  # wall clock (epoch ms) when the alerts append committed


def evaluate_batch(
    run: BatchRun, writes: BatchWrites, *, state_cache: TableCache, memory_cache: TableCache, to_kafka: bool
) -> Evaluated:
    """Evaluate the batch; its tiles, alerts and cooldown memory are appended in the background."""
    spark, engine, paths, states = run.spark, run.settings.engine, run.paths, run.states
    bucket_ms = engine.bucket_seconds * 1000
    files = files_for(run.stats.valid * len(states) * 3)  # at most three tiles (levels) per row and state
    tagged = tag_rows(run.valid, states, bucket_ms=bucket_ms, keep=TAGGED_KEEP, units=run.units)
    tagged = co_partitioned(tagged, run.partitions)
    tagged = kept(tagged)
    run.cached.append(tagged)
    # Materialized (a local checkpoint): the append and the evaluation read it, then the state cache keeps it. It is
    # stored on a thread of its own while the evaluation's plan is built and planned here (``storing``).
    stamp = run.constants.select(F.col("batchId").alias("lastBatchId"), F.col("batchStartedAt").alias("updatedAt"))
    batch_tiles, stored = storing(
        with_coordinates(
            tiles(tagged, bucket_ms=bucket_ms, distinct_cap=engine.distinct_cap), bucket_ms=bucket_ms
        ).crossJoin(F.broadcast(stamp))
    )
    evaluated = Evaluated(batch_tiles)
    try:
        state_cache.ensure(spark, run.state_version)
        active = [s for s in states if s.evaluated_rules]  # ACTIVE or SHADOW rules: PAUSED ones keep state only
        candidates = _candidates(run, active, state_cache, tagged, batch_tiles) if active else None
    finally:
        tile_rows = stored.result()  # also when planning failed: no job of this batch outlives it

    def append_state(tag: CommitTag) -> None:
        """The batch's tiles: as many as the driver takes are written by delta-rs (``append_tagged``), more by
        Spark."""
        append_tiles(
            tiles_to_table(batch_tiles), paths.bucket_state, batch_id=None, tag=tag, files=files, rows_at_most=tile_rows
        )

    writes.append("state", append_state)
    if candidates is None:
        return evaluated
    emitted = materialize(candidates)
    run.cached.append(emitted)
    if any(r.rule.cooldown_minutes for s in active for r in s.evaluated_rules):
        memory_cache.ensure(spark, run.cooldown_version)
        emitted = materialize(apply_cooldown(emitted, fold_memory(memory_cache.frame())))
        run.cached.append(emitted)
    # Candidates are few: one task over all of them, one stage (an aggregation over several partitions would
    # add a shuffle and a second stage, the larger part of this step's cost on a small batch).
    # Shadow alerts are counted in the same aggregation (no extra action) and left out of the live latency.
    live = ~F.col("shadow")
    counted = (
        emitted.coalesce(1)
        .agg(
            F.count(F.when(live, 1)),
            ingestion_percentiles(F.when(live, F.col("ingestedAt"))),
            F.count(F.when(~live, 1)),
        )
        .first()
    )
    if counted:
        evaluated.alerts, evaluated.alerts_ingest_ms, evaluated.shadow_alerts = counted[0], counted[1], counted[2]
    if evaluated.alerts or evaluated.shadow_alerts:
        detection = local_frame(spark, [(utcnow(), run.pins.rules, run.batch_id)], DETECTION_CONSTANTS)
        rows = alert_rows(
            emitted.crossJoin(F.broadcast(detection)),
            rules_version=F.col("_rulesVersion"),
            batch_id=F.col("_batchId"),
            detected_at=F.col("_detectedAt"),
        )
        rows = kept(rows)
        run.cached.append(rows)
        # Alerts and cooldown rows are at most the batch's alerts: few, written from the driver by delta-rs where
        # it applies (``append_tagged``), each in milliseconds instead of a Spark write job and commit.
        alerts = evaluated.alerts + evaluated.shadow_alerts

        def publish(tag: CommitTag) -> None:
            """The alerts append, then the Kafka copy of the live ones when configured (at-least-once)."""
            append_tagged(rows, paths.alerts, tag, files=1, rows_at_most=alerts)
            evaluated.alerts_committed_ms = time.time() * 1000
            if to_kafka and evaluated.alerts:
                write_alerts_to_kafka(rows, run.settings)

        writes.append("alerts", publish)
        memory = materialize(last_alert_times(emitted).crossJoin(F.broadcast(stamp)))
        evaluated.memory = memory  # the memory cache takes it over after the append
        writes.append(
            "cooldown",
            lambda tag: append_last_alerts(
                memory, paths.alert_cooldown, batch_id=None, tag=tag, files=1, rows_at_most=alerts
            ),
        )
    return evaluated


def _candidates(
    run: BatchRun, active: list[StateSpec], state_cache: TableCache, tagged: DataFrame, batch_tiles: DataFrame
) -> DataFrame:
    """The plan of the batch's candidate alerts (``evaluate.candidate_alerts``) over the cached state and the batch's
    rows and tiles of the ``active`` states, physically planned already (``planned``)."""
    engine = run.settings.engine
    active_ids = [s.state_id for s in active]
    rules = rules_frame(run.spark, run.states, bucket_seconds=engine.bucket_seconds, units=run.units)
    prior = state_cache.frame().where(F.col("stateId").isin(*active_ids))
    # Late rows are not evaluated but count for the rows after them, also within their bucket.
    running = running_in_bucket(tagged.where(F.col("stateId").isin(*active_ids))).where(~F.col("isLate"))
    candidates = candidate_alerts(
        running,
        rules,
        prior,
        batch_tiles.where(F.col("stateId").isin(*active_ids)),
        bucket_ms=engine.bucket_seconds * 1000,
        distinct_cap=engine.distinct_cap if any(s.distinct for s in active) else None,
        relative=has_baselines(active),
    )
    return planned(candidates)


def take_over_appends(
    run: BatchRun, evaluated: Evaluated, *, state_cache: TableCache, memory_cache: TableCache
) -> None:
    """The caches move to the versions just written, on the batch's thread, once no job reads them any more."""
    states = [s.state_id for s in run.states]  # the batch's tiles are of these states only
    _take_over(run, state_cache, evaluated.tiles, "state", run.state_version, held=states)
    if evaluated.memory is not None:
        _take_over(run, memory_cache, evaluated.memory, "cooldown", run.cooldown_version)


def _take_over(
    run: BatchRun, cache: TableCache, frame: DataFrame, write: str, read: int, *, held: list[str] | None = None
) -> None:
    """Give the cache the frame this batch appended (or, if an earlier attempt did, make it reload)."""
    if run.attempt.done(write):
        cache.invalidate()
        release(frame)
    else:
        cache.appended(run.spark, frame, read_version=read, held=held)


def batch_latency(stats: BatchStats, evaluated: Evaluated | None) -> dict[str, float]:
    """Latency at the alerts' commit (or, without alerts, at the end of the batch's writes): latency.py"""
    committed_ms = (evaluated.alerts_committed_ms if evaluated else None) or time.time() * 1000
    return {
        COMMITTED_AT: round(committed_ms, 1),  # per-transaction latency = this - its ingestion (live_latency)
        **latency_metrics(
            ALERT_PREFIX, commit_ms=committed_ms, ingestion_ms=evaluated.alerts_ingest_ms if evaluated else None
        ),
        **latency_metrics(EVALUATED_PREFIX, commit_ms=committed_ms, ingestion_ms=stats.ingest_ms),
    }
