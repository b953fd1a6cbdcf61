"""The state registry (``rule_states``) the engine remembers after writing it is the table's content at that version.

A batch whose rules need other states writes the registry; the next batch plans against that version. The engine
keeps what it wrote instead of reading it back (``RulesCache.registry_written``), but only when its write is the
version right after the one it read: a registry written by anyone else in between is read from the table.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from engine_fixtures import make_rule, put_rules, raw_frame
from lakehouse_template import fresh_lakehouse
from pyspark.sql import SparkSession

from delta_tables.idempotent import table_version
from delta_tables.local_rows import local_frame
from delta_tables.rule_states import RULE_STATES_SCHEMA, replace_registry
from pipelines.base.settings import Settings
from pipelines.engine.batch_handler import BatchHandler
from pipelines.engine.states import RegistryEntry, RulesCache, read_registry


def test_the_registry_a_batch_wrote_is_what_the_next_batch_plans_against(
    spark: SparkSession, settings: Settings
) -> None:
    fresh_lakehouse(spark, settings)
    path = settings.table_path("rule_states")
    handler = BatchHandler(settings, app_id="engine-registry", report=lambda line: None)
    record = {"transactionId": "t0", "eventTime": 1_700_006_400_000, "payerId": 1, "paymentAmount": Decimal("20")}
    put_rules(spark, settings, [make_rule(1, limit=10)])
    handler.process(raw_frame(spark, [record]), 0)  # one new state: the registry written
    put_rules(spark, settings, [make_rule(2, groupingKeyNames=["beneficiaryId"], windowMinutes=30)], tick=1)
    second = {**record, "transactionId": "t1", "beneficiaryId": 7}
    counts = handler.process(raw_frame(spark, [second]), 1)  # another new state: written again
    assert counts["states"] == 2

    version = table_version(spark, path)
    remembered = handler._rules.registry(spark, version)  # what batch 2 would plan against
    assert remembered == read_registry(spark, path, version=version)
    assert {e.created_batch_id for e in remembered.values()} == {0, 1}


def test_a_registry_written_by_someone_else_in_between_is_read_from_the_table(
    spark: SparkSession, settings: Settings
) -> None:
    fresh_lakehouse(spark, settings)
    path = settings.table_path("rule_states")
    cache = RulesCache(settings.table_path("rules"), path, settings.transaction_schema)
    read = table_version(spark, path)
    now = dt.datetime(2026, 1, 1)

    def write(state_id: str, window: int) -> RegistryEntry:
        replace_registry(local_frame(spark, [(state_id, "{}", window, 0, 0, now)], RULE_STATES_SCHEMA), path, tag=None)
        return RegistryEntry(state_id, window, 0, 0)

    mine = write("s-mine", 10)
    cache.registry_written(spark, {"s-mine": mine}, read_version=read)
    assert cache.registry(spark, read + 1) == {"s-mine": mine} == read_registry(spark, path, version=read + 1)

    theirs = write("s-theirs", 60)  # someone else's version read + 2, then "mine" as read + 3
    write("s-mine", 30)
    cache.registry_written(spark, {"s-mine": RegistryEntry("s-mine", 30, 0, 0)}, read_version=read + 1)
    assert cache.registry(spark, read + 2) == {"s-theirs": theirs}
    assert cache.registry(spark, read + 3) == read_registry(spark, path, version=read + 3)
