"""What a Delta table's log says without a Spark job: its newest version, and from that version's checksum file
(``_delta_log/<version>.crc``, written with each commit) its file count and, for a table of few files, each file's
rows and partition values.

A Delta scan or DML of a new table version runs a Spark job over the log (the snapshot's state, ~0.2-0.7 s on two
cores) for figures the checksum already holds: the engine asks these instead where it only needs such a figure
(which version to pin, whether a table is empty, how many rows a retention fold would drop). Each answers None
("not known") where the fast path does not apply, and the caller then asks Spark.

Example::

    version = table_version(spark, path)
    if table_file_count(spark, path, version) == 0: ...   # empty: no query needed
    table_row_counts(spark, path, version, "stateId", ["s1"])   # {"s1": 1234}
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from pipelines.base.jvm_classes import jvm_class


def newest_snapshot(spark: SparkSession, path: str) -> Any:
    """The JVM ``Snapshot`` of the table's newest version (a listing of its log, no Spark job); raises where the JVM
    ``DeltaLog`` is not reachable (Spark Connect)."""
    none = jvm_class(spark, "scala.Option").empty()
    log = jvm_class(spark, "org.apache.spark.sql.delta.DeltaLog").forTable(spark._jsparkSession, path)
    return log.update(False, none, none)


def table_version(spark: SparkSession, path: str) -> int:
    """The newest committed version of the Delta table at ``path``: a listing of its log, no Spark job.

    Falls back to ``DESCRIBE HISTORY`` (a Spark job) where the JVM ``DeltaLog`` is not reachable (Spark Connect).
    """
    try:
        return int(newest_snapshot(spark, path).version())
    except Exception:  # any failure of the fast path: use the public API
        row = DeltaTable.forPath(spark, path).history(1).select("version").first()
        if row is None:
            raise RuntimeError(f"{path} has no commits") from None
        version: int = row["version"]
        return version


def table_file_count(spark: SparkSession, path: str, version: int | None = None) -> int | None:
    """The number of data files of the table at ``path`` at ``version`` (None: its newest version), from the newest
    version's checksum file (``_delta_log/<version>.crc``, which Delta writes with each commit): no Spark job. None
    where it is not known (``version`` is not the newest, no checksum file, no JVM access); ``DESCRIBE DETAIL`` would
    know, at the cost of a state reconstruction job. A fresh lakehouse's first micro-batch skips its queries of
    tables known to be empty (0): each is ~1 s of planning, compiling and running in a new JVM."""
    try:
        checksum = _newest_checksum(spark, path, version)
        return None if checksum is None else int(checksum.numFiles())
    except Exception:  # no fast path: unknown
        return None


def _newest_checksum(spark: SparkSession, path: str, version: int | None) -> Any:
    """The JVM ``VersionChecksum`` of the table's newest version, if that is ``version`` (None: whichever it is) and
    Delta wrote one; else None. Raises where the JVM ``DeltaLog`` is not reachable."""
    snapshot = newest_snapshot(spark, path)
    if version is not None and int(snapshot.version()) != version:
        return None
    checksum = snapshot.checksumOpt()
    return checksum.get() if checksum.isDefined() else None


def file_row_counts(
    spark: SparkSession, path: str, version: int, column: str | None = None
) -> list[tuple[str | None, int]] | None:
    """Each data file of the table at ``path`` at ``version`` as (its value of partition column ``column``, or None
    without one; its rows), from the newest version's checksum file: for a table of few files (up to 50:
    ``allFilesInCrc.thresholdNumFiles``) Delta lists them there with their statistics. No Spark job, where a count
    is one (a read of the log and the Parquet footers, and Delta's snapshot state for the scan: ~0.6-0.9 s on a small
    table). None where it is not known (``version`` is not the newest, no checksum or no file list in it, a file
    without a row count, no JVM access): the caller counts with Spark."""
    try:
        checksum = _newest_checksum(spark, path, version)
        files = None if checksum is None else checksum.allFiles()
        if files is None or not files.isDefined():
            return None
        found: list[tuple[str | None, int]] = []
        listed = files.get().iterator()
        while listed.hasNext():
            add = listed.next()
            rows = add.numLogicalRecords()  # the stats' numRecords less rows a deletion vector removed
            if not rows.isDefined():
                return None
            value = add.partitionValues().get(column) if column is not None else None
            text = value.get() if value is not None and value.isDefined() else None  # Scala Option of the value
            found.append((None if text is None else str(text), int(rows.get())))
        return found
    except Exception:  # no fast path: unknown
        return None


def table_row_counts(
    spark: SparkSession, path: str, version: int, column: str | None = None, values: Collection[str] | None = None
) -> dict[str | None, int]:
    """Rows of the table at ``path`` at ``version`` per value of partition column ``column`` (None: all under None),
    only of ``values`` when given; values (as text, either way) with no row are absent. From the checksum
    (``file_row_counts``: no Spark job) where it lists the files, else from the log's file statistics read by
    delta-rs (``arrow_reads.file_rows_at``: no Spark job, a table on this machine's disk without deleted rows), else
    a Spark count (Delta answers it from the files' statistics)."""
    from delta_tables.arrow_reads import file_rows_at  # arrow_reads asks this module for its empty-table check

    wanted = None if values is None else set(values)
    files = file_row_counts(spark, path, version, column)
    if files is None:
        files = file_rows_at(path, version=version, column=column)
    if files is None:
        table = spark.read.format("delta").option("versionAsOf", version).load(path)
        if column is None:
            files = [(None, table.count())]
        else:
            if wanted is not None:
                table = table.where(F.col(column).isin(*sorted(wanted)))
            counted = table.groupBy(column).count().collect()
            files = [(None if r[column] is None else str(r[column]), int(r["count"])) for r in counted]
    counts: dict[str | None, int] = {}
    for value, rows in files:
        if rows and (wanted is None or value in wanted):
            counts[value] = counts.get(value, 0) + rows
    return counts
