"""The reference evaluator on small hand-computed cases: each asserts the exact alerts and aggregate values."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from reference_evaluator import (
    RefAlert,
    RefBatch,
    bucket_index,
    counts_for,
    distinct_token,
    evaluate,
    filter_passes,
    key_of,
)

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


# ---- COUNT_DISTINCT, VALUE and relative limits ----------------------------------------------------------------


def baselines(alerts: list[RefAlert]) -> dict[str, Decimal | None]:
    return {a.transaction_id: a.baseline_value for a in alerts}


def distinct_rule(**fields: Any) -> Rule:
    """COUNT_DISTINCT of paymentType per payer over 5 minutes, GREATER_EQUAL 1 (every evaluated x alerts)."""
    base = {"aggregatorFunctionType": "COUNT_DISTINCT", "aggregateFieldName": "paymentType", "windowMinutes": 5}
    return rule(**(base | {"limitOperatorType": "GREATER_EQUAL", "limit": 1} | fields))


DISTINCT_BATCH = [
    tx("a", 0, paymentType="CSH"),
    tx("b", MIN, paymentType="CRD"),
    tx("c", 2 * MIN, paymentType="CSH"),  # seen before: still 2
    tx("d", 3 * MIN, paymentType="TRF"),
    tx("e", 3 * MIN + 1),  # no paymentType: neither counted nor evaluated
    tx("f", 4 * MIN, paymentType="WEB"),
    tx("g", 4 * MIN + 1, paymentType="CSH", payer=2),  # another key
    tx("h", 10 * MIN, paymentType="TRF"),  # buckets 5..10: only itself
]


def test_count_distinct_counts_different_non_null_values_in_the_window() -> None:
    alerts = evaluate([RefBatch([distinct_rule()], DISTINCT_BATCH)])
    assert values(alerts) == {"a": 1, "b": 2, "c": 2, "d": 3, "f": 4, "g": 1, "h": 1}
    assert all(a.baseline_value is None for a in alerts) and str(alerts[0].aggregate_value) == "1.000000"


def test_count_distinct_saturates_at_the_cap() -> None:
    capped = evaluate([RefBatch([distinct_rule()], DISTINCT_BATCH)], distinct_cap=3)
    assert values(capped) == {"a": 1, "b": 2, "c": 2, "d": 3, "f": 3, "g": 1, "h": 1}
    # A limit at the cap can never be exceeded: 4 distinct values read as 3, "at least 3".
    above = distinct_rule(limitOperatorType="GREATER", limit=3)
    assert ids(evaluate([RefBatch([above], DISTINCT_BATCH)], distinct_cap=3)) == []
    assert ids(evaluate([RefBatch([above], DISTINCT_BATCH)])) == ["f"]
    at_cap = distinct_rule(limitOperatorType="EQUAL", limit=3)
    assert ids(evaluate([RefBatch([at_cap], DISTINCT_BATCH)], distinct_cap=3)) == ["d", "f"]


def test_count_distinct_of_a_long_field_and_at_equal_timestamps() -> None:
    r = distinct_rule(aggregateFieldName="beneficiaryId", groupingKeyNames=[])
    batch = [
        tx("b", 0, beneficiaryId=11),
        tx("a", 0, beneficiaryId=10),  # same time: a precedes b
        tx("c", 0, beneficiaryId=10),
        tx("d", 1, beneficiaryId=None),
        tx("e", 2, beneficiaryId=12),
    ]
    assert values(evaluate([RefBatch([r], batch)])) == {"a": 1, "b": 2, "c": 2, "e": 3}


def test_distinct_values_are_told_apart_as_their_column_type_writes_them() -> None:
    assert distinct_token(Decimal("1.5")) == distinct_token(Decimal("1.50")) == distinct_token(1.5)
    assert distinct_token(0.0) != distinct_token(-0.0) and distinct_token(0) == distinct_token(0.0)
    assert distinct_token("1") != distinct_token(1) and distinct_token(True) != distinct_token(1)
    r = distinct_rule(aggregateFieldName="paymentAmount", groupingKeyNames=[])
    batch = [tx("a", 0, Decimal("1.5")), tx("b", 1, Decimal("1.50")), tx("c", 2, Decimal("-1.50"))]
    assert values(evaluate([RefBatch([r], batch)])) == {"a": 1, "b": 1, "c": 2}


def test_value_is_the_transactions_own_value() -> None:
    r = rule(aggregatorFunctionType="VALUE", limit=15, windowMinutes=1)
    batch = [tx("a", 0, Decimal("10")), tx("b", 1, Decimal("20.5")), tx("c", 2, None), tx("d", 3, Decimal("16"))]
    alerts = evaluate([RefBatch([r], batch)])
    assert [(a.transaction_id, str(a.aggregate_value), a.baseline_value) for a in alerts] == [
        ("b", "20.500000", None),
        ("d", "16.000000", None),
    ]


def relative(aggregator: str, **fields: Any) -> Rule:
    """VALUE of paymentAmount per payer (window 1) against a baseline over 10 minutes, GREATER 2, unless overridden."""
    window = {"aggregatorFunctionType": aggregator, "windowMinutes": fields.pop("baselineWindow", 10)}
    window |= {k: fields.pop(k) for k in ("minCount", "perWindow") if k in fields}
    base = {"aggregatorFunctionType": "VALUE", "limitOperatorType": "GREATER", "limit": 2, "baseline": window}
    return rule(**(base | fields))


STEPS = [tx("a", 0, Decimal(10)), tx("b", MIN, Decimal(20)), tx("c", 2 * MIN, Decimal(31)), tx("d", 3 * MIN, 100)]


def test_an_avg_baseline_excludes_x_and_rounds_half_up() -> None:
    alerts = evaluate([RefBatch([relative("AVG")], STEPS)])
    # a: no history (minCount 1); b: 20 > 2*10 fails; c: 31 > 2*15 (with c itself the average would be 20.33);
    # d: 100 > 2*20.333333 (61/3 rounded down).
    assert baselines(alerts) == {"c": Decimal("15.000000"), "d": Decimal("20.333333")}
    assert values(alerts) == {"c": Decimal("31.000000"), "d": Decimal("100.000000")}
    at_least = evaluate([RefBatch([relative("AVG", limitOperatorType="GREATER_EQUAL")], STEPS)])
    assert ids(at_least) == ["b", "c", "d"]
    # HALF_UP: the average of 0.000002 and 0.000003 is 0.000003, and c's own 0.000003 equals 1 x it.
    tiny = [tx("a", 0, Decimal("0.000002")), tx("b", 1, Decimal("0.000003")), tx("c", 2, Decimal("0.000003"))]
    equal = evaluate([RefBatch([relative("AVG", limitOperatorType="EQUAL", limit=1)], tiny)])
    assert baselines(equal) == {"c": Decimal("0.000003")}


def test_an_avg_baseline_without_values_raises_nothing() -> None:
    # COUNT over beneficiaryId counts transactions, so a null beneficiary is in the baseline set, without a value.
    r = relative("AVG", aggregatorFunctionType="COUNT", aggregateFieldName="beneficiaryId", limit=0, minCount=0)
    empty = [tx("a", 0, beneficiaryId=None), tx("b", 1, beneficiaryId=None)]
    assert evaluate([RefBatch([r], empty)]) == []
    one = [tx("a", 0, beneficiaryId=None), tx("b", 1, beneficiaryId=4), tx("c", 2, beneficiaryId=None)]
    assert baselines(evaluate([RefBatch([r], one)])) == {"c": Decimal("4.000000")}


def test_a_sum_baseline_and_min_count() -> None:
    r = relative("SUM", aggregatorFunctionType="SUM", limit=1, baselineWindow=3, minCount=0)
    # SUM over 1 minute (x's bucket and the one before) against the SUM of buckets [x-3, x] before x.
    alerts = evaluate([RefBatch([r], STEPS)])
    assert values(alerts) == {"a": 10, "b": 30, "c": 51, "d": 131}
    assert baselines(alerts) == {"a": 0, "b": 10, "c": 30, "d": 61}  # a: the empty baseline sums to 0
    needs_two = relative("SUM", aggregatorFunctionType="SUM", limit=1, baselineWindow=3, minCount=2)
    assert ids(evaluate([RefBatch([needs_two], STEPS)])) == ["c", "d"]


def test_per_window_scales_the_baseline_exactly() -> None:
    plain = relative("SUM", aggregatorFunctionType="SUM", limit=3, baselineWindow=3)
    per_window = relative("SUM", aggregatorFunctionType="SUM", limit=3, baselineWindow=3, perWindow=True)
    assert ids(evaluate([RefBatch([plain], STEPS)])) == []  # 30 > 30, 51 > 90, 131 > 183: never
    assert baselines(evaluate([RefBatch([per_window], STEPS)])) == {"b": 10, "c": 30, "d": 61}  # B' = B/3
    # Exactly: 3 * (10 * 1/3) is 10, not 3 * 3.333333; rounding B' would miss this EQUAL.
    equal = relative(
        "SUM", aggregatorFunctionType="SUM", limitOperatorType="EQUAL", limit=3, baselineWindow=3, perWindow=True
    )
    assert ids(evaluate([RefBatch([equal], [tx("a", 0, Decimal(10)), tx("b", MIN, Decimal(0))])])) == ["b"]


def test_a_count_baseline_counts_the_history_without_x() -> None:
    # COUNT per payer over 1 minute >= 1 x the number of transactions of the 10 minutes before x (at least 2 of them).
    fields: dict[str, Any] = {"aggregatorFunctionType": "COUNT", "aggregateFieldName": "COUNT", "minCount": 2}
    r = relative("COUNT", **fields, limitOperatorType="GREATER_EQUAL", limit=1)
    batch = [tx("a", 0), tx("b", 0), tx("c", 4 * MIN), tx("d", 4 * MIN), tx("e", 4 * MIN + 1), tx("f", 5 * MIN)]
    alerts = evaluate([RefBatch([r], batch)])
    # c: 1 >= 2 fails; d: 2 >= 3 fails; e: 3 >= 4 fails; f (bucket 5: count over buckets 4..5 = 4) >= 5 fails ...
    assert alerts == []
    # ... but per window (B' = n/10) they hold once there are 2 before x (a and b are held back by minCount).
    scaled = relative("COUNT", **fields, limitOperatorType="GREATER_EQUAL", limit=1, perWindow=True)
    assert baselines(evaluate([RefBatch([scaled], batch)])) == {"c": 2, "d": 3, "e": 4, "f": 5}


def test_equal_timestamps_put_the_earlier_transaction_id_in_the_baseline() -> None:
    r = relative("COUNT", limitOperatorType="GREATER_EQUAL", limit=1)
    batch = [tx("b", 5, Decimal(7)), tx("a", 5, Decimal(3))]
    # a precedes b: b's baseline is {a} (n = 1), a's is empty (no alert under minCount 1).
    assert [(a.transaction_id, a.aggregate_value, a.baseline_value) for a in evaluate([RefBatch([r], batch)])] == [
        ("b", Decimal(7), Decimal(1))
    ]


def test_a_relative_rule_is_cooled_down_and_shadowed_like_any_rule() -> None:
    r = relative("AVG", limitOperatorType="GREATER_EQUAL", limit=1, cooldownMinutes=2, ruleState="SHADOW")
    alerts = evaluate([RefBatch([r], STEPS)])
    # b (20 >= 10) emitted, c suppressed (2 min later: not before b + 2), d emitted.
    assert [(a.transaction_id, a.shadow) for a in alerts] == [("b", True), ("d", True)]
