"""A Delta table's definition, and its creation under the lakehouse root: idempotent, and safe beside other writers.

Jobs start side by side (the rules CDC job and the engine, as the bundle starts them; ``fraudlake init`` from a
terminal meanwhile): on a fresh lakehouse several of them create the same table at once. Delta lets one writer win
version 0 and fails the others (``ProtocolChangedException``: "multiple writers are writing to an empty
directory", or, while the winner is half-way, ``TABLE_OR_VIEW_ALREADY_EXISTS``). ``create_table`` takes the loss:
it looks again after a pause (``commit_conflicts.Backoff``) and accepts the winner's table when it is the table it
wanted (column types, partitioning, properties), else raises ``TableMismatchError`` naming the differences.

On a local lakehouse the creation also runs under an exclusive file lock per table (``_locks/<table>.lock`` beside
the tables): Delta's local log store makes a commit's "is version N free? then rename" atomic only inside one JVM,
so two processes could both write version 0, the second silently replacing the first. Other storage (cloud object
stores, Databricks) has a log store that does this itself; there the retries alone apply.

Example::

    spec = TableSpec(name="alerts", schema=ALERTS_SCHEMA, partition_by=("detectedDate",))
    create_table(spark, spec, settings.table_path(spec.name))   # twice, or from two jobs at once: one table
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from delta.tables import DeltaTable, DeltaTableBuilder
from pyspark.sql import SparkSession
from pyspark.sql.types import StructType

from delta_tables.commit_conflicts import Backoff, conflict_condition
from pipelines.base.file_lock import exclusive_lock
from pipelines.base.runtime_env import on_databricks

log = logging.getLogger(__name__)

COMMON_PROPERTIES: dict[str, str] = {
    # Streaming appends write many small files; let Delta compact them as it goes.
    "delta.autoOptimize.optimizeWrite": "true",
    "delta.autoOptimize.autoCompact": "true",
}

RETENTION_PROPERTY = "delta.deletedFileRetentionDuration"
"""How long VACUUM keeps unreferenced files (Delta 4 reads this, not VACUUM's argument)."""

CHECKPOINT_PROPERTY = "delta.checkpointInterval"


def checkpoint_every(commits: int) -> dict[str, str]:
    """The table property that makes Delta write a checkpoint every ``commits`` commits (Delta's default: 10)."""
    return {CHECKPOINT_PROPERTY: str(commits)}


DEFERRED_INTERVAL = 1000
"""``delta.checkpointInterval`` of a table on this machine's disk whose checkpoints the engine writes after its
batches (``TableSpec.checkpoint_every``, ``delta_tables.log_checkpoints``): Delta's own, on the commit path, only
every 1,000 commits, for a writer that runs without it."""


LOCKS_FOLDER = "_locks"
"""Beside the tables on a local lakehouse; ``_`` like ``_delta_log``: readers of the root skip it."""

LOCK_WAIT_S = 120.0
"""How long a creation waits for another process's creation of the same table (seconds, normally)."""


CREATE_BACKOFF = Backoff()
"""Pauses between looks at a table other writers are creating or altering (~13 s in all at most)."""


def retention_interval(hours: int) -> str:
    return f"interval {int(hours)} hours"


def file_retention(hours: int) -> dict[str, str]:
    """The retention property for ``hours``: set at creation, so the first VACUUM does not change the metadata
    (a metadata change fails every concurrent writer's commit)."""
    return {RETENTION_PROPERTY: retention_interval(hours)}


@dataclass(frozen=True)
class TableSpec:
    """Schema, layout and properties of one lakehouse table."""

    name: str
    schema: StructType
    comment: str
    partition_by: tuple[str, ...] = ()
    properties: dict[str, str] = field(default_factory=dict)
    # A table the engine commits to on every micro-batch: Delta's own checkpoint, in the commit that reaches the
    # interval (a state reconstruction, its validation and a Parquet write on the committing thread), would hold up
    # one batch in a few, so the engine writes it after the batch (delta_tables.log_checkpoints) and the table on this
    # machine's disk gets DEFERRED_INTERVAL. Elsewhere (an object store, Databricks) Delta's own every this many
    # commits; the five tables' intervals (10, 11, 13, 17, 19) are staggered so that one batch writes one checkpoint
    # and two coincide at most once in 110 batches.
    checkpoint_every: int | None = None

    def all_properties(self, path: str | None = None) -> dict[str, str]:
        """The table's properties; the checkpoint interval follows where ``path`` is (``checkpoint_every``)."""
        properties = {**COMMON_PROPERTIES, **self.properties}
        if self.checkpoint_every is not None:
            local = path is not None and local_folder(path) is not None
            properties.update(checkpoint_every(DEFERRED_INTERVAL if local else self.checkpoint_every))
        return properties


class TableMismatchError(RuntimeError):
    """The Delta table at a spec's path is not the table the spec describes."""


class TableConflictError(RuntimeError):
    """Other writers kept changing the table (or a crashed creation left ``_delta_log`` without version 0)."""


def create_table(
    spark: SparkSession,
    spec: TableSpec,
    path: str,
    *,
    properties: Mapping[str, str] | None = None,
    backoff: Backoff = CREATE_BACKOFF,
) -> bool:
    """Create the table at ``path`` unless a Delta table is there; return whether this call created it.

    ``properties`` are lakehouse-wide ones added to the spec's (e.g. ``file_retention``). A table already there
    must have the spec's column types (``TableMismatchError`` if not); the nullable columns it lacks (a lakehouse
    of an older release) are added. A table another writer created while this one tried (a lost race) must also
    have the spec's partitioning and these properties: both were meant to make the same table. Other writers
    that keep winning for ~13 s (``backoff``) raise ``TableConflictError``."""
    wanted = {**spec.all_properties(path), **(properties or {})}
    with _creation_lock(path):
        lost_race = False
        pauses = backoff.pauses()
        while True:
            try:
                if DeltaTable.isDeltaTable(spark, path):
                    _check_table(spark, spec, path, wanted if lost_race else None)
                    add_missing_columns(spark, spec, path)
                    return False
                try:
                    _builder(spark, spec, path, wanted).execute()
                    return True
                except Exception as error:
                    lost_race = lost_race or conflict_condition(error) is not None
                    raise
            except Exception as error:
                condition = conflict_condition(error)
                pause = next(pauses, None) if condition else None
                if pause is None:
                    if condition:
                        raise TableConflictError(
                            f"{path}: still conflicting after {backoff.attempts} attempts ({condition}): another "
                            "writer keeps changing it, or a creation that crashed left a _delta_log without "
                            "version 0 (remove that folder if nothing else uses the path)"
                        ) from error
                    raise
                log.info("table %s: %s (another writer); looking again in %.2f s", spec.name, condition, pause)
                time.sleep(pause)
                _refresh_snapshot(spark, path)


def _refresh_snapshot(spark: SparkSession, path: str) -> None:
    """Make this JVM look at the table's log again before the next ``isDeltaTable``.

    ``DeltaTable.isDeltaTable`` answers from the JVM's cached ``DeltaLog`` without updating it: once it saw the
    path while another process was half-way through its first commit (``_delta_log`` there, version 0 not yet),
    it says "no table" until the cache expires, whatever that process committed since. A read updates the cached
    snapshot; on a path that is still no table it fails, which is fine here."""
    try:
        columns = len(spark.read.format("delta").load(path).schema.fields)
    except Exception:  # still no table: the next attempt finds out how
        log.debug("table at %s: not readable yet", path)
    else:
        log.debug("table at %s: readable now (%d columns)", path, columns)


def table_mismatches(
    spark: SparkSession, spec: TableSpec, path: str, properties: Mapping[str, str] | None = None
) -> list[str]:
    """How the Delta table at ``path`` differs from ``spec``: a column of another type; with ``properties`` also
    other partition columns and a property missing or with another value. Extra columns, missing nullable columns
    (``add_missing_columns`` adds them) and extra properties are not differences.

    The column check reads only the schema (milliseconds): it runs on every start. Partitioning and properties take
    two more commands (tenths of a second each, seconds on a busy machine), paid only after a lost race."""
    have = {f.name: f.dataType.simpleString() for f in spark.read.format("delta").load(path).schema.fields}
    problems = [
        f"column {f.name} is {have[f.name]}, not {f.dataType.simpleString()}"
        for f in spec.schema.fields
        if f.name in have and have[f.name] != f.dataType.simpleString()
    ]
    if properties is None:
        return problems
    partitioned = partition_columns(spark, path)
    if partitioned != list(spec.partition_by):
        problems.append(f"partitioned by {partitioned}, not {list(spec.partition_by)}")
    rows = spark.sql(f"SHOW TBLPROPERTIES delta.{_quoted(path)}").collect()
    table_properties = {str(row[0]): str(row[1]) for row in rows}
    for key, value in properties.items():
        if table_properties.get(key) != value:
            problems.append(f"property {key} is {table_properties.get(key)!r}, not {value!r}")
    return problems


def partition_columns(spark: SparkSession, path: str) -> list[str]:
    """The table's partition columns, in order: the rows under ``# Partition Information`` of ``DESCRIBE TABLE``
    (cheaper than ``DESCRIBE DETAIL``, which also counts the table's files)."""
    rows = [(str(r[0] or ""), str(r[1] or "")) for r in spark.sql(f"DESCRIBE TABLE delta.{_quoted(path)}").collect()]
    names = [row[0] for row in rows]
    if "# Partition Information" not in names:
        return []
    after = rows[names.index("# Partition Information") + 1 :]
    if after and after[0][0] == "# col_name":
        after = after[1:]
    return [name for name, _ in itertools.takewhile(lambda r: r[0].strip() and not r[0].startswith("#"), after)]


def add_missing_columns(spark: SparkSession, spec: TableSpec, path: str) -> list[str]:
    """Add the spec's columns that an existing table lacks (a lakehouse made by an older release): nullable
    columns only, appended at the end, as ``ALTER TABLE ... ADD COLUMNS``. Returns their names.

    Two writers adding them at once: the second fails (``MetadataChangedException`` or ``FIELD_ALREADY_EXISTS``);
    ``create_table`` looks again and finds nothing left to add."""
    have = {f.name for f in spark.read.format("delta").load(path).schema.fields}
    missing = [f for f in spec.schema.fields if f.name not in have]
    if not missing:
        return []
    if any(not f.nullable for f in missing):
        raise ValueError(f"{path} lacks required columns {[f.name for f in missing]}: recreate the table")
    columns = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in missing)
    spark.sql(f"ALTER TABLE delta.{_quoted(path)} ADD COLUMNS ({columns})")
    return [f.name for f in missing]


