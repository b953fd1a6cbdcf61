"""A small Delta table's rows at a version, as dicts: on the driver with delta-rs where it reads what Spark would,
else with Spark.

The engine reads two small tables at a pinned version on a micro-batch's path: the rules table (at each new version,
i.e. after every rule change, and once in a fresh engine) and the state registry. A Spark read of a table version
it has not read yet reconstructs the snapshot's state from the log (a Spark job) and then scans the Parquet files:
0.5-0.75 s on two warm cores for a table of a few rows, seconds in a fresh JVM. The ``deltalake`` library (delta-rs,
the console's reader) replays the same log and reads the same files in ~5 ms.

delta-rs reads only where it reads what Spark would: a table on this machine's disk (``table_spec.local_folder``:
an object store's credentials are Spark's Hadoop configuration, and Databricks' local-looking paths are no plain
disks), with the library installed, and whose reader features delta-rs has — the rules table and the registry use
none (no deletion vectors, no column mapping); delta-rs refuses a table with a reader feature it lacks. Anything
else, and any error, reads with Spark. Either way the values are Python's; timestamps differ (delta-rs gives
UTC-aware datetimes, Spark naive local ones), which the engine's readers do not use.

The same library reads a version's file statistics from the log (``partition_files_at``: rows per file, a column's
smallest value), which retention asks before it folds a state with Spark jobs, and a few columns of a table's files
(``table_columns_at``), from which retention decides whether the cooldown memory's fold saves anything.

Example::

    rows = table_rows(spark, settings.table_path("rules"), version=12)
    newest_version_at(settings.table_path("rule_states"))   # 7, or None where delta-rs does not apply
    partition_files_at(settings.table_path("bucket_state"), version=40, partition="stateId", column="bucketStart")
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from delta_tables.table_snapshot import table_file_count
from delta_tables.table_spec import local_folder

log = logging.getLogger(__name__)


def delta_rs_folder(path: str) -> str | None:
    """The folder of the Delta table at ``path`` where delta-rs may read (and ``arrow_writes`` write) it: a table on
    this machine's disk, with the ``deltalake`` library installed; else None (Spark reads it)."""
    folder = local_folder(path)
    if folder is None:
        return None
    try:
        import deltalake  # noqa: F401
    except ImportError:  # an install without the console's extra
        return None
    return str(folder)


def table_rows(
    spark: SparkSession, path: str, *, version: int, columns: Sequence[str] | None = None
) -> list[dict[str, Any]]:
    """The rows of the Delta table at ``path`` at ``version`` (only ``columns`` when given; a column the table lacks
    at that version is absent from the rows): delta-rs where it applies (``table_rows_at``), else a Spark read unless
    the version's checksum says the table is empty."""
    rows = table_rows_at(path, version=version, columns=columns)
    if rows is not None:
        return rows
    if table_file_count(spark, path, version) == 0:
        return []  # the version's checksum says it has no file: no Spark query (a fresh lakehouse's tables)
    frame = spark.read.format("delta").option("versionAsOf", version).load(path)
    if columns is not None:
        frame = frame.select(*[c for c in columns if c in frame.columns])
    return [row.asDict() for row in frame.collect()]


def table_rows_at(path: str, *, version: int, columns: Sequence[str] | None = None) -> list[dict[str, Any]] | None:
    """``table_rows`` read by delta-rs on the driver; None where that does not apply (not a table on this machine's
    disk, no ``deltalake``, a reader feature it lacks, any error)."""
    folder = delta_rs_folder(path)
    if folder is None:
        return None
    from deltalake import DeltaTable

    try:
        table = DeltaTable(folder, version=version)
        present = {field.name for field in table.schema().fields}
        wanted = None if columns is None else [c for c in columns if c in present]
        rows: list[dict[str, Any]] = table.to_pyarrow_table(columns=wanted).to_pylist()
        return rows
    except Exception as error:  # not readable this way: Spark reads it
        log.debug("delta-rs did not read %s at version %s: %s", path, version, error)
        return None


def newest_version_at(path: str) -> int | None:
    """The newest version of the Delta table at ``path`` read by delta-rs (its log from the last checkpoint on), where
    ``table_rows_at`` applies; else None. For a table delta-rs writes (``arrow_writes``): Spark's ``DeltaLog`` would
    load the new version's protocol and metadata with a Spark job (~0.15 s warm), since delta-rs writes no checksum
    file to read them from."""
    folder = delta_rs_folder(path)
    if folder is None:
        return None
    from deltalake import DeltaTable

    try:
        return int(DeltaTable(folder).version())
    except Exception as error:  # not readable this way: Spark reads it
        log.debug("delta-rs did not read the version of %s: %s", path, error)
        return None


