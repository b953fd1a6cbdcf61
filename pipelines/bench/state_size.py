"""State size at steady state: the engine's bucket tiles vs the per-event baseline's events, for a full window.

A streaming run long enough to fill a 1-day window at 10 transactions per key per minute would take hours here,
so both states are *built* from the same input in one Spark job each, exactly as the two designs hold them:

* engine: ``tiles(tag_rows(input))`` — what the bucket state holds, folded, once every batch has appended its
  tiles (the baselines scenario checks this equality on a real engine run: ``engine_state_mismatches``);
* per-event, lean: the tagged rows themselves (``per_event.EVENTS_SCHEMA``: state, key, time, id, value), every
  event of the window — what our per-event baseline keeps;
* per-event, as the seeds keep it: every whole transaction of the window under its key (the Flink demo's
  ``MapState<Long, Set<Transaction>>``), one copy per grouping key (here one).

Input: ``keys`` payers, each with ``per_minute`` transactions in every minute of ``window_minutes``, one state (4
rules: SUM, COUNT, AVG, MAX per payer). The transactions look like the generator's (``pipelines.generator``): a random
UUID for an id and a time at a random millisecond of its minute. Sequential ids at the minute's start (this module's
input until 2026-12-02) compress to almost nothing, which no payment system's ids do: the per-event state came out
4.4x the tiles in bytes then, against 20x and more with these; the tiles' bytes are the same either way. Each state
is written the same way — one Delta table, one file sorted by key and time — and measured in rows and bytes.

Example::

    result = steady_state_sizes(spark, keys=100, per_minute=10, window_minutes=60, folder=Path("/tmp/s"))
    result.bytes_ratio          # per-event bytes / engine bytes
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, StringType, StructField, StructType

from delta_tables.bucket_state import TILE_COLUMNS, fold_tiles
from delta_tables.local_rows import local_frame
from pipelines.bench.engine_runs import table_size
from pipelines.bench.per_event import EVENTS_SCHEMA
from pipelines.bench.workload import BENEFICIARIES, BENEFICIARY_BASE, PAYER_BASE, PAYMENT_TYPES, START_MS, rule_set
from pipelines.engine.buckets import bucket_index, state_top_level, tag_rows, tiles
from pipelines.engine.states import LiveRule, states_of
from rules_cdc.rule_model import Rule

BUCKET_MS = 60_000
UUID_PARTS = ((1, 8), (9, 4), (13, 4), (17, 4), (21, 12))
"""(start, length) of a UUID's five groups in 32 hex digits (``substring`` counts from 1)."""


@dataclass(frozen=True)
class StateSize:
    """Rows and bytes of both states for one input."""

    keys: int
    per_minute: int
    window_minutes: int
    transactions: int
    engine_rows: int
    engine_bytes: int
    per_event_rows: int
    per_event_bytes: int
    whole_rows: int = 0
    whole_bytes: int = 0

    @property
    def rows_ratio(self) -> float:
        return self.per_event_rows / max(1, self.engine_rows)

    @property
    def bytes_ratio(self) -> float:
        return self.per_event_bytes / max(1, self.engine_bytes)

    @property
    def whole_bytes_ratio(self) -> float:
        return self.whole_bytes / max(1, self.engine_bytes)


def window_input(spark: SparkSession, *, keys: int, per_minute: int, window_minutes: int) -> DataFrame:
    """``keys * per_minute * window_minutes`` transactions: every key ``per_minute`` times in every minute, each at a
    random millisecond of it, with a random UUID-shaped id (an md5 of its number) and a log-normal amount like the
    workload's (all seeded)."""
    count = keys * per_minute * window_minutes
    cents = F.floor(F.exp(F.lit(8.5) + F.randn(seed=7))).cast("long")
    minute = F.lit(START_MS) + F.floor(F.col("id") / (keys * per_minute)) * BUCKET_MS
    event_ms = (minute + F.floor(F.rand(seed=13) * BUCKET_MS)).cast("long")
    digest = F.md5(F.concat(F.lit("fraudlake-state-size-"), F.col("id").cast("string")))
    uuid = F.concat_ws("-", *[F.substring(digest, start, length) for start, length in UUID_PARTS])
    return spark.range(count).select(
        uuid.alias("transactionId"),
        event_ms.alias("eventTimeMs"),
        F.timestamp_millis(event_ms).alias("eventTime"),
        (F.lit(PAYER_BASE) + F.col("id") % keys).alias("payerId"),
        (F.lit(BENEFICIARY_BASE) + F.floor(F.rand(seed=11) * BENEFICIARIES)).cast("long").alias("beneficiaryId"),
        (cents / 100).cast("decimal(18,2)").alias("paymentAmount"),
        F.element_at(
            F.array(*[F.lit(t) for t in PAYMENT_TYPES]), (F.col("id") % len(PAYMENT_TYPES) + 1).cast("int")
        ).alias("paymentType"),
        F.lit("WEB").alias("channel"),
        F.lit("NL").alias("country"),
        F.lit("EUR").alias("currency"),
    )


