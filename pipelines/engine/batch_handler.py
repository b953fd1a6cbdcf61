"""The ``foreachBatch`` function: one micro-batch of raw records -> bronze, quarantine, state, alerts, batch log.

Order of a batch, each step a function of the batch's values (one ``batch_run.BatchRun``, built once its reads
are pinned):

1. parse (cached) and one aggregation for the batch's counts and event-time range (``batch_run.batch_stats``);
2. pin what it reads: the rules-table version, the registry, bronze (what a backfill may read); state maintenance
   if the rules need it (``state_rebuild``); then the state and cooldown-memory versions to evaluate against;
3. in parallel: the quarantine and bronze appends, the append of the batch's tiles to the state, and the
   evaluation against the pinned state (held on the executors: ``table_cache``) plus the batch itself, followed
   by the alerts append (+ Kafka) and the cooldown-memory append (``batch_evaluation``); every append goes through
   ``batch_writes.BatchWrites``: skipped if an earlier attempt committed it, else tagged and run in the background;
4. compaction of the state and cooldown memory when retention is due (``retention.compact_state``); the batch-log
   row last.

Every write carries a commit tag naming the batch and its pins (``delta_tables.idempotent``). A replayed batch
(a crash before the checkpoint commit) finds the tags of what its first attempt committed (``recovery``),
reuses those pins, so it computes exactly the same writes, and skips the ones already there: exactly-once
effects. Nothing the batch reads is something it writes.

Example::

    handler = BatchHandler(settings, app_id="engine-test")
    handler(raw_batch_frame, 0)          # what foreachBatch calls
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from delta_tables.alert_cooldown import fold_memory
from delta_tables.batch_log import log_batch, previous_batch
from delta_tables.bucket_state import TILE_COLUMNS, fold_tiles
from delta_tables.idempotent import append_tagged, files_for
from delta_tables.log_checkpoints import LogCheckpoints
from delta_tables.table_snapshot import table_version
from pipelines.base.settings import Settings
from pipelines.base.spark_session import session_confs
from pipelines.engine.batch_evaluation import Evaluated, batch_latency, evaluate_batch, take_over_appends
from pipelines.engine.batch_run import BatchRun, StepTimer, batch_constants, batch_stats, utcnow, with_batch_constants
from pipelines.engine.batch_writes import BatchWrites
from pipelines.engine.buckets import co_partitioned
from pipelines.engine.faults import crash_point
from pipelines.engine.latency import format_latency
from pipelines.engine.lookback import COORDINATES, with_coordinates
from pipelines.engine.parse_transactions import bronze_rows, flag_duplicates, parse_raw, quarantine_rows
from pipelines.engine.recovery import BATCH_LOG_WRITE, Attempt, EnginePaths, Pins
from pipelines.engine.retention import retention_steps, run_retention, states_held
from pipelines.engine.state_rebuild import maintain_states, needs_maintenance, returning_rule_ids
from pipelines.engine.states import RulesCache, StateSpec, plan_states, states_of
from pipelines.engine.table_cache import TableCache, kept, release
from pipelines.engine.units import (
    ANSI_CONF,
    LONG_UNITS,
    UNIT_TYPES,
    WIDE_UNITS,
    is_overflow,
    tiles_from_table,
)

log = logging.getLogger(__name__)
AUTO_COMPACT_CONF = "spark.databricks.delta.autoCompact.enabled"
SHUFFLE_PARTITIONS_CONF = "spark.sql.shuffle.partitions"
ADAPTIVE_CONF = "spark.sql.adaptive.enabled"
CO_PARTITION_CONF = "spark.sql.requireAllClusterKeysForCoPartition"
CLASS_NAME_ID_CONF = "spark.sql.codegen.useIdInClassName"
STATE_ROWS = (*TILE_COLUMNS, "lastBatchId", *COORDINATES)  # coordinates: computed once per tile, not per batch
MEMORY_ROWS = ("ruleId", "keyValue", "lastAlertTimeMs", "lastBatchId")


class BatchHandler:
    """Processes micro-batches of RAW_SCHEMA frames for one streaming query (``app_id``)."""

    def __init__(
        self,
        settings: Settings,
        *,
        app_id: str | Callable[[], str],
        alerts_to_kafka: bool | None = None,
        report: Callable[[str], None] | None = None,
    ) -> None:
        self.settings = settings
        self.paths = EnginePaths.of(settings)
        self._app_id = app_id
        self.alerts_to_kafka = settings.engine.alerts_to_kafka if alerts_to_kafka is None else alerts_to_kafka
        self.report = report or (lambda line: print(line, flush=True))
        self.last_counts: dict[str, int] = {}
        self.last_steps: dict[str, float] = {}  # step timings (ms) of the last batch
        self.last_latency: dict[str, float] = {}  # latency metrics of the last batch (pipelines.engine.latency)
        self._rules = RulesCache(self.paths.rules, self.paths.rule_states, settings.transaction_schema)
        bucket_ms = settings.engine.bucket_seconds * 1000
        self._layout: int | None = None  # hash partitions of the hot path's frames (``co_partitioned``)
        self._units = UNIT_TYPES[settings.engine.units]  # the hot path's arithmetic (``pipelines.engine.units``)
        self._distinct_cap = settings.engine.distinct_cap
        # Whether a COUNT_DISTINCT state is in force (set per batch): the cache folds distinct values only then.
        self._distinct = False
        self._state = TableCache(
            self.paths.bucket_state,
            fold=lambda rows: with_coordinates(
                fold_tiles(rows, distinct_cap=self._distinct_cap, distinct=self._distinct), bucket_ms=bucket_ms
            ),
            columns=STATE_ROWS,
            layout=lambda rows: co_partitioned(tiles_from_table(rows, self._units), self._partitions()),
            held_at=lambda spark, version: states_held(self.paths.bucket_state, version),
        )
        self._memory = TableCache(self.paths.alert_cooldown, fold=fold_memory, columns=MEMORY_ROWS)
        self._previous: dict[str, Any] | None = None  # batch-log row of the last batch this handler completed
        # The log checkpoints of the tables every batch commits to: written after a batch (by delta-rs where it
        # applies), not in its commits.
        self.checkpoints = LogCheckpoints(settings.engine.log_checkpoint_every)

    @property
    def app_id(self) -> str:
        if callable(self._app_id):
            self._app_id = self._app_id()
        return self._app_id

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        self.process(batch, batch_id)

    def release(self) -> None:
        """Free what this handler keeps between batches (the bucket state and cooldown memory it caches on the
        executors), once no batch of it runs any more: its query has stopped. A later batch would reload both."""
        self._state.invalidate()
        self._memory.invalidate()

    def process(self, batch: DataFrame, batch_id: int) -> dict[str, int]:
        """Run one micro-batch; return its counts (rows, valid, late, quarantined, alerts, ...).

        An aggregate beyond the 64-bit units (±9.2e12 at 6 decimals) fails the batch with an ANSI overflow; it
        then runs again, as a replay of itself, in 38-digit decimal units, and so does every later batch of
        this handler (``pipelines.engine.units``).
        """
        try:
            return self._attempt(batch, batch_id)
        except Exception as error:
            if self._units != LONG_UNITS or not is_overflow(error):
                raise
            self.report(
                f"batch {batch_id}: an aggregate left the 64-bit range (±9.2e12 with 6 decimals);"
                " running it again, and every later batch, in 38-digit decimal arithmetic"
            )
            self._units = WIDE_UNITS
            return self._attempt(batch, batch_id)

    def _attempt(self, batch: DataFrame, batch_id: int) -> dict[str, int]:
        try:
            with session_confs(batch.sparkSession, self._batch_confs(batch.sparkSession)):
                return self._process(batch, batch_id)
        except BaseException:
            # Whatever failed, the next call must recover from the tables, and reload what it reads.
            self._previous = None
            self._state.invalidate()
            self._memory.invalidate()
            raise

    def _process(self, batch: DataFrame, batch_id: int) -> dict[str, int]:
        spark, app, steps = batch.sparkSession, self.app_id, StepTimer()
        continuing = self._previous is not None and self._previous["batchId"] == batch_id - 1
        # A handler that completed batch_id - 1 knows nobody has started batch_id; anyone else asks the tables.
        attempt = Attempt.first(app, batch_id) if continuing else Attempt.recover(spark, self.paths, app, batch_id)
        if attempt.complete:
            self.report(f"batch {batch_id}: already committed; replay skipped")
            return {}
        previous = self._previous if continuing else previous_batch(spark, self.paths.batch_log, app, batch_id)
        m_before = attempt.pins.m_before if attempt.pins else (previous or {}).get("maxEventTimeMs")
        started = utcnow()
        lateness_ms = self.settings.engine.allowed_lateness_seconds * 1000
        late_before_ms = None if m_before is None else m_before - lateness_ms
        constants = batch_constants(spark, batch_id=batch_id, started=started, late_before_ms=late_before_ms)
        # Cache the parse without this batch's constants (lateness bound, start time): Spark compiles the code of
        # a plan once and reuses it while the plan's text is the same, and the parse is the biggest piece.
        base = kept(flag_duplicates(parse_raw(batch, self.settings.transaction_schema)))
        cached: list[DataFrame] = [base]
        parsed = with_batch_constants(base, constants)
        try:
            stats = batch_stats(parsed)
            if stats.rows == 0 and not attempt.committed:
                return {}
            pins, states = self._pin(spark, attempt, previous, m_before)
            crash_point("pinned", batch_id)  # not a write: a hook for tests (reads pinned, nothing evaluated)
            steps.done("plan")
            run = BatchRun(
                spark=spark,
                settings=self.settings,
                paths=self.paths,
                attempt=attempt,
                pins=pins,
                states=tuple(states),
                stats=stats,
                parsed=parsed,
                valid=parsed.where(F.col("reason").isNull()),
                constants=constants,
                units=self._units,
                partitions=self._partitions(),
                started=started,
                steps=steps,
                cached=cached,
            )
            counts = self._write_batch(run)
            counts.update(rules=sum(len(s.rules) for s in states), states=len(states))
            counts["activeRules"] = sum(len(s.active_rules) for s in states)
            counts["shadowRules"] = sum(len(s.shadow_rules) for s in states)
            row = run.log_row(counts, metrics={**steps.ms, **self.last_latency})
            log_batch(spark, self.paths.batch_log, row, tag=run.tag(BATCH_LOG_WRITE))
            crash_point("logged", batch_id)
            self._previous = row
            self.last_counts, self.last_steps = counts, steps.ms
            self.checkpoints.after_commits(spark, self.paths.every_batch())
            self.report(
                f"batch {batch_id}: {counts['rows']} rows ({counts['late']} late, {counts['quarantined']} quarantined),"
                f" {counts['alerts']} alerts"
                + (f" (+{counts['shadowAlerts']} shadow)" if counts["shadowAlerts"] else "")
                + f", {steps.total_seconds:.1f} s, rules v{pins.rules}"
                f" ({counts['activeRules']} active"
                + (f", {counts['shadowRules']} shadow" if counts["shadowRules"] else "")
                + f" / {counts['rules']} live, {counts['states']} states)"
                + (f", {format_latency(self.last_latency)}" if self.last_latency else "")
            )
            return counts
        finally:
            for frame in cached:
                release(frame)

    def _pin(
        self, spark: SparkSession, attempt: Attempt, previous: dict[str, Any] | None, m_before: int | None
    ) -> tuple[Pins, list[StateSpec]]:
        """The versions this batch reads (an earlier attempt's, or the newest), after any state maintenance."""
        paths = self.paths
        pins = attempt.pins or Pins(
            rules=table_version(spark, paths.rules),
            registry=self._rules.registry_version(spark),
            bronze=table_version(spark, paths.bronze),
            m_before=m_before,
        )
        states = states_of(self._rules.rules(spark, pins.rules))
        # Before any state maintenance: the caches fold what maintenance writes (a backfill) with it, and a fold
        # without distinct values would drop a new COUNT_DISTINCT state's backfilled ones.
        self._distinct = any(s.distinct for s in states)
        if pins.ready:
            return pins, states
        previous_rules = previous["rulesVersion"] if previous else None
        previous_live = (
            None
            if previous_rules is None
            else {r.rule.rule_id for r in self._rules.rules(spark, previous_rules)}
            if previous_rules != pins.rules
            else {r.rule.rule_id for s in states for r in s.rules}
        )
        returning = returning_rule_ids(previous_live, states)
        plan = plan_states(states, self._rules.registry(spark, pins.registry))
        if needs_maintenance(plan, returning):
            caches = (self._state, self._memory)
            maintain_states(
                spark, self.settings, self._rules, attempt, pins, states, returning=returning, caches=caches
            )
            crash_point("maintenance", attempt.batch_id)
        ready = pins.evaluating(
            state=table_version(spark, paths.bucket_state), cooldown=table_version(spark, paths.alert_cooldown)
        )
        return ready, states

    def _batch_confs(self, spark: SparkSession) -> dict[str, str]:
        """The session confs a batch runs with, set for the attempt and put back after it (``session_confs``): a
        handler called on a shared session (a notebook's, the tests') leaves it as it found it. In a streaming
        query the batch's session is the query's own clone anyway."""
        # One layout for every keyed frame of the batch and the cached state: hash partitions by (state, key), so
        # the evaluation's joins and aggregations need no shuffle but the probes' (``buckets.co_partitioned``).
        self._layout = self._layout or self.settings.engine.state_partitions or spark.sparkContext.defaultParallelism
        return {
            # Delta's auto compaction runs synchronously after a commit: off (a batch running it after each of its
            # appends took several times as long); retention bin-packs the tables' small files, one per step.
            AUTO_COMPACT_CONF: "false",
            SHUFFLE_PARTITIONS_CONF: str(self._layout),
            CO_PARTITION_CONF: "false",
            # Overflow must fail, not wrap or turn null: the units arithmetic relies on it (``process``).
            ANSI_CONF: "true",
            # Adaptive execution plans one stage at a time, after the one before it finished: for a micro-batch's
            # small, well-sized shuffles that doubles the stages (44 -> 24 per batch) for nothing to adapt.
            ADAPTIVE_CONF: "false",
            # Generated classes named after their codegen stage id would change name, hence source, whenever a stage
            # is added before them (the cached state's union grows a child per batch): every later stage compiled
            # again (Janino, then the JIT from scratch), 14-31 classes a batch. Without the id the source is the
            # same and Spark's code cache reuses the class: 0-12 a batch, 0 once warm.
            CLASS_NAME_ID_CONF: "false",
        }

    def _partitions(self) -> int:
        if self._layout is None:
            raise RuntimeError("the layout is chosen at the start of a batch")
        return self._layout

    def _write_batch(self, run: BatchRun) -> dict[str, int]:
        """The batch's writes: quarantine and bronze appends beside the evaluation (tiles, alerts, cooldown memory),
        the caches moved to what was appended, then retention when it is due."""
        stats, paths = run.stats, run.paths
        evaluated: Evaluated | None = None
        # Appends carry their own tags (writer options), so they run beside the evaluation.
        with BatchWrites(run.attempt, run.pins, after=crash_point) as writes:
            if stats.quarantined:
                rows = quarantine_rows(run.parsed, batch_id=F.col("batchId"), now=F.col("batchStartedAt"))
                writes.append("quarantine", lambda tag: append_tagged(rows, paths.quarantine, tag, files=1))
            if stats.valid:
                bronze = bronze_rows(
                    run.valid, run.settings.transaction_schema, batch_id=F.col("batchId"), late=F.col("isLate")
                )
                files = files_for(stats.valid)
                writes.append("bronze", lambda tag: append_tagged(bronze, paths.bronze, tag, files=files))
            if run.states and stats.valid:
                evaluated = evaluate_batch(
                    run, writes, state_cache=self._state, memory_cache=self._memory, to_kafka=self.alerts_to_kafka
                )
        run.steps.done("evaluate")
        if evaluated is not None:
            take_over_appends(run, evaluated, state_cache=self._state, memory_cache=self._memory)
        self.last_latency = batch_latency(stats, evaluated)
        high_water_ms = run.high_water_ms
        steps = retention_steps(run.batch_id, run.settings.engine.retention_every_batches, run.states)
        if high_water_ms is not None and steps:
            run_retention(run, steps, state_cache=self._state, memory_cache=self._memory, high_water_ms=high_water_ms)
            crash_point("retention", run.batch_id)
            run.steps.done("retention")
        return {
            "rows": stats.rows,
            "valid": stats.valid,
            "late": stats.late,
            "quarantined": stats.quarantined,
            "alerts": evaluated.alerts if evaluated else 0,  # live alerts only
            "shadowAlerts": evaluated.shadow_alerts if evaluated else 0,
        }
