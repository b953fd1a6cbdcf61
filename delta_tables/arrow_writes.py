"""Small Delta tables written from the driver with delta-rs where it writes what Spark would, else with Spark.

The engine writes two small tables on a micro-batch's path: the state registry (``rule_states``, a row per shared
state), overwritten after every rule change that adds, widens or drops a state, and the batch log (``batch_log``),
a row appended at the end of every batch. A Spark write of a few rows is a local relation, a write job and Delta's
commit (an overwrite also reconstructs the table's state from the log to count the files it removes): 0.3-0.7 s on
two warm cores (the batch log's append: two SQL executions, 0.53 s of a 5-6-s batch on 2 busy cores), more in a
fresh JVM. The ``deltalake`` library (delta-rs, which already reads these tables: ``arrow_reads``) writes the same
Parquet file and the same commit, with the batch's tag in ``commitInfo.userMetadata`` as Spark puts it there, in a
few milliseconds and no Spark job.

delta-rs writes only where ``arrow_reads`` reads (``delta_rs_folder``: a table on this machine's disk, with the
library installed), only a table of the plain protocol (reader version 1, writer version 2 at most: no table
feature, no column mapping; the registry's and the batch log's are 1/2, whose NOT NULL invariants delta-rs checks
as Spark does), and only column types this module maps to Arrow (strings, integers, doubles, timestamps, maps of
them). delta-rs 1.6 would also write some tables with features (deletion vectors, column mapping), but what it does
with each is its own reading of the protocol: not taken on trust here, with one exception checked by its own test
(``overwrite_partitions_at``: retention's fold of a state, the cooldown memory's rewrite): whole partitions, or a
whole unpartitioned table, replaced in a table that has deletion vectors enabled but none on any file, the removes
then being plain ones.
Anything else, and any error before the commit, writes with Spark. An error after delta-rs committed (a post-commit
hook: its checkpoint) is no second write: the commit is found by its tag and counts as written.

Example::

    if not overwrite_rows_at(path, rows, RULE_STATES_SCHEMA, user_metadata=tag.to_json()):
        overwrite_tagged(local_frame(spark, rows, RULE_STATES_SCHEMA), path, tag)
    if not append_rows_at(path, [row], BATCH_LOG_SCHEMA, user_metadata=tag.to_json()):
        append_tagged(local_frame(spark, [row], BATCH_LOG_SCHEMA), path, tag)
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Collection, Sequence
from typing import Any, Literal

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.types import (
    DataType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructType,
    TimestampType,
)

from delta_tables.arrow_reads import delta_rs_folder
from delta_tables.version_checksum import carry_checksum

log = logging.getLogger(__name__)

PLAIN_PROTOCOL = (1, 2)
"""The newest (reader, writer) protocol versions this module lets delta-rs write: no table features."""

_ARROW_TYPES: dict[type[DataType], pa.DataType] = {
    StringType: pa.string(),
    IntegerType: pa.int32(),
    LongType: pa.int64(),
    DoubleType: pa.float64(),
    TimestampType: pa.timestamp("us", tz="UTC"),  # Delta's timestamp is an instant; a naive datetime is UTC here
}


def _arrow_type(data_type: DataType) -> pa.DataType | None:
    """``data_type`` in Arrow's types; None for a type this module does not map. A map's keys are never null."""
    if isinstance(data_type, MapType):
        key, value = _arrow_type(data_type.keyType), _arrow_type(data_type.valueType)
        if key is None or value is None:
            return None
        return pa.map_(key, pa.field("value", value, nullable=data_type.valueContainsNull))
    return _ARROW_TYPES.get(type(data_type))


def _arrow_schema(schema: StructType) -> pa.Schema | None:
    """``schema`` in Arrow's types (nullability kept); None when a column has a type this module does not map."""
    fields = []
    for field in schema.fields:
        arrow_type = _arrow_type(field.dataType)
        if arrow_type is None:
            return None
        fields.append(pa.field(field.name, arrow_type, nullable=field.nullable))
    return pa.schema(fields)


def _arrow_values(values: Sequence[Any], arrow_type: pa.DataType) -> pa.Array:
    if pa.types.is_map(arrow_type):  # a dict per row: Arrow takes a map's entries as (key, value) pairs
        values = [None if v is None else list(v.items()) for v in values]
    return pa.array(list(values), type=arrow_type)


def overwrite_rows_at(
    path: str, rows: Sequence[Sequence[Any]], schema: StructType, *, user_metadata: str | None
) -> bool:
    """Replace the content of the Delta table at ``path`` with ``rows`` (tuples in ``schema``'s column order) in one
    delta-rs commit carrying ``user_metadata``. False when that does not apply (see the module) and nothing was
    committed: the caller writes with Spark."""
    return _write_rows_at(path, rows, schema, mode="overwrite", user_metadata=user_metadata)