def _write_sorted(frame: DataFrame, path: str, order: list[str]) -> tuple[int, int]:
    frame.repartition(1).sortWithinPartitions(*order).write.format("delta").mode("overwrite").save(path)
    return table_size(frame.sparkSession, path)


def steady_state_sizes(
    spark: SparkSession, *, keys: int, per_minute: int, window_minutes: int, folder: Path
) -> StateSize:
    """Both states for a full window of input (see the module docstring), written under ``folder``."""
    rules = rule_set(4, window_minutes=window_minutes, states=1)
    states = states_of([LiveRule(r, None) for r in rules])
    transactions = window_input(spark, keys=keys, per_minute=per_minute, window_minutes=window_minutes)
    whole = [c for c in transactions.columns if c != "eventTimeMs"]
    tagged = tag_rows(transactions, states, bucket_ms=BUCKET_MS, keep=whole).persist()
    try:
        engine = tiles(tagged, bucket_ms=BUCKET_MS).withColumns(
            {"lastBatchId": F.lit(0).cast("long"), "updatedAt": F.current_timestamp()}
        )
        events = tagged.select(*[f.name for f in EVENTS_SCHEMA.fields if f.name != "batchId"]).withColumn(
            "batchId", F.lit(0).cast("long")
        )
        engine_rows, engine_bytes = _write_sorted(
            engine, str(folder / "bucket_state"), ["stateId", "keyValue", "level", "bucketStart"]
        )
        event_rows, event_bytes = _write_sorted(
            events, str(folder / "events"), ["stateId", "keyValue", "eventTimeMs", "transactionId"]
        )
        kept = tagged.select("keyValue", *whole).dropDuplicates(["keyValue", "transactionId"])
        whole_rows, whole_bytes = _write_sorted(kept, str(folder / "transactions"), ["keyValue", "eventTime"])
    finally:
        tagged.unpersist()
        shutil.rmtree(folder, ignore_errors=True)
    return StateSize(
        keys=keys,
        per_minute=per_minute,
        window_minutes=window_minutes,
        transactions=keys * per_minute * window_minutes,
        engine_rows=engine_rows,
        engine_bytes=engine_bytes,
        per_event_rows=event_rows,
        per_event_bytes=event_bytes,
        whole_rows=whole_rows,
        whole_bytes=whole_bytes,
    )


def engine_state_mismatches(
    spark: SparkSession, bucket_state_path: str, events_path: str, rules: Sequence[Rule]
) -> int:
    """Rows that differ between the engine's bucket state and ``tiles`` of the per-event baseline's events (the
    same input, each state's levels those of ``rules``: ``buckets.top_level``): 0 when the state the engine built
    batch by batch is the one ``steady_state_sizes`` builds."""
    levels = [(s.state_id, state_top_level(s, BUCKET_MS)) for s in states_of([LiveRule(r, None) for r in rules])]
    top = local_frame(
        spark, levels, StructType([StructField("stateId", StringType()), StructField("topLevel", IntegerType())])
    )
    events = spark.read.format("delta").load(events_path).join(F.broadcast(top), "stateId")
    expected = tiles(events.withColumn("bucket", bucket_index(F.col("eventTimeMs"), BUCKET_MS)), bucket_ms=BUCKET_MS)
    actual = fold_tiles(spark.read.format("delta").load(bucket_state_path)).select(*TILE_COLUMNS)
    return actual.exceptAll(expected).count() + expected.exceptAll(actual).count()
