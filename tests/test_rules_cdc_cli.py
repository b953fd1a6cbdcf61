"""The ``fraudlake rules`` and ``state`` commands, time travel, and the file-source streaming job with replays."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from delta.tables import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql.types import DataType, StructType
from rules_cdc_support import cli, cli_json, rule_event, sample, sample_pg_position, stable, table_rows, write_conf

from delta_tables.bucket_state import BUCKET_STATE
from delta_tables.table_spec import create_table
from pipelines.base.settings import Settings
from pipelines.local.smoke import last_operation_metrics
from rules_cdc.streaming_job import batch_handler, start_rules_job


def test_rules_commands_apply_list_time_travel_history_export_delete_all(
    spark: SparkSession, settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = write_conf(settings, tmp_path)

    def merge_metrics() -> dict[str, int]:
        """The metrics of the rules table's newest commit: the MERGE of the command just run."""
        return last_operation_metrics(DeltaTable.forPath(spark, settings.table_path("rules")))

    bad_rule = json.loads(sample("pg_create_schema_precise"))
    bad_rule["payload"]["after"]["owner"] = "analyst-7"
    first = tmp_path / "first.jsonl"
    first_lines = [sample("pg_snapshot_read_no_schema_string"), sample("pg_create_schema_precise"), "null", "{bad"]
    first.write_text("\n".join([*first_lines, json.dumps(bad_rule)]))
    code, out = cli(capsys, settings, conf, "rules", "apply", str(first))
    assert code == 0 and "5 records: 2 applied (2 change-log rows), 0 duplicate, 2 quarantined (0 stale), 1 k" in out
    metrics = merge_metrics()
    assert (metrics["numTargetRowsInserted"], metrics["numTargetRowsUpdated"]) == (2, 0)
    rules = stable(table_rows(spark, settings, "rules"))
    assert {rid: (r["ruleState"], r["limit"], r["sourceOp"]) for rid, r in rules.items()} == {
        1: ("ACTIVE", Decimal("1000000.000000"), "r"),
        2: ("ACTIVE", Decimal("5.000000"), "c"),
    }
    assert rules[2]["filter"] == '{"field":"paymentType","op":"EQUAL","value":"CSH"}'
    assert rules[2]["groupingKeyNames"] == ["payerId"]
    assert rules[2]["sourcePosition"] == sample_pg_position("pg_create_schema_precise")
    quarantine = sorted(table_rows(spark, settings, "quarantine"), key=lambda r: r["sourceOffset"])
    assert [(q["source"], q["sourceOffset"], q["rawPayload"]) for q in quarantine] == [
        ("rules_cdc", f"file:{first}:4", "{bad"),
        ("rules_cdc", f"file:{first}:5", json.dumps(bad_rule)),
    ]
    assert "not JSON" in quarantine[0]["reason"] and "rule 2: owner: Extra inputs" in quarantine[1]["reason"]

    second = tmp_path / "second.jsonl"
    second.write_text(
        "\n".join(
            [
                sample("pg_update_schema_double"),
                sample("pg_delete_no_schema"),
                sample("pg_update_schema_string"),
                sample("pg_create_schema_precise"),  # redelivered: older than the delete in this batch
            ]
        )
    )
    code, out = cli(capsys, settings, conf, "rules", "apply", str(second))
    assert code == 0 and "3 applied (3 change-log rows), 1 duplicate, 0 quarantined (0 stale)" in out
    metrics = merge_metrics()
    assert (metrics["numTargetRowsInserted"], metrics["numTargetRowsUpdated"]) == (0, 2)

    everything = cli_json(capsys, settings, conf, "rules", "list", "--json", "--all")
    live = everything[:1]
    assert [(r["ruleId"], r["ruleState"], r["limit"]) for r in live] == [(1, "ACTIVE", 2500000.5)]
    assert live[0]["groupingKeyNames"] == ["payerId", "beneficiaryId"] and live[0]["aggregatorFunctionType"] == "SUM"
    assert everything[1:] == [{"ruleId": 2, "ruleState": "DELETED"}]

    changes = {r["op"]: r["rulesVersion"] for r in table_rows(spark, settings, "rule_changes") if r["ruleId"] == 2}
    past = cli_json(capsys, settings, conf, "rules", "list", "--json", "--as-of", str(changes["c"]))
    assert [(r["ruleId"], r["ruleState"], r["limit"], r["filter"]) for r in past] == [
        (1, "ACTIVE", 1000000, None),
        (2, "ACTIVE", 5, {"field": "paymentType", "op": "EQUAL", "value": "CSH"}),
    ]
    when = DeltaTable.forPath(spark, settings.table_path("rules")).history().where(f"version = {changes['c']}")
    stamp = when.first()["timestamp"].strftime("%Y-%m-%d %H:%M:%S.%f")
    assert cli_json(capsys, settings, conf, "rules", "list", "--json", "--as-of", stamp) == past

    history = cli_json(capsys, settings, conf, "rules", "history", "2", "--json")
    assert [(h["op"], h["resultingState"]) for h in history] == [("c", "ACTIVE"), ("u", "PAUSED"), ("d", "DELETED")]

    exported = tmp_path / "export.json"
    assert cli(capsys, settings, conf, "rules", "export", "--output", str(exported))[0] == 0
    assert json.loads(exported.read_text()) == live

    code, out = cli(capsys, settings, conf, "rules", "delete-all")
    assert code == 0 and "1 applied (2 change-log rows)" in out
    # A replay of old events: the tombstones resist them; the MERGE matches both rows and updates none. Both were
    # applied before (their changes are in the change log): duplicates, counted, not quarantined as stale.
    code, out = cli(capsys, settings, conf, "rules", "apply", str(first))
    assert "0 applied (0 change-log rows), 2 duplicate, 2 quarantined (0 stale)" in out
    assert merge_metrics()["numTargetRowsUpdated"] == 0
    rules = {r["ruleId"]: (r["ruleState"], r["sourcePosition"]) for r in table_rows(spark, settings, "rules")}
    deleted_all = rules[-1][1]
    assert deleted_all.startswith(sample_pg_position("pg_delete_no_schema") + "+cli:")  # after the newest seen
    assert rules == {1: ("DELETED", deleted_all), 2: ("DELETED", deleted_all), -1: ("DELETED", deleted_all)}

    log = sorted(table_rows(spark, settings, "rule_changes"), key=lambda r: (r["sourcePosition"], r["ruleId"]))
    assert [(r["ruleId"], r["op"], r["resultingState"], r["rulesVersion"]) for r in log] == [
        (1, "r", "ACTIVE", 1),
        (2, "c", "ACTIVE", 1),
        (2, "u", "PAUSED", 2),
        (1, "u", "ACTIVE", 2),
        (2, "d", "DELETED", 2),
        (-1, "t", "DELETED", 3),
        (1, "t", "DELETED", 3),
    ]
    assert json.loads(log[3]["before"])["limit_value"] == "1000000.00"
    assert json.loads(log[3]["after"])["limit_value"] == "2500000.50"
    assert json.loads(log[6]["before"])["limit"] == "2500000.500000"  # the row delete-all tombstoned
    assert {r["sourceOffset"] for r in log[5:]} == {"cli:delete-all"}