@dataclass(frozen=True)
class PartitionFiles:
    """One partition's data files at a version, as the Delta log's file statistics give them."""

    rows: int
    """The partition's rows (its files' ``numRecords`` summed)."""
    largest_file: int
    """The rows of its largest file."""
    lowest: Any
    """The smallest value of the column asked for, over its files."""


def _file_columns(path: str, version: int, names: Sequence[str]) -> list[list[Any]] | None:
    """These columns of the version's add actions (one value per data file: ``num_records``, ``partition.<p>``,
    ``min.<c>``, ...) as read from the Delta log by delta-rs (no Spark job, no data file read). None where that does
    not apply (``table_rows_at``'s cases), where a file lacks one of them (no statistics), or where a file has deleted
    rows (deletion vectors: its ``num_records`` counts them)."""
    folder = delta_rs_folder(path)
    if folder is None:
        return None
    from deltalake import DeltaTable

    try:
        table = DeltaTable(folder, version=version)
        if any(batch.num_rows for batch in table.deletion_vectors()):
            return None
        actions = table.get_add_actions(flatten=True)  # an arro3 table: no pyarrow conversion (~2 s the first time)
        if actions.num_rows == 0:
            return [[] for _ in names]  # no file (and then no statistics columns)
        if not set(names) <= set(actions.column_names):
            return None
        columns: list[list[Any]] = [list(actions.column(name).to_pylist()) for name in names]
        return None if any(value is None for column in columns for value in column) else columns
    except Exception as error:  # not readable this way: the caller asks Spark
        log.debug("delta-rs did not read the file statistics of %s at version %s: %s", path, version, error)
        return None


def file_rows_at(path: str, *, version: int, column: str | None = None) -> list[tuple[str | None, int]] | None:
    """Each data file of the table at ``version`` as (its value of partition column ``column``, or None without one;
    its rows), from the log's file statistics (``_file_columns``); None where they are not known."""
    names = ["num_records"] if column is None else ["num_records", f"partition.{column}"]
    found = _file_columns(path, version, names)
    if found is None:
        return None
    values = found[1] if column is not None else [None] * len(found[0])
    return [(None if v is None else str(v), int(rows)) for rows, v in zip(found[0], values, strict=True)]


def table_files_at(path: str, *, version: int, column: str) -> PartitionFiles | None:
    """The whole table's rows, its largest file's rows and the smallest value of ``column`` at ``version`` (None
    without a file), from the log's file statistics (``_file_columns``); None where they are not known."""
    found = _file_columns(path, version, ["num_records", f"min.{column}"])
    if found is None:
        return None
    records, lows = [int(r) for r in found[0]], found[1]
    return PartitionFiles(sum(records), max(records, default=0), min(lows, default=None))


def table_columns_at(path: str, *, version: int, columns: Sequence[str]) -> pa.Table | None:
    """These columns (no partition column) of every row of the table at ``version``, read on the driver from its data
    files with pyarrow (no Spark job); None where delta-rs does not apply, the table has no file, or a file has deleted
    rows (its deletion vector would have to be applied)."""
    folder = delta_rs_folder(path)
    if folder is None:
        return None
    from deltalake import DeltaTable

    try:
        table = DeltaTable(folder, version=version)
        if any(batch.num_rows for batch in table.deletion_vectors()) or set(columns) & set(
            table.metadata().partition_columns
        ):
            return None
        files = table.file_uris()
        return pq.read_table(files, columns=list(columns)) if files else None
    except Exception as error:  # not readable this way: the caller asks Spark
        log.debug("delta-rs did not read %s at version %s: %s", path, version, error)
        return None


def partition_files_at(path: str, *, version: int, partition: str, column: str) -> dict[str, PartitionFiles] | None:
    """Per value of the partition column ``partition``, its rows, its largest file's rows and the smallest value of
    ``column`` at ``version``, from the log's file statistics (``_file_columns``); None where they are not known."""
    found = _file_columns(path, version, ["num_records", f"partition.{partition}", f"min.{column}"])
    if found is None:
        return None
    out: dict[str, PartitionFiles] = {}
    for records, value, low in zip(*found, strict=True):
        seen = out.get(str(value))
        out[str(value)] = (
            PartitionFiles(int(records), int(records), low)
            if seen is None
            else PartitionFiles(seen.rows + records, max(seen.largest_file, records), min(seen.lowest, low))
        )
    return out
