from __future__ import annotations

from decimal import Decimal

import pytest
from pyspark.sql import SparkSession
from rules_cdc_support import FAN_OUT_RULE, SEED, SPIKE_RULE

from pipelines.base.settings import Settings
from rules_cdc.rule_model import Aggregator, Baseline, LimitOperator, RuleState, RuleValidationError, parse_rule


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


# ---- the aggregators and the baseline of docs/engine.md ("The contract"): COUNT_DISTINCT, VALUE, relative limits --

DISTINCT, RELATIVE = FAN_OUT_RULE, SPIKE_RULE


def test_a_distinct_count_and_a_relative_limit_parse_and_keep_their_vocabulary(base_settings: Settings) -> None:
    schema = base_settings.transaction_schema
    distinct, relative = parse_rule(DISTINCT, schema), parse_rule(RELATIVE, schema)
    assert distinct.aggregator_function_type is Aggregator.COUNT_DISTINCT and distinct.counts_distinct
    assert distinct.baseline is None and distinct.baseline_json is None and "baseline" not in distinct.to_json_dict()
    assert relative.aggregator_function_type is Aggregator.VALUE
    assert relative.baseline == Baseline(aggregatorFunctionType="AVG", windowMinutes=43200, minCount=5)
    assert (
        relative.baseline_json
        == '{"aggregatorFunctionType":"AVG","minCount":5,"perWindow":false,"windowMinutes":43200}'
    )
    assert relative.history_minutes == 43200
    # camelCase out, and back in: the same rule (the seeds', the CLI's and the console's vocabulary).
    assert parse_rule(relative.to_json_dict(), schema) == relative
    assert parse_rule(distinct.to_json_dict(), schema) == distinct
    # A non-numeric field may be counted distinct (any type): a string field too.
    assert parse_rule({**DISTINCT, "aggregateFieldName": "channel"}, schema).aggregate_field_name == "channel"


def test_a_baseline_arrives_as_an_object_or_as_json_text_like_filter(base_settings: Settings) -> None:
    """Debezium carries the jsonb column as JSON text; snake_case keys (the model's own names) are accepted too."""
    schema = base_settings.transaction_schema
    relative = parse_rule(RELATIVE, schema)
    row = {
        "rule_id": 22,
        "grouping_key_names": ["payerId"],
        "aggregate_field_name": "paymentAmount",
        "aggregator_function_type": "value",
        "limit_operator_type": "GREATER",
        "limit_value": "5.00",
        "window_minutes": 1,
        "baseline": '{"windowMinutes": 43200, "aggregatorFunctionType": "avg", "minCount": 5}',
    }
    assert parse_rule(row, schema) == relative
    assert parse_rule({**row, "baseline": relative.baseline_json}, schema) == relative
    snake = {"aggregator": "AVG", "window_minutes": 43200, "min_count": 5, "per_window": False}
    assert parse_rule({**row, "baseline": snake}, schema) == relative
    for nothing in (None, "", "null"):  # SQL NULL, a blank text, the JSON null: a fixed limit
        assert parse_rule({**row, "aggregator_function_type": "MAX", "baseline": nothing}, schema).baseline is None


