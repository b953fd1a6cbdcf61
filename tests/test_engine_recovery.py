"""The engine as a streaming job over the real file source: run to completion, and killed with SIGKILL mid-way.

``fraudlake run --once`` is started in a subprocess that kills itself (fault injection) right after one write of
its second micro-batch — the bronze append, the alerts append or the bucket state MERGE — before the batch is
logged or checkpointed; the job is then restarted from the same checkpoint (in this test's Spark session, to spare
a second JVM start) and replays that batch. The lakehouse must then equal one from an uninterrupted run, computed
once for the module: bronze, state, alerts, cooldown memory; no alert lost or written twice. The uninterrupted run
is itself checked against independent computations: its alerts are the reference evaluator's, its bucket state the
tiles computed in plain Python from the transactions.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from engine_fixtures import alerts_by_id, folded_state, independent_tiles, make_rule, put_rules, table_rows
from lakehouse_template import fresh_lakehouse
from pyspark.sql import SparkSession
from reference_evaluator import RefBatch, evaluate
from reliability_support import record_outcome, run_in_own_group

from pipelines.base.settings import LAKEHOUSE_ENV, Settings
from pipelines.engine.faults import FAULT_ENV
from pipelines.engine.job import EngineRun, run_engine
from pipelines.engine.keys import encode_key
from pipelines.generator.transactions import FraudRates, GeneratorConfig, Transaction, generate, to_json
from rules_cdc.rule_model import Rule

pytestmark = pytest.mark.subprocess  # SIGKILLed CLI runs: a JVM each
FILES, PER_FILE = 2, 200
VOLATILE = {
    "bronze_transactions": (),
    "bucket_state": ("updatedAt",),
    "alerts": ("detectedAt", "latencyMs", "detectedDate"),
    "alert_cooldown": ("updatedAt",),
}


RULES: list[Rule] = [
    make_rule(1, aggregatorFunctionType="COUNT", limit=3, windowMinutes=2, cooldownMinutes=1),
    # windows of minutes, 90 minutes and two days: states with buckets only, with hours, with days (top_level)
    make_rule(2, groupingKeyNames=["beneficiaryId"], limit=2000, windowMinutes=90),
    make_rule(3, groupingKeyNames=[], aggregatorFunctionType="MAX", limit=5000, windowMinutes=2880),
]


def _landing(folder: Path) -> list[list[Transaction]]:
    """Write the landing files (one per micro-batch); return their records, file by file."""
    config = GeneratorConfig(
        seed=11,
        start_ms=1_700_006_400_000,
        events_per_second=2.0,
        payers=8,
        beneficiaries=20,
        fraud=FraudRates.split(0.03),
    )
    records = generate(config, FILES * PER_FILE)
    files = [records[i * PER_FILE : (i + 1) * PER_FILE] for i in range(FILES)]
    folder.mkdir(parents=True)
    for i, part in enumerate(files):
        path = folder / f"part-{i}.jsonl"
        path.write_text("\n".join(to_json(r) for r in part) + "\n")
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))  # the file source takes them oldest first
    return files


def _lakehouse(spark: SparkSession, settings: Settings, root: Path) -> Settings:
    own = settings.with_lakehouse(str(root))
    fresh_lakehouse(spark, own)
    put_rules(spark, own, RULES)
    return own


def _run_cli(root: Path, landing: Path, fault: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, LAKEHOUSE_ENV: str(root), "PYSPARK_PYTHON": sys.executable, FAULT_ENV: fault}
    command = [sys.executable, "-m", "pipelines.cli", "run", "--once", "--input", str(landing)]
    command += ["--max-files-per-trigger", "1"]
    returncode, output = run_in_own_group(command, env)
    return subprocess.CompletedProcess(command, returncode, output, "")


RUN = EngineRun(source="files", once=True, max_files_per_trigger=1)


@dataclass(frozen=True)
class Reference:
    """The uninterrupted run: its landing folder and lakehouse, and its tables' content."""

    landing: Path
    rows: dict[str, list[tuple[Any, ...]]]


@pytest.fixture(scope="module")
def reference(spark: SparkSession, base_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Reference:
    folder = tmp_path_factory.mktemp("recovery")
    landing = folder / "landing"
    files = _landing(landing)
    clean = _lakehouse(spark, base_settings, folder / "clean")
    lines: list[str] = []
    run_engine(spark, clean, replace(RUN, input_path=str(landing)), report=lines.append)
    assert [line.split(":")[0] for line in lines] == ["batch 0", "batch 1"]
    rows = {table: table_rows(spark, clean.table_path(table), drop=volatile) for table, volatile in VOLATILE.items()}
    assert len(rows["alerts"]) > 0 and {row[1] for row in rows["alerts"]} == {1, 2, 3}
    # The run the crashed ones are compared with is right by independent computations, not just by itself.
    expected = {
        (a.rule_id, a.transaction_id): (encode_key(a.key), a.aggregate_value)
        for a in evaluate([RefBatch(RULES, part) for part in files])
    }
    assert alerts_by_id(spark, clean) == expected
    assert folded_state(spark, clean) == independent_tiles([r for part in files for r in part], RULES)
    return Reference(landing, rows)


@pytest.mark.parametrize("fault", ["bronze@1", "alerts@1", "state@1"])
def test_killed_and_restarted_run_equals_an_uninterrupted_one(
    spark: SparkSession, base_settings: Settings, reference: Reference, tmp_path: Path, fault: str
) -> None:
    started = time.monotonic()
    crashed = _lakehouse(spark, base_settings, tmp_path / "crashed")
    killed = _run_cli(tmp_path / "crashed", reference.landing, fault=fault)
    assert killed.returncode == -signal.SIGKILL, killed.stdout[-3000:]
    assert "batch 0:" in killed.stdout and "batch 1:" not in killed.stdout
    assert f"fault injection: SIGKILL after '{fault.split('@')[0]}' of batch 1" in killed.stdout
    restarted: list[str] = []
    run_engine(spark, crashed, replace(RUN, input_path=str(reference.landing)), report=restarted.append)
    assert [line.split(":")[0] for line in restarted] == ["batch 1"]  # replayed from the checkpoint

    got = {table: table_rows(spark, crashed.table_path(table), drop=volatile) for table, volatile in VOLATILE.items()}
    for table in VOLATILE:
        assert got[table] == reference.rows[table], table
    alert_ids = [row[0] for row in got["alerts"]]  # alertId = <ruleId>:<transactionId>
    expected_ids = {row[0] for row in reference.rows["alerts"]}
    lost, duplicated = len(expected_ids - set(alert_ids)), len(alert_ids) - len(set(alert_ids))
    assert lost == duplicated == 0
    bronze = len(got["bronze_transactions"])
    record_outcome(
        f"engine SIGKILL after {fault.split('@')[0]} of batch 1, restart",
        "fault",
        records_in=FILES * PER_FILE,
        applied=bronze,
        quarantined=FILES * PER_FILE - bronze,
        lost=0,
        duplicated=duplicated + bronze - len({row[0] for row in got["bronze_transactions"]}),
        outcome=f"bronze, state, alerts ({len(alert_ids)}), cooldown = uninterrupted run",
        seconds=time.monotonic() - started,
    )
