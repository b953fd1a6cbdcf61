"""Retention rewrites a state (or the cooldown memory) only when it saves something: a tile (or a memory row) beyond
the horizon to drop, or rows that folding at least halves (``pipelines.engine.retention.FOLD_GAIN``). A step with
neither commits nothing, and the alerts stay the reference evaluator's.

Three batches with every retention step on every batch: batch 0 (nothing to fold or trim: no rewrite), batch 1 in
the same minute for the same payers (the state's rows double: folded), batch 2 a month later (every earlier tile and
memory row is beyond its horizon: trimmed).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from delta import DeltaTable
from engine_fixtures import alerts_by_id, make_rule, put_rules, raw_frame, tagged_writes
from lakehouse_template import fresh_lakehouse
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from reference_evaluator import RefBatch, evaluate

from delta_tables.alert_cooldown import MemoryCounts, memory_counts_at
from delta_tables.arrow_reads import table_files_at
from delta_tables.bucket_state import TILE_KEY
from delta_tables.idempotent import CommitTag
from delta_tables.table_snapshot import table_version
from pipelines.base.settings import Settings
from pipelines.engine.batch_handler import BatchHandler
from pipelines.engine.keys import encode_key
from pipelines.engine.retention import fold_saves, quiet_memory, quiet_states, state_files

T0 = 1_700_006_400_000  # a minute's start
MONTH_MS = 31 * 24 * 3600 * 1000


def _batch(n: int, start_ms: int) -> list[dict[str, Any]]:
    """Twelve payments of three payers within one minute from ``start_ms``."""
    return [
        {
            "transactionId": f"b{n}-{i:02d}",
            "eventTime": start_ms + i * 4_000,
            "payerId": i % 3,
            "paymentAmount": Decimal(10 + 7 * i) + Decimal("0.25"),
            "paymentType": "CRD",
        }
        for i in range(12)
    ]


def test_retention_rewrites_only_what_folding_or_trimming_saves(spark: SparkSession, settings: Settings) -> None:
    settings = settings.model_copy(update={"engine": settings.engine.model_copy(update={"retention_every_batches": 1})})
    fresh_lakehouse(spark, settings)
    rule = make_rule(1, limit=40, windowMinutes=2, cooldownMinutes=1)
    put_rules(spark, settings, [rule])
    batches = [_batch(0, T0), _batch(1, T0 + 2_000), _batch(2, T0 + MONTH_MS)]
    state_path, memory_path = settings.table_path("bucket_state"), settings.table_path("alert_cooldown")
    state_rows: list[tuple[int, int]] = []  # after each batch: (rows, distinct tiles)
    versions: list[int] = []  # the state table's version after each batch
    handler = BatchHandler(settings, app_id="retention-rewrites", report=lambda line: None)
    for batch_id, records in enumerate(batches):
        handler.process(raw_frame(spark, records), batch_id)
        state = spark.read.format("delta").load(state_path)
        state_rows.append((state.count(), state.select(*TILE_KEY).distinct().count()))
        versions.append(table_version(spark, state_path))

    # Batch 0 appended one row per tile: no rewrite. Batch 1 doubled the rows of the same tiles: folded back to
    # one a tile. Batch 2: the earlier tiles are beyond the horizon: dropped, one row a tile of batch 2 left.
    assert tagged_writes(spark, state_path) == [
        (0, "state"),
        (1, "state"),
        (1, "state-compact"),
        (2, "state"),
        (2, "state-compact"),
    ]
    # What the step decides from the log's file statistics alone, without folding (quiet: surely no rewrite). After
    # batch 0 one write holds every tile; batch 1's append doubled the rows (not quiet: the fold saw it due) and its
    # rewrite left one write again; a horizon after the oldest tile is never quiet (a trim is due).
    (state_id,) = [
        r["stateId"] for r in spark.read.format("delta").load(state_path).select("stateId").distinct().collect()
    ]
    assert quiet_states(state_files(state_path, versions[0]), {state_id: T0 - 24 * 3600 * 1000}) == {state_id}
    assert quiet_states(state_files(state_path, versions[1] - 1), {state_id: T0 - 24 * 3600 * 1000}) == set()
    assert quiet_states(state_files(state_path, versions[1]), {state_id: T0 - 24 * 3600 * 1000}) == {state_id}
    assert quiet_states(state_files(state_path, versions[1]), {state_id: T0 + 60_000}) == set()
    assert quiet_states(state_files(state_path, versions[0]), {"a state with no tile": T0}) == {"a state with no tile"}

    rows0, tiles0 = state_rows[0]
    assert rows0 == tiles0 > 0
    assert state_rows[1] == (tiles0, tiles0)  # the same tiles, folded
    assert state_rows[2] == (tiles0, tiles0)  # batch 2's tiles alone
    oldest = spark.read.format("delta").load(state_path).agg(F.min("bucketStart")).first()
    assert oldest is not None and oldest[0] >= T0 + MONTH_MS - 24 * 3600 * 1000  # its day tile at the latest

    # The cooldown memory: a row per alerting payer in batch 0, none in batch 1 (within the cooldown), and in
    # batch 2 the month-old rows dropped (beyond the longest cooldown), which is the only rewrite.
    assert tagged_writes(spark, memory_path) == [(0, "cooldown"), (2, "cooldown"), (2, "cooldown-compact")]
    memory = spark.read.format("delta").load(memory_path)
    assert memory.where(F.col("lastAlertTimeMs") < T0 + MONTH_MS).count() == 0
    assert memory.count() > 0

    # What the cooldown step decides from the log's file statistics alone (quiet: surely no rewrite, and the memory
    # is not loaded to decide it): the empty table and batch 0's one append are quiet; the version with batch 2's
    # append holds month-old rows (not quiet: the step trimmed them); a horizon after the oldest row is not quiet.
    history = DeltaTable.forPath(spark, memory_path).history().orderBy("version").collect()
    at = {tag.write + str(tag.batch_id): r["version"] for r in history if (tag := CommitTag.parse(r["userMetadata"]))}
    day = 24 * 3600 * 1000
    assert quiet_memory(table_files_at(memory_path, version=0, column="lastAlertTimeMs"), T0)
    assert quiet_memory(table_files_at(memory_path, version=at["cooldown0"], column="lastAlertTimeMs"), T0 - day)
    assert not quiet_memory(table_files_at(memory_path, version=at["cooldown0"], column="lastAlertTimeMs"), T0 + 60_000)
    assert not quiet_memory(table_files_at(memory_path, version=at["cooldown2"], column="lastAlertTimeMs"), T0)
    # Past the statistics, the step decides from the memory's key columns read on the driver, as the fold would:
    # batch 2's append holds the same three pairs again (folding halves the rows), none before a horizon at T0.
    assert memory_counts_at(memory_path, version=at["cooldown2"], horizon_ms=T0) == MemoryCounts(6, 3, 0)
    assert memory_counts_at(memory_path, version=at["cooldown2"], horizon_ms=T0 + 2 * MONTH_MS) == MemoryCounts(6, 3, 3)
    assert fold_saves(MemoryCounts(6, 3, 0)) and fold_saves(MemoryCounts(3, 3, 1))
    assert not fold_saves(MemoryCounts(5, 3, 0)) and not fold_saves(MemoryCounts(0, 0, 0))
    compacted = at["cooldown-compact2"]
    assert quiet_memory(table_files_at(memory_path, version=compacted, column="lastAlertTimeMs"), T0)
    # The same pairs appended again: folding would halve the rows, not quiet. A deleted row (a deletion vector: the
    # statistics count it) leaves the statistics unknown: not quiet either, the step loads and decides.
    pairs = memory.collect()
    spark.createDataFrame(pairs, memory.schema).write.format("delta").mode("append").save(memory_path)
    assert not quiet_memory(table_files_at(memory_path, version=compacted + 1, column="lastAlertTimeMs"), T0)
    DeltaTable.forPath(spark, memory_path).delete(F.col("keyValue") == pairs[0]["keyValue"])
    deleted = table_version(spark, memory_path)
    assert table_files_at(memory_path, version=deleted, column="lastAlertTimeMs") is None
    assert memory_counts_at(memory_path, version=deleted, horizon_ms=T0) is None
    assert not quiet_memory(None, T0)

    refs = [RefBatch(rules=[rule], transactions=records) for records in batches]
    expected = {(a.rule_id, a.transaction_id): (encode_key(a.key), a.aggregate_value) for a in evaluate(refs)}
    assert alerts_by_id(spark, settings) == expected
    assert {transaction for _, transaction in expected} & {r["transactionId"] for r in batches[1]} == set()
