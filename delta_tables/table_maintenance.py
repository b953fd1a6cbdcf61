"""Table maintenance: OPTIMIZE (bin-packing compaction) then VACUUM, for every lakehouse table.

Streaming appends and MERGEs leave many small files; OPTIMIZE rewrites them into few large ones, VACUUM deletes
the files no version within the retention still references. Delta 4 ignores VACUUM's retention argument (unless
0) and reads the table property ``delta.deletedFileRetentionDuration`` instead, so the configured retention is
written to that property (once, when it differs) before vacuuming; ``init_lakehouse`` already sets it at
creation, so that the first VACUUM does not change the metadata under a running writer. Keep it at least as
long as the longest time a reader (a stream, a time-travel query) may lag.

Deleting old *buckets* (state retention) is the engine's job, not this module's: it knows each state's window.

Example::

    for result in maintain_lakehouse(spark, settings):
        print(result.table, result.files_removed, result.files_added)
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from delta_tables.arrow_compaction import compact_files_at
from delta_tables.catalog import all_tables
from delta_tables.table_snapshot import table_file_count
from delta_tables.table_spec import RETENTION_PROPERTY, retention_interval
from pipelines.base.runtime_env import on_databricks
from pipelines.base.settings import Settings
from pipelines.base.spark_session import session_confs

_LISTING_PARALLELISM = "spark.sql.sources.parallelPartitionDiscovery.parallelism"


@dataclass(frozen=True)
class MaintenanceResult:
    table: str
    path: str
    present: bool
    files_removed: int = 0
    files_added: int = 0
    vacuumed: bool = False


def optimize_table(spark: SparkSession, path: str) -> tuple[int, int]:
    """Compact the table's small files; return (files removed, files added)."""
    row = DeltaTable.forPath(spark, path).optimize().executeCompaction().first()
    metrics: dict[str, Any] = row["metrics"].asDict() if row is not None else {}
    return int(metrics.get("numFilesRemoved", 0)), int(metrics.get("numFilesAdded", 0))


def compact_small_files(spark: SparkSession, path: str, *, min_files: int) -> bool:
    """Bin-pack the table's small files if it holds at least ``min_files`` data files; return whether it ran. With
    delta-rs where it applies (``arrow_compaction.compact_files_at``: files counted in the log, no Spark job), else
    Spark's OPTIMIZE (files counted from the newest version's checksum; when that is unknown, compact).

    Like Delta's auto compaction (``spark.databricks.delta.autoCompact.minNumFiles``, 50 by default): a table of a
    few files gains nothing from a rewrite, and each OPTIMIZE rewrites every small file again (the last compaction's
    output with the few files appended since), plus a state reconstruction job and a commit.
    """
    done = compact_files_at(path, min_files=min_files)
    if done is not None:
        return done
    files = table_file_count(spark, path)
    if files is not None and files < min_files:
        return False
    optimize_table(spark, path)
    return True


@contextmanager
def _listing_parallelism(spark: SparkSession, parallelism: int) -> Iterator[None]:
    """VACUUM lists files with 10000 tasks by default: minutes of scheduling on a laptop. Not on Databricks."""
    if on_databricks():
        yield
        return
    with session_confs(spark, {_LISTING_PARALLELISM: str(parallelism)}):
        yield


def vacuum_table(spark: SparkSession, path: str, retention_hours: int, *, parallelism: int = 8) -> bool:
    """Set the table's file retention to ``retention_hours`` if it differs, then VACUUM; return whether it was set."""
    table = DeltaTable.forPath(spark, path)
    wanted = retention_interval(retention_hours)
    detail = table.detail().first()
    properties: dict[str, str] = dict(detail["properties"]) if detail is not None else {}
    changed = properties.get(RETENTION_PROPERTY) != wanted
    if changed:
        spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('{RETENTION_PROPERTY}' = '{wanted}')")
    with _listing_parallelism(spark, parallelism):
        table.vacuum()
    return changed


def maintain_lakehouse(
    spark: SparkSession,
    settings: Settings,
    tables: Sequence[str] | None = None,
    *,
    vacuum: bool = True,
) -> list[MaintenanceResult]:
    """OPTIMIZE then (unless ``vacuum`` is False) VACUUM each table (default: every table in the catalog).

    A table that does not exist yet is reported as not present, not an error.
    """
    specs = all_tables(settings)
    known = [spec.name for spec in specs]
    unknown = sorted(set(tables or ()) - set(known))
    if unknown:
        raise ValueError(f"unknown tables {unknown}; known: {', '.join(known)}")
    results = []
    for name in [n for n in known if not tables or n in tables]:
        path = settings.table_path(name)
        if not DeltaTable.isDeltaTable(spark, path):
            results.append(MaintenanceResult(name, path, present=False))
            continue
        removed, added = optimize_table(spark, path)
        if vacuum:
            vacuum_table(
                spark, path, settings.maintenance.vacuum_retention_hours, parallelism=settings.spark.shuffle_partitions
            )
        results.append(MaintenanceResult(name, path, True, removed, added, vacuum))
    return results
