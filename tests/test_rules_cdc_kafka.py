"""The Kafka path end to end through the real broker: CLI publisher -> rules topic -> rules job -> Delta."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import pytest
from kafka import KafkaProducer
from pyspark.sql import SparkSession
from rules_cdc_support import SEED, cli, cli_json, sample, table_rows, write_conf

from pipelines.base.settings import Settings
from pipelines.local.kafka_broker import KafkaBroker

pytestmark = pytest.mark.kafka


def test_cli_edits_travel_through_kafka_and_the_job_applies_them(
    spark: SparkSession,
    settings: Settings,
    kafka_broker: KafkaBroker,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("FRAUDLAKE_KAFKA_BOOTSTRAP", raising=False)
    topic = f"fraudlake.rules.{uuid.uuid4().hex[:8]}"
    kafka = settings.kafka.model_copy(
        update={
            "bootstrap_servers": kafka_broker.bootstrap,
            "topics": settings.kafka.topics.model_copy(update={"rules": topic}),
        }
    )
    settings = settings.model_copy(update={"kafka": kafka})
    conf = write_conf(settings, tmp_path)
    upserts = tmp_path / "rules.json"
    upserts.write_text(json.dumps([SEED, {**SEED, "ruleId": 2, "aggregatorFunctionType": "MAX", "limit": 5000}]))
    code, out = cli(capsys, settings, conf, "rules", "upsert", str(upserts))
    assert code == 0 and f"published 2 event(s) to {topic}" in out

    # What else a topic can hold: a Kafka tombstone, garbage, and an event of another connector kind.
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap)
    for value in (None, b"{garbage", sample("pg_create_schema_precise").encode()):
        producer.send(topic, key=b'{"rule_id": 2}', value=value)
    producer.flush()
    producer.close()

    code, _ = cli(capsys, settings, conf, "rules", "run", "--source", "kafka", "--once")
    assert code == 0
    live = cli_json(capsys, settings, conf, "rules", "list", "--json")
    assert [(r["ruleId"], r["ruleState"], r["aggregatorFunctionType"], r["limit"]) for r in live] == [
        (1, "ACTIVE", "SUM", 1000000),
        (2, "ACTIVE", "MAX", 5000),
    ]
    quarantine = sorted(table_rows(spark, settings, "quarantine"), key=lambda q: q["reason"])
    assert quarantine[0]["reason"].startswith("not JSON") and quarantine[0]["rawPayload"] == "{garbage"
    assert quarantine[1]["reason"].startswith("source position kind 'pg' does not match the rules table's ['ts']")
    assert len(quarantine) == 2
    assert all(re.fullmatch(rf"kafka:{re.escape(topic)}/\d+/\d+", q["sourceOffset"]) for q in quarantine)

    assert cli(capsys, settings, conf, "rules", "pause", "1")[0] == 0
    assert cli(capsys, settings, conf, "rules", "delete", "2")[0] == 0
    code, out = cli(capsys, settings, conf, "rules", "pause", "7")
    assert code == 2
    assert cli(capsys, settings, conf, "rules", "run", "--source", "kafka", "--once")[0] == 0

    everything = cli_json(capsys, settings, conf, "rules", "list", "--json", "--all")
    assert [(r["ruleId"], r["ruleState"]) for r in everything] == [(1, "PAUSED"), (2, "DELETED")]
    history = cli_json(capsys, settings, conf, "rules", "history", "1", "--json")
    assert [(h["op"], h["resultingState"]) for h in history] == [("c", "ACTIVE"), ("u", "PAUSED")]
    assert json.loads(history[1]["before"])["rule_state"] == "ACTIVE"
    assert all(h["sourceOffset"].startswith(f"kafka:{topic}/") for h in history)