def append_rows_at(path: str, rows: Sequence[Sequence[Any]], schema: StructType, *, user_metadata: str | None) -> bool:
    """Append ``rows`` (tuples in ``schema``'s column order; a map column's value a dict) to the Delta table at
    ``path`` in one delta-rs commit carrying ``user_metadata``. False when that does not apply (see the module) and
    nothing was committed: the caller writes with Spark."""
    return _write_rows_at(path, rows, schema, mode="append", user_metadata=user_metadata)


def _write_rows_at(
    path: str,
    rows: Sequence[Sequence[Any]],
    schema: StructType,
    *,
    mode: Literal["append", "overwrite"],
    user_metadata: str | None,
) -> bool:
    folder = delta_rs_folder(path)
    target = _arrow_schema(schema)
    if folder is None or target is None:
        return False
    from deltalake import CommitProperties, DeltaTable, write_deltalake

    columns = list(zip(*rows, strict=True)) if rows else [() for _ in schema.fields]
    data = pa.Table.from_arrays(
        [_arrow_values(values, f.type) for values, f in zip(columns, target, strict=True)], schema=target
    )
    properties = CommitProperties(custom_metadata={"userMetadata": user_metadata}) if user_metadata else None
    before: int | None = None
    try:
        table = DeltaTable(folder)
        protocol = table.protocol()
        if protocol.min_reader_version > PLAIN_PROTOCOL[0] or protocol.min_writer_version > PLAIN_PROTOCOL[1]:
            return False
        before = table.version()
        write_deltalake(table, data, mode=mode, commit_properties=properties)
        return True
    except Exception as error:
        if before is not None and _committed(folder, before, user_metadata):
            log.warning("delta-rs committed the %s of %s, then failed: %s", mode, path, error)
            return True
        log.debug("delta-rs did not %s %s: %s", mode, path, error)
        return False


def frame_as_arrow(frame: DataFrame) -> pa.Table:
    """A Spark frame's rows on the driver as Arrow, its timestamps as Delta's (microseconds, UTC)."""
    data = frame.toArrow()
    utc = pa.timestamp("us", tz="UTC")
    return pa.Table.from_arrays(
        [c.cast(utc) if pa.types.is_timestamp(c.type) else c for c in data.columns], names=data.column_names
    )


DELETION_VECTOR_FEATURES = {"deletionVectors", "invariants", "appendOnly"}
"""The table features with which ``overwrite_partitions_at`` lets delta-rs replace whole partitions: deletion
vectors *enabled* (the state table's), as long as no file has one (checked at the version read)."""
PARTITION_VALUE = re.compile(r"^[A-Za-z0-9_.:-]+$")
"""The partition values ``overwrite_partitions_at`` puts in delta-rs' predicate (the engine's state ids); any other
goes to Spark, whose writer takes them quoted (no predicate text is built from anything else)."""


DRIVER_OVERWRITE_ROWS = 1_000_000
"""A fold (the state's, the cooldown memory's) of at most this many rows, as its caller bounds them, is written from
the driver by ``overwrite_partitions_at`` where it applies; a larger one by Spark."""


def overwrite_partitions_at(
    path: str,
    data: Callable[[], pa.Table],
    *,
    partition: str | None,
    values: Collection[str] = (),
    read_version: int,
    user_metadata: str | None,
) -> bool:
    """Replace the partitions ``partition IN values`` of the Delta table at ``path`` (``partition`` None: the whole
    table, which has no partition column) with ``data()`` (Arrow, the table's columns, only rows of those partitions;
    called only once delta-rs applies) in one delta-rs commit on top of ``read_version``, carrying ``user_metadata``.
    A partition-only overwrite: the files of those partitions are removed whole, as Spark's ``replaceWhere`` on a
    partition column does, without Spark's reconstruction of the table's state (~1 s of a 2.5-3-s overwrite of a
    120,000-row state).

    Only where delta-rs applies (a local table, the library installed), the table partitioned by ``partition`` alone,
    its features within ``DELETION_VECTOR_FEATURES`` and no deletion vector on any file at ``read_version`` (a
    removed file's deletion vector would then have to travel with its remove), not append-only, and values matching
    ``PARTITION_VALUE``. A commit after ``read_version`` makes delta-rs' conflict check refuse (Spark then writes).
    False when nothing was committed: the caller writes with Spark."""
    folder = delta_rs_folder(path)
    if folder is None or (partition is not None and not (values and all(PARTITION_VALUE.match(v) for v in values))):
        return False
    from deltalake import CommitProperties, DeltaTable, write_deltalake

    properties = CommitProperties(custom_metadata={"userMetadata": user_metadata}) if user_metadata else None
    try:
        table = DeltaTable(folder, version=read_version)
        protocol, metadata = table.protocol(), table.metadata()
        features = set(protocol.writer_features or []) | set(protocol.reader_features or [])
        if (
            protocol.min_writer_version > 7
            or not features <= DELETION_VECTOR_FEATURES
            or metadata.configuration.get("delta.appendOnly", "false").lower() == "true"
            or list(metadata.partition_columns) != ([partition] if partition else [])
            or any(batch.num_rows for batch in table.deletion_vectors())
        ):
            return False
        predicate = f"{partition} IN ({', '.join(repr(v) for v in sorted(values))})" if partition else None
        write_deltalake(table, data(), mode="overwrite", predicate=predicate, commit_properties=properties)
    except Exception as error:
        if _committed(folder, read_version, user_metadata):  # untagged: Spark writes the same partitions again
            log.warning("delta-rs committed the overwrite of %s, then failed: %s", path, error)
            return True
        log.debug("delta-rs did not overwrite %s: %s", path, error)
        return False
    carry_checksum(folder, version=read_version + 1)  # else Spark reconstructs the table's state to make one
    return True


