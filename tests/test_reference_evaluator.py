"""The reference evaluator on small hand-computed cases: each asserts the exact alerts and aggregate values."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from reference_evaluator import RefAlert, RefBatch, bucket_index, counts_for, evaluate, filter_passes, key_of

from rules_cdc.filter_expr import parse_filter
from rules_cdc.rule_model import Rule

MIN = 60_000  # ms


def rule(rule_id: int = 1, **fields: Any) -> Rule:
    """A rule: SUM of paymentAmount per payer over 1 minute, GREATER 0, unless overridden (camelCase)."""
    base: dict[str, Any] = {
        "ruleId": rule_id,
        "groupingKeyNames": ["payerId"],
        "aggregateFieldName": "paymentAmount",
        "aggregatorFunctionType": "SUM",
        "limitOperatorType": "GREATER",
        "limit": 0,
        "windowMinutes": 1,
    }
    return Rule.model_validate(base | fields)


def tx(tid: str, t: int, amount: Any = "10", payer: Any = 1, **extra: Any) -> dict[str, Any]:
    return {"transactionId": tid, "eventTime": t, "payerId": payer, "paymentAmount": amount, **extra}


def ids(alerts: list[RefAlert]) -> list[str]:
    return [a.transaction_id for a in alerts]


def values(alerts: list[RefAlert]) -> dict[str, Decimal]:
    return {a.transaction_id: a.aggregate_value for a in alerts}


def test_helpers() -> None:
    assert bucket_index(0) == 0 and bucket_index(59_999) == 0 and bucket_index(60_000) == 1
    assert bucket_index(-1) == -1 and bucket_index(29_999, bucket_seconds=30) == 0
    r = rule(groupingKeyNames=["payerId", "beneficiaryId"])
    assert key_of(tx("a", 0, payer=7, beneficiaryId=9), r) == (7, 9)
    assert key_of(tx("a", 0, payer=7), r) == (7, None)
    assert key_of(tx("a", 0), rule(groupingKeyNames=[])) == ()
    assert counts_for(tx("a", 0), r) and not counts_for(tx("a", 0, amount=None), r)
    assert counts_for(tx("a", 0, amount=None), rule(aggregatorFunctionType="COUNT"))


def test_equal_timestamps_are_ordered_by_transaction_id() -> None:
    r = rule(aggregatorFunctionType="COUNT", limitOperatorType="GREATER_EQUAL", limit=2)
    batch = RefBatch([r], [tx("b", 1000), tx("a", 1000), tx("c", 999)])
    # Order c, a, b: a sees {c, a} -> 2 and b sees 3; c sees only itself.
    assert values(evaluate([batch])) == {"a": Decimal("2.000000"), "b": Decimal("3.000000")}


def test_the_oldest_bucket_counts_from_its_first_millisecond_and_not_one_earlier() -> None:
    r = rule(windowMinutes=2)
    x = tx("x", 10 * MIN + 30_000, amount="1")
    first_of_oldest = tx("y1", 8 * MIN, amount="10")
    just_before = tx("y2", 8 * MIN - 1, amount="100")
    alerts = evaluate([RefBatch([r], [just_before, first_of_oldest, x])])
    assert values(alerts) == {"y2": Decimal("100.000000"), "y1": Decimal("110.000000"), "x": Decimal("11.000000")}


def test_bucket_seconds_sets_the_far_edge() -> None:
    # 30 s buckets, 1 minute window: x's bucket and the two before it.
    r = rule(windowMinutes=1)
    batch = RefBatch([r], [tx("y0", 29_999, "1000"), tx("y1", 30_000, "100"), tx("x", 90_000 + 29_999, "1")])
    assert values(evaluate([batch], bucket_seconds=30))["x"] == Decimal("101.000000")
    assert values(evaluate([batch], bucket_seconds=60))["x"] == Decimal("1101.000000")


def test_later_transactions_of_the_same_batch_do_not_count_but_earlier_batches_do() -> None:
    r = rule(aggregatorFunctionType="SUM", windowMinutes=5)
    first = RefBatch([r], [tx("late-in-time", 50_000, "7"), tx("next-bucket", 61_000, "1000")])
    second = RefBatch([r], [tx("x", 10_000, "1"), tx("z", 20_000, "2")])
    alerts = values(evaluate([first, second]))
    # x: itself + "late-in-time" (earlier batch, same bucket); "next-bucket" is in a later bucket than x.
    # z: x, itself and "late-in-time"; never a transaction that comes after it.
    assert alerts["x"] == Decimal("8.000000") and alerts["z"] == Decimal("10.000000")
    assert alerts["late-in-time"] == Decimal("7.000000")
    assert alerts["next-bucket"] == Decimal("1007.000000")


@pytest.mark.parametrize(
    ("aggregator", "field", "expected"),
    [
        ("SUM", "paymentAmount", ["10.000000", "30.000000", "60.500000"]),
        ("COUNT", "paymentAmount", ["1.000000", "2.000000", "3.000000"]),
        ("AVG", "paymentAmount", ["10.000000", "15.000000", "20.166667"]),
        ("MIN", "paymentAmount", ["10.000000", "10.000000", "10.000000"]),
        ("MAX", "paymentAmount", ["10.000000", "20.000000", "30.500000"]),
        ("SUM", "COUNT_FLINK", ["1.000000", "2.000000", "3.000000"]),
        ("COUNT", "COUNT", ["1.000000", "2.000000", "3.000000"]),
    ],
)
def test_every_aggregator(aggregator: str, field: str, expected: list[str]) -> None:
    r = rule(aggregatorFunctionType=aggregator, aggregateFieldName=field)
    batch = RefBatch([r], [tx("a", 0, "10"), tx("b", 1, Decimal("20")), tx("c", 2, 30.5)])
    alerts = evaluate([batch])
    assert [str(a.aggregate_value) for a in alerts] == expected
    assert all(a.key == (1,) for a in alerts)


def test_avg_rounds_half_up_and_min_max_quantize() -> None:
    batch = [tx("a", 0, "0.000002"), tx("b", 1, "0.000003")]
    assert values(evaluate([RefBatch([rule(aggregatorFunctionType="AVG")], batch)]))["b"] == Decimal("0.000003")
    batch = [tx("a", 0, "-0.000002"), tx("b", 1, "-0.000003")]
    avg = rule(aggregatorFunctionType="AVG", limitOperatorType="LESS")
    assert values(evaluate([RefBatch([avg], batch)]))["b"] == Decimal("-0.000003")
    two_thirds = [tx("a", 0, "1"), tx("b", 1, "1"), tx("c", 2, "0")]
    assert values(evaluate([RefBatch([rule(aggregatorFunctionType="AVG")], two_thirds)]))["c"] == Decimal("0.666667")


def test_count_counts_null_fields_but_sum_skips_them() -> None:
    batch = [tx("a", 0, "5"), tx("b", 1, None), tx("c", 2, "6")]
    counted = evaluate([RefBatch([rule(aggregatorFunctionType="COUNT")], batch)])
    assert values(counted) == {"a": Decimal(1), "b": Decimal(2), "c": Decimal(3)}
    summed = evaluate([RefBatch([rule(aggregatorFunctionType="SUM")], batch)])
    assert values(summed) == {"a": Decimal(5), "c": Decimal(11)}  # b is not evaluated and not summed


@pytest.mark.parametrize(
    ("operator", "alerting"),
    [
        ("GREATER", ["c"]),
        ("GREATER_EQUAL", ["b", "c"]),
        ("LESS", ["a"]),
        ("LESS_EQUAL", ["a", "b"]),
        ("EQUAL", ["b"]),
        ("NOT_EQUAL", ["a", "c"]),
    ],
)
def test_every_operator(operator: str, alerting: list[str]) -> None:
    r = rule(aggregatorFunctionType="COUNT", limitOperatorType=operator, limit=2)
    assert ids(evaluate([RefBatch([r], [tx("a", 0), tx("b", 1), tx("c", 2)])])) == alerting


def test_empty_grouping_keys_aggregate_everything_together() -> None:
    r = rule(groupingKeyNames=[], limitOperatorType="GREATER", limit=25)
    batch = RefBatch([r], [tx("a", 0, "10", payer=1), tx("b", 1, "10", payer=2), tx("c", 2, "10", payer=None)])
    assert evaluate([batch]) == [RefAlert(1, "c", (), Decimal("30.000000"))]


def test_keys_separate_and_a_missing_key_is_none() -> None:
    r = rule(limit=15)
    batch = RefBatch([r], [tx("a", 0, "10", payer=1), tx("b", 1, "10", payer=2), tx("c", 2, "10", payer=1)])
    no_payer = {"transactionId": "d", "eventTime": 3, "paymentAmount": "20"}
    assert evaluate([RefBatch([r], [*batch.transactions, no_payer])]) == [
        RefAlert(1, "c", (1,), Decimal("20.000000")),
        RefAlert(1, "d", (None,), Decimal("20.000000")),
    ]


def test_filter_interpreter() -> None:
    record = {"paymentType": "CSH", "paymentAmount": "100.00", "payerId": 5, "flag": True, "none": None}
    cases = [
        ({"field": "paymentType", "op": "EQUAL", "value": "CSH"}, True),
        ({"field": "paymentType", "op": "NOT_EQUAL", "value": "CSH"}, False),
        ({"field": "paymentType", "op": "IN", "value": ["CRD", "CSH"]}, True),
        ({"field": "paymentType", "op": "GREATER", "value": "CRD"}, True),
        ({"field": "paymentAmount", "op": "EQUAL", "value": 100}, True),
        ({"field": "paymentAmount", "op": "GREATER_EQUAL", "value": 100.0}, True),
        ({"field": "paymentAmount", "op": "GREATER", "value": 99.99}, True),
        ({"field": "paymentAmount", "op": "LESS", "value": 100}, False),
        ({"field": "paymentAmount", "op": "LESS_EQUAL", "value": 100}, True),
        ({"field": "payerId", "op": "IN", "value": [4, 5.0]}, True),
        ({"field": "flag", "op": "EQUAL", "value": True}, True),
        ({"field": "flag", "op": "NOT_EQUAL", "value": True}, False),
        ({"field": "none", "op": "NOT_EQUAL", "value": "x"}, False),
        ({"field": "missing", "op": "EQUAL", "value": "x"}, False),
        ({"not": {"field": "missing", "op": "EQUAL", "value": "x"}}, True),
        ({"not": {"field": "none", "op": "NOT_EQUAL", "value": "x"}}, True),
        (
            {"all": [{"field": "payerId", "op": "EQUAL", "value": 5}, {"field": "missing", "op": "IN", "value": [1]}]},
            False,
        ),
        (
            {
                "any": [
                    {"field": "payerId", "op": "EQUAL", "value": 4},
                    {"field": "paymentType", "op": "LESS", "value": "D"},
                ]
            },
            True,
        ),
    ]
    assert [filter_passes(parse_filter(c), record) for c, _ in cases] == [want for _, want in cases]
    assert filter_passes(None, record)


def test_filtered_rule_evaluates_and_counts_only_passing_transactions() -> None:
    not_cash = {"not": {"field": "paymentType", "op": "EQUAL", "value": "CSH"}}
    r = rule(aggregatorFunctionType="COUNT", filter=not_cash)
    batch = RefBatch([r], [tx("a", 0, paymentType="CSH"), tx("b", 1), tx("c", 2, paymentType="CRD")])
    # a fails the filter: no alert, and it is not counted; b has no paymentType, so "not CSH" holds.
    assert values(evaluate([batch])) == {"b": Decimal(1), "c": Decimal(2)}


def test_late_transactions_are_not_evaluated_but_count_for_others() -> None:
    r = rule(aggregatorFunctionType="COUNT", windowMinutes=10)
    first = RefBatch([r], [tx("hw", 1_000_000)])
    edge = 1_000_000 - 300_000
    second = RefBatch([r], [tx("late", edge - 1), tx("on-time", edge), tx("after", edge + 1)])
    assert values(evaluate([first, second])) == {
        "hw": Decimal(1),
        "on-time": Decimal(2),  # "late" and itself; hw is in a later bucket
        "after": Decimal(3),
    }
    # The high-water mark comes from earlier batches only: nothing in the first batch is late.
    assert ids(evaluate([RefBatch([r], [tx("hw", 1_000_000), tx("old", 0)])])) == ["hw", "old"]
    assert ids(evaluate([first, second], allowed_lateness_seconds=301)) == ["after", "hw", "late", "on-time"]


def test_paused_rules_raise_nothing_but_their_transactions_still_count_later() -> None:
    paused = rule(ruleState="PAUSED", aggregatorFunctionType="COUNT")
    active = rule(aggregatorFunctionType="COUNT")
    other = rule(2, aggregatorFunctionType="COUNT")
    alerts = evaluate([RefBatch([paused, other], [tx("a", 0)]), RefBatch([active, other], [tx("b", 1)])])
    assert alerts == [
        RefAlert(1, "b", (1,), Decimal(2)),
        RefAlert(2, "a", (1,), Decimal(1)),
        RefAlert(2, "b", (1,), Decimal(2)),
    ]


def test_a_rule_added_later_sees_earlier_transactions() -> None:
    late_rule = rule(7, limit=25, windowMinutes=3)
    batches = [RefBatch([], [tx("a", 0, "20")]), RefBatch([late_rule], [tx("b", 2 * MIN, "10")])]
    assert evaluate(batches) == [RefAlert(7, "b", (1,), Decimal("30.000000"))]


def test_cooldown_suppresses_per_key_and_suppressed_alerts_do_not_extend_it() -> None:
    r = rule(cooldownMinutes=5, windowMinutes=1)
    batch = RefBatch(
        [r],
        [
            tx("a", 0),
            tx("b", 3 * MIN),  # suppressed (3 < 0 + 5)
            tx("c", 5 * MIN - 1),  # suppressed
            tx("d", 5 * MIN),  # emitted: the suppressed b and c did not restart the cooldown
            tx("e", 6 * MIN),  # suppressed by d
            tx("p2", 1, payer=2),  # another key: its own cooldown
        ],
    )
    assert ids(evaluate([batch])) == ["a", "d", "p2"]
    assert ids(evaluate([RefBatch([rule(cooldownMinutes=0)], batch.transactions)])) == ["a", "b", "c", "d", "e", "p2"]


def test_cooldown_follows_precedence_not_event_time() -> None:
    r = rule(cooldownMinutes=5)
    # "b" comes after "a" (a later batch) with an earlier eventTime: a's cooldown suppresses it.
    assert ids(evaluate([RefBatch([r], [tx("a", 10 * MIN)]), RefBatch([r], [tx("b", 9 * MIN)])])) == ["a"]


def test_cooldown_survives_batches_and_pauses_but_not_a_deletion() -> None:
    r = rule(cooldownMinutes=10)
    paused = rule(cooldownMinutes=10, ruleState="PAUSED")
    kept = [RefBatch([r], [tx("a", 0)]), RefBatch([paused], [tx("b", MIN)]), RefBatch([r], [tx("c", 2 * MIN)])]
    assert ids(evaluate(kept)) == ["a"]
    recreated = [RefBatch([r], [tx("a", 0)]), RefBatch([], [tx("b", MIN)]), RefBatch([r], [tx("c", 2 * MIN)])]
    assert ids(evaluate(recreated)) == ["a", "c"]


def test_alerts_are_sorted_by_rule_then_transaction_id() -> None:
    rules = [rule(2), rule(1)]
    alerts = evaluate([RefBatch(rules, [tx("b", 0), tx("a", 1)])])
    assert [(a.rule_id, a.transaction_id) for a in alerts] == [(1, "a"), (1, "b"), (2, "a"), (2, "b")]


def test_batches_must_hold_live_rules_with_distinct_ids() -> None:
    with pytest.raises(ValueError, match="distinct"):
        evaluate([RefBatch([rule(1), rule(1, limit=5)], [])])
    with pytest.raises(ValueError, match="tombstoned"):
        evaluate([RefBatch([rule(1, disabled=True)], [])])


def test_a_shadow_rule_raises_what_it_would_as_active_flagged_shadow() -> None:
    batches = [tx("a", 0), tx("b", 3 * MIN), tx("c", 5 * MIN), tx("p2", 1, payer=2)]
    active = evaluate([RefBatch([rule(cooldownMinutes=5, windowMinutes=1)], batches)])
    shadow = evaluate([RefBatch([rule(cooldownMinutes=5, windowMinutes=1, ruleState="SHADOW")], batches)])
    assert [(a.transaction_id, a.aggregate_value) for a in shadow] == [
        (a.transaction_id, a.aggregate_value) for a in active
    ]
    assert ids(shadow) == ["a", "c", "p2"] and all(a.shadow for a in shadow) and not any(a.shadow for a in active)


def test_promotion_and_demotion_keep_the_cooldown_memory_and_switch_the_flag() -> None:
    shadow = rule(cooldownMinutes=10, ruleState="SHADOW")
    active = rule(cooldownMinutes=10)
    # a (shadow) sets the memory; b after the promotion is suppressed by it; c (after 10 min) is live.
    promoted = evaluate(
        [RefBatch([shadow], [tx("a", 0)]), RefBatch([active], [tx("b", MIN)]), RefBatch([active], [tx("c", 10 * MIN)])]
    )
    assert [(a.transaction_id, a.shadow) for a in promoted] == [("a", True), ("c", False)]
    demoted = evaluate(
        [RefBatch([active], [tx("a", 0)]), RefBatch([shadow], [tx("b", MIN)]), RefBatch([shadow], [tx("c", 10 * MIN)])]
    )
    assert [(a.transaction_id, a.shadow) for a in demoted] == [("a", False), ("c", True)]
