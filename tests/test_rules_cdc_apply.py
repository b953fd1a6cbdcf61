"""Applying CDC batches to real Delta tables: replays of a batch, and convergence of shuffled deliveries."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import random
from pathlib import Path

from delta.tables import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql.types import StructType
from rules_cdc_support import SEED, records, reshaped, rule_event, sample, sample_pg_position, stable, table_rows

from delta_tables.rules import RULES, RULES_SCHEMA
from delta_tables.rules_merge import commit_tag, merge_rules, rules_frame
from delta_tables.table_spec import create_table
from pipelines.base.settings import Settings
from rules_cdc.apply_changes import apply_records, ensure_rules_tables, read_view
from rules_cdc.parse_events import parse_records
from rules_cdc.plan_changes import final_rows, plan_batch
from rules_cdc.rule_model import parse_rule
from rules_cdc.rule_rows import RULE_FIELDS, TRUNCATE_MARKER_ID, rule_from_row, rule_to_row
from rules_cdc.rules_views import read_rules, rules_json, rules_table_text


def test_a_replayed_batch_changes_nothing_and_completes_a_half_written_one(
    spark: SparkSession, settings: Settings
) -> None:
    ensure_rules_tables(spark, settings)
    lines = [rule_event("c", 1, 1000, settings.transaction_schema), "not json"]
    first = apply_records(spark, settings, records(lines), txn=("app-a", 0))
    again = apply_records(spark, settings, records(lines), txn=("app-a", 0))
    assert (first.applied, first.quarantined, first.replayed) == (1, 1, False)
    assert (again.replayed, again.rules_version) == (True, first.rules_version)
    assert len(table_rows(spark, settings, "rule_changes")) == 1
    assert len(table_rows(spark, settings, "quarantine")) == 1

    # Batch 1 dies after its MERGE committed and before its change-log append; the replay completes it.
    lines = [rule_event("u", 1, 2000, settings.transaction_schema, ruleState="PAUSED")]
    rules_path = settings.table_path("rules")
    now = dt.datetime(2024, 11, 22, 8, 0)
    plan = plan_batch(
        parse_records(records(lines), settings.transaction_schema).events, read_view(spark, rules_path), now
    )
    commit = merge_rules(
        spark,
        rules_path,
        rules_frame(spark, list(plan.rows)),
        truncate_below=None,
        marker_id=TRUNCATE_MARKER_ID,
        commit_tag=commit_tag("app-a", 1),
        txn=("app-a", 1),
    )
    assert commit is not None and commit.metrics["numTargetRowsUpdated"] == 1
    version = commit.version
    replay = apply_records(spark, settings, records(lines), txn=("app-a", 1))
    assert (replay.replayed, replay.rules_version, replay.applied) == (True, version, 1)
    log = sorted(table_rows(spark, settings, "rule_changes"), key=lambda r: r["sourcePosition"])
    assert [(r["op"], r["resultingState"], r["rulesVersion"], r["batchId"]) for r in log] == [
        ("c", "ACTIVE", first.rules_version, 0),
        ("u", "PAUSED", version, 1),
    ]
    assert DeltaTable.forPath(spark, rules_path).history(1).first()["version"] == version


def test_the_real_merge_converges_for_shuffled_duplicated_deliveries(
    spark: SparkSession, settings: Settings, tmp_path: Path
) -> None:
    schema = settings.transaction_schema
    stream = [
        rule_event("c", 1, 100, schema),
        rule_event("c", 2, 110, schema, limit=5),
        rule_event("u", 1, 120, schema, ruleState="PAUSED"),
        rule_event("d", 2, 130, schema),
        rule_event("c", 3, 140, schema),
        rule_event("t", 0, 150, schema),
        rule_event("c", 2, 160, schema, limit=7),
        rule_event("u", 2, 170, schema, limit=8, disabled=True),
        rule_event("c", 4, 145, schema),  # older than the truncate: ends as a tombstone at 150
    ]
    expected = stable(list(final_rows(parse_records(records(stream), schema).events, dt.datetime(2024, 1, 1)).values()))
    assert {rid: r["ruleState"] for rid, r in expected.items()} == {
        1: "DELETED",
        2: "DISABLED",
        3: "DELETED",
        4: "DELETED",
        TRUNCATE_MARKER_ID: "DELETED",
    }
    for seed, batch_size in ((7, 7), (11, len(stream) + 4)):  # two batches; then everything in one
        lake = settings.with_lakehouse(str(tmp_path / f"lake-{seed}"))
        ensure_rules_tables(spark, lake)
        rng = random.Random(seed)
        delivered = stream + rng.sample(stream, 4)
        rng.shuffle(delivered)
        for start in range(0, len(delivered), batch_size):
            apply_records(spark, lake, records(delivered[start : start + batch_size]))
        assert stable(table_rows(spark, lake, "rules")) == expected, f"delivery seed {seed}"


# ---- schema version 8: distinct counts and relative limits reach the rules table as the model has them -----------

NEW_KINDS = ("pg_create_count_distinct_no_schema_string", "pg_create_relative_schema_precise")


def test_rules_of_the_new_kinds_written_in_sql_reach_the_rules_table_equal_to_the_model(
    spark: SparkSession, settings: Settings
) -> None:
    """The real connector's events of two INSERTs typed in SQL (tests/test_debezium_modes.py writes the samples),
    through the rules job's parse, plan and MERGE; a third event with an invalid baseline is quarantined."""
    schema = settings.transaction_schema
    ensure_rules_tables(spark, settings)
    invalid = reshaped(NEW_KINDS[1], baseline='{"aggregatorFunctionType": "MEDIAN", "windowMinutes": 43200}')
    lines = [sample("pg_snapshot_read_no_schema_string"), *(sample(name) for name in NEW_KINDS), invalid]
    result = apply_records(spark, settings, records(lines, "sql"))
    assert (result.applied, result.quarantined) == (3, 1), result.summary()

    # What the analyst typed (tests/test_debezium_modes.py SETUP and STEPS), in the seeds' vocabulary.
    typed = {
        1: {**SEED, "ruleName": "big transfers to one beneficiary"},
        3: {**SEED, "ruleId": 3, "ruleName": "fan-out", "groupingKeyNames": ["payerId"]}
        | {
            "aggregateFieldName": "beneficiaryId",
            "aggregatorFunctionType": "COUNT_DISTINCT",
            "limit": 5,
            "windowMinutes": 60,
        },
        4: {**SEED, "ruleId": 4, "ruleName": "five times the usual", "groupingKeyNames": ["payerId"]}
        | {"aggregatorFunctionType": "VALUE", "limit": 5, "windowMinutes": 1}
        | {"baseline": {"aggregatorFunctionType": "AVG", "windowMinutes": 43200, "minCount": 5}},
    }
    expected = {rule_id: parse_rule(rule, schema) for rule_id, rule in typed.items()}
    rows = {r["ruleId"]: r for r in table_rows(spark, settings, "rules")}
    assert {rule_id: rule_from_row(rows[rule_id]) for rule_id in expected} == expected
    for rule_id, rule in expected.items():
        row = rule_to_row(rule, source_position="", source_op="", source_ts_ms=None)
        assert {k: rows[rule_id][k] for k in RULE_FIELDS} == {k: row[k] for k in RULE_FIELDS}
    assert rows[1]["baseline"] is None and rows[3]["baseline"] is None
    assert (
        rows[4]["baseline"] == '{"aggregatorFunctionType":"AVG","minCount":5,"perWindow":false,"windowMinutes":43200}'
    )
    # The change log keeps the row as it came (the baseline as the database's JSON text).
    (logged,) = [r for r in table_rows(spark, settings, "rule_changes") if r["ruleId"] == 4]
    assert (
        json.loads(logged["after"])["baseline"]
        == '{"minCount": 5, "windowMinutes": 43200, "aggregatorFunctionType": "AVG"}'
    )
    (quarantined,) = table_rows(spark, settings, "quarantine")
    assert quarantined["reason"] == "rule 4: baseline.aggregatorFunctionType: Input should be 'AVG', 'SUM' or 'COUNT'"
    assert quarantined["rawPayload"] == invalid

    # `fraudlake rules list` and `--json`: the rule's vocabulary, readably and in camelCase.
    listed = read_rules(spark, settings)
    text = rules_table_text(listed)
    assert "COUNT_DISTINCT(beneficiaryId) > 5 in 60 min by [payerId]" in text
    assert "VALUE(paymentAmount) > 5 \u00d7 AVG over 30 days (min 5 tx) by [payerId]" in text
    by_id = {r["ruleId"]: r for r in rules_json(listed)}
    assert by_id[4]["baseline"] == {
        "aggregatorFunctionType": "AVG",
        "windowMinutes": 43200,
        "minCount": 5,
        "perWindow": False,
    }
    assert by_id[3]["aggregatorFunctionType"] == "COUNT_DISTINCT" and "baseline" not in by_id[3]


