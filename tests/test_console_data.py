"""The console's parts without a browser: the lake reader on our tables' features, the evidence against the
reference evaluator, parameterized writes to a real PostgreSQL, the form's mapping, the CLI and the App manifest."""

from __future__ import annotations

import datetime as dt
import random
import re
import tomllib
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from debezium_support import own_database
from delta.tables import DeltaTable
from engine_fixtures import make_rule
from pyspark.sql import SparkSession
from reference_evaluator import RefBatch, evaluate

from delta_tables.batch_log import BATCH_LOG, log_batch
from delta_tables.bronze_transactions import bronze_schema
from delta_tables.table_spec import create_table
from pipelines.base.settings import REPO_ROOT, Settings
from pipelines.cli import build_parser
from pipelines.console.evidence import window_evidence
from pipelines.console.health_data import dq_report
from pipelines.console.lake_reader import LakeReader, TableMissing
from pipelines.console.rule_form import RuleFormValues
from pipelines.console.rule_writes import EditRefused, RulesDbWriter, WriteFailed
from pipelines.data_quality.report import default_report_path
from pipelines.engine.keys import encode_key
from pipelines.local.rules_database import RulesDb
from rules_cdc.plan_changes import TableView

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _batch_row(batch_id: int) -> dict[str, Any]:
    now = dt.datetime(2026, 1, 1, 12, 0, batch_id)
    return {
        "job": "engine-test",
        "batchId": batch_id,
        "rulesVersion": 1,
        "startedAt": now,
        "finishedAt": now,
        "durationMs": 1000.0 + batch_id,
        "counts": {"rows": batch_id, "late": 0},
        "metrics": {"latencyP50Ms": 10.0 * batch_id},
        "maxEventTimeMs": 0,
        "pins": {"rules": 1},
    }


def test_the_reader_reads_checkpointed_tables_itself_and_deletion_vectors_through_spark(
    spark: SparkSession, settings: Settings, tmp_path: Path
) -> None:
    path = settings.table_path("batch_log")
    create_table(spark, BATCH_LOG, path, properties={"delta.checkpointInterval": "2"})
    for batch_id in range(5):  # one commit each, by delta-rs (log_batch): it checkpoints after every second
        log_batch(spark, path, _batch_row(batch_id), tag=None)
    assert list((Path(path) / "_delta_log").glob("*.checkpoint.parquet"))
    reader = LakeReader(settings, spark=lambda: spark)
    rows = reader.rows("batch_log", where=[("job", "startswith", "engine-"), ("batchId", ">=", 3)])
    assert reader.backend("batch_log") == "deltalake"
    assert sorted(r["batchId"] for r in rows) == [3, 4]
    assert {r["batchId"]: r["counts"] for r in rows}[4] == {"rows": 4, "late": 0}  # map columns as dicts
    assert reader.version("batch_log") == DeltaTable.forPath(spark, path).history(1).first()["version"]

    # A table with deletion vectors (as bucket_state and alert_cooldown have): deltalake refuses it, Spark reads it.
    dv_path = str(tmp_path / "with_dv")
    spark.range(10).write.format("delta").option("delta.enableDeletionVectors", "true").save(dv_path)
    DeltaTable.forPath(spark, dv_path).delete("id < 3")
    dv_reader = LakeReader(settings.with_lakehouse(str(tmp_path)), spark=lambda: spark)
    ids = sorted(r["id"] for r in dv_reader.rows("with_dv", where=[("id", "in", [1, 2, 3, 4, 9])]))
    assert dv_reader.backend("with_dv") == "spark" and ids == [3, 4, 9]
    assert dv_reader.version("with_dv") == 1 and not dv_reader.exists("batch_log")
    with pytest.raises(TableMissing):
        reader.rows("no_such_table")


