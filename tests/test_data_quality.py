"""``fraudlake dq``: clean tables pass; each seeded corruption fails the expectation that guards against it.

GX on Spark is slow, so one lakehouse is built once (tests/dq_tables.py): validated clean, then every
corruption is appended and it is validated again; each corruption must show up as its own failed expectation
in the markdown report, and nothing else may fail.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import pytest
from dq_tables import CORRUPTIONS, Corruption, build_clean, seed_corruptions
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from delta_tables.catalog import all_tables
from pipelines.base.settings import REPO_ROOT, Settings, load_settings
from pipelines.cli import main
from pipelines.commands.dq_cmd import SUITE_TABLES
from pipelines.data_quality.checks import alerts_checked, operator_holds
from pipelines.data_quality.run import checked_frame
from pipelines.data_quality.suites import TABLES, build_suites, referenced_columns, stale_suites, write_suites
from rules_cdc.rule_model import LimitOperator

LOCAL_CONF = REPO_ROOT / "conf" / "local.yaml"


_SECTION = re.compile(r"^## (\w+): ")
_ROW = re.compile(r"^\| (✅ pass|❌ FAIL) \| ([^|]+) \| ([^|]*) \|")


def report_rows(text: str) -> list[tuple[str, str, str, str]]:
    """(table, result, expectation, columns) of every expectation row of the report."""
    rows, table = [], ""
    for line in text.splitlines():
        if section := _SECTION.match(line):
            table = section.group(1)
        elif row := _ROW.match(line):
            rows.append((table, row.group(1), row.group(2).strip(), row.group(3).strip()))
    return rows


@dataclass(frozen=True)
class DqRun:
    exit_code: int
    report: str


def run_dq(lakehouse: Path, report: Path, *extra: str) -> DqRun:
    code = main(["dq", "--conf", str(LOCAL_CONF), "--lakehouse", str(lakehouse), "--report", str(report), *extra])
    return DqRun(code, report.read_text())


@pytest.fixture(scope="module")
def dq_runs(
    spark: SparkSession, base_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> tuple[DqRun, DqRun]:
    root = tmp_path_factory.mktemp("dq")
    settings = base_settings.with_lakehouse(str(root / "lakehouse"))
    build_clean(spark, settings)
    clean = run_dq(root / "lakehouse", root / "clean.md")
    seed_corruptions(spark, settings)
    corrupt = run_dq(root / "lakehouse", root / "corrupt.md")
    return clean, corrupt


def test_clean_tables_pass(dq_runs: tuple[DqRun, DqRun], base_settings: Settings) -> None:
    clean, _ = dq_runs
    assert clean.exit_code == 0, clean.report
    assert clean.report.startswith("# fraudlake data quality: PASSED")
    rows = report_rows(clean.report)
    suites = build_suites(base_settings)
    for table in TABLES:
        passed = [r for r in rows if r[0] == table and r[1] == "✅ pass"]
        assert len(passed) == len(suites[table].expectations), table
    assert not [r for r in rows if r[1] != "✅ pass"]
    assert "| bronze_transactions | ✅ passed | 3 |" in clean.report


@pytest.mark.parametrize("corruption", CORRUPTIONS, ids=lambda c: c.name)
def test_each_corruption_fails_its_expectation(dq_runs: tuple[DqRun, DqRun], corruption: Corruption) -> None:
    _, corrupt = dq_runs
    assert corrupt.exit_code == 1
    assert corrupt.report.startswith("# fraudlake data quality: FAILED")
    failed = {(t, e, c) for t, result, e, c in report_rows(corrupt.report) if result == "❌ FAIL"}
    assert (corruption.table, corruption.expectation, corruption.columns) in failed
    assert f"- `{corruption.table}` · `{corruption.expectation}` on `{corruption.columns}`" in corrupt.report


def test_nothing_but_the_seeded_corruptions_fails(dq_runs: tuple[DqRun, DqRun]) -> None:
    _, corrupt = dq_runs
    failed = {(t, e, c) for t, result, e, c in report_rows(corrupt.report) if result == "❌ FAIL"}
    assert failed == {(c.table, c.expectation, c.columns) for c in CORRUPTIONS}


def test_missing_tables_fail_unless_allowed(spark: SparkSession, tmp_path: Path) -> None:
    lakehouse = tmp_path / "empty-lakehouse"
    missing = run_dq(lakehouse, tmp_path / "missing.md", "--tables", "bucket_state", "alerts")
    assert missing.exit_code == 1
    assert "| bucket_state | ❌ MISSING |" in missing.report and "| alerts | ❌ MISSING |" in missing.report
    assert f"no Delta table at {lakehouse}/alerts" in missing.report
    assert "bronze_transactions" not in missing.report
    allowed = run_dq(lakehouse, tmp_path / "allowed.md", "--tables", "alerts", "--allow-missing")
    assert allowed.exit_code == 0
    assert "| alerts | ⏭️ skipped |" in allowed.report and "allowed by --allow-missing" in allowed.report


def test_operator_check_agrees_with_the_rule_model(spark: SparkSession) -> None:
    values = [Decimal("1"), Decimal("2"), Decimal("3")]
    cases = [(op.value, v, Decimal("2")) for op in LimitOperator for v in values]
    cases += [("GREATER", None, Decimal("2")), ("SOMETIMES", Decimal("3"), Decimal("2"))]
    df = spark.createDataFrame(cases, "op string, value decimal(38,6), limit decimal(38,6)")
    got = {
        (r["op"], r["value"]): r["holds"]
        for r in df.select(
            "op", "value", operator_holds(F.col("value"), F.col("op"), F.col("limit")).alias("holds")
        ).collect()
    }
    for op, value, limit in cases:
        expected = op in LimitOperator.__members__ and value is not None and LimitOperator(op).holds(value, limit)
        assert got[(op, value)] is expected, (op, value)


def test_a_relative_alerts_condition_is_checked_against_its_baseline(spark: SparkSession) -> None:
    """An alert with ``baselineValue`` meets ``value OP limit * B`` (``* W / W2`` with perWindow), not ``value OP
    limit``: exact at the boundary (1.5 * 17.333333 = 25.9999995, which 6 decimals would round to 26)."""
    per_window = json.dumps({"baseline": {"perWindow": True, "windowMinutes": 10080}})
    plain = json.dumps({"baseline": {"perWindow": False, "windowMinutes": 43200}})
    cases = [  # (id, value, limit, baseline, window, snapshot, expected)
        ("spike", "100", "5", "17", 1, plain, True),  # 100 > 85
        ("not a spike", "80", "5", "17", 1, plain, False),  # 80 > 85 fails; 80 > 5 would pass
        ("boundary above", "26", "1.5", "17.333333", 1, plain, True),  # 26 > 25.9999995
        ("boundary below", "25.999999", "1.5", "17.333333", 1, plain, False),
        ("hourly", "200", "3", "10080", 60, per_window, True),  # 200 > 3 * 10080 * 60 / 10080 = 180
        ("hourly under", "180", "3", "10080", 60, per_window, False),
        ("fixed", "3", "2", None, 60, None, True),
    ]
    rows = [
        (i, Decimal(v), Decimal(lim), None if b is None else Decimal(b), w, snap, "GREATER")
        for i, v, lim, b, w, snap, _ in cases
    ]
    schema = (
        "id string, aggregateValue decimal(38,6), limit decimal(38,6), baselineValue decimal(38,6), "
        "windowMinutes int, ruleSnapshot string, limitOperatorType string"
    )
    alerts = spark.createDataFrame(rows, schema).withColumn("ruleId", F.lit(1).cast("long"))
    checked = alerts_checked(alerts.withColumn("aggregatorFunctionType", F.lit("SUM")), alerts.select("ruleId"))
    got = {r["id"]: r["dq_operator_holds"] for r in checked.collect()}
    assert got == {case[0]: case[-1] for case in cases}


def test_every_column_a_suite_names_exists_in_its_checked_frame(spark: SparkSession, settings: Settings) -> None:
    specs = {spec.name: spec for spec in all_tables(settings)}
    suites = build_suites(settings)
    for table in TABLES:
        empty = spark.createDataFrame([], specs[table].schema)
        columns = set(checked_frame(spark, settings, table, empty).columns)
        assert referenced_columns(suites[table]) <= columns, table


def test_versioned_suites_match_the_code(tmp_path: Path) -> None:
    settings = load_settings(LOCAL_CONF)
    assert stale_suites(settings) == [], "conf/expectations is stale: run `fraudlake dq --write-suites`"
    write_suites(settings, tmp_path)
    assert stale_suites(settings, tmp_path) == []
    edited = json.loads((tmp_path / "alerts.json").read_text())
    edited["expectations"].pop()
    (tmp_path / "alerts.json").write_text(json.dumps(edited))
    (tmp_path / "rules.json").unlink()
    assert stale_suites(settings, tmp_path) == ["rules", "alerts"]
    assert tuple(SUITE_TABLES) == TABLES