def _builder(spark: SparkSession, spec: TableSpec, path: str, properties: Mapping[str, str]) -> DeltaTableBuilder:
    # ``create``, not ``createIfNotExists``: the latter accepts any table already at the path, whatever its schema,
    # and reports nothing; ``create`` fails there (TABLE_OR_VIEW_ALREADY_EXISTS) and the table gets checked.
    builder = DeltaTable.create(spark).location(path).addColumns(spec.schema).comment(spec.comment)
    if spec.partition_by:
        builder = builder.partitionedBy(*spec.partition_by)
    for key, value in properties.items():
        builder = builder.property(key, value)
    return builder


def _check_table(spark: SparkSession, spec: TableSpec, path: str, properties: Mapping[str, str] | None) -> None:
    problems = table_mismatches(spark, spec, path, properties)
    if problems:
        who = "another writer created it meanwhile: " if properties is not None else ""
        raise TableMismatchError(
            f"{path} is not the {spec.name} table this release expects ({who}{'; '.join(problems)})"
        )


def _quoted(path: str) -> str:
    """``path`` as a backticked SQL identifier (a backtick in it doubled): never a way out of the identifier."""
    return "`" + path.replace("`", "``") + "`"


def local_folder(path: str) -> Path | None:
    """The folder of a table on this machine's disk (a plain path or a ``file:`` URI); None elsewhere."""
    if on_databricks():
        return None  # its paths look local (/Volumes, /dbfs) but are not plain disks; its log store is safe
    parsed = urlparse(path)
    if parsed.scheme in ("", "file"):
        return Path(parsed.path if parsed.scheme else path)
    return None


@contextmanager
def _creation_lock(path: str) -> Iterator[None]:
    """Exclusive to one creator of ``path`` at a time on this machine (local lakehouses); nothing elsewhere."""
    folder = local_folder(path)
    if folder is None:
        yield
        return
    lock_file = folder.parent / LOCKS_FOLDER / f"{folder.name}.lock"
    with exclusive_lock(lock_file, wait_s=LOCK_WAIT_S, what=f"creating the table {folder}"):
        yield
