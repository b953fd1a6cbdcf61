"""The real Debezium PostgreSQL connector in every ``decimal.handling.mode``, with and without the JSON schema.

Six connectors (3 decimal modes x ``value.converter.schemas.enable`` true/false) of the documented config
(conf/connect/rules-postgres.properties) read one database of their own on the session cluster, through the session
Connect worker and broker. One scripted sequence of analyst changes (``SETUP`` before they start: a snapshot read;
then ``STEPS``: insert, update, update under REPLICA IDENTITY FULL, delete, truncate) reaches six topics; the
parser must turn every one of them into the same events: same rules, ops, states and positions.

``tests/data/debezium/pg_*.json`` are records these connectors wrote. This test checks they still are (volatile
parts aside: LSNs, clocks, transaction ids, connector names); ``WRITE_DEBEZIUM_SAMPLES=1`` writes them afresh.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from typing import Any

import pytest
from debezium_support import connector, own_database, record_count, topic_records
from polling import wait_for
from rules_cdc_support import SAMPLES

from pipelines.base.settings import Settings
from pipelines.local.connect_worker import ConnectWorker
from pipelines.local.kafka_broker import KafkaBroker
from pipelines.local.rules_database import RulesDb
from rules_cdc.envelope import Op
from rules_cdc.parse_events import RawRecord, parse_records
from rules_cdc.rule_model import Aggregator, Baseline
from rules_cdc.rule_rows import TRUNCATE_MARKER_ID

pytestmark = pytest.mark.kafka

DATABASE = "fraudlake_modes"
MODES = [(decimal, schemas) for decimal in ("precise", "double", "string") for schemas in (True, False)]
COLUMNS = (
    "rule_id, rule_name, rule_state, grouping_key_names, aggregate_field_name, aggregator_function_type, "
    "limit_operator_type, limit_value, window_minutes, filter, cooldown_minutes"
)
SETUP = (
    f"INSERT INTO fraud_rules ({COLUMNS}) VALUES (1, 'big transfers to one beneficiary', 'ACTIVE', "
    "'{payerId,beneficiaryId}', 'paymentAmount', 'SUM', 'GREATER', 1000000.00, 10080, NULL, NULL)"
)
STEPS = (
    f"INSERT INTO fraud_rules ({COLUMNS}) VALUES (2, 'many cash payments', 'ACTIVE', '{{payerId}}', 'COUNT_FLINK', "
    """'SUM', 'GREATER_EQUAL', 5.00, 60, '{"field": "paymentType", "op": "EQUAL", "value": "CSH"}', 15)""",
    # The aggregators and the baseline of schema version 8 (conf/rulesdb/008_rule_kinds.sql): jsonb as JSON text.
    f"INSERT INTO fraud_rules ({COLUMNS}, baseline) VALUES (3, 'fan-out', 'ACTIVE', '{{payerId}}', 'beneficiaryId', "
    "'COUNT_DISTINCT', 'GREATER', 5, 60, NULL, NULL, NULL)",
    f"INSERT INTO fraud_rules ({COLUMNS}, baseline) VALUES (4, 'five times the usual', 'ACTIVE', '{{payerId}}', "
    "'paymentAmount', 'VALUE', 'GREATER', 5, 1, NULL, NULL, "
    """'{"aggregatorFunctionType": "AVG", "windowMinutes": 43200, "minCount": 5}')""",
    "UPDATE fraud_rules SET rule_state = 'PAUSE', limit_value = 7.5 WHERE rule_id = 2",
    "ALTER TABLE fraud_rules REPLICA IDENTITY FULL",
    "UPDATE fraud_rules SET limit_value = 2500000.50 WHERE rule_id = 1",
    "ALTER TABLE fraud_rules REPLICA IDENTITY DEFAULT",
    "DELETE FROM fraud_rules WHERE rule_id = 2",
    "TRUNCATE fraud_rules",
)
RECORDS = 9  # r1, c2, c3, c4, u2, u1, d2 and its Kafka tombstone, t
SAMPLE_OF = {
    # sample name: (decimal mode, schemas.enable, op, rule id)
    "pg_snapshot_read_no_schema_string": ("string", False, "r", 1),
    "pg_snapshot_read_schema_precise": ("precise", True, "r", 1),
    "pg_create_schema_precise": ("precise", True, "c", 2),
    "pg_create_no_schema_precise": ("precise", False, "c", 2),
    "pg_create_count_distinct_no_schema_string": ("string", False, "c", 3),
    "pg_create_relative_schema_precise": ("precise", True, "c", 4),  # baseline: io.debezium.data.Json
    "pg_update_schema_double": ("double", True, "u", 2),
    "pg_update_no_schema_double": ("double", False, "u", 1),  # REPLICA IDENTITY FULL: with "before"
    "pg_update_schema_string": ("string", True, "u", 1),  # REPLICA IDENTITY FULL: with "before"
    "pg_delete_no_schema": ("precise", False, "d", 2),  # DEFAULT: only the key is real in "before"
    "pg_delete_schema_double": ("double", True, "d", 2),
    "pg_truncate_schema": ("string", True, "t", None),
}
VOLATILE = frozenset({"ts_ms", "ts_us", "ts_ns", "lsn", "sequence", "txId", "xmin", "updated_at"})
"""Keys whose values change from run to run (log positions, clocks, transaction ids)."""


def _name(decimal: str, schemas: bool) -> str:
    return f"modes-{decimal}-{'schema' if schemas else 'noschema'}"


@pytest.fixture(scope="module")
def captured(
    rulesdb: RulesDb, connect_worker: ConnectWorker, kafka_broker: KafkaBroker, base_settings: Settings
) -> Iterator[dict[tuple[str, bool], list[str | None]]]:
    """Each mode's record values (by partition and offset; the topics have several partitions)."""
    db = own_database(rulesdb, DATABASE)
    db.sql("TRUNCATE fraud_rules")
    db.sql(SETUP)
    settings = base_settings.model_copy(
        update={"kafka": base_settings.kafka.model_copy(update={"bootstrap_servers": kafka_broker.bootstrap})}
    )
    connectors = {
        (decimal, schemas): connector(
            settings,
            db,
            name=_name(decimal, schemas),
            topic=f"{_name(decimal, schemas)}.rules",
            overrides={"decimal.handling.mode": decimal, "value.converter.schemas.enable": str(schemas).lower()},
        )
        for decimal, schemas in MODES
    }
    try:
        for config in connectors.values():
            connect_worker.add_connector(config)
        topics = {mode: str(c["config"]["transforms.route.replacement"]) for mode, c in connectors.items()}
        for topic in topics.values():
            wait_for(f"the snapshot read on {topic}", lambda t=topic: record_count(kafka_broker.bootstrap, t) >= 1)
        for statement in STEPS:
            db.sql(statement)
        for topic in topics.values():
            wait_for(
                f"{RECORDS} records on {topic}", lambda t=topic: record_count(kafka_broker.bootstrap, t) >= RECORDS
            )
        yield {mode: [value for *_, value in topic_records(kafka_broker.bootstrap, t)] for mode, t in topics.items()}
    finally:
        for config in connectors.values():
            try:
                connect_worker.remove_connector(str(config["name"]))
            except Exception:  # not created: nothing to remove
                pass
        for config in connectors.values():
            db.drop_slot(str(config["config"]["slot.name"]))


