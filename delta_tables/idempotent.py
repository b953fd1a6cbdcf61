"""Idempotent writes by tagged commits: each write of a micro-batch names itself in ``commitInfo.userMetadata``.

A tag is ``{"fraudlake": 1, "app": <app id>, "batch": <batch id>, "write": <name>, "pins": {...}}``: which
streaming query, which micro-batch, which of its writes, and the snapshot versions the batch read (its *pins*).
Delta writes the commit info in the same atomic commit file as the data, so "the tag is in the table's history"
is exactly "the write committed".

Why not Delta's ``txnAppId/txnVersion``: reading a table's last transaction versions needs its full snapshot
state, a Spark job over the log on every write (about 0.4 s per write on 2 cores, several writes per
micro-batch). Tags cost nothing to write; they are read only when a batch is replayed after a crash
(``pipelines.engine.recovery``), from the few newest commits of each table.

Example::

    tag = CommitTag("engine-1f2e", 7, "bronze", {"rules": 12})
    append_tagged(frame, path, tag)
    [t.write for t in batch_commits(spark, path, "engine-1f2e", 7)]   # ['bronze'] after a crash
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from delta_tables.arrow_writes import append_frame_at
from delta_tables.table_snapshot import table_file_count, table_version
from pipelines.base.jvm_classes import jvm_class
from pipelines.base.spark_session import session_confs

USER_METADATA_CONF = "spark.databricks.delta.commitInfo.userMetadata"
_MARK = '{"fraudlake":1,'


@dataclass(frozen=True)
class CommitTag:
    """One write of one micro-batch, and the versions the batch pinned."""

    app_id: str
    batch_id: int
    write: str
    pins: Mapping[str, int | None] = field(default_factory=dict)

    def to_json(self) -> str:
        body = {"app": self.app_id, "batch": self.batch_id, "write": self.write, "pins": dict(self.pins)}
        return _MARK + json.dumps(body, sort_keys=True, separators=(",", ":"))[1:]

    @classmethod
    def parse(cls, text: str | None) -> CommitTag | None:
        """The tag in a commit's userMetadata, or None for any other commit."""
        if not text or not text.startswith(_MARK):
            return None
        try:
            data: dict[str, Any] = json.loads(text)
            return cls(str(data["app"]), int(data["batch"]), str(data["write"]), dict(data.get("pins") or {}))
        except (ValueError, KeyError, TypeError):
            return None


def write_options(tag: CommitTag | None) -> dict[str, str]:
    """Writer options of a tagged write. Optimized writes are off: they add a shuffle to every small append."""
    options = {"optimizeWrite": "false"}
    if tag is not None:
        options["userMetadata"] = tag.to_json()
    return options


ROWS_PER_FILE = 1_000_000