def test_a_rules_table_of_an_older_release_gets_the_baseline_column(
    spark: SparkSession, settings: Settings, tmp_path: Path
) -> None:
    schema = settings.transaction_schema
    lake = settings.with_lakehouse(str(tmp_path / "older"))
    path = lake.table_path(RULES.name)
    older = dataclasses.replace(RULES, schema=StructType([f for f in RULES_SCHEMA.fields if f.name != "baseline"]))
    create_table(spark, older, path)
    seed = rule_to_row(
        parse_rule(SEED, schema),
        source_position=sample_pg_position("pg_snapshot_read_no_schema_string"),
        source_op="r",
        source_ts_ms=1,
    )
    del seed["baseline"]
    spark.createDataFrame([seed], older.schema).write.format("delta").mode("append").save(path)

    ensure_rules_tables(spark, lake)  # what every job does at start: the missing nullable column is added
    assert "baseline" in spark.read.format("delta").load(path).columns
    (old_row,) = table_rows(spark, lake, "rules")
    assert old_row["baseline"] is None and rule_from_row(old_row) == parse_rule(SEED, schema)
    result = apply_records(spark, lake, records([sample(NEW_KINDS[1])], "older"))
    assert (result.applied, result.quarantined) == (1, 0), result.summary()
    rows = {r["ruleId"]: r for r in table_rows(spark, lake, "rules")}
    assert rule_from_row(rows[4]).baseline is not None and rows[1]["baseline"] is None
