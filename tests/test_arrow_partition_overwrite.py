"""The state table's partitions replaced by delta-rs (``arrow_writes.overwrite_partitions_at``, retention's fold) are
what Spark's ``replaceWhere`` would leave, and the cooldown memory replaced whole what Spark's overwrite would: Spark
reads the new rows in those partitions and the old ones elsewhere, the batch's tag is found where a replay looks for
it, Delta validates the carried-forward checksum, and Spark appends after it. Where a removed file could carry a
deletion vector, a commit came after the version read, a value is not a plain state id or the table is append-only,
delta-rs commits nothing and the caller writes with Spark."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

from delta_checks import checksum_agrees
from lakehouse_template import fresh_lakehouse
from pyspark.sql import SparkSession

from delta_tables.alert_cooldown import ALERT_COOLDOWN_SCHEMA, compact_memory
from delta_tables.arrow_writes import frame_as_arrow, overwrite_partitions_at
from delta_tables.bucket_state import BUCKET_STATE_SCHEMA, compact_tiles
from delta_tables.idempotent import CommitTag, batch_commits
from delta_tables.local_rows import local_frame
from delta_tables.table_snapshot import table_version
from pipelines.base.settings import Settings

NOW = dt.datetime(2026, 11, 29, 16, 20, 5, 250000)  # naive: UTC, as the engine's rows


def _tiles(state: str, keys: range, *, batch: int, distinct: bool = False) -> list[tuple[Any, ...]]:
    return [
        (
            state,
            f"payer-{k}",
            k % 3,
            1_795_000_000_000 + k * 60_000,
            Decimal(f"{k}.125000") * batch,
            k + batch,
            k,
            Decimal("-1.500000") if k % 2 else None,
            Decimal(f"{k * 10}.000001"),
            batch,
            NOW + dt.timedelta(seconds=batch),
            [f"v{k}", f"w{batch}"] if distinct else None,
        )
        for k in keys
    ]


def _read(spark: SparkSession, path: str, version: int | None = None) -> list[tuple[Any, ...]]:
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    frame = reader.load(path).select(*[f.name for f in BUCKET_STATE_SCHEMA.fields])
    return sorted(tuple(list(v) if isinstance(v, list) else v for v in row) for row in frame.collect())


def _append(spark: SparkSession, path: str, rows: list[tuple[Any, ...]]) -> None:
    local_frame(spark, rows, BUCKET_STATE_SCHEMA).write.format("delta").mode("append").save(path)


def test_delta_rs_replaces_the_states_partitions_as_spark_would_and_tags_the_commit(
    spark: SparkSession, settings: Settings
) -> None:
    fresh_lakehouse(spark, settings)
    path = settings.table_path("bucket_state")
    for batch in (1, 2):  # two files per state, as two batches' appends leave them
        _append(spark, path, [*_tiles("aa01", range(5), batch=batch), *_tiles("bb02", range(4), batch=batch)])
        _append(spark, path, _tiles("cc03", range(3), batch=batch, distinct=True))
    read = table_version(spark, path)
    before = _read(spark, path)
    folded = [*_tiles("aa01", range(2), batch=9, distinct=True), *_tiles("bb02", range(1, 3), batch=9)]
    tag = CommitTag("engine-fold", 7, "state-compact", {"state": read})

    compact_tiles(
        local_frame(spark, folded, BUCKET_STATE_SCHEMA),
        path,
        tag=tag,
        state_ids=["aa01", "bb02"],
        read_version=read,
        rows_at_most=18,
    )

    assert table_version(spark, path) == read + 1
    kept = [row for row in before if row[0] == "cc03"]
    assert _read(spark, path) == sorted([*folded, *kept])  # decimals, nulls, arrays and timestamps as written
    assert _read(spark, path, read) == before  # time travel to the version read is untouched
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").where(f"version = {read + 1}").first()
    assert history is not None and str(history.engineInfo).startswith("delta-rs")  # no Spark job wrote it
    assert batch_commits(spark, path, "engine-fold", 7) == [tag]

    checksum_agrees(spark, path, read + 1)  # carried forward, as Spark's state reconstruction counts it

    _append(spark, path, _tiles("aa01", range(7, 8), batch=10))  # Spark appends after delta-rs' commit
    assert _read(spark, path) == sorted([*folded, *kept, *_tiles("aa01", range(7, 8), batch=10)])
    checksum_agrees(spark, path, read + 2)  # Spark's own, derived from the carried one


def test_the_cooldown_memory_replaced_whole_by_delta_rs_reads_as_written(
    spark: SparkSession, settings: Settings
) -> None:
    fresh_lakehouse(spark, settings)
    path = settings.table_path("alert_cooldown")
    memory = [(rule, f"payer-{k}", 1_795_000_000_000 + k, rule, NOW) for rule in (1, 2) for k in range(4)]
    for batch in (memory[:5], memory[5:], memory[2:4]):  # three appends, a pair twice: the fold keeps one row a pair
        local_frame(spark, batch, ALERT_COOLDOWN_SCHEMA).write.format("delta").mode("append").save(path)
    read = table_version(spark, path)
    folded = [row for row in memory if row[2] % 2]  # what a retention step keeps
    tag = CommitTag("engine-fold", 8, "cooldown-compact")

    compact_memory(local_frame(spark, folded, ALERT_COOLDOWN_SCHEMA), path, tag=tag, read_version=read, rows_at_most=8)

    assert table_version(spark, path) == read + 1
    rows = spark.read.format("delta").load(path).collect()
    assert sorted(tuple(r) for r in rows) == sorted(folded)
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").where(f"version = {read + 1}").first()
    assert history is not None and str(history.engineInfo).startswith("delta-rs")
    assert batch_commits(spark, path, "engine-fold", 8) == [tag]
    checksum_agrees(spark, path, read + 1)


def test_it_commits_nothing_where_spark_must_write(spark: SparkSession, settings: Settings) -> None:
    fresh_lakehouse(spark, settings)
    path = settings.table_path("bucket_state")
    _append(spark, path, [*_tiles("aa01", range(4), batch=1), *_tiles("bb02", range(4), batch=1)])
    read = table_version(spark, path)
    rows = frame_as_arrow(local_frame(spark, _tiles("aa01", range(1), batch=5), BUCKET_STATE_SCHEMA))

    def attempt(at: int, values: list[str] | None = None, where: str = path) -> bool:
        return overwrite_partitions_at(
            where, lambda: rows, partition="stateId", values=values or ["aa01"], read_version=at, user_metadata=None
        )

    assert not attempt(read, ["aa01", "x') OR (stateId = 'bb02"])  # not a state id: no predicate built from it
    assert not attempt(read, where="s3a://bucket/lake/bucket_state")  # not on this disk
    _append(spark, path, _tiles("aa01", range(9, 10), batch=2))
    assert not attempt(read)  # a commit after the version read: delta-rs' conflict check refuses
    assert table_version(spark, path) == read + 1

    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.appendOnly' = 'true')")
    assert not attempt(table_version(spark, path))  # append-only: Spark refuses the overwrite, and so does this
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.appendOnly' = 'false')")

    spark.sql(f"DELETE FROM delta.`{path}` WHERE stateId = 'bb02' AND keyValue = 'payer-1'")  # a deletion vector
    deleted = table_version(spark, path)
    assert not attempt(deleted)  # a removed file could carry one: Spark writes
    assert table_version(spark, path) == deleted
    assert len(_read(spark, path)) == 4 + 1 + 3