def files_for(rows: int) -> int:
    """How many files an append of ``rows`` rows should write: one per million (small batches: one file)."""
    return max(1, -(-rows // ROWS_PER_FILE))


def append_tagged(
    frame: DataFrame, path: str, tag: CommitTag | None, *, files: int | None = None, rows_at_most: int | None = None
) -> None:
    """Append ``frame`` to the Delta table at ``path`` in one commit carrying ``tag``; ``files``: at most that
    many files (one write task each: a micro-batch's few thousand rows are one small file, not one per partition).
    Given ``rows_at_most`` (the caller's count of the rows), a small append is written from the driver by delta-rs
    where it applies (``arrow_writes.append_frame_at``: one file), else by Spark.
    """
    if rows_at_most is not None and append_frame_at(
        frame, path, rows_at_most=rows_at_most, user_metadata=tag.to_json() if tag else None
    ):
        return
    if files is not None:
        frame = frame.coalesce(files)
    frame.write.format("delta").mode("append").options(**write_options(tag)).save(path)


def overwrite_tagged(frame: DataFrame, path: str, tag: CommitTag | None, *, replace_where: str | None = None) -> None:
    """Replace the whole content of the table at ``path`` with ``frame`` (with ``replace_where``, a condition on
    partition columns: only the rows it selects, ``frame`` holding only such rows), in one commit carrying ``tag``.

    A table whose newest checksum says it has no file (``table_file_count`` 0: a fresh lakehouse's registry where
    Spark writes it, an empty cooldown memory) gets an append instead: the same content, without the overwrite's
    cost (Delta's overwrite reconstructs the table state to count the files it removes: ~0.5 s warm, 1.5 s in a fresh
    JVM). Only for tables with one writer (the engine's own): a blind append does not conflict with a concurrent one
    as an overwrite would.
    """
    if table_file_count(frame.sparkSession, path) == 0:
        append_tagged(frame, path, tag, files=1)
        return
    writer = frame.write.format("delta").mode("overwrite").options(**write_options(tag))
    if replace_where is not None:
        writer = writer.option("replaceWhere", replace_where)
    writer.save(path)


@contextmanager
def tagged_dml(spark: SparkSession, tag: CommitTag | None) -> Iterator[None]:
    """Tag the DML statements run inside (DELETE, UPDATE, MERGE) with ``tag`` (a session conf, put back after).

    Run them on one thread: the conf is session-wide. Appends set their own writer option, which Delta prefers.
    """
    with session_confs(spark, {USER_METADATA_CONF: tag.to_json()} if tag else {}):
        yield


def batch_commits(spark: SparkSession, path: str, app_id: str, batch_id: int, *, newest: int = 64) -> list[CommitTag]:
    """The tags of ``app_id``'s batch ``batch_id`` among the table's newest commits.

    The commits of one engine's batches follow each other, so the scan goes from the newest commit back and stops
    at the first commit of an earlier batch (or of another engine run: an older checkpoint), or after ``newest``
    commits. It reads the commit files' ``commitInfo`` lines directly (Hadoop FileSystem via the JVM: no Spark
    job, a few milliseconds per table); where that is not possible (a commit file not yet backfilled into
    ``_delta_log``, or no JVM access) it uses ``DESCRIBE HISTORY``.
    """
    try:
        return _tags_from_commit_files(spark, path, app_id, batch_id, newest)
    except _NeedHistory:
        pass
    history = DeltaTable.forPath(spark, path).history(newest).where(F.col("userMetadata").startswith(_MARK))
    tags = [CommitTag.parse(row["userMetadata"]) for row in history.select("userMetadata").collect()]
    return [t for t in tags if t is not None and t.app_id == app_id and t.batch_id == batch_id]


class _NeedHistory(Exception):
    """The commit files cannot be read directly."""


def _tags_from_commit_files(spark: SparkSession, path: str, app_id: str, batch_id: int, newest: int) -> list[CommitTag]:
    try:
        hadoop_path = jvm_class(spark, "org.apache.hadoop.fs.Path")
        log_dir = hadoop_path(path.rstrip("/") + "/_delta_log")
        fs = log_dir.getFileSystem(spark._jsc.hadoopConfiguration())
    except Exception as error:
        raise _NeedHistory from error
    found: list[CommitTag] = []
    latest = table_version(spark, path)
    for version in range(latest, max(latest - newest, -1), -1):
        commit_file = hadoop_path(log_dir, f"{version:020d}.json")
        if not fs.exists(commit_file):
            raise _NeedHistory(f"{commit_file} is not in _delta_log")
        tag = CommitTag.parse(_user_metadata(spark, fs, commit_file))
        if tag is None:
            continue  # a commit of another writer (OPTIMIZE, a manual DELETE, ...)
        if tag.app_id != app_id or tag.batch_id < batch_id:
            break
        if tag.batch_id == batch_id:
            found.append(tag)
    return found


def _user_metadata(spark: SparkSession, fs: Any, commit_file: Any) -> str | None:
    """``commitInfo.userMetadata`` of one commit file (Delta writes commitInfo as the first action)."""
    text = jvm_class(spark, "java.io.InputStreamReader")(fs.open(commit_file), "UTF-8")
    reader = jvm_class(spark, "java.io.BufferedReader")(text)
    try:
        while True:
            line = reader.readLine()
            if line is None:
                return None
            if line.startswith('{"commitInfo"'):
                info: dict[str, Any] = json.loads(line)["commitInfo"]
                value = info.get("userMetadata")
                return value if isinstance(value, str) else None
    finally:
        reader.close()
