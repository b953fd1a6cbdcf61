"""``fraudlake maintain``: OPTIMIZE compacts a table's small files into one, VACUUM runs, missing tables are skipped."""

from __future__ import annotations

import pytest
from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from delta_tables.catalog import all_tables
from delta_tables.table_spec import create_table
from pipelines.base.settings import REPO_ROOT, Settings
from pipelines.cli import main

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
