"""Rule states: the registry of shared states the engine keeps buckets for, and the window each is complete for.

One row per ``stateId`` (``Rule.state_id``). ``windowMinutes`` is the widest window of the live (ACTIVE or
PAUSED) rules of the state when it was last planned: retention keeps that much history, so a rule that needs a
wider one makes the engine rebuild the state from bronze. A state whose last rule is gone is deleted here and
its buckets dropped.

Example::

    replace_registry(spark, rows, settings.table_path("rule_states"), tag=CommitTag("engine-x", 7, "registry"))
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType, TimestampType

from delta_tables.arrow_writes import overwrite_rows_at
from delta_tables.idempotent import CommitTag, overwrite_tagged
from delta_tables.local_rows import local_frame
from delta_tables.table_spec import TableSpec, checkpoint_every

RULE_STATES_SCHEMA = StructType(
    [
        StructField("stateId", StringType(), False),
        StructField("signature", StringType(), False),  # JSON: grouping keys, aggregate field, filter
        StructField("windowMinutes", IntegerType(), False),
        StructField("createdBatchId", LongType(), False),
        StructField("updatedBatchId", LongType(), False),
        StructField("updatedAt", TimestampType(), False),
    ]
)

RULE_STATES = TableSpec(
    name="rule_states",
    schema=RULE_STATES_SCHEMA,
    comment="Registry of shared rule states: signature and the window their buckets are complete for.",
    properties=checkpoint_every(10),  # Delta's default, written out: delta-rs, its writer, would take 100
)


def replace_registry(spark: SparkSession, rows: Sequence[Sequence[Any]], path: str, *, tag: CommitTag | None) -> None:
    """Overwrite the registry with ``rows`` (tuples in RULE_STATES_SCHEMA's order: one per state) in one commit
    carrying ``tag``: the table is a few rows, so a whole rewrite is cheaper than a MERGE. Written by delta-rs on the
    driver where it applies (``arrow_writes``: no Spark job), else by Spark."""
    if not overwrite_rows_at(path, rows, RULE_STATES_SCHEMA, user_metadata=tag.to_json() if tag else None):
        overwrite_tagged(local_frame(spark, rows, RULE_STATES_SCHEMA), path, tag)
