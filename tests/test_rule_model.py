from __future__ import annotations

from decimal import Decimal

import pytest
from pyspark.sql import SparkSession
from rules_cdc_support import SEED

from pipelines.base.settings import Settings
from rules_cdc.rule_model import Aggregator, LimitOperator, RuleState, RuleValidationError, parse_rule


def test_seed_rule_parses_as_is(base_settings: Settings) -> None:
    rule = parse_rule(SEED, base_settings.transaction_schema)
    assert rule.rule_id == 1 and rule.rule_state is RuleState.ACTIVE
    assert rule.grouping_key_names == ("payerId", "beneficiaryId")
    assert rule.aggregator_function_type is Aggregator.SUM and rule.limit == Decimal("1000000")
    assert rule.to_json_dict() | {"ruleName": None} == {
        **SEED,
        "ruleName": None,
        "filter": None,
        "cooldownMinutes": None,
        "disabled": False,
    }


def test_snake_case_row_with_json_strings_and_aliases(base_settings: Settings) -> None:
    row = {
        "rule_id": 7,
        "rule_state": "PAUSE",
        "grouping_key_names": '["payerId"]',
        "aggregate_field_name": "COUNT_FLINK",
        "aggregator_function_type": "SUM",
        "limit_operator_type": "GREATER_EQUAL",
        "limit_value": "5",
        "window_minutes": 60,
        "filter": '{"any": [{"field": "paymentType", "op": "IN", "value": ["CSH"]}]}',
    }
    rule = parse_rule(row, base_settings.transaction_schema)
    assert rule.rule_state is RuleState.PAUSED and rule.counts_transactions
    assert rule.filter_json == '{"any":[{"field":"paymentType","op":"IN","value":["CSH"]}]}'


def test_rules_sharing_keys_field_and_filter_share_state(base_settings: Settings) -> None:
    a = parse_rule(SEED, base_settings.transaction_schema)
    b = parse_rule(
        {**SEED, "ruleId": 2, "aggregatorFunctionType": "MAX", "windowMinutes": 5}, base_settings.transaction_schema
    )
    c = parse_rule({**SEED, "ruleId": 3, "groupingKeyNames": ["payerId"]}, base_settings.transaction_schema)
    assert a.state_id == b.state_id != c.state_id


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"groupingKeyNames": ["nope"]}, "unknown transaction fields"),
        ({"aggregateFieldName": "paymentType"}, "not numeric"),
        ({"windowMinutes": 43201}, "windowMinutes"),
        ({"limit": "a lot"}, "limit must be a number"),
        ({"filter": {"field": "payerId", "op": "EQUAL", "value": "x"}}, "compares numeric field"),
        ({"filter": {"field": "ghost", "op": "EQUAL", "value": 1}}, "unknown transaction field"),
        ({"extra": 1}, "Extra inputs are not permitted"),
        ({"ruleState": "DELETED"}, "set by delete events"),
    ],
)
def test_invalid_rules_are_rejected_with_a_reason(
    base_settings: Settings, change: dict[str, object], reason: str
) -> None:
    with pytest.raises(RuleValidationError, match=reason):
        parse_rule({**SEED, **change}, base_settings.transaction_schema)


def test_limit_operator_holds() -> None:
    assert LimitOperator.GREATER.holds(Decimal(2), Decimal(1))
    assert not LimitOperator.GREATER.holds(Decimal(1), Decimal(1))
    assert LimitOperator.NOT_EQUAL.holds(Decimal(1), Decimal(2))


def test_rules_table_row_round_trip(spark: SparkSession, base_settings: Settings) -> None:
    from delta_tables.rules import RULES_SCHEMA
    from rules_cdc.rule_rows import live_rules, rule_from_row, rule_to_row

    rule = parse_rule(
        {**SEED, "filter": {"field": "paymentType", "op": "EQUAL", "value": "CSH"}, "cooldownMinutes": 5},
        base_settings.transaction_schema,
    )
    live = rule_to_row(rule, source_position="p1", source_op="c", source_ts_ms=1)
    dead = rule_to_row(
        rule.model_copy(update={"rule_id": 2}),
        source_position="p2",
        source_op="d",
        source_ts_ms=2,
        state=RuleState.DELETED,
    )
    frame = spark.createDataFrame([live, dead], RULES_SCHEMA)
    rows = [r.asDict() for r in live_rules(frame).collect()]
    assert [rule_from_row(r) for r in rows] == [rule]
    with pytest.raises(ValueError, match="tombstone"):
        rule_from_row(dead)
