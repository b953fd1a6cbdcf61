"""Notebook 01 and ``rules_cdc.manage``: rule edits as CDC events, applied at once or published to Kafka."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer
from pyspark.sql import SparkSession
from rules_cdc_support import FAN_OUT_RULE, SEED, SPIKE_RULE, table_rows, write_conf

from pipelines.base.settings import REPO_ROOT, Settings
from pipelines.local.kafka_broker import KafkaBroker
from pipelines.notebook_tools.runner import NOTEBOOKS_DIR, NotebookError, NotebookResult, run_notebook
from rules_cdc.manage import edit_rules, parse_rules_text, sample_rules_path, seed_rule_text
from rules_cdc.publisher import PublishRefused
from rules_cdc.rule_model import RuleState
from rules_cdc.rule_rows import rule_from_row
from rules_cdc.rules_views import rules_frame

NOTEBOOK = NOTEBOOKS_DIR / "01_manage_rules.py"
LOCAL_CONF = str(REPO_ROOT / "conf" / "local.yaml")


def run_01(spark: SparkSession, settings: Settings, out: Path, conf: str = LOCAL_CONF, **params: str) -> NotebookResult:
    parameters = {"conf": conf, "lakehouse": settings.lakehouse_root, **params}
    return run_notebook(NOTEBOOK, spark, parameters=parameters, output_dir=out)


def test_seed_rule_is_the_first_sample_rule(tmp_path: Path, base_settings: Settings) -> None:
    sample = REPO_ROOT / "conf" / "sample_rules.json"
    assert json.loads(seed_rule_text()) == SEED == json.loads(sample.read_text())[0]
    assert sample_rules_path(str(tmp_path / "elsewhere.yaml")) == sample  # no samples next to that conf
    (tmp_path / "sample_rules.json").write_text(json.dumps([{**SEED, "ruleId": 9}]))
    assert json.loads(seed_rule_text(str(tmp_path / "conf.yaml")))["ruleId"] == 9
    assert parse_rules_text("  ", base_settings) == []
    assert [r.rule_id for r in parse_rules_text(json.dumps([SEED, {**SEED, "ruleId": 2}]), base_settings)] == [1, 2]


def test_notebook_upserts_the_seed_then_pauses_it_with_history_and_time_travel(
    spark: SparkSession, settings: Settings, tmp_path: Path
) -> None:
    # A fresh lakehouse: the notebook creates the rules tables it needs.
    created = run_01(spark, settings, tmp_path / "out")
    assert created.widgets["action"] == "upsert" and created.widgets["publish_to"] == "apply"
    (rule,) = rules_frame(spark, settings).collect()
    assert (rule["ruleId"], rule["ruleState"], rule["sourceOp"]) == (1, "ACTIVE", "c")
    assert rule["groupingKeyNames"] == SEED["groupingKeyNames"] and rule["limit"] == SEED["limit"]

    paused = run_01(spark, settings, tmp_path / "out", action="pause")
    assert [(r["ruleId"], r["ruleState"]) for r in table_rows(spark, settings, "rules")] == [(1, "PAUSED")]
    history = sorted(table_rows(spark, settings, "rule_changes"), key=lambda h: h["sourcePosition"])
    assert [(h["op"], h["resultingState"], h["rulesVersion"]) for h in history] == [
        ("c", "ACTIVE", 1),
        ("u", "PAUSED", 2),
    ]
    assert [h["sourceOffset"] for h in history] == ["notebook:upsert:1", "notebook:pause:1"]
    assert json.loads(history[1]["before"])["rule_state"] == "ACTIVE"

    # What the notebook showed: live rules, the rule's history, the table before the pause (version 1).
    live, shown_history, as_of = (o.text for o in paused.outputs)
    assert "PAUSED" in live and "ACTIVE" not in live
    assert [line.split()[:2] for line in shown_history.splitlines()[1:]] == [["1", "c"], ["1", "u"]]
    assert "ACTIVE" in as_of and "PAUSED" not in as_of
    assert [r["ruleState"] for r in rules_frame(spark, settings, "1").collect()] == ["ACTIVE"]

    with pytest.raises(NotebookError, match="rule 1 is already PAUSED"):
        run_01(spark, settings, tmp_path / "out", action="pause")
    with pytest.raises(NotebookError, match="'archive' is not one of"):
        run_01(spark, settings, tmp_path / "out", action="archive")


def test_edit_rules_refuses_what_it_cannot_express(spark: SparkSession, settings: Settings) -> None:
    with pytest.raises(ValueError, match="publish_to 'email' is not one of"):
        edit_rules(spark, settings, "pause", rule_id=1, publish_to="email")
    with pytest.raises(ValueError, match="pause needs a rule id"):
        edit_rules(spark, settings, "pause")
    with pytest.raises(PublishRefused, match="rule 3 is not a live rule"):
        edit_rules(spark, settings, "delete", rule_id=3)


@pytest.mark.kafka
def test_notebook_publishes_to_the_rules_topic(
    spark: SparkSession,
    settings: Settings,
    kafka_broker: KafkaBroker,
    tmp_path: Path,
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
    conf = write_conf(settings.model_copy(update={"kafka": kafka}), tmp_path)
    run_01(spark, settings, tmp_path / "out", conf=str(conf), publish_to="kafka")

    assert table_rows(spark, settings, "rules") == []  # the rules job applies it, not the notebook
    consumer = KafkaConsumer(topic, bootstrap_servers=kafka_broker.bootstrap, auto_offset_reset="earliest")
    records: list[tuple[bytes, dict[str, Any]]] = []
    deadline = time.monotonic() + 30
    try:
        while not records and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=1000).values():
                records.extend((r.key, json.loads(r.value)) for r in batch)
    finally:
        consumer.close()
    ((key, event),) = records
    assert key == b'{"rule_id": 1}'
    assert event["op"] == "c" and event["before"] is None and event["after"]["rule_id"] == 1
    assert event["source"]["connector"] == "fraudlake-cli"


def test_a_distinct_count_and_a_relative_limit_are_upserted_and_paused_with_their_vocabulary(
    spark: SparkSession, settings: Settings
) -> None:
    """The CLI publisher's events carry the baseline as Debezium does (JSON text of the jsonb column)."""
    text = json.dumps([FAN_OUT_RULE, SPIKE_RULE])
    rules = parse_rules_text(text, settings)
    upserted = edit_rules(spark, settings, "upsert", rules=rules)
    assert upserted.applied is not None and upserted.applied.quarantined == 0
    after = json.loads(upserted.events[1]["after"]["baseline"])  # as the connector carries a jsonb column
    assert after == {"aggregatorFunctionType": "AVG", "windowMinutes": 43200, "minCount": 5, "perWindow": False}
    edit_rules(spark, settings, "pause", rule_id=22)
    rows = {r["ruleId"]: r for r in table_rows(spark, settings, "rules")}
    assert rule_from_row(rows[21]) == rules[0]
    assert rule_from_row(rows[22]) == rules[1].model_copy(update={"rule_state": RuleState.PAUSED})
    assert rows[22]["baseline"] == rules[1].baseline_json
