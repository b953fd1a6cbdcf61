"""The engine's table cache folds its newest frames, not the whole cached table, and always holds the table.

``TableCache`` keeps an append-only Delta table as a union of frames on the executors: the one loaded from Delta
and one per append since. Past ``MAX_FRAMES`` appended frames it folds the newest together, with each older one no
heavier than them, so that a fold costs what recent batches appended; a frame of whole states (the load, a
compaction's rewrite) is not folded with them, and is let go once a compaction rewrote all of its states. Whatever
it folds or lets go, the cached rows fold to exactly what the Delta table holds at the cached version (checked
against a Delta read at the end of each case: rows lost on the way would be missing there). Here with
``MAX_FRAMES`` 4, on real Delta tables (delta-rs commits, so that each case costs a few seconds).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from delta_tables.arrow_writes import append_rows_at, frame_as_arrow, overwrite_partitions_at
from delta_tables.local_rows import local_frame
from pipelines.engine import table_cache
from pipelines.engine.table_cache import WHOLE, HeldAt, TableCache, materialize

SCHEMA = "stateId string, keyValue string, lastMs long"
ROWS = StructType(
    [StructField("stateId", StringType()), StructField("keyValue", StringType()), StructField("lastMs", LongType())]
)
COLUMNS = ("stateId", "keyValue", "lastMs")


def _fold(rows: DataFrame) -> DataFrame:
    return rows.groupBy("stateId", "keyValue").agg(F.max("lastMs").alias("lastMs"))


def _rows(batch: int, states: tuple[str, ...] = ("a", "b")) -> list[tuple[str, str, int]]:
    """A row per state and key; keys recur across batches (their folds merge rows of several frames)."""
    return [(s, f"k{(batch + r) % 3}", batch * 100 + r) for s in states for r in range(2)]


def _table(spark: SparkSession, path: str, rows: list[tuple[str, str, int]]) -> None:
    """The table, partitioned by state (as the state table): version 0 holds ``rows``."""
    spark.createDataFrame(rows, SCHEMA).write.format("delta").partitionBy("stateId").save(path)


def _folded(frame: DataFrame) -> list[tuple[str, str, int]]:
    return sorted((r[0], r[1], r[2]) for r in _fold(frame.select(*COLUMNS)).collect())


def _check(spark: SparkSession, cache: TableCache, path: str) -> None:
    assert cache.version is not None
    table = spark.read.format("delta").option("versionAsOf", cache.version).load(path)
    assert _folded(cache.frame()) == _folded(table), cache.version


def _append(spark: SparkSession, cache: TableCache, path: str, batch: int) -> None:
    """Append a batch to the table, then give the cache the frame appended (as the engine does). Cheap: a delta-rs
    commit and a frame of driver-side rows (no job); the cache's own folds materialize on the executors."""
    read = cache.version
    assert read is not None
    rows = _rows(batch)
    assert append_rows_at(path, rows, ROWS, user_metadata=None)
    cache.appended(spark, local_frame(spark, rows, ROWS), read_version=read, held=["a", "b"])
    assert cache.version == read + 1


def _rewrite(spark: SparkSession, cache: TableCache, path: str, state: str) -> None:
    """A compaction of one state: its rows folded and written over its partition (as retention does)."""
    read = cache.version
    assert read is not None
    written = materialize(_fold(cache.frame().where(F.col("stateId") == state)))
    data = frame_as_arrow(written.select(*COLUMNS))
    assert overwrite_partitions_at(
        path, lambda: data, partition="stateId", values=[state], read_version=read, user_metadata=None
    )
    cache.replaced(spark, written, rewritten=F.col("stateId") == state, read_version=read, states=[state])


def _states_at(path: str) -> HeldAt:
    """The states a version holds, read from the table (``retention.states_held`` reads them from the state table's
    log statistics, which need its ``bucketStart`` column)."""

    def held_at(session: SparkSession, version: int) -> frozenset[str]:
        table = session.read.format("delta").option("versionAsOf", version).load(path)
        return frozenset(r[0] for r in table.select("stateId").distinct().collect())

    return held_at


@pytest.fixture
def four_frames(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(table_cache, "MAX_FRAMES", 4)


@pytest.mark.usefixtures("four_frames")
def test_a_fold_takes_the_newest_appended_frames_and_leaves_the_loaded_table(
    spark: SparkSession, tmp_path: Path
) -> None:
    path = str(tmp_path / "table")
    _table(spark, path, _rows(0))
    cache = TableCache(path, fold=_fold, columns=COLUMNS)
    cache.ensure(spark, 0)
    weights = []
    for batch in range(1, 10):
        _append(spark, cache, path, batch)
        weights.append(cache.frame_weights)
    _check(spark, cache, path)  # rows a fold lost would be missing from every later version
    assert weights == [
        (WHOLE, 1),
        (WHOLE, 1, 1),
        (WHOLE, 1, 1, 1),
        (WHOLE, 1, 1, 1, 1),
        (WHOLE, 5),  # five appended frames: folded into one, the loaded one left as it was
        (WHOLE, 5, 1),
        (WHOLE, 5, 1, 1),
        (WHOLE, 5, 1, 1, 1),
        (WHOLE, 5, 4),  # the four newest fold; the fold of five is heavier: left as it was
    ]


@pytest.mark.usefixtures("four_frames")
def test_an_empty_table_folds_with_the_appended_frames(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "table")
    _table(spark, path, [])
    cache = TableCache(path, fold=_fold, columns=COLUMNS)
    cache.ensure(spark, 0)
    assert cache.frame_weights == (0,)
    folds, frames = [], 1
    for batch in range(1, 13):
        _append(spark, cache, path, batch)
        if len(cache.frame_weights) < frames:
            folds.append((batch, cache.frame_weights))
        frames = len(cache.frame_weights)
    # Frames of a weight fold together (4 + 4), a lighter run apart (8, then 4).
    assert folds == [(4, (4,)), (8, (8,)), (12, (8, 4))]
    _check(spark, cache, path)


@pytest.mark.usefixtures("four_frames")
def test_a_rewrite_of_every_state_of_a_frame_lets_it_go_without_a_fold(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "table")
    _table(spark, path, _rows(0))
    cache = TableCache(path, fold=_fold, columns=COLUMNS, held_at=_states_at(path))
    cache.ensure(spark, 0)
    for batch in (1, 2):
        _append(spark, cache, path, batch)
    _rewrite(spark, cache, path, "a")
    assert cache.frame_weights == (WHOLE, 1, 1, WHOLE)  # the older frames still hold state b's rows
    _rewrite(spark, cache, path, "b")
    assert cache.frame_weights == (WHOLE, WHOLE)  # the two rewrites: all the older frames held is rewritten
    _append(spark, cache, path, 3)
    _rewrite(spark, cache, path, "a")
    assert cache.frame_weights == (WHOLE, 1, WHOLE)  # the first rewrite of a let go; b's and the append kept
    _check(spark, cache, path)


@pytest.mark.usefixtures("four_frames")
def test_more_frames_of_whole_states_than_the_limit_fold_together(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "table")
    states = ("a", "b", "c", "d", "e")
    _table(spark, path, _rows(0, states))
    cache = TableCache(path, fold=_fold, columns=COLUMNS)  # the loaded frame's states are not known
    cache.ensure(spark, 0)
    for state in states[:3]:
        _rewrite(spark, cache, path, state)
    assert cache.frame_weights == (WHOLE,) * 4
    _rewrite(spark, cache, path, "d")
    assert cache.frame_weights == (WHOLE,)
    _check(spark, cache, path)
