"""Debezium envelopes: real PostgreSQL and MySQL samples, every decimal mode, positions, rejections (no Spark)."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rules_cdc_support import FAN_OUT_RULE, SEED, SPIKE_RULE, reshaped, sample, sample_pg_position, sample_record

from pipelines.base.settings import Settings
from rules_cdc.decimals import decode_precise, encode_precise
from rules_cdc.envelope import Op, read_envelope
from rules_cdc.parse_events import RawRecord, parse_record, parse_records
from rules_cdc.rule_model import RuleState, parse_rule
from rules_cdc.rule_rows import TRUNCATE_MARKER_ID
from rules_cdc.source_position import (
    PositionError,
    cli_position,
    local_truncate_position,
    mysql_position,
    pg_position,
    position_of,
    ts_position,
)


@pytest.mark.parametrize(
    ("name", "rule_id", "op", "state", "limit", "position"),
    [
        # Written by the real connector (tests/test_debezium_modes.py): positions are the WAL's, read from the file.
        ("pg_snapshot_read_no_schema_string", 1, Op.READ, RuleState.ACTIVE, "1000000", None),
        ("pg_snapshot_read_schema_precise", 1, Op.READ, RuleState.ACTIVE, "1000000", None),
        ("pg_create_schema_precise", 2, Op.CREATE, RuleState.ACTIVE, "5", None),
        ("pg_create_no_schema_precise", 2, Op.CREATE, RuleState.ACTIVE, "5", None),
        ("pg_update_schema_double", 2, Op.UPDATE, RuleState.PAUSED, "7.5", None),
        ("pg_update_schema_string", 1, Op.UPDATE, RuleState.ACTIVE, "2500000.5", None),
        ("pg_update_no_schema_double", 1, Op.UPDATE, RuleState.ACTIVE, "2500000.5", None),
        ("pg_delete_no_schema", 2, Op.DELETE, RuleState.DELETED, None, None),
        ("pg_delete_schema_double", 2, Op.DELETE, RuleState.DELETED, None, None),
        ("pg_truncate_schema", TRUNCATE_MARKER_ID, Op.TRUNCATE, RuleState.DELETED, None, None),
        # Written by hand (no MySQL connector runs here).
        (
            "mysql_handwritten_snapshot_read_schema_precise",
            10,
            Op.READ,
            RuleState.ACTIVE,
            "1000000",
            mysql_position("b.000003", 157),
        ),
        (
            "mysql_handwritten_create_no_schema_string",
            11,
            Op.CREATE,
            RuleState.ACTIVE,
            "5",
            mysql_position("b.000003", 1024),
        ),
        (
            "mysql_handwritten_update_schema_double",
            11,
            Op.UPDATE,
            RuleState.DISABLED,
            "5",
            mysql_position("b.000003", 2048),
        ),
        (
            "mysql_handwritten_delete_schema_precise",
            10,
            Op.DELETE,
            RuleState.DELETED,
            None,
            mysql_position("b.000003", 4096),
        ),
        (
            "mysql_handwritten_truncate_no_schema",
            TRUNCATE_MARKER_ID,
            Op.TRUNCATE,
            RuleState.DELETED,
            None,
            mysql_position("b.4", 4),
        ),
    ],
)
def test_connector_samples_parse_to_the_right_event(
    base_settings: Settings, name: str, rule_id: int, op: Op, state: RuleState, limit: str | None, position: str | None
) -> None:
    event = parse_record(sample_record(name), base_settings.transaction_schema)
    assert event is not None
    position = position or sample_pg_position(name)
    assert (event.rule_id, event.op, event.state, event.position) == (rule_id, op, state, position)
    assert (event.rule.limit if event.rule else None) == (Decimal(limit) if limit else None)
    assert event.ts_ms is not None and event.ts_ms >= 1732262400000


def test_samples_carry_rule_content_in_every_shape(base_settings: Settings) -> None:
    schema = base_settings.transaction_schema
    pg = parse_record(sample_record("pg_create_schema_precise"), schema)
    my = parse_record(sample_record("mysql_handwritten_create_no_schema_string"), schema)
    assert pg is not None and my is not None and pg.rule is not None and my.rule is not None
    # PostgreSQL text[] and MySQL JSON text give the same keys; COUNT_FLINK and jsonb filter are understood.
    for rule in (pg.rule, my.rule):
        assert rule.grouping_key_names == ("payerId",)
        assert rule.counts_transactions and rule.cooldown_minutes == 15
        assert rule.filter_json == '{"field":"paymentType","op":"EQUAL","value":"CSH"}'
    assert pg.rule.model_copy(update={"rule_id": 0}) == my.rule.model_copy(update={"rule_id": 0})
    # A MySQL TINYINT(1) disabled=1 is a DISABLED tombstone that keeps the rule's content.
    disabled = parse_record(sample_record("mysql_handwritten_update_schema_double"), schema)
    assert disabled is not None and disabled.rule is not None and disabled.rule.disabled
    assert disabled.before is not None and disabled.before["disabled"] == 0


def test_precise_decimals_round_trip_exactly() -> None:
    assert encode_precise(Decimal("1000000.00")) == ("BfXhAA==", 2)
    assert decode_precise("BfXhAA==", 2) == Decimal("1000000.00")
    assert decode_precise("/w==", 0) == Decimal(-1)


@given(st.decimals(min_value=Decimal("-1e18"), max_value=Decimal("1e18"), places=4, allow_nan=False))
def test_precise_decimal_encoding_is_lossless(value: Decimal) -> None:
    encoded, scale = encode_precise(value)
    assert decode_precise(encoded, scale) == value


def test_variable_scale_decimal_without_schema(base_settings: Settings) -> None:
    line = json.loads(sample("pg_create_schema_precise"))["payload"]
    line["after"]["limit_value"] = {"scale": 1, "value": "Sw=="}  # 75 unscaled, scale 1
    event = parse_record(RawRecord(json.dumps(line), "o"), base_settings.transaction_schema)
    assert event is not None and event.rule is not None and event.rule.limit == Decimal("7.5")


@pytest.mark.parametrize("value", [None, "null", "  ", '{"schema": {"type": "struct"}, "payload": null}'])
def test_kafka_tombstones_are_counted_not_applied(base_settings: Settings, value: str | None) -> None:
    batch = parse_records([RawRecord(value, "kafka:t/0/1")], base_settings.transaction_schema)
    assert (batch.kafka_tombstones, batch.events, batch.rejected) == (1, [], [])


def _without(payload: dict[str, object], key: str) -> dict[str, object]:
    return {k: v for k, v in payload.items() if k != key}


CREATE = json.loads(sample("mysql_handwritten_create_no_schema_string"))


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "a change event is a JSON object"),
        (json.dumps({**CREATE, "op": "x"}), "unknown op 'x'"),
        (json.dumps({**CREATE, "after": {**CREATE["after"], "owner": "bob"}}), "owner: Extra inputs are not permitted"),
        (json.dumps({**CREATE, "after": {**CREATE["after"], "window_minutes": 0}}), "rule 11: window_minutes"),
        (json.dumps({**CREATE, "after": {**CREATE["after"], "limit_value": "BfXhAA=="}}), "needs the schema"),
        (json.dumps({**CREATE, "extra": 1}), "extra: Extra inputs are not permitted"),
        (json.dumps(_without(CREATE, "after")), "op 'c' event without 'after'"),
        (json.dumps({**CREATE, "op": "d", "before": None}), "delete event without 'before'"),
        (json.dumps({**CREATE, "source": {"connector": "x"}, "ts_ms": None}), "order is unknown"),
        (
            json.dumps({**CREATE, "source": {**CREATE["source"], "file": "binlog"}}),
            "is not <name>.<six or more digits>",
        ),
    ],
)
def test_invalid_events_are_rejected_with_a_reason(base_settings: Settings, value: str, reason: str) -> None:
    batch = parse_records([RawRecord(value, "kafka:rules/0/7")], base_settings.transaction_schema)
    assert batch.events == [] and batch.kafka_tombstones == 0
    assert len(batch.rejected) == 1
    assert reason in batch.rejected[0].reason
    assert batch.rejected[0].record == RawRecord(value, "kafka:rules/0/7")


def test_camel_case_rule_in_an_envelope(base_settings: Settings) -> None:
    line = json.dumps({"op": "c", "after": {**SEED, "ruleId": 5}, "ts_ms": 7})
    event = parse_record(RawRecord(line, "o"), base_settings.transaction_schema)
    assert event is not None and (event.rule_id, event.position) == (5, ts_position(7))


POSITIONS = st.tuples(st.integers(0, 2**40), st.integers(0, 2**40), st.integers(0, 10**6))


@given(POSITIONS, POSITIONS)
def test_position_strings_sort_like_their_numbers(a: tuple[int, int, int], b: tuple[int, int, int]) -> None:
    assert (pg_position(a[0], a[1]) < pg_position(b[0], b[1])) == ((a[0], a[1]) < (b[0], b[1]))
    mysql_a, mysql_b = (mysql_position(f"bin.{p[2]:06d}", p[0], p[1] % 1000) for p in (a, b))
    assert (mysql_a < mysql_b) == ((a[2], a[0], a[1] % 1000) < (b[2], b[0], b[1] % 1000))
    assert (ts_position(a[0]) < ts_position(b[0])) == (a[0] < b[0])


def test_position_source_precedence() -> None:
    assert position_of({"lsn": 5, "sequence": '[null,"5"]', "ts_ms": 9}, 10) == pg_position(5)
    assert position_of({"file": "mysql-bin.000002", "pos": 7, "ts_ms": 9}, 10) == mysql_position("x.2", 7)
    assert position_of({"ts_ms": 9}, 10) == ts_position(9)
    assert position_of(None, 10) == ts_position(10)
    assert read_envelope("null") is None


def test_cli_positions_follow_everything_seen_and_delete_all_precedes_newer_database_events() -> None:
    assert cli_position([], now_ms=5) == (ts_position(5), 5)
    assert cli_position([ts_position(9)], now_ms=5) == (ts_position(10), 10)
    seen = [pg_position(100, 90), pg_position(120, 110)]
    with pytest.raises(PositionError, match="fed by a database"):  # CLI edits of such a table go to the database
        cli_position(seen, now_ms=7)
    first, ms = local_truncate_position(seen, now_ms=7)  # rules delete-all, built and applied in process
    assert first == pg_position(120, 110) + "+cli:" + "7".zfill(20)
    second, _ = local_truncate_position([*seen, first], now_ms=3, after_ms=ms)
    assert max(seen) < first < second < pg_position(120, 111) < pg_position(121)
    assert local_truncate_position([ts_position(9)], now_ms=5) == (ts_position(10), 10)
    cli = {"connector": "fraudlake-cli", "ts_ms": 10, "position": ts_position(10)}
    assert position_of(cli, 1) == ts_position(10)
    with pytest.raises(PositionError, match="never outrank the database"):  # no record may carry a +cli position
        position_of({**cli, "position": second, "ts_ms": None}, 1)
    with pytest.raises(PositionError, match="database log fields"):
        position_of({**cli, "lsn": 1}, 1)
    with pytest.raises(PositionError, match="not a source position"):
        position_of({"connector": "fraudlake-cli", "position": "zz:1"}, 1)
    with pytest.raises(PositionError, match="mixes position kinds"):
        cli_position([ts_position(1), pg_position(1)], now_ms=1)


# ---- schema version 8: COUNT_DISTINCT, VALUE and the baseline (jsonb, which Debezium carries as JSON text) ---------

DISTINCT_RULE = {**FAN_OUT_RULE, "ruleId": 3, "ruleName": "fan-out"}
RELATIVE_RULE = {**SPIKE_RULE, "ruleId": 4, "ruleName": "five times the usual"}


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("pg_create_count_distinct_no_schema_string", DISTINCT_RULE),
        ("pg_create_relative_schema_precise", RELATIVE_RULE),
    ],
)
def test_rules_of_the_new_kinds_written_in_sql_parse_to_the_model(
    base_settings: Settings, name: str, expected: dict[str, object]
) -> None:
    """Samples the real connector wrote for an INSERT typed in SQL (tests/test_debezium_modes.py)."""
    schema = base_settings.transaction_schema
    event = parse_record(sample_record(name), schema)
    assert event is not None and event.op is Op.CREATE and event.position == sample_pg_position(name)
    assert event.rule == parse_rule(expected, schema)
    assert event.after is not None and isinstance(event.after["baseline"], str | None)  # jsonb: JSON text


def _without_baseline(name: str) -> str:
    """A sample as a connector on a database before schema version 8 wrote it: no baseline column at all."""
    document = json.loads(sample(name))
    if set(document) == {"schema", "payload"}:
        for side in document["schema"]["fields"]:
            if side["field"] in ("before", "after"):
                side["fields"] = [f for f in side["fields"] if f["field"] != "baseline"]
        payload = document["payload"]
    else:
        payload = document
    for side in ("before", "after"):
        if payload.get(side):
            del payload[side]["baseline"]
    return json.dumps(document)


@pytest.mark.parametrize(
    "name",
    [
        "pg_snapshot_read_no_schema_string",
        "pg_snapshot_read_schema_precise",
        "pg_create_schema_precise",
        "pg_update_schema_string",
        "pg_update_no_schema_double",
        "pg_delete_no_schema",
    ],
)
def test_events_of_a_database_without_the_baseline_column_still_parse(base_settings: Settings, name: str) -> None:
    schema = base_settings.transaction_schema
    now = parse_record(sample_record(name), schema)
    before_008 = parse_record(RawRecord(_without_baseline(name), "file:old.jsonl:1"), schema)
    assert now is not None and before_008 is not None
    assert (before_008.rule_id, before_008.op, before_008.position) == (now.rule_id, now.op, now.position)
    assert before_008.rule == now.rule and (now.rule is None or now.rule.baseline is None)


@pytest.mark.parametrize(
    ("baseline", "reason"),
    [
        ('{"aggregatorFunctionType": "MEDIAN", "windowMinutes": 43200}', "rule 4: baseline.aggregatorFunctionType: "),
        ('{"aggregatorFunctionType": "AVG", "windowMinutes": 0}', "rule 4: baseline.windowMinutes: "),
        ('{"aggregatorFunctionType": "AVG", "windowMinutes": 43200, "factor": 2}', "Extra inputs are not permitted"),
        ('"{\\"aggregatorFunctionType\\": \\"AVG\\"}"', "rule 4: baseline: "),  # a jsonb string, not an object
        ("[1, 2]", "rule 4: baseline: "),
        ("{not json", "baseline must be a JSON object"),
    ],
)
def test_an_invalid_baseline_is_rejected_with_a_reason(base_settings: Settings, baseline: str, reason: str) -> None:
    line = reshaped("pg_create_relative_schema_precise", baseline=baseline)
    batch = parse_records([RawRecord(line, "kafka:rules/0/4")], base_settings.transaction_schema)
    assert batch.events == [] and len(batch.rejected) == 1
    assert reason in batch.rejected[0].reason, batch.rejected[0].reason


def test_a_baseline_must_fit_its_rule(base_settings: Settings) -> None:
    schema = base_settings.transaction_schema
    shorter = '{"aggregatorFunctionType": "SUM", "windowMinutes": 1440}'
    line = reshaped("pg_create_relative_schema_precise", window_minutes=43200, baseline=shorter)
    batch = parse_records([RawRecord(line, "kafka:rules/0/5")], schema)
    assert batch.events == []
    reason = batch.rejected[0].reason
    assert "rule 4: rule: Value error, baseline.windowMinutes must be at least the rule's windowMinutes" in reason
    # The same rule without a baseline (SQL NULL) is a fixed limit: valid.
    batch = parse_records([RawRecord(reshaped("pg_create_relative_schema_precise", baseline=None), "k:1")], schema)
    assert batch.rejected == [] and batch.events[0].rule is not None and batch.events[0].rule.baseline is None


def test_a_count_distinct_with_a_baseline_is_rejected(base_settings: Settings) -> None:
    baseline = '{"aggregatorFunctionType": "COUNT", "windowMinutes": 1440}'
    line = reshaped("pg_create_count_distinct_no_schema_string", baseline=baseline)
    batch = parse_records([RawRecord(line, "kafka:rules/0/6")], base_settings.transaction_schema)
    assert batch.events == []
    assert "rule 3: rule: Value error, COUNT_DISTINCT takes a fixed limit, not a baseline" in batch.rejected[0].reason
