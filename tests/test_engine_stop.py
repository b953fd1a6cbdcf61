"""A stop signal ends a continuous engine within a bounded time, even when it is behind or its broker went away.

``fraudlake run`` (continuous) runs in a subprocess and gets SIGTERM:

* **behind**: a backlog of landing files, one per micro-batch, so triggers run back to back (Spark's
  ``isTriggerActive`` stays true from one batch to the next). The old supervisor waited for it to go false,
  i.e. for the whole backlog;
* **broker gone**: a Kafka source whose broker is stopped after the first batch, so the next trigger sits in
  Spark's offset retries (again ``isTriggerActive``), for minutes.

Either way the process must exit (code 0, saying how it stopped) within the grace for the batch in flight plus
Spark's stop timeout plus process exit, and a restart from the same checkpoint must give every transaction once
and the reference evaluator's alerts: whatever was abandoned replays safely.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from engine_fixtures import alerts_by_id, json_line, make_rule, put_rules
from kafka import KafkaProducer
from lakehouse_template import fresh_lakehouse
from pyspark.sql import SparkSession
from reference_evaluator import RefBatch, evaluate
from reliability_support import record_outcome
from rules_cdc_support import write_conf

from pipelines.base.settings import REPO_ROOT, Settings
from pipelines.engine.job import STOP_GRACE_SECONDS, STOP_TIMEOUT_SECONDS, EngineRun, run_engine
from pipelines.engine.keys import encode_key
from pipelines.local.kafka_broker import KafkaBroker, started_broker

pytestmark = pytest.mark.subprocess
T0 = 1_700_006_400_000
RULES = [make_rule(1, limit=150, windowMinutes=3), make_rule(2, groupingKeyNames=[], aggregatorFunctionType="MAX")]
EXIT_MARGIN_SECONDS = 30  # the CLI's own exit after the query stopped: Python and the JVM shutting down
BOUND_SECONDS = STOP_GRACE_SECONDS + STOP_TIMEOUT_SECONDS + EXIT_MARGIN_SECONDS


def _records(part: int, n: int) -> list[dict[str, Any]]:
    """Event times increase from part to part: precedence is (eventTime, id) however the parts are batched."""
    return [
        {
            "transactionId": f"p{part:02d}-{i:02d}",
            "eventTime": T0 + part * 60_000 + i * 1_000,
            "payerId": i % 3,
            "paymentAmount": Decimal(20 + 7 * ((part + i) % 9)) + Decimal("0.25"),
        }
        for i in range(n)
    ]


class Engine:
    """``fraudlake run`` in a subprocess of its own group; its output lines collected as they come."""

    def __init__(self, settings: Settings, conf: Path, *args: str) -> None:
        command = [sys.executable, "-m", "pipelines.cli", "run", *args]
        command += ["--conf", str(conf), "--lakehouse", settings.lakehouse_root]
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
        self.process = subprocess.Popen(
            command,
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for_line(self, prefix: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if any(line.startswith(prefix) for line in self.lines):
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.5)
        raise AssertionError(f"no line {prefix!r} within {timeout_s:.0f} s:\n" + "\n".join(self.lines[-40:]))

    def stop(self, *, group: bool = False) -> tuple[int, float]:
        """SIGTERM to the process (or to its whole group, the Spark JVM included, as a service manager's stop or a
        terminal's signal does); the exit code and the seconds from the signal to the process's exit."""
        signalled = time.monotonic()
        if group:
            os.killpg(self.process.pid, signal.SIGTERM)
        else:
            self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=BOUND_SECONDS + 120)
        except subprocess.TimeoutExpired:
            code = -999
        return code, time.monotonic() - signalled

    def reap(self) -> None:
        """Kill whatever of its group is left (its Spark JVM), and wait for the output reader."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(timeout=60)
        self._reader.join(timeout=10)


@pytest.fixture
def fast_triggers(settings: Settings, tmp_path: Path) -> tuple[Settings, Path]:
    engine = settings.engine.model_copy(update={"trigger_interval_seconds": 1})
    fast = settings.model_copy(update={"engine": engine})
    return fast, write_conf(fast, tmp_path)


def _expected(records: list[dict[str, Any]]) -> dict[tuple[int, str], tuple[str, Decimal]]:
    return {
        (a.rule_id, a.transaction_id): (encode_key(a.key), a.aggregate_value)
        for a in evaluate([RefBatch(RULES, records)])
    }


def _bronze_ids(spark: SparkSession, settings: Settings) -> list[str]:
    bronze = spark.read.format("delta").load(settings.table_path("bronze_transactions"))
    return [r["transactionId"] for r in bronze.select("transactionId").collect()]


def test_sigterm_on_an_engine_that_is_behind(
    spark: SparkSession, fast_triggers: tuple[Settings, Path], tmp_path: Path
) -> None:
    settings, conf = fast_triggers
    landing = tmp_path / "landing"
    landing.mkdir()
    parts = [_records(part, 12) for part in range(40)]  # a backlog of 40 micro-batches
    for part, records in enumerate(parts):
        path = landing / f"part-{part:02d}.jsonl"
        path.write_text("\n".join(json_line(r) for r in records) + "\n")
        os.utime(path, (1_700_000_000 + part, 1_700_000_000 + part))
    fresh_lakehouse(spark, settings)
    put_rules(spark, settings, RULES)

    engine = Engine(settings, conf, "--input", str(landing), "--max-files-per-trigger", "1")
    try:
        engine.wait_for_line("batch 1:", timeout_s=600)  # running back to back
        code, seconds = engine.stop(group=True)  # the JVM gets it too: it must not die under the graceful stop
    finally:
        engine.reap()
    done = [line for line in engine.lines if line.startswith("batch ")]
    stopped = [line for line in engine.lines if line.startswith("engine: stopped in ")]
    print(f"behind: exit {code} {seconds:.1f} s after SIGTERM, {len(done)} of {len(parts)} batches done; {stopped}")
    assert code == 0, "\n".join(engine.lines[-40:])
    assert seconds < BOUND_SECONDS, f"{seconds:.0f} s from SIGTERM to exit"
    assert stopped, engine.lines[-10:]
    assert len(done) < len(parts) - 5, "the backlog was worked off before the stop: the test proves nothing"

    run_engine(spark, settings, EngineRun(source="files", input_path=str(landing), once=True))
    ids = _bronze_ids(spark, settings)
    everything = [r for records in parts for r in records]
    assert sorted(ids) == sorted(r["transactionId"] for r in everything)  # each once
    assert alerts_by_id(spark, settings) == _expected(everything)
    record_outcome(
        "SIGTERM to a continuous engine behind by a backlog of 40 micro-batches, then restarted",
        "fault",
        records_in=len(everything),
        applied=len(set(ids)),
        quarantined=0,
        duplicated=len(ids) - len(set(ids)),
        outcome=f"exit 0 {seconds:.1f} s after the signal ({len(done)} batches done); restart: alerts = contract",
        seconds=seconds,
    )


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[KafkaBroker]:
    with started_broker(tmp_path / "kafka", heap="256m") as broker:
        yield broker


@pytest.mark.kafka
def test_sigterm_on_an_engine_whose_broker_went_away(
    spark: SparkSession, settings: Settings, own_broker: KafkaBroker, tmp_path: Path
) -> None:
    topic = f"tx-stop-{uuid.uuid4().hex[:8]}"
    kafka = settings.kafka.model_copy(
        update={
            "bootstrap_servers": own_broker.bootstrap,
            "topics": settings.kafka.topics.model_copy(update={"transactions": topic}),
        }
    )
    settings = settings.model_copy(
        update={"kafka": kafka, "engine": settings.engine.model_copy(update={"trigger_interval_seconds": 1})}
    )
    conf = write_conf(settings, tmp_path)
    fresh_lakehouse(spark, settings)
    put_rules(spark, settings, RULES)
    records = _records(0, 20)

    engine = Engine(settings, conf, "--source", "kafka")
    try:
        engine.wait_for_line("engine: source kafka", timeout_s=600)  # the topic was created, the query runs
        producer = KafkaProducer(bootstrap_servers=own_broker.bootstrap, acks="all")
        for record in records:
            producer.send(topic, key=str(record["payerId"]).encode(), value=json_line(record).encode())
        producer.flush(timeout=60)
        producer.close()
        # The first batch that holds the records: batch 0 when its offsets were read after they landed, batch 1 when
        # batch 0 ran on the empty topic (an empty batch reports no line).
        engine.wait_for_line("batch ", timeout_s=600)
        own_broker.stop()
        time.sleep(8)  # the next triggers now sit in Kafka offset requests against a dead broker
        code, seconds = engine.stop()
    finally:
        engine.reap()
    stopped = [line for line in engine.lines if line.startswith("engine: stopped in ")]
    print(f"broker gone: exit {code} {seconds:.1f} s after SIGTERM; {stopped}")
    assert code == 0, "\n".join(engine.lines[-40:])
    assert seconds < BOUND_SECONDS, f"{seconds:.0f} s from SIGTERM to exit"
    assert stopped, engine.lines[-10:]

    own_broker.start()  # the same data folder: the topic and its records are back
    run_engine(spark, settings, replace(EngineRun(source="kafka"), once=True))
    assert sorted(_bronze_ids(spark, settings)) == sorted(r["transactionId"] for r in records)
    # Records arrive over partitions while batches are cut: the reference takes the engine's batches as input.
    bronze = spark.read.format("delta").load(settings.table_path("bronze_transactions"))
    batch_of = {r["transactionId"]: r["batchId"] for r in bronze.select("transactionId", "batchId").collect()}
    batches = [[r for r in records if batch_of[r["transactionId"]] == b] for b in sorted(set(batch_of.values()))]
    expected = {
        (a.rule_id, a.transaction_id): (encode_key(a.key), a.aggregate_value)
        for a in evaluate([RefBatch(RULES, batch) for batch in batches])
    }
    assert alerts_by_id(spark, settings) == expected
    ids = _bronze_ids(spark, settings)
    record_outcome(
        "SIGTERM to a continuous engine whose Kafka broker went away, then restarted",
        "fault",
        records_in=len(records),
        applied=len(set(ids)),
        quarantined=0,
        duplicated=len(ids) - len(set(ids)),
        outcome=f"exit 0 {seconds:.1f} s after the signal; restart: alerts = contract",
        seconds=seconds,
    )
