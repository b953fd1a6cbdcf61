"""The alert contract's per-transaction arithmetic in plain Python, for evidence shown to people.

The engine computes a rule's aggregate from minute-bucket tiles in Spark; the evidence view recomputes it from the
transactions themselves, as docs/engine.md defines it, so that the two can be compared on screen:

* a transaction counts for a rule when it passes the rule's filter (a leaf on a null field is false, as
  ``filter_expr.compile_filter`` compiles it) and, unless the rule counts transactions, its field is not null;
* the lookback of ``x`` holds the counting transactions of ``x``'s key whose bucket lies in
  ``[bucket(x) - floor(W*60/bs), bucket(x)]`` and that precede ``x`` or are ``x``;
* SUM, COUNT, AVG (exact SUM/COUNT), MIN, MAX, each rounded to 6 decimals half away from zero;
  COUNT_DISTINCT: the distinct non-null values (told apart by their text, as the engine does), saturating at
  ``engine.distinct_cap``; VALUE: the transaction's own value;
* a relative limit (``rule.baseline``): the baseline set is the lookback over the baseline's window with the
  transaction itself excluded; ``n`` its size, ``B`` its AVG (HALF_UP, 6 decimals) / SUM / COUNT, ``B' = B*W/W2``
  with ``perWindow`` (exact), and the alert condition ``n >= minCount and aggregate OP limit * B'`` (exact).

Example::

    passes(rule.filter, {"paymentType": "CSH"})        # True / False
    aggregate(rule, [row1, row2])                       # Decimal('150.000000')
    figures = baseline_figures(rule, history_rows)      # n, B, B', the threshold k * B'
    figures.allows(LimitOperator.GREATER, Decimal(900))
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, localcontext
from fractions import Fraction
from typing import Any

from rules_cdc.filter_expr import All, AnyOf, FilterOperator, Leaf, Not
from rules_cdc.rule_model import COUNT_FIELD, Aggregator, BaselineAggregator, LimitOperator, Rule

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


DEFAULT_DISTINCT_CAP = 100
"""``engine.distinct_cap``'s default: a COUNT_DISTINCT aggregate saturates there."""


def aggregate(
    rule: Rule,
    lookback: Sequence[Mapping[str, Any]],
    *,
    own: Mapping[str, Any] | None = None,
    distinct_cap: int = DEFAULT_DISTINCT_CAP,
) -> Decimal | None:
    """The rule's aggregate over the lookback's records (None when there are none); VALUE takes ``own``'s value (the
    evaluated transaction: the lookback's last record when not given), COUNT_DISTINCT saturates at ``distinct_cap``."""
    if not lookback:
        return None
    aggregator = rule.aggregator_function_type
    if aggregator is Aggregator.COUNT:
        return quantize(Decimal(len(lookback)))
    if aggregator is Aggregator.COUNT_DISTINCT:
        return quantize(Decimal(min(len(distinct_values(rule, lookback)), distinct_cap)))
    if aggregator is Aggregator.VALUE:
        value = (own if own is not None else lookback[-1]).get(rule.aggregate_field_name)
        return None if value is None else quantize(_number(value))
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


