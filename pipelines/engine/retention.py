"""How far back a state must keep (and a backfill must read) buckets: the horizon.

Every transaction evaluated from now on has ``t >= M - L`` (``M`` the max event time seen so far, ``L`` the
allowed lateness): anything older is late and not evaluated. Its lookback starts at bucket
``index(t) - reach >= index(M - L) - reach``, so a state needs no tile starting before

    horizon = (floor((M - L) / bucket) - reach(widest live window of the state)) * bucket      [epoch ms]

Retention deletes a state's tiles older than its horizon every ``retention_every_batches`` batches; a new or
rebuilt state is backfilled from bronze from its horizon on. Both are per state (the widest window of *its*
ACTIVE and PAUSED rules), which is never less than what the contract needs and often far less than the global
widest window. The cooldown memory needs no row older than ``M - L - 30 days`` (the longest cooldown).

``run_retention`` is that retention, run by the handler in small steps spread over each cycle of
``retention_every_batches`` batches (``retention_steps``): each state's tiles, and the cooldown memory, rewritten
folded (one row per tile, per rule and key) without what is beyond its horizon, in one tagged commit, their
executor caches then holding exactly what was written; and the small files of the append-only tables bin-packed,
one table per step, once it holds ``compact_min_files`` files (Delta's auto compaction after every commit of one
batch made that batch several times longer).

Example::

    horizon_ms(high_water_ms=1_700_000_000_000, lateness_ms=300_000, bucket_ms=60_000, reach=60)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F

from delta_tables.alert_cooldown import MemoryCounts, compact_memory, fold_memory, memory_counts_at
from delta_tables.arrow_reads import PartitionFiles, partition_files_at, table_files_at
from delta_tables.arrow_writes import DRIVER_OVERWRITE_ROWS
from delta_tables.bucket_state import TILE_KEY, compact_tiles, fold_tiles, rows_per_state, trim_condition
from delta_tables.idempotent import CommitTag
from delta_tables.table_maintenance import compact_small_files
from delta_tables.table_snapshot import table_row_counts, table_version
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
    """Whether a whole retention cycle ends with this batch: every ``every`` batches (ids ``every-1``, ...)."""
    return (batch_id + 1) % every == 0


FILE_COMPACTED = ("bronze", "alerts", "quarantine", "batch_log")
"""The engine's append-only tables whose small files a retention cycle bin-packs (``EnginePaths`` attributes); the
state and the cooldown memory are rewritten whole by their own steps."""


@dataclass(frozen=True)
class RetentionStep:
    """One small piece of a retention cycle: a state's tiles, the cooldown memory, or one table's small files."""

    kind: Literal["state", "cooldown", "files"]
    target: str = ""  # the state id, or the table (an ``EnginePaths`` attribute)


def retention_steps(batch_id: int, every: int, states: Sequence[StateSpec]) -> list[RetentionStep]:
    """The steps of the cycle that fall on this batch.

    A cycle of ``every`` batches holds one step per state, one for the cooldown memory and one per table of
    ``FILE_COMPACTED``; step ``j`` of ``n`` falls on the batches whose ``(batch_id + 1) % every`` is
    ``j * every // n``, so the steps are spread over the cycle instead of all falling on one batch (which made one
    batch in ``every`` several times as long as the others: docs/engine.md, retention). With ``every`` 1 every
    step runs on every batch; step 0 runs where ``retention_due`` says. Rules that change mid-cycle shift the
    steps: a state may then wait a cycle longer for its trim, which is never wrong (trimming only saves space).
    """
    steps = [RetentionStep("state", s.state_id) for s in sorted(states, key=lambda s: s.state_id)]
    steps += [RetentionStep("cooldown"), *[RetentionStep("files", table) for table in FILE_COMPACTED]]
    position = (batch_id + 1) % every
    return [step for j, step in enumerate(steps) if (j * every // len(steps)) % every == position]


def run_retention(
    run: BatchRun,
    steps: Sequence[RetentionStep],
    *,
    state_cache: TableCache,
    memory_cache: TableCache,
    high_water_ms: int,
) -> None:
    """Retention's steps of this batch: the states' tiles and the cooldown memory rewritten folded without what no
    lookback can reach (each skipped when an earlier attempt of the batch committed it; its cache then holds what
    was written), small files of the append-only tables bin-packed (Delta's OPTIMIZE; idempotent) once a table has
    ``compact_min_files`` of them."""
    engine = run.settings.engine
    lateness_ms = engine.allowed_lateness_seconds * 1000
    state_ids = {step.target for step in steps if step.kind == "state"}
    compacted = [s for s in run.states if s.state_id in state_ids]
    if compacted and not run.attempt.done("state-compact"):
        horizons = state_horizons(
            compacted, high_water_ms=high_water_ms, lateness_ms=lateness_ms, bucket_seconds=engine.bucket_seconds
        )
        compact_state_tiles(run, state_cache, horizons)
    if any(step.kind == "cooldown" for step in steps) and not run.attempt.done("cooldown-compact"):
        horizon = cooldown_horizon_ms(high_water_ms=high_water_ms, lateness_ms=lateness_ms)
        compact_cooldown_memory(run, memory_cache, horizon)
    for step in steps:
        if step.kind == "files":
            compact_small_files(run.spark, getattr(run.paths, step.target), min_files=engine.compact_min_files)


FOLD_GAIN = 2
"""A state's tiles (or the cooldown memory) with nothing beyond its horizon are rewritten only once folding them at
least halves their rows in the table (``FOLD_GAIN`` rows a tile); until then the step commits nothing.

Each batch appends a row per key and tile it touched, so a state's rows grow with the batches between rewrites;
that is all a rewrite with nothing to trim saves, and it costs a Delta overwrite of the state's partitions (~1 s
on a small table: Delta's DML reconstructs the snapshot's file list and commits). Decided on the table's content
at the version read (the tiles of the cache against the rows the table holds, ``rows_per_state``), so a replay
decides the same."""


def compact_state_tiles(run: BatchRun, cache: TableCache, horizons: dict[str, int]) -> None:
    """These states' tiles (``horizons``' keys) folded (one row per tile), those before each state's horizon
    dropped, written over their partitions in one commit; the other states' tiles are not read or written. A
    state with nothing beyond its horizon whose rows folding would not halve is left as it is (``FOLD_GAIN``): told
    from the log's file statistics where they suffice (``quiet_states``), else from one aggregation of the cached
    rows; only the states due are folded."""
    spark, path = run.spark, run.paths.bucket_state
    read = table_version(spark, path)
    files = state_files(path, read)
    quiet = quiet_states(files, horizons)
    horizons = {state: horizon for state, horizon in horizons.items() if state not in quiet}
    if not horizons:
        return
    # A state whose oldest tile (the log's statistics) starts before its horizon is due: a tile to drop.
    due = sorted(s for s in horizons if files is not None and s in files and files[s].lowest < horizons[s])
    unknown = sorted(s for s in horizons if s not in due)
    cache.ensure(spark, read)
    tiles: dict[str, tuple[int, int]] = {}  # per state looked at: its tiles, and how many start before its horizon
    if unknown:
        # The others from one aggregation of their cached rows (no fold, nothing stored): their tiles, and how many
        # of them start before the horizon.
        keep = trim_condition({s: horizons[s] for s in unknown})
        held = cache.frame().where(F.col("stateId").isin(*unknown))
        per_tile = held.groupBy(*TILE_KEY).agg(F.max(F.when(keep, 0).otherwise(1)).alias("beyond"))
        tiles = {
            row["stateId"]: (int(row["tiles"]), int(row["beyond"]))
            for row in per_tile.groupBy("stateId")
            .agg(F.count(F.lit(1)).alias("tiles"), F.sum("beyond").alias("beyond"))
            .collect()
        }
        untrimmed = [s for s, (_, beyond) in tiles.items() if not beyond]  # the others are due: no count needed
        rows = rows_per_state(spark, path, read, untrimmed) if untrimmed else {}
        due = sorted([*due, *(s for s, (n, beyond) in tiles.items() if beyond > 0 or rows.get(s, 0) >= FOLD_GAIN * n)])
    if not due:
        return
    keep = trim_condition({s: horizons[s] for s in due})
    engine = run.settings.engine
    rewritten = F.col("stateId").isin(*due)
    folded = with_coordinates(
        fold_tiles(
            cache.frame().where(rewritten),
            distinct_cap=engine.distinct_cap,
            distinct=any(s.distinct for s in run.states),
        ),
        bucket_ms=engine.bucket_seconds * 1000,
    )
    written = materialize(folded.withColumn("updatedAt", F.current_timestamp()).where(keep))
    # The folded rows are at most the rows the table holds for those states (the log's statistics) or their tiles;
    # a state known by neither leaves the bound unknown (Spark writes).
    known = {**{s: n for s, (n, _) in tiles.items()}, **{s: f.rows for s, f in (files or {}).items()}}
    bound = sum(known[s] for s in due) if all(s in known for s in due) else None
    tag = run.tag("state-compact")
    compact_tiles(tiles_to_table(written), path, tag=tag, state_ids=due, read_version=read, rows_at_most=bound)
    cache.replaced(spark, written, rewritten=rewritten, read_version=read, states=due)


def state_files(path: str, version: int) -> dict[str, PartitionFiles] | None:
    """Per state, its rows, its largest file's rows and its oldest tile start in the state table at ``version``,
    from the file statistics in the Delta log (``arrow_reads.partition_files_at``: no Spark job); None where
    delta-rs does not read them."""
    return partition_files_at(path, version=version, partition="stateId", column="bucketStart")


def states_held(path: str, version: int) -> frozenset[str] | None:
    """The states with rows in the state table at ``version`` (its partitions, from the log: ``state_files``); None
    where not known. The state cache's frame loaded at that version holds these (``TableCache``'s ``held_at``)."""
    files = state_files(path, version)
    return None if files is None else frozenset(files)


def quiet_states(files: Mapping[str, PartitionFiles] | None, horizons: Mapping[str, int]) -> set[str]:
    """The states (``horizons``' keys) whose step surely rewrites nothing, told from the state table's file
    statistics (``state_files``): none of its tiles starts before its horizon
    (the smallest ``bucketStart`` of its files), and it holds fewer than ``FOLD_GAIN`` times the rows of its
    largest file. A file holds one row per tile (it is part of one write: a batch's tiles, a backfill's, or a
    rewrite's folded ones), so the largest file's rows are at most the state's tiles, and folding could not halve
    its rows.

    A fresh state written in one file (a small batch's state: one file a state) is quiet, and so is one whose latest
    rewrite still outweighs the appends since: a fresh engine's first retention steps cost no Spark job (1-4 s each
    in a new JVM). The decision is the fold's own where it says quiet, and a function of the version read (a
    replay decides the same). An OPTIMIZE (``fraudlake maintain``) may put several rows of a tile in one file:
    the bound is then loose and a due fold may wait for the state's next trim, which only keeps rows a while
    longer. Empty where the statistics are not known (delta-rs does not apply): every state is then looked at."""
    if files is None:
        return set()
    return {
        state
        for state, horizon in horizons.items()
        if (held := files.get(state)) is None or (held.lowest >= horizon and held.rows < FOLD_GAIN * held.largest_file)
    }


def compact_cooldown_memory(run: BatchRun, cache: TableCache, horizon_ms: int) -> None:
    """The cooldown memory folded (one row per rule and key), without rows older than ``horizon_ms``. Nothing is read
    into the engine's cache when the step would write nothing (``fold_saves``), as told from the log's file
    statistics (``quiet_memory``), else from the memory's key columns read on the driver
    (``alert_cooldown.memory_counts_at``, a memory within ``DRIVER_OVERWRITE_ROWS`` rows): a cache load and an
    aggregation otherwise (2.3-4.3 s every ``retention_every_batches`` batches at 2,000 rows, with the sample rules,
    none of which has a cooldown, so nothing else loads the memory)."""
    path = run.paths.alert_cooldown
    read = table_version(run.spark, path)
    files = table_files_at(path, version=read, column="lastAlertTimeMs")
    if quiet_memory(files, horizon_ms):
        return
    counts = None
    if files is not None and files.rows <= DRIVER_OVERWRITE_ROWS:
        counts = memory_counts_at(path, version=read, horizon_ms=horizon_ms)
        if counts is not None and not fold_saves(counts):
            return
    recent = F.col("lastAlertTimeMs") >= F.lit(horizon_ms)
    rewrite_memory(run.spark, path, cache, keep=recent, tag=run.tag("cooldown-compact"), read=read, counts=counts)


def fold_saves(counts: MemoryCounts) -> bool:
    """Whether rewriting the cooldown memory folded saves anything: a pair to drop, or rows that folding at least
    halves (``FOLD_GAIN``)."""
    return counts.dropped > 0 or (counts.pairs > 0 and counts.rows >= FOLD_GAIN * counts.pairs)


def quiet_memory(files: PartitionFiles | None, horizon_ms: int) -> bool:
    """Whether the cooldown memory's retention step surely writes nothing, told from its file statistics at the
    version read (``arrow_reads.table_files_at``): the table is empty, or no row is older than ``horizon_ms`` and it
    holds fewer than ``FOLD_GAIN`` times the rows of its largest file. A file holds one row per (rule, key) (a
    batch's append holds a pair's latest alert, a rewrite the folded pairs), so the largest file's rows are at most
    the pairs, and folding could not halve the rows: ``rewrite_memory`` would decide the same after loading the
    whole memory and aggregating it. False where the statistics are not known (an object store, deleted rows).
    An OPTIMIZE (``fraudlake maintain``) may put rows of a pair in one file: a due fold then waits for the memory's
    next trim, as for a state (``quiet_states``)."""
    if files is None:
        return False
    return files.rows == 0 or (files.lowest >= horizon_ms and files.rows < FOLD_GAIN * files.largest_file)


def rewrite_memory(
    spark: SparkSession,
    path: str,
    cache: TableCache,
    *,
    keep: Column,
    tag: CommitTag,
    read: int | None = None,
    counts: MemoryCounts | None = None,
) -> None:
    """The cooldown memory rewritten from the engine's cache (loaded at version ``read``, by default the table's
    newest, unless it holds it): folded, one row per rule and key, only the rows matching ``keep``, over the table in
    one commit; the cache then holds what was written. Retention drops old rows with it, state maintenance a returning
    rule's (a DELETE would scan the table's files, write deletion vectors and reconstruct the snapshot: about twice
    the cost). Nothing is written when no row is dropped and folding would not halve the table's rows (``FOLD_GAIN``),
    as decided from one aggregation of the fold, unless the caller already counted it at ``read`` against ``keep``
    (``counts``: retention's cooldown step, from the table's files)."""
    read = table_version(spark, path) if read is None else read
    cache.ensure(spark, read)
    folded = fold_memory(cache.frame()).withColumn("updatedAt", F.current_timestamp())
    if counts is None:
        # Whether to write, from one aggregation (nothing stored); the fold is computed and kept only to be written.
        agg = folded.agg(F.count(F.lit(1)).alias("n"), F.sum(F.when(keep, 0).otherwise(1)).alias("dropped")).first()
        pairs, dropped = (int(agg["n"]), int(agg["dropped"] or 0)) if agg else (0, 0)
        rows = sum(table_row_counts(spark, path, read).values()) if pairs and not dropped else 0
        counts = MemoryCounts(rows, pairs, dropped)
    if not fold_saves(counts):
        return
    kept = materialize(folded.where(keep) if counts.dropped else folded)
    compact_memory(kept, path, tag=tag, read_version=read, rows_at_most=counts.pairs)
    cache.reset(spark, kept, written_version=read + 1)
