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
with each is its own reading of the protocol: not taken on trust here.
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
from collections.abc import Sequence
from typing import Any, Literal

import pyarrow as pa
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


def _committed(folder: str, before: int, user_metadata: str | None) -> bool:
    """Whether a commit after version ``before`` carries ``user_metadata`` (without one: whether any came)."""
    from deltalake import DeltaTable

    try:
        table = DeltaTable(folder)
        if table.version() <= before:
            return False
        if user_metadata is None:
            return True
        newer = table.history(table.version() - before)
        return any(commit.get("userMetadata") == user_metadata for commit in newer)
    except Exception:
        return False