def distinct_text(value: Any) -> str:
    """The text a value is told apart by (as the engine casts it to a string): ``-0.0`` and ``0.0`` are two values,
    a decimal's scale is its column's."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        return repr(value) if math.isfinite(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    return str(value)


@dataclass(frozen=True)
class DistinctValue:
    """One distinct value of a COUNT_DISTINCT window: its text, how many transactions had it, the first of them."""

    text: str
    transactions: int
    first_transaction: str


def distinct_values(rule: Rule, rows: Sequence[Mapping[str, Any]]) -> list[DistinctValue]:
    """The distinct non-null values of the rule's field among ``rows``, in text order (the order the engine keeps
    the smallest ``distinct_cap`` of)."""
    seen: dict[str, list[Any]] = {}
    for row in rows:
        value = row.get(rule.aggregate_field_name)
        if value is None:
            continue
        entry = seen.setdefault(distinct_text(value), [0, row.get("transactionId")])
        entry[0] += 1
    return [DistinctValue(text, count, str(first)) for text, (count, first) in sorted(seen.items())]


@dataclass(frozen=True)
class BaselineFigures:
    """A relative limit worked out: ``n`` transactions of the baseline set, ``B`` (``value``), ``B'`` (``scaled``,
    exact), the threshold ``k * B'`` (exact); ``value``/``scaled``/``threshold`` are None for an AVG of no values."""

    aggregator: BaselineAggregator
    n: int
    min_count: int
    value: Decimal | None
    scaled: Fraction | None
    threshold: Fraction | None
    per_window: bool
    factor: Decimal

    @property
    def enough(self) -> bool:
        """``n >= minCount``: enough history for the rule to fire at all."""
        return self.n >= self.min_count

    def allows(self, operator: LimitOperator, aggregate_value: Decimal | None) -> bool:
        """Whether the alert condition holds: enough history, a baseline, and ``aggregate OP k * B'`` exactly."""
        if aggregate_value is None or self.threshold is None or not self.enough:
            return False
        return holds_exactly(operator, Fraction(aggregate_value), self.threshold)


def baseline_figures(rule: Rule, history: Sequence[Mapping[str, Any]]) -> BaselineFigures:
    """The baseline of ``rule`` (which must have one) over ``history``: the records of the key that count for the
    rule within the baseline's window, before the evaluated transaction and without it."""
    baseline = rule.baseline
    if baseline is None:
        raise ValueError(f"rule {rule.rule_id} has a fixed limit, not a baseline")
    field = rule.aggregate_field_name
    values = [
        Decimal(1) if field == COUNT_FIELD else _number(r[field])
        for r in history
        if field == COUNT_FIELD or r.get(field) is not None
    ]
    value: Decimal | None
    if baseline.aggregator is BaselineAggregator.COUNT:
        value = quantize(Decimal(len(history)))
    elif baseline.aggregator is BaselineAggregator.SUM:
        value = quantize(sum((Fraction(v) for v in values), Fraction(0)))
    else:
        value = quantize(sum((Fraction(v) for v in values), Fraction(0)) / len(values)) if values else None
    scaled: Fraction | None = None
    threshold: Fraction | None = None
    if value is not None:
        scaled = Fraction(value)
        if baseline.per_window:
            scaled = scaled * rule.window_minutes / baseline.window_minutes
        threshold = Fraction(rule.limit) * scaled
    return BaselineFigures(
        aggregator=baseline.aggregator,
        n=len(history),
        min_count=baseline.min_count,
        value=value,
        scaled=scaled,
        threshold=threshold,
        per_window=baseline.per_window,
        factor=rule.limit,
    )


def holds_exactly(operator: LimitOperator, value: Fraction, limit: Fraction) -> bool:
    """``value OP limit``, exactly (fractions: ``k * B * W / W2`` need not be a decimal)."""
    order = (value > limit) - (value < limit)
    return {
        LimitOperator.GREATER: order > 0,
        LimitOperator.GREATER_EQUAL: order >= 0,
        LimitOperator.LESS: order < 0,
        LimitOperator.LESS_EQUAL: order <= 0,
        LimitOperator.EQUAL: order == 0,
        LimitOperator.NOT_EQUAL: order != 0,
    }[operator]


def exact_text(value: Fraction | Decimal | None) -> str:
    """A number for people: exact when it is a decimal (trailing zeros dropped), else ``≈`` and 6 decimals.

    >>> exact_text(Fraction(3, 8)), exact_text(Fraction(1, 3)), exact_text(Decimal("150.000000"))
    ('0.375', '≈0.333333', '150')
    """
    if value is None:
        return "-"
    fraction = Fraction(value)
    denominator = fraction.denominator
    for prime in (2, 5):
        while denominator % prime == 0:
            denominator //= prime
    if denominator == 1:
        with localcontext() as ctx:
            ctx.prec = 200
            text = format(Decimal(fraction.numerator) / Decimal(fraction.denominator), "f")
        return text.rstrip("0").rstrip(".") if "." in text else text
    text = format(quantize(fraction), "f").rstrip("0").rstrip(".")
    return f"≈{text}"


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