@pytest.mark.parametrize(
    ("rule", "reason"),
    [
        # COUNT_DISTINCT takes a fixed limit, at most 10,000 (the engine keeps at most engine.distinct_cap values).
        ({**DISTINCT, "baseline": RELATIVE["baseline"]}, "COUNT_DISTINCT takes a fixed limit, not a baseline"),
        ({**DISTINCT, "limit": 10_001}, "COUNT_DISTINCT limit must be at most 10000"),
        ({**DISTINCT, "limit": -10_001}, "COUNT_DISTINCT limit must be at most 10000"),
        # The baseline reads at least the rule's window.
        (
            {**RELATIVE, "windowMinutes": 60, "baseline": {"aggregatorFunctionType": "SUM", "windowMinutes": 59}},
            "baseline.windowMinutes must be at least the rule's windowMinutes",
        ),
        # An average over the COUNT pseudo-field is always 1.
        (
            {
                **RELATIVE,
                "aggregateFieldName": "COUNT",
                "aggregatorFunctionType": "COUNT",
                "baseline": {"aggregatorFunctionType": "AVG", "windowMinutes": 43200},
            },
            "a baseline AVG over COUNT is always 1",
        ),
        # Only COUNT_DISTINCT counts values of a field of any type.
        ({**RELATIVE, "aggregateFieldName": "channel"}, "only COUNT_DISTINCT counts values of any type"),
        ({**DISTINCT, "aggregatorFunctionType": "SUM", "aggregateFieldName": "channel"}, "is not numeric"),
        ({**DISTINCT, "aggregateFieldName": "ghost"}, "is not a transaction field"),
        # The baseline's own vocabulary.
        ({**RELATIVE, "baseline": {"aggregatorFunctionType": "MEDIAN", "windowMinutes": 60}}, "baseline"),
        ({**RELATIVE, "baseline": {"aggregatorFunctionType": "AVG", "windowMinutes": 43201}}, "baseline"),
        ({**RELATIVE, "baseline": {"aggregatorFunctionType": "AVG", "windowMinutes": 60, "k": 1}}, "Extra inputs"),
        ({**RELATIVE, "baseline": {"windowMinutes": 60}}, "baseline"),
        ({**RELATIVE, "baseline": "{not json"}, "baseline must be a JSON object"),
    ],
)
def test_invalid_kinds_and_baselines_are_rejected_with_a_reason(
    base_settings: Settings, rule: dict[str, object], reason: str
) -> None:
    with pytest.raises(RuleValidationError, match=reason):
        parse_rule(rule, base_settings.transaction_schema)


def test_a_distinct_limit_of_exactly_the_cap_is_accepted(base_settings: Settings) -> None:
    assert parse_rule({**DISTINCT, "limit": 10_000}, base_settings.transaction_schema).limit == 10_000


def test_rules_table_rows_keep_the_baseline_and_older_rows_have_none(
    spark: SparkSession, base_settings: Settings
) -> None:
    from delta_tables.rules import RULE_CONTENT_COLUMNS, RULES_SCHEMA
    from rules_cdc.rule_rows import database_row, rule_from_row, rule_to_row
    from rules_cdc.rules_views import rule_text

    schema = base_settings.transaction_schema
    distinct, relative = parse_rule(DISTINCT, schema), parse_rule(RELATIVE, schema)
    assert "baseline" in RULE_CONTENT_COLUMNS and RULES_SCHEMA["baseline"].nullable
    rows = [
        rule_to_row(r, source_position=f"p{n}", source_op="c", source_ts_ms=n)
        for n, r in enumerate([distinct, relative])
    ]
    assert [r["baseline"] for r in rows] == [None, relative.baseline_json]
    read = [r.asDict() for r in spark.createDataFrame(rows, RULES_SCHEMA).collect()]
    assert [rule_from_row(r) for r in read] == [distinct, relative]
    # A row of a rules table written before the column existed: no key at all, a fixed limit.
    old = {k: v for k, v in read[0].items() if k != "baseline"}
    assert rule_from_row(old) == distinct
    assert database_row(relative)["baseline"] == {
        "aggregatorFunctionType": "AVG",
        "windowMinutes": 43200,
        "minCount": 5,
        "perWindow": False,
    }
    assert database_row(distinct)["baseline"] is None
    # `fraudlake rules list` prints both kinds readably.
    assert rule_text(read[0]) == "COUNT_DISTINCT(beneficiaryId) > 5 in 60 min by [payerId]"
    assert rule_text(read[1]) == "VALUE(paymentAmount) > 5 \u00d7 AVG over 30 days (min 5 tx) by [payerId]"
    per_window = parse_rule(
        {
            **RELATIVE,
            "aggregatorFunctionType": "SUM",
            "windowMinutes": 60,
            "limit": 3,
            "groupingKeyNames": [],
            "baseline": {"aggregatorFunctionType": "SUM", "windowMinutes": 10080, "minCount": 10, "perWindow": True},
        },
        schema,
    )
    per_window_row = rule_to_row(per_window, source_position="p", source_op="c", source_ts_ms=1)
    assert rule_text(per_window_row) == "SUM(paymentAmount) in 60 min > 3 \u00d7 SUM per 60 min over 7 days (min 10 tx)"
