"""``fraudlake maintain``: OPTIMIZE compacts a table's small files into one, VACUUM runs, missing tables are skipped.
The engine's retention steps bin-pack an append-only table only once it holds ``compact_min_files`` files."""

from __future__ import annotations

from decimal import Decimal

import pytest
from delta.tables import DeltaTable
from engine_fixtures import make_rule, put_rules, raw_frame
from lakehouse_template import fresh_lakehouse
from pyspark.sql import SparkSession

from delta_tables.catalog import all_tables
from delta_tables.table_snapshot import table_file_count
from delta_tables.table_spec import create_table
from pipelines.base.settings import REPO_ROOT, Settings
from pipelines.cli import main
from pipelines.engine.batch_handler import BatchHandler

LOCAL_CONF = str(REPO_ROOT / "conf" / "local.yaml")


def test_maintain_compacts_and_vacuums(
    spark: SparkSession, settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    (spec,) = [s for s in all_tables(settings) if s.name == "rule_changes"]
    path = settings.table_path(spec.name)
    create_table(spark, spec, path)
    for batch in range(3):  # one small file per append
        (
            spark.createDataFrame([(batch, "c", f"pos-{batch}")], "ruleId long, op string, sourcePosition string")
            .selectExpr("ruleId", "op", "sourcePosition", "current_timestamp() AS appliedAt")
            .coalesce(1)
            .write.format("delta")
            .mode("append")
            .save(path)
        )
    table = DeltaTable.forPath(spark, path)
    assert table.detail().first()["numFiles"] == 3

    args = ["maintain", "--conf", LOCAL_CONF, "--lakehouse", settings.lakehouse_root]
    assert main([*args, "--tables", "rule_changes", "alerts"]) == 0
    assert table.detail().first()["numFiles"] == 1
    assert "OPTIMIZE" in [r["operation"] for r in table.history().collect()]
    assert table.detail().first()["properties"]["delta.deletedFileRetentionDuration"] == "interval 168 hours"
    assert sorted(r["ruleId"] for r in spark.read.format("delta").load(path).collect()) == [0, 1, 2]
    out = capsys.readouterr().out
    assert "maintain: rule_changes: optimized (3 files -> 1), vacuumed (retention 168 h)" in out
    assert f"maintain: alerts: not present at {settings.table_path('alerts')} (skipped)" in out
    assert main([*args, "--tables", "no_such_table"]) == 2


def test_retention_bin_packs_an_append_only_table_once_it_holds_compact_min_files(
    spark: SparkSession, settings: Settings
) -> None:
    engine = settings.engine.model_copy(update={"retention_every_batches": 1, "compact_min_files": 2})
    settings = settings.model_copy(update={"engine": engine})  # every retention step on every batch
    fresh_lakehouse(spark, settings)
    put_rules(spark, settings, [make_rule(1, limit=10)])
    handler = BatchHandler(settings, app_id="engine-compaction", report=lambda line: None)
    bronze, batch_log = settings.table_path("bronze_transactions"), settings.table_path("batch_log")

    def operations(path: str) -> list[str]:
        return [row["operation"] for row in DeltaTable.forPath(spark, path).history().collect()]

    record = {"transactionId": "t0", "eventTime": 1_700_006_400_000, "payerId": 1, "paymentAmount": Decimal("20")}
    handler.process(raw_frame(spark, [record]), 0)
    assert "OPTIMIZE" not in operations(bronze)  # one file: its step left it
    assert table_file_count(spark, bronze) == DeltaTable.forPath(spark, bronze).detail().first()["numFiles"] == 1

    handler.process(raw_frame(spark, [record | {"transactionId": "t1", "eventTime": 1_700_006_460_000}]), 1)
    assert "OPTIMIZE" in operations(bronze)  # two files: bin-packed into one
    assert table_file_count(spark, bronze) == 1
    assert sorted(r["transactionId"] for r in spark.read.format("delta").load(bronze).collect()) == ["t0", "t1"]
    assert "OPTIMIZE" not in operations(batch_log)  # batch 0's row only when its step ran: one file