def overwrite_frame_at(
    frame: DataFrame,
    path: str,
    *,
    partition: str | None,
    values: Collection[str] = (),
    read_version: int | None,
    rows_at_most: int | None,
    user_metadata: str | None,
) -> bool:
    """``overwrite_partitions_at`` for a Spark frame (the table's columns): its rows come to the driver as Arrow only
    where delta-rs applies and the caller's bound on them (``rows_at_most``) is within ``DRIVER_OVERWRITE_ROWS``.
    False when nothing was committed (a version or bound not known, too many rows, delta-rs not applying): the caller
    writes with Spark."""
    if read_version is None or rows_at_most is None or rows_at_most > DRIVER_OVERWRITE_ROWS:
        return False
    return overwrite_partitions_at(
        path,
        lambda: frame_as_arrow(frame),
        partition=partition,
        values=values,
        read_version=read_version,
        user_metadata=user_metadata,
    )


APPEND_FEATURES = {"appendOnly", "invariants", "changeDataFeed", "deletionVectors"}
"""The table features with which ``append_frame_at`` lets delta-rs append: none asks an appender for more than adding
files whose NOT NULL columns hold values (delta-rs checks invariants as Spark does; an append writes no change-data
file, the feed reads its rows from the added files; a new file has no deletion vector)."""
DRIVER_APPEND_ROWS = 100_000
"""An append of at most this many rows (the caller's bound) may come to the driver for delta-rs; a larger one Spark
writes."""


def append_frame_at(frame: DataFrame, path: str, *, rows_at_most: int, user_metadata: str | None) -> bool:
    """Append ``frame`` (the table's columns, at most ``rows_at_most`` rows as its caller counted them) to the Delta
    table at ``path`` in one delta-rs commit carrying ``user_metadata``, its rows brought to the driver as Arrow, and
    carry the table's checksum to the new version (``version_checksum``). A Spark append of a few hundred rows is a
    write job and Delta's commit, 0.25-0.4 s of a warm micro-batch (the alerts', the cooldown memory's); this is one
    small collect and a few milliseconds.

    Only where delta-rs applies (a local table, the library installed), the table's features within
    ``APPEND_FEATURES`` (a legacy protocol: writer version 2 at most), and ``rows_at_most`` within
    ``DRIVER_APPEND_ROWS``. False when nothing was committed: the caller writes with Spark."""
    folder = delta_rs_folder(path)
    if folder is None or rows_at_most > DRIVER_APPEND_ROWS:
        return False
    from deltalake import CommitProperties, DeltaTable, write_deltalake

    properties = CommitProperties(custom_metadata={"userMetadata": user_metadata}) if user_metadata else None
    before: int | None = None
    try:
        table = DeltaTable(folder)
        protocol = table.protocol()
        features = set(protocol.writer_features or []) | set(protocol.reader_features or [])
        legacy = protocol.min_writer_version <= PLAIN_PROTOCOL[1] and protocol.min_reader_version <= PLAIN_PROTOCOL[0]
        if not legacy and (protocol.min_writer_version != 7 or not features <= APPEND_FEATURES):
            return False
        before = table.version()
        write_deltalake(table, frame_as_arrow(frame), mode="append", commit_properties=properties)
    except Exception as error:
        if before is not None and _committed(folder, before, user_metadata):
            log.warning("delta-rs committed the append to %s, then failed: %s", path, error)
            return True
        log.debug("delta-rs did not append to %s: %s", path, error)
        return False
    carry_checksum(folder, version=before + 1)  # else Spark reconstructs the table's state at its next commit
    return True


def _committed(folder: str, before: int, user_metadata: str | None) -> bool:
    """Whether a commit after version ``before`` carries ``user_metadata``. False without one: a later commit could be
    anyone's, so the caller writes again (harmless for an overwrite; the engine tags every write it makes)."""
    if user_metadata is None:
        return False
    from deltalake import DeltaTable

    try:
        table = DeltaTable(folder)
        if table.version() <= before:
            return False
        newer = table.history(table.version() - before)
        return any(commit.get("userMetadata") == user_metadata for commit in newer)
    except Exception:
        return False
