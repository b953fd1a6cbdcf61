"""Hostile rules are stopped at the CDC boundary with a clear reason; filters never become SQL text; secrets stay out.

A rule naming an unknown field (filter or grouping key), an absurd window, a limit that is not a number, a filter
that nests too deep or a field name that is SQL are rejected by the rule model, quarantined by the CDC job with
their reason, and never reach Spark. Rule content is compiled to Column expressions only (checked on the code).
Kafka credentials come only from the environment and appear in no settings dump, log line or table.
"""

from __future__ import annotations

import ast
import json
import logging
import re
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from reliability_support import record_outcome
from rules_cdc_support import SEED, records, rule_event, table_rows

from pipelines.base.kafka_clients import python_client_config, spark_kafka_options
from pipelines.base.settings import REPO_ROOT, KafkaSecurity, Settings, load_settings
from rules_cdc.apply_changes import apply_records, ensure_rules_tables
from rules_cdc.filter_expr import compile_filter, parse_filter
from rules_cdc.rule_model import RuleValidationError, parse_rule

SCHEMA = load_settings().transaction_schema
LEAF = {"field": "paymentType", "op": "EQUAL", "value": "CSH"}


def _nested(depth: int) -> dict[str, Any]:
    cond: dict[str, Any] = LEAF
    for _ in range(depth - 1):
        cond = {"not": cond}
    return cond


