"""The alert contract's per-transaction arithmetic in plain Python, for evidence shown to people.

The engine computes a rule's aggregate from minute-bucket tiles in Spark; the evidence view recomputes it from the
transactions themselves, as docs/engine.md defines it, so that the two can be compared on screen:

* a transaction counts for a rule when it passes the rule's filter (a leaf on a null field is false, as
  ``filter_expr.compile_filter`` compiles it) and, unless the rule counts transactions, its field is not null;
* the lookback of ``x`` holds the counting transactions of ``x``'s key whose bucket lies in
  ``[bucket(x) - floor(W*60/bs), bucket(x)]`` and that precede ``x`` or are ``x``;
* SUM, COUNT, AVG (exact SUM/COUNT), MIN, MAX, each rounded to 6 decimals half away from zero.

Example::

    passes(rule.filter, {"paymentType": "CSH"})        # True / False
    aggregate(rule, [row1, row2])                       # Decimal('150.000000')
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import ROUND_HALF_UP, Decimal, localcontext
from fractions import Fraction
from typing import Any

from rules_cdc.filter_expr import All, AnyOf, FilterOperator, Leaf, Not
from rules_cdc.rule_model import COUNT_FIELD, Aggregator, Rule

SIX_PLACES = Decimal("0.000001")
Condition = All | AnyOf | Not | Leaf


def bucket_index(event_time_ms: int, bucket_seconds: int) -> int:
    """``floor(t / (bucket_seconds*1000))``."""
    return event_time_ms // (bucket_seconds * 1000)


def reach_buckets(window_minutes: int, bucket_seconds: int) -> int:
    """How many buckets before its own a transaction's lookback reaches: ``floor(W*60/bs)``."""
    return (window_minutes * 60) // bucket_seconds


def passes(cond: Condition | None, record: Mapping[str, Any]) -> bool:
    """Whether a record passes a filter (no filter passes everything; a leaf on a null field is false)."""
    if cond is None:
        return True
    if isinstance(cond, All):
        return all(passes(c, record) for c in cond.all)
    if isinstance(cond, AnyOf):
        return any(passes(c, record) for c in cond.any)
    if isinstance(cond, Not):
        return not passes(cond.not_, record)
    return _leaf_holds(cond, record)


def counts_for(rule: Rule, record: Mapping[str, Any]) -> bool:
    """Whether the record takes part in the rule's aggregate."""
    if not passes(rule.filter, record):
        return False
    return rule.counts_transactions or record.get(rule.aggregate_field_name) is not None


def aggregate(rule: Rule, lookback: Sequence[Mapping[str, Any]]) -> Decimal | None:
    """The rule's aggregate over the lookback's records (None when there are none)."""
    if not lookback:
        return None
    aggregator = rule.aggregator_function_type
    if aggregator is Aggregator.COUNT:
        return quantize(Decimal(len(lookback)))
    values = [
        Decimal(1) if rule.aggregate_field_name == COUNT_FIELD else _number(r[rule.aggregate_field_name])
        for r in lookback
    ]
    if aggregator is Aggregator.MIN:
        return quantize(min(values))
    if aggregator is Aggregator.MAX:
        return quantize(max(values))
    total = sum((Fraction(v) for v in values), Fraction(0))
    return quantize(total if aggregator is Aggregator.SUM else total / len(values))


def quantize(value: Decimal | Fraction) -> Decimal:
    """Round to 6 decimals, half away from zero, exactly."""
    if isinstance(value, Decimal):
        with localcontext() as ctx:
            ctx.prec = 100
            return value.quantize(SIX_PLACES, rounding=ROUND_HALF_UP)
    scaled = abs(value) * 10**6
    whole, rest = divmod(scaled.numerator, scaled.denominator)
    if 2 * rest >= scaled.denominator:
        whole += 1
    return Decimal(whole if value >= 0 else -whole).scaleb(-6).quantize(SIX_PLACES)


def _number(value: Any) -> Decimal:
    if isinstance(value, bool):
        raise TypeError(f"{value!r} is not a number")
    return value if isinstance(value, Decimal) else Decimal(str(value))


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float | Decimal) and not isinstance(value, bool)


def _compare(actual: Any, target: Any) -> int:
    if _is_number(target) and _is_number(actual):
        left, right = _number(actual), _number(target)
        return (left > right) - (left < right)
    if isinstance(actual, str) and isinstance(target, str):
        return (actual > target) - (actual < target)
    raise TypeError(f"cannot compare {actual!r} with {target!r}")


def _equal(actual: Any, target: Any) -> bool:
    if isinstance(target, bool) or isinstance(actual, bool):
        return isinstance(target, bool) and isinstance(actual, bool) and actual == target
    return _compare(actual, target) == 0


def _leaf_holds(leaf: Leaf, record: Mapping[str, Any]) -> bool:
    actual = record.get(leaf.field)
    if actual is None:
        return False
    if leaf.op is FilterOperator.IN:
        values = leaf.value if isinstance(leaf.value, tuple) else (leaf.value,)
        return any(_equal(actual, v) for v in values)
    if leaf.op is FilterOperator.EQUAL:
        return _equal(actual, leaf.value)
    if leaf.op is FilterOperator.NOT_EQUAL:
        return not _equal(actual, leaf.value)
    order = _compare(actual, leaf.value)
    return {
        FilterOperator.GREATER: order > 0,
        FilterOperator.GREATER_EQUAL: order >= 0,
        FilterOperator.LESS: order < 0,
        FilterOperator.LESS_EQUAL: order <= 0,
    }[leaf.op]