def test_every_decimal_mode_with_and_without_schema_parses_to_the_same_events(
    captured: dict[tuple[str, bool], list[str | None]], base_settings: Settings
) -> None:
    outcomes = {}
    for mode, values in captured.items():
        assert len(values) == RECORDS, (mode, values)
        records = [RawRecord(v, f"{mode}:{n}") for n, v in enumerate(values)]
        batch = parse_records(records, base_settings.transaction_schema)
        assert batch.rejected == [], (mode, [r.reason for r in batch.rejected])
        assert batch.kafka_tombstones == 1
        events = sorted(batch.events, key=lambda e: e.position)  # the topics have partitions: order by the log
        # A snapshot read carries the LSN of its own connector's snapshot; streamed changes carry the change's LSN.
        outcomes[mode] = [(e.rule_id, e.op, e.state, None if e.op is Op.READ else e.position, e.rule) for e in events]
    reference = outcomes[("string", False)]
    assert [(rule_id, op) for rule_id, op, *_ in reference] == [
        (1, Op.READ),
        (2, Op.CREATE),
        (3, Op.CREATE),
        (4, Op.CREATE),
        (2, Op.UPDATE),
        (1, Op.UPDATE),
        (2, Op.DELETE),
        (TRUNCATE_MARKER_ID, Op.TRUNCATE),
    ]
    positions = [position for *_, position, _ in reference[1:]]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)  # commit order, all distinct
    limits = [str(rule.limit) if rule else None for *_, rule in reference]
    assert limits == ["1000000.000000", "5.000000", "5.000000", "5.000000", "7.500000", "2500000.500000", None, None]
    distinct, relative = reference[2][-1], reference[3][-1]
    assert distinct is not None and (distinct.aggregator_function_type, distinct.baseline) == (
        Aggregator.COUNT_DISTINCT,
        None,
    )
    assert relative is not None and relative.aggregator_function_type is Aggregator.VALUE
    assert relative.baseline == Baseline(aggregatorFunctionType="AVG", windowMinutes=43200, minCount=5)
    assert reference[0][-1] is not None and reference[0][-1].baseline is None  # NULL baseline: a fixed limit
    for mode, events in outcomes.items():
        assert events == reference, mode


