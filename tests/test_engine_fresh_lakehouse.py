"""A fresh lakehouse's first micro-batch takes the shortcuts its empty tables allow, and later batches do not.

On a fresh lakehouse the bucket state, the cooldown memory and the state registry have no data file (their newest
checksum says so: ``table_snapshot.table_file_count``). The first batch then starts the engine's caches of the two
tables from an empty RDD instead of scanning them (the caches must still have the hash layout by (state, key) the
evaluation's joins rely on). The registry, first and later, is overwritten by delta-rs on the driver
(``delta_tables.arrow_writes``: no Spark job), not by Spark. Alerts equal the reference evaluator's throughout.
"""

from __future__ import annotations

from delta.tables import DeltaTable
from engine_fixtures import alerts_by_id, make_rule, put_rules, raw_frame
from lakehouse_template import fresh_lakehouse
from pyspark.sql import DataFrame, SparkSession
from reference_evaluator import RefBatch, evaluate

from pipelines.base.settings import Settings
from pipelines.engine.batch_handler import BatchHandler
from pipelines.engine.keys import encode_key
from pipelines.generator.transactions import FraudRates, GeneratorConfig, generate, to_json


def _partitioning(frame: DataFrame) -> str:
    return str(frame._jdf.queryExecution().executedPlan().outputPartitioning().toString())


def _registry_writes(spark: SparkSession, settings: Settings) -> list[tuple[int, str, str]]:
    history = DeltaTable.forPath(spark, settings.table_path("rule_states")).history()
    rows = history.where("operation = 'WRITE'").select("version", "operationParameters", "engineInfo").collect()
    return sorted((r["version"], r["operationParameters"]["mode"], r["engineInfo"].split(":")[0]) for r in rows)


def test_the_first_batch_writes_the_registry_without_spark_and_starts_the_caches_with_their_layout(
    spark: SparkSession, settings: Settings
) -> None:
    config = GeneratorConfig(
        seed=5,
        start_ms=1_700_006_400_000,
        events_per_second=2.0,
        payers=6,
        beneficiaries=10,
        fraud=FraudRates.split(0.05),
    )
    records = generate(config, 120)
    first, second = records[:60], records[60:]
    counted = make_rule(1, aggregatorFunctionType="COUNT", limit=3, windowMinutes=2, cooldownMinutes=1)
    rules = [counted, make_rule(2, limit=300)]  # a cooldown: the batch reads the cooldown memory's cache
    added = [*rules, make_rule(3, groupingKeyNames=["beneficiaryId"], limit=400, windowMinutes=30)]
    fresh_lakehouse(spark, settings)
    put_rules(spark, settings, rules)
    handler = BatchHandler(settings, app_id="engine-fresh", report=lambda line: None)

    handler.process(raw_frame(spark, [to_json(r) for r in first]), 0)
    assert _registry_writes(spark, settings) == [(1, "Overwrite", "delta-rs")]
    registry = spark.read.format("delta").load(settings.table_path("rule_states"))
    states = registry.count()
    assert states >= 1
    state, memory = handler._state.frame(), handler._memory.frame()
    assert _partitioning(state).startswith("hashpartitioning(stateId#") and "keyValue#" in _partitioning(state)
    assert _partitioning(memory).startswith("hashpartitioning(ruleId#") and "keyValue#" in _partitioning(memory)

    put_rules(spark, settings, added, tick=1)  # a new state: its backfill and a registry of two rows
    handler.process(raw_frame(spark, [to_json(r) for r in second]), 1)
    assert _registry_writes(spark, settings) == [(1, "Overwrite", "delta-rs"), (2, "Overwrite", "delta-rs")]
    assert spark.read.format("delta").load(settings.table_path("rule_states")).count() == states + 1

    expected = {
        (a.rule_id, a.transaction_id): (encode_key(a.key), a.aggregate_value)
        for a in evaluate([RefBatch(rules, first), RefBatch(added, second)])
    }
    assert expected and alerts_by_id(spark, settings) == expected