RULES = [
    make_rule(1, limit=300, windowMinutes=5),
    make_rule(
        2,
        aggregateFieldName="COUNT",
        aggregatorFunctionType="COUNT",
        limitOperatorType="GREATER_EQUAL",
        limit=3,
        filter={"field": "paymentType", "op": "IN", "value": ["CSH"]},
    ),
    make_rule(
        3, groupingKeyNames=["payerId", "paymentType"], aggregatorFunctionType="AVG", limit=50.5, windowMinutes=3
    ),
    make_rule(
        4,
        groupingKeyNames=[],
        aggregatorFunctionType="MAX",
        limit=90,
        windowMinutes=1,
        filter={"not": {"field": "paymentAmount", "op": "LESS", "value": 20}},
    ),
]


def test_the_evidence_recomputes_every_alert_of_the_reference_evaluator(
    spark: SparkSession, settings: Settings
) -> None:
    """Random transactions in three micro-batches (equal times, out-of-order and late rows among them): every alert
    the contract raises is explained by a window whose recomputed aggregate is the alert's value."""
    rng = random.Random(15)
    base = 1_767_225_600_000  # 2026-01-01
    batches: list[list[dict[str, Any]]] = []
    for batch in range(3):
        rows = []
        for n in range(40):
            rows.append(
                {
                    "transactionId": f"b{batch}-{n:02d}",
                    "eventTime": base + rng.randrange(0, 20) * 30_000 + (batch * 240_000 if n % 5 else 0),
                    "payerId": rng.choice([1, 2, 3]),
                    "paymentAmount": Decimal(rng.randrange(100, 12_000)) / 100,
                    "paymentType": rng.choice(["CSH", "CRD", None]),
                }
            )
        batches.append(rows)
    expected = evaluate([RefBatch(rules=RULES, transactions=rows) for rows in batches])
    assert len({a.rule_id for a in expected}) == len(RULES)  # every rule alerts: each path is exercised

    bronze = []
    for batch, rows in enumerate(batches):
        for n, row in enumerate(rows):
            event_time = EPOCH + dt.timedelta(milliseconds=row["eventTime"])
            bronze.append(
                {
                    **{f: row.get(f) for f in ("transactionId", "payerId", "paymentAmount", "paymentType")},
                    "eventTime": event_time,
                    "beneficiaryId": None,
                    "currency": None,
                    "country": None,
                    "channel": None,
                    "extraFields": None,
                    "eventDate": event_time.date(),
                    "ingestedAt": event_time,
                    "source": "files",
                    "sourceOffset": f"file:{batch}:{n}",
                    "kafkaPartition": None,
                    "kafkaOffset": None,
                    "batchId": batch,
                    "isLate": False,
                }
            )
    schema = bronze_schema(settings.transaction_schema)
    spark.createDataFrame(bronze, schema).write.format("delta").partitionBy("eventDate").save(
        settings.table_path("bronze_transactions")
    )
    reader = LakeReader(settings)
    batch_of = {row["transactionId"]: batch for batch, rows in enumerate(batches) for row in rows}
    time_of = {row["transactionId"]: row["eventTime"] for rows in batches for row in rows}
    by_id = {rule.rule_id: rule for rule in RULES}
    for alert in expected:
        evidence = window_evidence(
            reader,
            settings,
            rule=by_id[alert.rule_id],
            key_value=encode_key(list(alert.key)),
            transaction_id=alert.transaction_id,
            event_time=EPOCH + dt.timedelta(milliseconds=time_of[alert.transaction_id]),
            batch_id=batch_of[alert.transaction_id],
            alert_value=alert.aggregate_value,
            precedence="engine",
        )
        assert evidence.matches and evidence.holds and evidence.own_row_found, (alert, evidence.recomputed)


