"""The Spark-native baseline (transformWithState on RocksDB) raises the contract's alerts, and measures its run."""

from __future__ import annotations

import sys
from decimal import Decimal
from pathlib import Path

import pytest
from engine_fixtures import make_rule
from pyspark.sql import SparkSession
from reference_evaluator import RefBatch, evaluate

from pipelines.base.settings import Settings
from pipelines.bench.native_processor import half_up, rule_checks
from pipelines.bench.native_state import run_native_state
from pipelines.bench.workload import Workload, transactions, write_batches
from pipelines.engine.keys import encode_key
from pipelines.engine.states import LiveRule, states_of

CRD = {"field": "paymentType", "op": "EQUAL", "value": "CRD"}
RULES = [
    make_rule(1, limit=150, windowMinutes=2),
    make_rule(2, aggregatorFunctionType="COUNT", limitOperatorType="GREATER_EQUAL", limit=3, windowMinutes=2),
    make_rule(3, aggregatorFunctionType="AVG", limit=80, windowMinutes=1, filter=CRD),
    make_rule(4, aggregatorFunctionType="MAX", limit=150, windowMinutes=3),
    make_rule(5, aggregatorFunctionType="MIN", limitOperatorType="LESS", limit=15, windowMinutes=1, filter=CRD),
    make_rule(6, aggregatorFunctionType="VALUE", limit=200, windowMinutes=1, ruleState="SHADOW"),
    make_rule(7, limit=1, windowMinutes=1, ruleState="PAUSED"),  # not evaluated: no alerts
]


def test_native_state_alerts_equal_the_reference_evaluator(
    spark: SparkSession, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The processor runs in Python workers: they need this interpreter's packages (`make` exports PYSPARK_PYTHON).
    monkeypatch.setattr(spark.sparkContext, "pythonExec", sys.executable)
    records = list(transactions(Workload(count=200, keys=50, rate_per_second=1.0, seed=11)))
    assert write_batches(iter(records), tmp_path / "landing", batch_size=100) == 2

    result = run_native_state(spark, tmp_path / "landing", tmp_path / "native", RULES, settings=settings)

    typed = [{**r, "paymentAmount": Decimal(r["paymentAmount"])} for r in records]
    expected = {
        (a.rule_id, a.transaction_id, encode_key(a.key), a.aggregate_value, a.shadow)
        for a in evaluate([RefBatch(RULES, typed[:100]), RefBatch(RULES, typed[100:])])
    }
    columns = ["ruleId", "transactionId", "keyValue", "aggregateValue", "shadow"]
    ours = {tuple(r) for r in spark.read.format("delta").load(result.alerts_path).select(*columns).collect()}
    assert {a[0] for a in expected} == {1, 2, 3, 4, 5, 6}, "the input must make every evaluated rule alert"
    assert ours == expected
    # Both files' transactions and alerts; the second file is the recovery run's.
    assert (result.rows, result.batches, result.alerts) == (200, 2, len(expected))
    assert len(result.batch_seconds) == 1 and result.median_batch_seconds > 0 and result.sustained_tps > 0
    assert result.state_rows > 0 and result.state_bytes > 0
    assert result.recovery_seconds is not None and result.recovery_seconds > 0
    assert result.recovery_batch_seconds is not None and result.recovery_batch_seconds > 0


def test_rule_checks_refuse_what_the_baseline_does_not_implement() -> None:
    distinct = make_rule(1, aggregatorFunctionType="COUNT_DISTINCT", aggregateFieldName="beneficiaryId", limit=5)
    for rules in ([distinct], [make_rule(2, cooldownMinutes=5)], [make_rule(3), make_rule(4, groupingKeyNames=[])]):
        with pytest.raises(ValueError):
            rule_checks(rules, states_of([LiveRule(r, None) for r in rules]), bucket_seconds=60)
    checks = rule_checks(RULES, states_of([LiveRule(r, None) for r in RULES]), bucket_seconds=60)
    assert [c.rule_id for c in checks] == [1, 2, 3, 4, 5, 6]  # PAUSED is not evaluated
    assert {c.reach for c in checks} == {1, 2, 3}
    assert [half_up(n, 4) for n in (2, -2, 5, -5, 7)] == [1, -1, 1, -1, 2]  # .5 away from 0; 1.25, 1.75