def _masked(value: str, decimal: str, schemas: bool) -> Any:
    """A record value with its volatile parts replaced by markers (names of this run's connector included)."""
    text = value.replace(_name(decimal, schemas), "<connector>").replace(DATABASE, "<database>")

    def mask(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: ("<volatile>" if k in VOLATILE and v is not None else mask(v)) for k, v in node.items()}
        if isinstance(node, list):
            return [mask(v) for v in node]
        return node

    return mask(json.loads(text))


def _sample_record(values: list[str | None], op: str, rule_id: int | None) -> str:
    for value in values:
        if value is None:
            continue
        document = json.loads(value)
        payload = document.get("payload", document) if set(document) == {"schema", "payload"} else document
        row = payload.get("after") or payload.get("before") or {}
        if payload["op"] == op and row.get("rule_id") == rule_id:
            return value
    raise AssertionError(f"no {op} event of rule {rule_id}")


def test_the_postgres_samples_are_what_the_real_connector_writes(
    captured: dict[tuple[str, bool], list[str | None]],
) -> None:
    write = os.environ.get("WRITE_DEBEZIUM_SAMPLES") == "1"
    for name, (decimal, schemas, op, rule_id) in SAMPLE_OF.items():
        live = _sample_record(captured[(decimal, schemas)], op, rule_id)
        path = SAMPLES / f"{name}.json"
        if write:
            path.write_text(json.dumps(json.loads(live), indent=2) + "\n")
            continue
        assert path.exists(), f"{path} missing: run this test with WRITE_DEBEZIUM_SAMPLES=1"
        stored = path.read_text()
        connector_name = re.search(r'"name": "(modes-[a-z]+-[a-z]+)"', stored)
        assert connector_name, f"{path} was not written by this test's connectors"
        assert _masked(stored.replace(connector_name.group(1), _name(decimal, schemas)), decimal, schemas) == _masked(
            live, decimal, schemas
        ), f"{name}: the connector now writes something else; regenerate with WRITE_DEBEZIUM_SAMPLES=1"
