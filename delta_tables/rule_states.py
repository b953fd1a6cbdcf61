"""Rule states: the registry of shared states the engine keeps buckets for, and the window each is complete for.

One row per ``stateId`` (``Rule.state_id``). ``windowMinutes`` is the widest window of the live (ACTIVE or
PAUSED) rules of the state when it was last planned: retention keeps that much history, so a rule that needs a
wider one makes the engine rebuild the state from bronze. A state whose last rule is gone is deleted here and
its buckets dropped.

Example::

    replace_registry(rows_df, settings.table_path("rule_states"), tag=CommitTag("engine-x", 7, "registry"))
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType, TimestampType

from delta_tables.idempotent import CommitTag, overwrite_tagged
from delta_tables.table_spec import TableSpec

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
)


def replace_registry(frame: DataFrame, path: str, *, tag: CommitTag | None) -> None:
    """Overwrite the registry with ``frame`` (RULE_STATES_SCHEMA rows: one per state): the table is a few rows,
    so a whole rewrite is cheaper than a MERGE."""
    overwrite_tagged(frame, path, tag)
