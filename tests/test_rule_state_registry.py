"""The state registry (``rule_states``) the engine remembers after writing it, and when it does not.

A batch whose rules need other states writes the registry; the next batch plans against that version. The engine
keeps what it wrote instead of reading it back (``RulesCache.registry_written``), but only when its write is the
version right after the one it read: a registry written by anyone else in between is read from the table. (That
what an engine run remembers equals the table, with no Spark job to get it: tests/test_engine_contract_lifecycle.py.)
"""

from __future__ import annotations

import datetime as dt

from lakehouse_template import fresh_lakehouse
from pyspark.sql import SparkSession

from delta_tables.rule_states import replace_registry
from delta_tables.table_snapshot import table_version
from pipelines.base.settings import Settings
from pipelines.engine.states import RegistryEntry, RulesCache, read_registry


def test_a_registry_written_by_someone_else_in_between_is_read_from_the_table(
    spark: SparkSession, settings: Settings
) -> None:
    fresh_lakehouse(spark, settings)
    path = settings.table_path("rule_states")
    cache = RulesCache(settings.table_path("rules"), path, settings.transaction_schema)
    read = table_version(spark, path)
    now = dt.datetime(2026, 1, 1)

    def write(state_id: str, window: int) -> RegistryEntry:
        replace_registry(spark, [(state_id, "{}", window, 0, 0, now)], path, tag=None)
        return RegistryEntry(state_id, window, 0, 0)

    mine = write("s-mine", 10)
    cache.registry_written(spark, {"s-mine": mine}, read_version=read)
    assert cache.registry(spark, read + 1) == {"s-mine": mine} == read_registry(spark, path, version=read + 1)

    theirs = write("s-theirs", 60)  # someone else's version read + 2, then "mine" as read + 3
    write("s-mine", 30)
    cache.registry_written(spark, {"s-mine": RegistryEntry("s-mine", 30, 0, 0)}, read_version=read + 1)
    assert cache.registry(spark, read + 2) == {"s-theirs": theirs}
    assert cache.registry(spark, read + 3) == read_registry(spark, path, version=read + 3)
