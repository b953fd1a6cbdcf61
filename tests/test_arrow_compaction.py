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

from delta_checks import checksum_agrees
from deltalake import DeltaTable
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
    spark.createDataFrame(_batch_rows(batch), COLUMNS).coalesce(1).write.format("delta").mode("append").save(path)


def _batch_rows(batch: int) -> list[tuple[Any, ...]]:
    return [
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


def _rows(spark: SparkSession, path: str) -> list[tuple[Any, ...]]:
    frame = spark.read.format("delta").load(path)
    return sorted((tuple(row) for row in frame.collect()), key=lambda row: row[0])


def _commit(path: str, version: int) -> list[dict[str, Any]]:
    text = (Path(path) / "_delta_log" / f"{version:020d}.json").read_text()
    return [json.loads(line) for line in text.splitlines() if line]


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
    checksum_agrees(spark, path)
    actions = _commit(path, compacted)
    moved = [action[kind] for action in actions for kind in ("add", "remove") if kind in action]
    assert len(moved) == 10 and all(file["dataChange"] is False for file in moved)
    feed = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", compacted)
    assert feed.load(path).count() == 0  # a rewrite of the same rows: no change to feed

    _append(spark, path, 4)  # Spark's next commit, its checksum derived from the carried one
    assert len(_rows(spark, path)) == 20
    checksum_agrees(spark, path)


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


def _files_agree(spark: SparkSession, path: str) -> list[dict[str, Any]]:
    """The newest version's checksum lists its files, each add action as Delta's own state reconstruction of that
    version gives it (``Snapshot.allFiles``, a Spark job over the log); returns the list.

    Compared as JSON, empty tags taken for none: Delta reads a listed file without tags as an empty map and a
    reconstructed one as null, and writes the empty map into the next list it derives, so its own
    ``validateFileListAgainstCRC`` refuses even the lists Spark writes itself."""
    snapshot = newest_snapshot(spark, path)
    version = int(snapshot.version())
    listed = json.loads((Path(path) / "_delta_log" / f"{version:020d}.crc").read_text()).get("allFiles")
    assert listed is not None, f"version {version}'s checksum lists no file"
    rebuilt = [json.loads(line) for line in snapshot.allFiles().toJSON().collectAsList()]
    assert _by_path(listed) == _by_path(rebuilt)
    return list(listed)


def _by_path(files: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(({k: v for k, v in f.items() if k != "tags" or v} for f in files), key=lambda f: f["path"])


def test_a_table_compacted_back_under_fifty_files_gets_its_file_list_in_the_checksum(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Delta lists a table's files in a checksum up to 50 of them; past that it stops, and Spark's first commit on a
    version back under 50 without the list reconstructs that version's state to make one. The carried checksum of
    a compaction back under 50 lists the files itself, read from the log: from the commits alone, and from a
    checkpoint plus the commits after it."""
    for name, checkpointed in (("commits", False), ("checkpoint", True)):
        path = str(tmp_path / name)
        _create(spark, path, "'delta.appendOnly' = 'true'")
        rows = [row for batch in range(26) for row in _batch_rows(batch)]
        spark.createDataFrame(rows, COLUMNS).repartition(40, "id").write.format("delta").mode("append").save(path)
        assert table_file_count(spark, path) > 50  # 40 tasks, most with both days: past Delta's 50
        if checkpointed:
            DeltaTable(path).create_checkpoint()
        before = _rows(spark, path)
        assert compact_files_at(path, min_files=8) is True
        assert len(_files_agree(spark, path)) == 2, name  # one file a day
        assert _rows(spark, path) == before

        _append(spark, path, 30)  # Spark's next commit derives its list from the carried one
        assert len(_files_agree(spark, path)) == 4, name
        checksum_agrees(spark, path)