def test_edits_to_the_rules_database_are_parameterized_and_refused_when_they_cannot_apply(rulesdb: RulesDb) -> None:
    db = own_database(rulesdb, "fraudlake_console_writes")
    writer = RulesDbWriter.for_database(db, role="operator")  # direct writes: fraudlake_operator, its password
    assert writer.reachable()
    hostile = "x'); DROP TABLE fraud_rules; --"
    rule = RULES[1].model_copy(update={"rule_id": 31, "rule_name": hostile})
    view = TableView()
    floors = [writer.write("create", rule_id=31, rule=rule, view=view).floor]
    row = db.sql("SELECT rule_name || '|' || filter::text || '|' || limit_value FROM fraud_rules WHERE rule_id = 31")
    assert row.strip() == f'{hostile}|{{"op": "IN", "field": "paymentType", "value": ["CSH"]}}|3'
    with pytest.raises(EditRefused, match="already exists"):
        writer.write("create", rule_id=31, rule=rule, view=view)
    floors.append(
        writer.write("update", rule_id=31, rule=rule.model_copy(update={"limit": Decimal(7)}), view=view).floor
    )
    floors.append(writer.write("pause", rule_id=31, rule=None, view=view).floor)
    with pytest.raises(EditRefused, match="already PAUSED"):
        writer.write("pause", rule_id=31, rule=None, view=view)
    assert db.sql("SELECT rule_state || limit_value FROM fraud_rules WHERE rule_id = 31").strip() == "PAUSED7"
    floors.append(writer.write("resume", rule_id=31, rule=None, view=view).floor)
    floors.append(writer.write("delete", rule_id=31, rule=None, view=view).floor)
    with pytest.raises(EditRefused, match="no row to delete"):
        writer.write("delete", rule_id=31, rule=None, view=view)
    assert all(f.startswith("pg:") for f in floors) and floors == sorted(floors) and len(set(floors)) == len(floors)
    assert db.sql("SELECT count(*) FROM fraud_rules").strip() == "0"  # the table survived its hostile name
    closed = RulesDbWriter("host=127.0.0.1 port=1 dbname=x user=x connect_timeout=2", "closed")
    with pytest.raises(WriteFailed):
        closed.write("create", rule_id=32, rule=rule, view=view)


def test_the_form_hands_the_model_what_was_typed() -> None:
    values = RuleFormValues(ruleId=" 7 ", groupingKeyNames="payerId, beneficiaryId,", limit="1e3", windowMinutes="5")
    assert values.model_input() == {
        "ruleId": "7",
        "ruleState": "ACTIVE",
        "groupingKeyNames": ["payerId", "beneficiaryId"],
        "aggregateFieldName": "paymentAmount",
        "aggregatorFunctionType": "SUM",
        "limitOperatorType": "GREATER",
        "limit": "1e3",
        "windowMinutes": "5",
    }
    assert RuleFormValues.from_rule(RULES[1].to_json_dict()).model_input()["filter"] == (
        '{"field": "paymentType", "op": "IN", "value": ["CSH"]}'
    )


def test_the_health_page_reads_the_report_fraudlake_dq_writes(settings: Settings) -> None:
    path, text = dq_report(settings)
    assert path == default_report_path(settings) and text is None
    path.parent.mkdir(parents=True)
    path.write_text("# fraudlake data quality: PASSED\n")
    assert dq_report(settings)[1] == "# fraudlake data quality: PASSED\n"


def test_the_cli_and_the_app_manifest_start_the_console() -> None:
    args = build_parser().parse_args(["console", "--port", "0", "--writes", "topic", "--lakehouse", "/tmp/lh"])
    assert args.command == "console" and args.port == 0 and args.writes == "topic"
    app = yaml.safe_load((REPO_ROOT / "resources" / "console.app.yml").read_text())["resources"]["apps"]
    config = app["fraudlake_console"]["config"]
    command = [re.sub(r"\$\{var\.[a-z_]+\}", "x", part) for part in config["command"]]
    scripts = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert command[0] in scripts
    assert build_parser().parse_args(command[1:]).command == "console"
    secrets = {r["name"] for r in app["fraudlake_console"]["resources"]}
    assert {e["valueFrom"] for e in config["env"] if "valueFrom" in e} <= secrets
    assert ".[console]" in (REPO_ROOT / "requirements.txt").read_text().split()