HOSTILE: dict[str, tuple[dict[str, Any], str]] = {
    "filter on an unknown field": (
        {"filter": {"field": "merchantRisk", "op": "GREATER", "value": 3}},
        "filter names unknown transaction field 'merchantRisk'",
    ),
    "filter field that is SQL": (
        {"filter": {"field": "paymentAmount) OR (1=1", "op": "GREATER", "value": 3}},
        "filter names unknown transaction field",
    ),
    "filter field with a dot (nested access)": (
        {"filter": {"field": "extraFields.x", "op": "EQUAL", "value": "a"}},
        "filter names unknown transaction field",
    ),
    "grouping key on an unknown field": (
        {"groupingKeyNames": ["payerId", "deviceId"]},
        "groupingKeyNames names unknown transaction fields ['deviceId']",
    ),
    "grouping key that is SQL": ({"groupingKeyNames": ["payerId`; DROP TABLE rules; --"]}, "unknown transaction field"),
    "grouping keys not strings": ({"groupingKeyNames": [["payerId"], {"a": 1}]}, "list of field names (strings)"),
    "grouping keys as malformed JSON text": ({"groupingKeyNames": '["payerId"'}, "groupingKeyNames"),
    "aggregate field not numeric": ({"aggregateFieldName": "paymentType"}, "is not numeric"),
    "aggregate field unknown": ({"aggregateFieldName": "sum(paymentAmount)"}, "is not a transaction field"),
    "window of zero minutes": ({"windowMinutes": 0}, "windowMinutes: Input should be greater than or equal to 1"),
    "window of a million years": ({"windowMinutes": 525_600_000_000}, "windowMinutes: Input should be less than"),
    "window negative": ({"windowMinutes": -5}, "windowMinutes: Input should be greater than or equal to 1"),
    "window as text": ({"windowMinutes": "forever"}, "windowMinutes: Input should be a valid integer"),
    "window fractional": ({"windowMinutes": 2.5}, "windowMinutes: Input should be a valid integer"),
    "limit as words": ({"limit": "ten thousand"}, "limit must be a number"),
    "limit as a list": ({"limit": [1000]}, "limit must be a number"),
    "limit as an object": ({"limit": {"value": 1}}, "limit must be a number"),
    "limit boolean": ({"limit": True}, "limit must be a number"),
    "limit NaN": ({"limit": "NaN"}, "limit must be a finite number below 1e30"),
    "limit infinite": ({"limit": "Infinity"}, "limit must be a finite number below 1e30"),
    "limit with a huge exponent": ({"limit": "1e999999999"}, "limit must be a finite number below 1e30"),
    "limit of 31 digits": ({"limit": "9" * 31}, "limit must be a finite number below 1e30"),
    "unknown aggregator": ({"aggregatorFunctionType": "MEDIAN"}, "aggregatorFunctionType: Input should be"),
    "unknown operator": ({"limitOperatorType": "LIKE"}, "limitOperatorType: Input should be"),
    "filter 17 levels deep": ({"filter": _nested(17)}, "filter nests 17 deep; at most 16"),
    "filter as deeply nested JSON text": ({"filter": "[" * 50_000}, "filter nests deeper than 16"),
    "filter IN with 1001 values": (
        {"filter": {"field": "paymentType", "op": "IN", "value": [str(n) for n in range(1001)]}},
        "IN takes at most 1000 values",
    ),
    "filter comparing a number with text": (
        {"filter": {"field": "paymentAmount", "op": "GREATER", "value": "1 OR 1=1"}},
        "filter compares numeric field 'paymentAmount'",
    ),
    "filter value beyond a 38-digit decimal": (
        {"filter": {"field": "paymentAmount", "op": "GREATER", "value": 1.7976931348623157e308}},
        "needs more than 38 digits or 18 decimal places",
    ),
    "filter value smaller than 18 places": (
        {"filter": {"field": "payerId", "op": "EQUAL", "value": -1e-20}},
        "needs more than 38 digits or 18 decimal places",
    ),
    "filter value beyond a long": (
        {"filter": {"field": "payerId", "op": "IN", "value": [1, 2**70]}},
        "beyond the 64-bit integer range",
    ),
    "filter with an unknown operator": (
        {"filter": {"field": "paymentType", "op": "LIKE", "value": "%"}},
        "filter",
    ),
    "unknown rule field": ({"sqlWhere": "1=1"}, "sqlWhere: Extra inputs are not permitted"),
    "state set by hand to DELETED": ({"ruleState": "DELETED"}, "set by delete events or disabled=true"),
    "negative cooldown": ({"cooldownMinutes": -1}, "cooldownMinutes: Input should be greater than or equal to 0"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_rule_is_rejected_with_a_clear_reason(name: str) -> None:
    change, reason = HOSTILE[name]
    with pytest.raises(RuleValidationError) as raised:
        parse_rule({**SEED, **change}, SCHEMA)
    assert reason in raised.value.reason
    assert "\n" not in raised.value.reason and len(raised.value.reason) < 500


# In a Debezium event the limit column is decoded as a decimal before the rule model sees it: these stop there.
DECIMAL_DECODER_REJECTS = {"limit as a list", "limit as an object", "limit as words", "limit boolean"}


def _event(rule_id: int, ts_ms: int, change: dict[str, Any]) -> str:
    """A create event whose ``after`` is the seed rule with ``change`` — built as JSON, not through the model."""
    event = json.loads(rule_event("c", rule_id, ts_ms, SCHEMA))
    event["after"] = {**SEED, "ruleId": rule_id, **change}
    return json.dumps(event)


def test_hostile_rules_are_quarantined_at_the_cdc_boundary_and_never_reach_the_rules_table(
    spark: SparkSession, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = time.monotonic()
    secret = "s3cr3t-Pa55word-for-the-test"
    monkeypatch.setenv("FRAUDLAKE_TEST_KAFKA_PASSWORD", secret)
    ensure_rules_tables(spark, settings)
    names = sorted(HOSTILE)
    lines = [_event(100 + n, 1_700_000_000_000 + n, HOSTILE[name][0]) for n, name in enumerate(names)]
    lines.append(_event(1, 1_700_000_100_000, {"ruleName": "lone surrogate \ud800 in a name"}))
    lines.append(rule_event("c", 2, 1_700_000_100_001, SCHEMA))  # one good rule among them
    result = apply_records(spark, settings, records(lines, "hostile"))

    quarantine = {q["sourceOffset"]: q["reason"] for q in table_rows(spark, settings, "quarantine")}
    for n, name in enumerate(names):
        reason = quarantine[f"file:/hostile.jsonl:{n + 1}"]
        if name in DECIMAL_DECODER_REJECTS:
            assert reason.startswith("after.limit: ") and "is not a number" in reason, (name, reason)
        else:
            assert reason.startswith(f"rule {100 + n}: ") and HOSTILE[name][1] in reason, (name, reason)
    # A lone surrogate (a "\ud800" escape) is not text: pydantic refuses it, so the rule is quarantined too.
    assert quarantine[f"file:/hostile.jsonl:{len(names) + 1}"] == (
        "rule 1: ruleName: Input should be a valid string, unable to parse raw data as a unicode string"
    )
    rules = {r["ruleId"]: r for r in table_rows(spark, settings, "rules")}
    assert set(rules) == {2}
    assert result.quarantined == len(names) + 1 and result.applied == 1
    for path in Path(settings.lakehouse_root).rglob("*"):
        assert not path.is_file() or secret.encode() not in path.read_bytes(), path
    record_outcome(
        "hostile rules (Debezium creates) through apply_records",
        "bad input",
        records_in=len(lines),
        applied=result.applied,
        quarantined=result.quarantined,
        outcome="each quarantined with its reason; only the valid rule in the rules table",
        seconds=time.monotonic() - started,
    )


def test_filter_values_stay_literals_in_the_compiled_column(spark: SparkSession) -> None:
    frame = spark.createDataFrame(
        [("t1", "CSH", 5), ("t2", "x') OR ('1'='1", 7)], "transactionId string, paymentType string, payerId long"
    )
    for value in ("x' OR '1'='1", "CSH' --", "`paymentType`", "paymentType"):
        cond = parse_filter({"field": "paymentType", "op": "EQUAL", "value": value})
        assert frame.where(compile_filter(cond)).count() == 0, value
    cond = parse_filter({"field": "paymentType", "op": "IN", "value": ["x') OR ('1'='1"]})
    assert [r.transactionId for r in frame.where(compile_filter(cond)).collect()] == ["t2"]
    # The compiled Column names the field as a column reference and the value as a literal, nothing else.
    text = str(compile_filter(parse_filter({"field": "paymentType", "op": "EQUAL", "value": "a' OR 1=1"})))
    assert "paymentType" in text and "'a\\' OR 1=1'" in text  # a quoted, escaped literal


RULE_CONTENT_MODULES = sorted(
    [*(REPO_ROOT / "rules_cdc").glob("*.py")]
    + [REPO_ROOT / "pipelines" / "engine" / f"{name}.py" for name in ("evaluate", "states", "buckets", "keys")]
    + [REPO_ROOT / "pipelines" / "engine" / f"{name}.py" for name in ("lookback", "cooldown", "alert_rows")]
)
SQL_TEXT_CALLS = {"expr", "selectExpr", "sql", "where", "filter"}


@pytest.mark.parametrize("path", RULE_CONTENT_MODULES, ids=lambda p: p.name)
def test_code_that_handles_rule_content_builds_no_sql_text(path: Path) -> None:
    """``F.expr``/``selectExpr``/``spark.sql``/``where`` get only constant text where rule content is handled."""
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute | ast.Name):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
        if name not in SQL_TEXT_CALLS:
            continue
        for arg in node.args:
            built = isinstance(arg, ast.JoinedStr) or (
                isinstance(arg, ast.Call) and isinstance(arg.func, ast.Attribute) and arg.func.attr == "format"
            )
            built |= isinstance(arg, ast.BinOp) and any(  # "..." + x, "..." % x
                isinstance(side, ast.Constant | ast.JoinedStr) and not isinstance(getattr(side, "value", ""), int)
                for side in (arg.left, arg.right)
            )
            assert not built, f"{path.name}:{node.lineno}: {name}() with text built at run time"


def test_kafka_secrets_come_only_from_the_environment_and_are_never_logged(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, base_settings: Settings
) -> None:
    secret = "s3cr3t-Pa55word-for-the-test"
    monkeypatch.setenv("FRAUDLAKE_TEST_KAFKA_USER", "fraud-app")
    monkeypatch.setenv("FRAUDLAKE_TEST_KAFKA_PASSWORD", secret)
    security = KafkaSecurity(
        protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username_env="FRAUDLAKE_TEST_KAFKA_USER",
        sasl_password_env="FRAUDLAKE_TEST_KAFKA_PASSWORD",
        ssl_cafile="/etc/ssl/ca.pem",
    )
    settings = base_settings.model_copy(update={"kafka": base_settings.kafka.model_copy(update={"security": security})})
    with caplog.at_level(logging.DEBUG):
        options = spark_kafka_options(settings)
        client = python_client_config(settings)
    assert options["kafka.security.protocol"] == "SASL_SSL" and options["kafka.sasl.mechanism"] == "SCRAM-SHA-512"
    assert secret in options["kafka.sasl.jaas.config"] and client["sasl_plain_password"] == secret
    assert options["kafka.ssl.truststore.location"] == "/etc/ssl/ca.pem"
    # Spark redacts option values matching spark.redaction.regex (default below) in its UI, logs and plans.
    assert re.search(r"(?i)secret|password|token|access[.]key", options["kafka.sasl.jaas.config"])
    assert secret not in caplog.text
    assert secret not in settings.model_dump_json() and secret not in repr(settings)
    with pytest.raises(ValueError, match="sasl_password"):  # a password in the conf file itself is refused
        KafkaSecurity.model_validate({"protocol": "SASL_SSL", "sasl_password": secret})
    monkeypatch.delenv("FRAUDLAKE_TEST_KAFKA_PASSWORD")
    assert 'password=""' in spark_kafka_options(settings)["kafka.sasl.jaas.config"]  # unset: empty, not a default
