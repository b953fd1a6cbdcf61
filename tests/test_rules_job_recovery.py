"""The rules CDC job killed with SIGKILL in the middle of a micro-batch, then restarted from its checkpoint.

The job (``start_rules_job``, files source) runs in a subprocess whose harness SIGKILLs it right after one write
of its micro-batch: after the rules MERGE (before the change-log append), or after the change-log append (before
Structured Streaming commits the batch). The job is restarted from the same checkpoint in this test's Spark
session; it replays the batch. Rules, change log and quarantine must equal an uninterrupted run's, computed once.
"""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from reliability_support import record_outcome, run_in_own_group
from rules_cdc_support import rule_event

from pipelines.base.settings import LAKEHOUSE_ENV, Settings, load_settings
from rules_cdc.streaming_job import start_rules_job

pytestmark = pytest.mark.subprocess  # SIGKILLed CLI runs: a JVM each

SCHEMA = load_settings().transaction_schema
T = 1_700_000_000_000
LINES = [
    rule_event("c", 1, T + 1, SCHEMA),
    rule_event("c", 2, T + 2, SCHEMA),
    rule_event("c", 3, T + 3, SCHEMA, ruleState="PAUSED"),
    rule_event("u", 2, T + 4, SCHEMA, limit=500, aggregatorFunctionType="MAX"),
    rule_event("d", 3, T + 5, SCHEMA),
    rule_event("c", 4, T + 6, SCHEMA, windowMinutes=5, cooldownMinutes=2),
    rule_event("c", 1, T + 1, SCHEMA),  # a redelivery of rule 1's create: a duplicate, applied once
    "null",  # a Kafka tombstone
    "{garbage",
    rule_event("c", 5, T + 7, SCHEMA).replace('"window_minutes": 10080', '"window_minutes": 0'),
]
VOLATILE = {
    "rules": ("updatedAt", "tombstonedAt"),
    "rule_changes": ("appliedAt",),
    "quarantine": ("quarantinedAt", "quarantineDate", "quarantineId"),
}
HARNESS = textwrap.dedent(
    """
    import os, signal, sys
    import rules_cdc.apply_changes as apply_changes
    from rules_cdc.streaming_job import start_rules_job
    from pipelines.base.settings import load_settings
    from pipelines.base.spark_session import get_spark

    point = sys.argv[1]
    wrapped = {"merge": "merge_rules", "changelog": "write_change_log", "quarantine": "write_quarantine"}[point]
    original = getattr(apply_changes, wrapped)

    def then_die(*args, **kwargs):
        result = original(*args, **kwargs)
        print(f"fault injection: SIGKILL after the rules job's {point}", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        return result

    setattr(apply_changes, wrapped, then_die)
    settings = load_settings()
    spark = get_spark(settings, app_name="rules-job-killed")
    start_rules_job(spark, settings, source="files", once=True).awaitTermination()
    print("the job ended without being killed", flush=True)
    """
)


def _land(settings: Settings) -> None:
    landing = Path(settings.landing_path("rules"))
    landing.mkdir(parents=True, exist_ok=True)
    (landing / "rules-0001.jsonl").write_text("\n".join(LINES) + "\n")


def _content(spark: SparkSession, settings: Settings) -> dict[str, list[tuple[Any, ...]]]:
    """Each table's rows minus wall-clock columns, with the lakehouse root blanked out of the source offsets."""
    root = settings.lakehouse_root
    content = {}
    for table, volatile in VOLATILE.items():
        frame = spark.read.format("delta").load(settings.table_path(table)).drop(*volatile)
        rows = [tuple(v.replace(root, "<root>") if isinstance(v, str) else v for v in r) for r in frame.collect()]
        content[table] = sorted(rows, key=lambda row: tuple((v is None, str(v)) for v in row))
    return content


def _run_job(spark: SparkSession, settings: Settings) -> None:
    query = start_rules_job(spark, settings, source="files", once=True)
    try:
        query.awaitTermination()
    finally:
        query.stop()
    assert query.exception() is None


@dataclass(frozen=True)
class Reference:
    content: dict[str, list[tuple[Any, ...]]]


@pytest.fixture(scope="module")
def reference(spark: SparkSession, base_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Reference:
    clean = base_settings.with_lakehouse(str(tmp_path_factory.mktemp("rules-recovery") / "clean"))
    _land(clean)
    _run_job(spark, clean)
    content = _content(spark, clean)
    assert {row[0]: row for row in content["rules"]}.keys() == {1, 2, 3, 4}
    assert len(content["quarantine"]) == 2
    return Reference(content)


@pytest.mark.parametrize("point", ["merge", "changelog"])
def test_a_killed_rules_job_restarts_to_the_uninterrupted_result(
    spark: SparkSession, base_settings: Settings, reference: Reference, tmp_path: Path, point: str
) -> None:
    started = time.monotonic()
    crashed = base_settings.with_lakehouse(str(tmp_path / "crashed"))
    _land(crashed)
    env = {**os.environ, LAKEHOUSE_ENV: crashed.lakehouse_root, "PYSPARK_PYTHON": sys.executable}
    returncode, output = run_in_own_group([sys.executable, "-c", HARNESS, point], env)
    assert returncode == -signal.SIGKILL, output[-3000:]
    assert f"fault injection: SIGKILL after the rules job's {point}" in output

    _run_job(spark, crashed)  # restarted from the checkpoint: the batch is replayed
    got = _content(spark, crashed)
    for table in VOLATILE:
        assert got[table] == reference.content[table], table
    changes = got["rule_changes"]
    record_outcome(
        f"rules CDC job SIGKILL after its {point} of batch 0, restart",
        "fault",
        records_in=len(LINES),
        applied=len(LINES) - len(got["quarantine"]),
        quarantined=len(got["quarantine"]),
        duplicated=len(changes) - len(set(changes)),
        outcome=f"rules ({len(got['rules'])}), change log ({len(changes)} rows), quarantine = uninterrupted run",
        seconds=time.monotonic() - started,
    )