def test_state_clear_empties_the_bucket_state_table(
    spark: SparkSession, settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = write_conf(settings, tmp_path)
    code, out = cli(capsys, settings, conf, "state", "clear")
    assert code == 0 and "no state table" in out
    path = settings.table_path(BUCKET_STATE.name)
    create_table(spark, BUCKET_STATE, path)
    spark.createDataFrame([_row(BUCKET_STATE.schema)] * 3, BUCKET_STATE.schema).write.format("delta").mode(
        "append"
    ).save(path)
    code, out = cli(capsys, settings, conf, "state", "clear")
    assert code == 0 and "deleted 3 buckets" in out
    assert spark.read.format("delta").load(path).count() == 0


def test_file_source_job_applies_landed_files_and_ignores_a_replayed_batch(
    spark: SparkSession, settings: Settings
) -> None:
    schema = settings.transaction_schema
    landing = Path(settings.landing_path("rules"))
    landing.mkdir(parents=True)
    (landing / "a.jsonl").write_text(
        "\n".join([rule_event("c", 1, 100, schema), rule_event("c", 2, 110, schema), "", "null", "{bad"]) + "\n"
    )
    query = start_rules_job(spark, settings, source="files", once=True)
    try:
        query.awaitTermination(180)
    finally:
        query.stop()
    (landing / "b.jsonl").write_text(rule_event("u", 2, 120, schema, ruleState="PAUSED", limit=9))
    query = start_rules_job(spark, settings, source="files", once=True)
    try:
        query.awaitTermination(180)
    finally:
        query.stop()
    rules = {r["ruleId"]: (r["ruleState"], r["limit"]) for r in table_rows(spark, settings, "rules")}
    assert rules == {1: ("ACTIVE", Decimal("1000000.000000")), 2: ("PAUSED", Decimal("9.000000"))}
    quarantine = table_rows(spark, settings, "quarantine")
    assert [(q["sourceOffset"], q["batchId"]) for q in quarantine] == [(f"file:{landing}/a.jsonl:5", 0)]

    # Batch 0 again, as after a crash before the checkpoint was committed: nothing is written twice.
    replay = spark.createDataFrame(
        [((landing / "a.jsonl").read_text(), f"file://{landing}/a.jsonl")], "value string, offset string"
    )
    result = batch_handler(settings, "files")(replay, 0)
    assert (result.replayed, result.applied, result.kafka_tombstones) == (True, 2, 1)
    log = table_rows(spark, settings, "rule_changes")
    assert sorted((r["ruleId"], r["op"], r["batchId"]) for r in log) == [(1, "c", 0), (2, "c", 0), (2, "u", 1)]
    assert len(table_rows(spark, settings, "quarantine")) == 1


def _row(schema: StructType) -> dict[str, Any]:
    """One row of any schema, with a plain value per column (the test must not depend on the engine's columns)."""
    return {f.name: _value(f.dataType) for f in schema.fields}


def _value(data_type: DataType) -> Any:
    name = data_type.typeName()
    simple: dict[str, Any] = {
        "string": "k",
        "long": 1,
        "integer": 1,
        "double": 1.0,
        "boolean": True,
        "timestamp": dt.datetime(2024, 1, 1),
        "date": dt.date(2024, 1, 1),
        "decimal": Decimal(1),
        "array": [],
        "map": {},
    }
    if isinstance(data_type, StructType):
        return _row(data_type)
    return simple[name]
