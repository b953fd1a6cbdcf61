"""An append-only table's small files bin-packed by delta-rs (``arrow_compaction.compact_files_at``, retention's file
steps) read as Spark's OPTIMIZE would leave them: the same rows (timestamps, decimals, dates, nested types), one file
per partition, a commit of ``dataChange: false`` removes and adds that the change data feed skips, a checksum Delta
validates, and Spark appends after it. Where the table has deletion vectors or column mapping, or is not on this
machine's disk, delta-rs commits nothing and the caller runs Spark's OPTIMIZE."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from delta_tables.arrow_compaction import compact_files_at
from delta_tables.table_snapshot import newest_snapshot, table_file_count, table_version

COLUMNS = (
    "id LONG NOT NULL, at TIMESTAMP, amount DECIMAL(18,6), day DATE, "
    "tags ARRAY<STRING>, attributes MAP<STRING,STRING>, place STRUCT<city: STRING, lat: DOUBLE>"
)


def _create(spark: SparkSession, path: str, properties: str) -> None:
    spark.sql(f"CREATE TABLE delta.`{path}` ({COLUMNS}) USING delta PARTITIONED BY (day) TBLPROPERTIES ({properties})")


def _append(spark: SparkSession, path: str, batch: int) -> None:
    rows = [
        (
            batch * 10 + i,
            dt.datetime(2026, 11, 29, 12, batch, i, 123456),
            Decimal(f"{batch}.{i:06d}") if i else None,
            dt.date(2026, 11, 28 + i % 2),
            [f"t{i}", None] if i % 3 else None,
            {"k": f"v{batch}"},
            ("Basel", 47.5 + i) if i % 2 else None,
        )
        for i in range(4)
    ]
    spark.createDataFrame(rows, COLUMNS).coalesce(1).write.format("delta").mode("append").save(path)


def _rows(spark: SparkSession, path: str) -> list[tuple[Any, ...]]:
    frame = spark.read.format("delta").load(path)
    return sorted((tuple(row) for row in frame.collect()), key=lambda row: row[0])


def _commit(path: str, version: int) -> list[dict[str, Any]]:
    text = (Path(path) / "_delta_log" / f"{version:020d}.json").read_text()
    return [json.loads(line) for line in text.splitlines() if line]


def _checksum_agrees(spark: SparkSession, path: str) -> None:
    """Delta's own check of the newest version's checksum against the state it reconstructs (raises on a mismatch)."""
    snapshot = newest_snapshot(spark, path)
    assert snapshot.validateChecksum(getattr(snapshot, "validateChecksum$default$1")())


def test_delta_rs_bin_packs_an_append_only_table_as_optimize_would(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "alerts_like")
    _create(spark, path, "'delta.enableChangeDataFeed' = 'true', 'delta.appendOnly' = 'true'")
    for batch in range(4):
        _append(spark, path, batch)
    before, read = _rows(spark, path), table_version(spark, path)
    assert table_file_count(spark, path) == 8  # four appends to two days

    assert compact_files_at(path, min_files=9) is False  # fewer files than asked: nothing committed
    assert table_version(spark, path) == read

    assert compact_files_at(path, min_files=8) is True
    compacted = table_version(spark, path)
    assert compacted == read + 1
    assert _rows(spark, path) == before
    assert table_file_count(spark, path) == 2  # one file a day, from the carried checksum
    _checksum_agrees(spark, path)
    actions = _commit(path, compacted)
    moved = [action[kind] for action in actions for kind in ("add", "remove") if kind in action]
    assert len(moved) == 10 and all(file["dataChange"] is False for file in moved)
    feed = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", compacted)
    assert feed.load(path).count() == 0  # a rewrite of the same rows: no change to feed

    _append(spark, path, 4)  # Spark's next commit, its checksum derived from the carried one
    assert len(_rows(spark, path)) == 20
    _checksum_agrees(spark, path)


def test_it_commits_nothing_where_spark_must_optimize(spark: SparkSession, tmp_path: Path) -> None:
    for name, properties in {
        "deletion_vectors": "'delta.enableDeletionVectors' = 'true'",
        "column_mapping": "'delta.columnMapping.mode' = 'name'",
    }.items():
        path = str(tmp_path / name)
        _create(spark, path, properties)
        for batch in range(3):
            _append(spark, path, batch)
        read = table_version(spark, path)
        assert compact_files_at(path, min_files=1) is None, name
        assert table_version(spark, path) == read, name
    assert compact_files_at("s3a://bucket/alerts", min_files=1) is None  # not on this machine's disk
