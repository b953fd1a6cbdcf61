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

Example::

    rows = table_rows(spark, settings.table_path("rules"), version=12)
    newest_version_at(settings.table_path("rule_states"))   # 7, or None where delta-rs does not apply
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

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
