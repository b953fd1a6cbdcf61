"""Shared helpers of the rules CDC tests: the Debezium samples, rule events, and table reads by content."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from pyspark.sql import SparkSession

from pipelines.base.settings import Settings, TransactionSchema
from pipelines.cli import main
from rules_cdc.envelope import Op
from rules_cdc.parse_events import RawRecord
from rules_cdc.publisher import cli_event
from rules_cdc.rule_model import parse_rule
from rules_cdc.source_position import pg_position, ts_position

SAMPLES = Path(__file__).parent / "data" / "debezium"
VOLATILE = ("updatedAt", "tombstonedAt")  # wall-clock columns: not part of the converged content

SEED = {
    "ruleId": 1,
    "ruleState": "ACTIVE",
    "groupingKeyNames": ["payerId", "beneficiaryId"],
    "aggregateFieldName": "paymentAmount",
    "aggregatorFunctionType": "SUM",
    "limitOperatorType": "GREATER",
    "limit": 1000000,
    "windowMinutes": 10080,
}


def sample(name: str) -> str:
    """A sample record value as one line (as it sits in a Kafka record or a JSON-lines file)."""
    return json.dumps(json.loads((SAMPLES / f"{name}.json").read_text()))


def sample_lsns(name: str) -> tuple[int, int]:
    """A PostgreSQL sample's ``(lsn, last commit lsn)``, read from its ``source`` by hand (``sequence[0]``, 0 when
    null). The samples are regenerated from the real connector (test_debezium_modes, WRITE_DEBEZIUM_SAMPLES=1), so
    tests read their positions rather than write them down."""
    document = json.loads((SAMPLES / f"{name}.json").read_text())
    source = document.get("payload", document)["source"]
    return int(source["lsn"]), int(json.loads(source["sequence"])[0] or 0)


def sample_pg_position(name: str) -> str:
    """The position a PostgreSQL sample must get: the change's LSN, then the last commit LSN."""
    return pg_position(*sample_lsns(name))


def reshaped(name: str, *, source: dict[str, Any] | None = None, replace_source: bool = False, **after: Any) -> str:
    """A sample record value with its ``source`` block updated (or, with ``replace_source``, replaced) and some
    ``after`` columns changed: the same change at another position, or a forged one."""
    document = json.loads((SAMPLES / f"{name}.json").read_text())
    payload = document.get("payload", document)
    payload["source"] = (source or {}) if replace_source else {**payload["source"], **(source or {})}
    payload["after"] = {**payload["after"], **after} if payload.get("after") is not None else None
    return json.dumps(document)


def sample_record(name: str) -> RawRecord:
    return RawRecord(sample(name), f"file:{name}.json:1")


def rule_event(op: str, rule_id: int, ts_ms: int, schema: TransactionSchema, **changes: Any) -> str:
    """A ``ts``-position change event for rule ``rule_id`` (a delete's before is the seed rule)."""
    rule = parse_rule({**SEED, "ruleId": rule_id, **changes}, schema)
    after = None if op in ("d", "t") else rule
    before = rule if op == "d" else None
    return json.dumps(cli_event(Op(op), before, after, (ts_position(ts_ms), ts_ms)))


def records(lines: list[str], name: str = "test") -> list[RawRecord]:
    return [RawRecord(line, f"file:/{name}.jsonl:{n}") for n, line in enumerate(lines, start=1)]


def table_rows(spark: SparkSession, settings: Settings, table: str, **options: str) -> list[dict[str, Any]]:
    reader = spark.read.format("delta")
    for key, value in options.items():
        reader = reader.option(key, value)
    return [r.asDict(recursive=True) for r in reader.load(settings.table_path(table)).collect()]


def stable(rows: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Rules rows by id without the wall-clock columns, for comparison by content."""
    return {r["ruleId"]: {k: v for k, v in r.items() if k not in VOLATILE} for r in rows}


def write_conf(settings: Settings, folder: Path) -> Path:
    conf = folder / "conf.yaml"
    conf.write_text(yaml.safe_dump(settings.model_dump(mode="json")))
    return conf


def cli(capsys: pytest.CaptureFixture[str], settings: Settings, conf: Path, *args: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main([*args, "--conf", str(conf), "--lakehouse", settings.lakehouse_root])
    return code, capsys.readouterr().out


def cli_json(capsys: pytest.CaptureFixture[str], settings: Settings, conf: Path, *args: str) -> Any:
    code, out = cli(capsys, settings, conf, *args)
    assert code == 0, out
    return json.loads(out)


FAN_OUT_RULE: dict[str, Any] = {
    "ruleId": 21,
    "groupingKeyNames": ["payerId"],
    "aggregateFieldName": "beneficiaryId",
    "aggregatorFunctionType": "COUNT_DISTINCT",
    "limitOperatorType": "GREATER",
    "limit": 5,
    "windowMinutes": 60,
}
"""A COUNT_DISTINCT rule (docs/engine.md, the contract): one payer paying more than 5 beneficiaries in an hour."""
SPIKE_RULE: dict[str, Any] = {
    "ruleId": 22,
    "groupingKeyNames": ["payerId"],
    "aggregateFieldName": "paymentAmount",
    "aggregatorFunctionType": "VALUE",
    "limitOperatorType": "GREATER",
    "limit": 5,
    "windowMinutes": 1,
    "baseline": {"aggregatorFunctionType": "AVG", "windowMinutes": 43200, "minCount": 5},
}
"""A relative limit: a payment over 5 times the payer's average of the last 30 days (5 payments of history)."""
