"""Put rules straight into the rules table, without CDC: for the engine's tests.

The production path is the rules CDC job (``delta_tables.rules_merge``: newest source position wins); this
writes rows as given, so a test can create, update, pause, resume and delete rules between micro-batches.

Example::

    put_rule_rows(spark, settings.table_path("rules"), [rule_to_row(rule, source_position="seed:1",
                                                                    source_op="c", source_ts_ms=None)])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from delta_tables.idempotent import append_tagged
from delta_tables.local_rows import local_frame
from delta_tables.rules import RULES_SCHEMA
from delta_tables.table_snapshot import table_file_count


def put_rule_rows(spark: SparkSession, path: str, rows: Sequence[dict[str, Any]]) -> None:
    """Write rules-table rows (RULES_SCHEMA dicts, one per ruleId) as they are, in one commit: a MERGE (an append
    into an empty table).

    Condition: ``t.ruleId = s.ruleId``. Clauses, in this order: ``whenMatchedUpdateAll`` (the row replaces the
    rule, tombstones included), ``whenNotMatchedInsertAll``. Into a table its newest checksum says is empty (the
    first rules of a fresh lakehouse, most tests' only put), the same rows are an append: the same table, without
    the MERGE's state reconstruction, match scan and rewrite (~0.3 s instead of ~1.1 s a put in a warm session).
    """
    if not rows:
        return
    source = local_frame(spark, [{f.name: row.get(f.name) for f in RULES_SCHEMA.fields} for row in rows], RULES_SCHEMA)
    if table_file_count(spark, path) == 0:
        append_tagged(source, path, None, files=1)
        return
    (
        DeltaTable.forPath(spark, path)
        .alias("t")
        .merge(source.alias("s"), "t.ruleId = s.ruleId")
        .whenMatchedUpdateAll()
        .whenNotMatchedInsertAll()
        .execute()
    )
