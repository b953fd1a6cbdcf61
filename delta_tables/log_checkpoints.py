"""Delta log checkpoints of the tables a stream commits to on every micro-batch, written by delta-rs after the batch
instead of by Spark inside the commit that reaches the interval.

Delta writes a table's checkpoint in the post-commit hook of every ``delta.checkpointInterval``-th commit, on the
committing thread: a state reconstruction job, its validation against the checksum file and a Parquet write, all
before the write returns (bronze's at version 10: 3.5 s of Spark work, 2.4 s of batch time on 2 busy cores, in a
7.9-s batch whose neighbours took 5.2-5.5 s). The engine's tables commit on every micro-batch, so one batch in a few
carried one. On this machine's disk they are created with an interval of ``table_spec.DEFERRED_INTERVAL`` (Delta's
own only every 1,000 commits, for a writer that runs without this; ``TableSpec.checkpoint_every``), and
``LogCheckpoints.after_commits`` writes a checkpoint of each such table that is ``every`` commits past its last one:

* with delta-rs (``DeltaTable.create_checkpoint``: 17-33 ms for the engine's tables) where the library is installed
  and the table's features are all in ``DELTA_RS_FEATURES``, each of which test_log_checkpoints shows to read back
  in Spark as it did before (deletion vectors in use, the change data feed, append-only, invariants);
* else with Spark's own ``DeltaLog.checkpoint``, at most one table per call (the most overdue), so that two tables'
  checkpoints never fall in one batch.

A table elsewhere (an object store, Databricks), or with another interval (a lakehouse made before), keeps Delta's
own checkpoints and is left alone here. A checkpoint is no part of a table's contents: the same version reads the
same with or without one, and one that fails leaves the table as it was (logged, not raised). The decision is the
distance from the last checkpoint, read from the table's ``_last_checkpoint`` the first time, so a call that wrote
nothing is caught up by the next.

Example::

    checkpoints = LogCheckpoints(every=10)
    ...  # a batch commits to the tables
    checkpoints.after_commits(spark, [bronze_path, state_path])
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from delta_tables.arrow_reads import delta_rs_folder
from delta_tables.table_snapshot import newest_snapshot
from delta_tables.table_spec import CHECKPOINT_PROPERTY, DEFERRED_INTERVAL, local_folder
from pipelines.base.jvm_classes import jvm_class

log = logging.getLogger(__name__)

DELTA_RS_FEATURES = frozenset({"deletionVectors", "changeDataFeed", "appendOnly", "invariants"})
"""The table features of a table whose checkpoint delta-rs writes (with reader version 3 / writer version 7 at most;
a table of the legacy protocol, reader 1 / writer 2, has none of them)."""


class LogCheckpoints:
    """Checkpoints of Delta tables, each once it is ``every`` commits past its last one (``every`` 0: none, only
    Delta's own on the commit path)."""

    def __init__(self, every: int) -> None:
        self.every = every
        self._checkpointed: dict[str, int] = {}  # path -> the version of its newest checkpoint known here
        self.written: list[tuple[str, int]] = []  # (path, version) of each checkpoint this object wrote

    def after_commits(self, spark: SparkSession, paths: Sequence[str]) -> list[tuple[str, int]]:
        """Write the checkpoints of ``paths`` that are due; return (path, version) of each written."""
        if self.every <= 0:
            return []
        written: list[tuple[str, int]] = []
        by_spark: list[tuple[int, str]] = []  # (commits past the last checkpoint, path)
        for path in paths:
            try:
                due = self._due(spark, path)
                if due is None:
                    continue
                version, table = due
                if table is not None and _delta_rs_checkpoint(path, table):
                    written.append((path, version))
                else:
                    by_spark.append((version - self._checkpointed[path], path))
            except Exception as error:  # a checkpoint is an optimization: the table reads the same without one
                log.warning("no log checkpoint of %s: %s", path, error)
        if by_spark:
            _, path = max(by_spark)
            try:
                written.append((path, _spark_checkpoint(spark, path)))
            except Exception as error:
                log.warning("no log checkpoint of %s: %s", path, error)
        for path, version in written:
            self._checkpointed[path] = version
        self.written.extend(written)
        return written

    def _due(self, spark: SparkSession, path: str) -> tuple[int, Any] | None:
        """(newest version, the delta-rs table loaded at it or None) if the table defers its checkpoints to this and
        is ``every`` commits past its last one; else None."""
        if local_folder(path) is None:
            return None  # elsewhere the table keeps Delta's own checkpoints (TableSpec.checkpoint_every)
        version, interval, last, table = _log_facts(spark, path)
        if interval != str(DEFERRED_INTERVAL):
            return None  # Delta's own, in its commits (a table of a lakehouse made before, or another interval)
        self._checkpointed.setdefault(path, last)
        return (version, table) if version - self._checkpointed[path] >= self.every else None


def _log_facts(spark: SparkSession, path: str) -> tuple[int, str | None, int, Any]:
    """(newest version, its checkpoint interval property, the version of its last checkpoint or -1, the delta-rs
    table loaded at that version or None) of a table on this machine's disk: from the log by delta-rs (no JVM: Spark
    would load a version delta-rs wrote, which has no checksum file, with a job), else by Spark's DeltaLog."""
    folder = delta_rs_folder(path)
    if folder is not None:
        from deltalake import DeltaTable

        table = DeltaTable(folder)
        hint = Path(folder, "_delta_log", "_last_checkpoint")
        last = int(json.loads(hint.read_text())["version"]) if hint.is_file() else -1
        return table.version(), table.metadata().configuration.get(CHECKPOINT_PROPERTY), last, table
    snapshot = newest_snapshot(spark, path)
    interval = snapshot.metadata().configuration().get(CHECKPOINT_PROPERTY)
    info = snapshot.deltaLog().readLastCheckpointFile()
    return (
        int(snapshot.version()),
        str(interval.get()) if interval.isDefined() else None,
        int(info.get().version()) if info.isDefined() else -1,
        None,
    )


def _delta_rs_checkpoint(path: str, table: Any) -> bool:
    """Write the checkpoint of the delta-rs ``table`` at the version it was loaded at, if delta-rs applies to its
    features; whether it did."""
    try:
        protocol = table.protocol()
        features = {*(protocol.reader_features or ()), *(protocol.writer_features or ())}
        if protocol.min_reader_version > 3 or protocol.min_writer_version > 7 or not features <= DELTA_RS_FEATURES:
            return False
        table.create_checkpoint()
    except Exception as error:  # delta-rs declined the table: Spark's own checkpoint instead
        log.info("delta-rs wrote no checkpoint of %s: %s", path, error)
        return False
    return True


def _spark_checkpoint(spark: SparkSession, path: str) -> int:
    """Write the checkpoint of the table's newest snapshot with Spark (Delta's own code: jobs); its version."""
    snapshot = newest_snapshot(spark, path)
    snapshot.deltaLog().checkpoint(snapshot, jvm_class(spark, "scala.Option").empty())
    return int(snapshot.version())
