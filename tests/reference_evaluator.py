"""The alert contract as a brute-force, plain-Python evaluator: the oracle the streaming engine is tested against.

No Spark, no buckets kept as state: every alert is computed by scanning the transactions themselves. It is meant
to be obviously correct, not fast (quadratic in the transactions of one grouping key).

The contract, exactly:

* ``bucket(t) = floor(t / (bucket_seconds*1000)) * bucket_seconds*1000`` (``t`` in epoch ms).
* Precedence: every transaction of an earlier batch precedes every transaction of a later batch; within a
  batch, transactions are ordered by ``(eventTime, transactionId)``.
* A transaction ``y`` *counts* for rule ``r`` iff it passes ``r``'s filter and, unless ``r`` counts transactions
  (aggregator COUNT or aggregate field COUNT), its aggregate field is not null.
* The key of ``y`` under ``r`` is the tuple of its values of ``r.grouping_key_names`` (missing = None).
* ``lookback(x, r)``: every ``y`` with ``x``'s key that counts for ``r``, whose bucket index is in
  ``[index(x) - floor(W*60/b), index(x)]`` (W = window minutes, b = bucket seconds), and that is ``x`` or precedes
  ``x``. Transactions of all earlier batches are eligible, whatever rules existed then.
* Aggregates over the lookback (each quantized to 6 decimals, ROUND_HALF_UP): SUM of the field; COUNT = number of
  transactions (also SUM over the COUNT field); AVG = exact SUM/COUNT then quantized; MIN / MAX of the field;
  COUNT_DISTINCT = ``min(number of different values of the field, D)`` with ``D`` the cap (``distinct_cap``,
  the engine's ``engine.distinct_cap``); VALUE = ``x``'s own value of the field. Values are told apart as the
  transaction schema's type would write them: a string by its text, a boolean as itself, a number by its numeric
  value (``1.5`` and ``1.50`` are one value, as a decimal column's fixed scale makes them), except that a float
  ``-0.0`` differs from ``0.0`` (a double column's text); so a record's values must be typed as its schema types
  them (a numeric string is a string here).
* Relative limits (``rule.baseline``, not for COUNT_DISTINCT): the limit is a factor ``k``. The baseline set is
  ``lookback(x, r)`` computed with the baseline's window ``W2`` instead of ``W``, **without ``x``**; ``n`` its
  size. ``B`` = AVG of its non-null values (quantized; none: no alert), their SUM (0 when empty) or ``n`` (COUNT);
  ``B' = B * W / W2`` exactly with ``per_window``, else ``B``. ``x`` alerts iff ``n >= min_count`` and
  ``aggregate OP k * B'`` holds exactly (as fractions); the alert carries ``B`` as ``baseline_value`` (None for
  a rule without a baseline).
* ``x`` is evaluated under every ACTIVE or SHADOW (not PAUSED) rule of its batch for which ``x`` counts; it
  alerts when ``aggregate OP limit`` holds (for a relative limit, see above). A SHADOW rule's alerts are exactly
  those it would raise as ACTIVE (lookback, late rows, cooldown all alike) and carry ``shadow=True``; an ACTIVE
  rule's carry ``shadow=False``. Which one applies is the rule's state in the batch that raises the alert.
* Late: with ``M`` = the max eventTime of all earlier batches, ``x`` is late iff ``x.t < M - lateness``; a late
  ``x`` is not evaluated but still counts in others' lookbacks.
* Cooldown ``C`` minutes (None/0 = none): per (rule, key), in precedence order, an alert for ``x`` is suppressed
  iff an earlier *emitted* alert of the pair has eventTime ``t_a`` with ``x.t < t_a + C*60000``. Cooldown memory is
  keyed by rule id and kept while the id is present in consecutive batches' rules (ACTIVE, PAUSED or SHADOW,
  whatever else about the rule changed: a promotion SHADOW -> ACTIVE or a demotion keeps it); a batch without the
  rule id clears that rule's memory. Shadow alerts are emitted alerts of their rule: they set its cooldown.

Tests import it as ``from reference_evaluator import ...`` (pytest puts ``tests/`` on ``sys.path``).

Example::

    alerts = evaluate([RefBatch(rules=[rule], transactions=[{"transactionId": "t1", "eventTime": 0, ...}])])
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, localcontext
from fractions import Fraction
from typing import Any

from rules_cdc.filter_expr import All, AnyOf, FilterOperator, Leaf, Not
from rules_cdc.rule_model import (
    COUNT_FIELD,
    TOMBSTONE_STATES,
    Aggregator,
    Baseline,
    BaselineAggregator,
    LimitOperator,
    Rule,
    RuleState,
)

SIX_PLACES = Decimal("0.000001")
Condition = All | AnyOf | Not | Leaf
Record = Mapping[str, Any]


@dataclass(frozen=True)
class RefBatch:
    """One micro-batch: the rules live for it (ACTIVE, PAUSED or SHADOW) and the transactions it brings."""

    rules: Sequence[Rule]
    transactions: Sequence[Record]


@dataclass(frozen=True)
class RefAlert:
    rule_id: int
    transaction_id: str
    key: tuple[Any, ...]
    aggregate_value: Decimal
    shadow: bool = False  # raised by a SHADOW rule: recorded, never acted on
    baseline_value: Decimal | None = None  # B of a relative limit (6 decimals); None for a rule without a baseline


@dataclass(frozen=True)
class _Txn:
    """A transaction with its place in the global precedence order."""

    position: int
    batch: int
    event_time: int
    transaction_id: str
    record: Record


# ---- small public helpers ----------------------------------------------------------------------------------


def bucket_index(event_time_ms: int, bucket_seconds: int = 60) -> int:
    """``floor(t / (bucket_seconds*1000))``: the bucket a time falls in (Python's ``//`` floors negatives too)."""
    return event_time_ms // (bucket_seconds * 1000)


def key_of(record: Record, rule: Rule) -> tuple[Any, ...]:
    """The record's values of the rule's grouping keys, in order; a missing field is None; () for a global rule."""
    return tuple(record.get(name) for name in rule.grouping_key_names)


def filter_passes(cond: Condition | None, record: Record) -> bool:
    """Whether a record passes a filter; no filter passes everything; a leaf on a missing/null field is False."""
    if cond is None:
        return True
    if isinstance(cond, All):
        return all(filter_passes(c, record) for c in cond.all)
    if isinstance(cond, AnyOf):
        return any(filter_passes(c, record) for c in cond.any)
    if isinstance(cond, Not):
        return not filter_passes(cond.not_, record)
    return _leaf_holds(cond, record)


def counts_for(record: Record, rule: Rule) -> bool:
    """Whether the record takes part in the rule's aggregate: passes its filter, aggregate field not null."""
    if not filter_passes(rule.filter, record):
        return False
    return rule.counts_transactions or record.get(rule.aggregate_field_name) is not None


# ---- the filter interpreter --------------------------------------------------------------------------------


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float | Decimal) and not isinstance(value, bool)


def _as_decimal(value: Any) -> Decimal:
    """Through ``str`` so that a float 0.1 stays 0.1; a numeric string is read as written."""
    if isinstance(value, bool):
        raise TypeError(f"{value!r} is not a number")
    return value if isinstance(value, Decimal) else Decimal(str(value))


def _compare(actual: Any, target: Any) -> int:
    """-1, 0 or 1 as ``actual`` is below, equal to or above ``target``: as Decimals when the target is numeric."""
    if _is_number(target):
        left: Any = _as_decimal(actual)
        right: Any = _as_decimal(target)
    elif isinstance(target, str) and isinstance(actual, str):
        left, right = actual, target
    else:
        raise TypeError(f"the reference evaluator does not compare {actual!r} with {target!r}")
    order: int = (left > right) - (left < right)
    return order


def _equal(actual: Any, target: Any) -> bool:
    if isinstance(target, bool) or isinstance(actual, bool):
        return isinstance(target, bool) and isinstance(actual, bool) and actual == target
    return _compare(actual, target) == 0


def _leaf_holds(leaf: Leaf, record: Record) -> bool:
    actual = record.get(leaf.field)
    if actual is None:
        return False
    if leaf.op is FilterOperator.IN:
        assert isinstance(leaf.value, tuple)
        return any(_equal(actual, v) for v in leaf.value)
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


# ---- aggregates --------------------------------------------------------------------------------------------


def _quantize(value: Decimal | Fraction) -> Decimal:
    """Round to 6 decimals, half away from zero (ROUND_HALF_UP), exactly: a Fraction is never pre-rounded."""
    if isinstance(value, Decimal):
        with localcontext() as ctx:
            ctx.prec = 100
            return value.quantize(SIX_PLACES, rounding=ROUND_HALF_UP)
    scaled = abs(value) * 10**6
    whole, rest = divmod(scaled.numerator, scaled.denominator)
    if 2 * rest >= scaled.denominator:
        whole += 1
    return Decimal(whole if value >= 0 else -whole).scaleb(-6).quantize(SIX_PLACES)


def _contribution(record: Record, rule: Rule) -> Decimal:
    """What one counting transaction adds: 1 for the COUNT field, else its field's value."""
    if rule.aggregate_field_name == COUNT_FIELD:
        return Decimal(1)
    return _as_decimal(record[rule.aggregate_field_name])


def distinct_token(value: Any) -> tuple[str, Any]:
    """What tells two values of one field apart for COUNT_DISTINCT (see the module docstring)."""
    if isinstance(value, bool):
        return ("boolean", value)
    if isinstance(value, str):
        return ("string", value)
    if isinstance(value, float) and value == 0 and math.copysign(1.0, value) < 0:
        return ("number", "-0.0")
    if _is_number(value):
        return ("number", _as_decimal(value))  # equal Decimals hash alike: 1.5 and 1.50 are one value
    return (type(value).__name__, value)


def _aggregate(lookback: Sequence[_Txn], x: _Txn, rule: Rule, distinct_cap: int) -> Decimal:
    assert lookback and lookback[-1] is x, "the lookback always holds x itself, last"
    aggregator = rule.aggregator_function_type
    if aggregator is Aggregator.COUNT:
        return _quantize(Decimal(len(lookback)))
    if aggregator is Aggregator.COUNT_DISTINCT:
        distinct = {distinct_token(y.record[rule.aggregate_field_name]) for y in lookback}
        return _quantize(Decimal(min(len(distinct), distinct_cap)))
    if aggregator is Aggregator.VALUE:
        return _quantize(_contribution(x.record, rule))
    values = [_contribution(y.record, rule) for y in lookback]
    if aggregator is Aggregator.MIN:
        return _quantize(min(values))
    if aggregator is Aggregator.MAX:
        return _quantize(max(values))
    total = sum((Fraction(v) for v in values), Fraction(0))
    if aggregator is Aggregator.SUM:
        return _quantize(total)
    return _quantize(total / len(values))


def _baseline_aggregate(baseline: Baseline, history: Sequence[_Txn], rule: Rule) -> Decimal | None:
    """``B`` over the baseline set: AVG of its non-null values (None when there are none), SUM (0 when empty), or
    its size (COUNT). A transaction of a rule that counts transactions may have a null field: it is in the set (n)
    but has no value."""
    if baseline.aggregator is BaselineAggregator.COUNT:
        return _quantize(Decimal(len(history)))
    values = [
        _contribution(y.record, rule)
        for y in history
        if rule.aggregate_field_name == COUNT_FIELD or y.record.get(rule.aggregate_field_name) is not None
    ]
    total = sum((Fraction(v) for v in values), Fraction(0))
    if baseline.aggregator is BaselineAggregator.SUM:
        return _quantize(total)
    return _quantize(total / len(values)) if values else None


def _holds(operator: LimitOperator, left: Fraction, right: Fraction) -> bool:
    """``left OP right``, exactly."""
    return {
        LimitOperator.GREATER: left > right,
        LimitOperator.GREATER_EQUAL: left >= right,
        LimitOperator.LESS: left < right,
        LimitOperator.LESS_EQUAL: left <= right,
        LimitOperator.EQUAL: left == right,
        LimitOperator.NOT_EQUAL: left != right,
    }[operator]


# ---- the evaluator -----------------------------------------------------------------------------------------


def _event_time(record: Record) -> int:
    value = record["eventTime"]
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"eventTime must be epoch milliseconds (int), got {value!r}")
    return value


def _in_precedence_order(batches: Sequence[RefBatch]) -> list[_Txn]:
    ordered: list[_Txn] = []
    for batch_no, batch in enumerate(batches):
        keyed = sorted(
            ((_event_time(r), str(r["transactionId"]), r) for r in batch.transactions), key=lambda e: (e[0], e[1])
        )
        for event_time, transaction_id, record in keyed:
            ordered.append(_Txn(len(ordered), batch_no, event_time, transaction_id, record))
    return ordered


def evaluate(
    batches: Sequence[RefBatch],
    *,
    bucket_seconds: int = 60,
    allowed_lateness_seconds: int = 300,
    distinct_cap: int = 100,
) -> list[RefAlert]:
    """Every alert the contract raises over these batches, sorted by (rule_id, transaction_id).

    ``distinct_cap`` is where COUNT_DISTINCT saturates (the engine's ``engine.distinct_cap``)."""
    if distinct_cap < 1:
        raise ValueError(f"distinct_cap must be positive, got {distinct_cap}")
    limits = _Limits(bucket_seconds, allowed_lateness_seconds, distinct_cap)
    ordered = _in_precedence_order(batches)
    alerts: list[RefAlert] = []
    cooldowns: dict[int, dict[tuple[Any, ...], list[int]]] = {}  # rule id -> key -> emitted alert eventTimes
    high_water: int | None = None  # max eventTime of all earlier batches
    for batch_no, batch in enumerate(batches):
        _check_live_rules(batch.rules)
        live_ids = {rule.rule_id for rule in batch.rules}
        for rule_id in list(cooldowns):
            if rule_id not in live_ids:
                del cooldowns[rule_id]
        seen = [t for t in ordered if t.batch <= batch_no]
        current = [t for t in seen if t.batch == batch_no]
        for rule in sorted(batch.rules, key=lambda r: r.rule_id):
            # Spelled out here, not taken from the model's helpers: the oracle states the contract on its own.
            if rule.rule_state not in (RuleState.ACTIVE, RuleState.SHADOW):
                continue
            memory = cooldowns.setdefault(rule.rule_id, {})
            alerts.extend(_alerts_for_rule(rule, seen, current, high_water, memory, limits))
        if current:
            latest = max(t.event_time for t in current)
            high_water = latest if high_water is None else max(high_water, latest)
    return sorted(alerts, key=lambda a: (a.rule_id, a.transaction_id))


def _check_live_rules(rules: Sequence[Rule]) -> None:
    ids = [rule.rule_id for rule in rules]
    if len(set(ids)) != len(ids):
        raise ValueError(f"a batch's rules must have distinct rule ids, got {sorted(ids)}")
    dead = [rule.rule_id for rule in rules if rule.is_tombstone or rule.rule_state in TOMBSTONE_STATES]
    if dead:
        raise ValueError(f"tombstoned rules {dead} must be absent from a batch, not passed in")


@dataclass(frozen=True)
class _Limits:
    """The run's settings the contract depends on."""

    bucket_seconds: int
    allowed_lateness_seconds: int
    distinct_cap: int


def _window(x: _Txn, candidates: Sequence[_Txn], minutes: int, bucket_seconds: int) -> list[_Txn]:
    """``lookback(x, r)`` with a window of ``minutes``: the candidates (x's key, counting for r) in the buckets
    ``[index(x) - floor(minutes*60/b), index(x)]`` that are x or precede it, in precedence order (x last)."""
    reach = (minutes * 60) // bucket_seconds
    x_index = bucket_index(x.event_time, bucket_seconds)
    return [
        y
        for y in candidates
        if y.position <= x.position and x_index - reach <= bucket_index(y.event_time, bucket_seconds) <= x_index
    ]


@dataclass(frozen=True)
class _Verdict:
    value: Decimal
    alerts: bool
    baseline_value: Decimal | None


def _verdict(rule: Rule, x: _Txn, candidates: Sequence[_Txn], limits: _Limits) -> _Verdict:
    """The aggregate of x under the rule and whether its limit (fixed or relative) is exceeded."""
    value = _aggregate(_window(x, candidates, rule.window_minutes, limits.bucket_seconds), x, rule, limits.distinct_cap)
    baseline = rule.baseline
    if baseline is None:
        return _Verdict(value, _holds(rule.limit_operator_type, Fraction(value), Fraction(rule.limit)), None)
    history = [y for y in _window(x, candidates, baseline.window_minutes, limits.bucket_seconds) if y is not x]
    level = _baseline_aggregate(baseline, history, rule)
    if level is None or len(history) < baseline.min_count:
        return _Verdict(value, False, level)
    scaled = Fraction(level)
    if baseline.per_window:
        scaled = scaled * rule.window_minutes / baseline.window_minutes
    return _Verdict(value, _holds(rule.limit_operator_type, Fraction(value), Fraction(rule.limit) * scaled), level)


def _alerts_for_rule(
    rule: Rule,
    seen: Sequence[_Txn],
    current: Sequence[_Txn],
    high_water: int | None,
    memory: dict[tuple[Any, ...], list[int]],
    limits: _Limits,
) -> list[RefAlert]:
    """The alerts of one ACTIVE or SHADOW rule for the current batch's transactions, in precedence order."""
    # Grouping by key only narrows the scan; every y is still checked against the full lookback definition.
    by_key: dict[tuple[Any, ...], list[_Txn]] = {}
    for y in seen:
        if counts_for(y.record, rule):
            by_key.setdefault(key_of(y.record, rule), []).append(y)
    cooldown_ms = (rule.cooldown_minutes or 0) * 60_000
    raised: list[RefAlert] = []
    for x in current:
        if not counts_for(x.record, rule):
            continue
        if high_water is not None and x.event_time < high_water - limits.allowed_lateness_seconds * 1000:
            continue  # late: not evaluated, but it stays in by_key for the others
        key = key_of(x.record, rule)
        verdict = _verdict(rule, x, by_key[key], limits)
        if not verdict.alerts:
            continue
        emitted = memory.setdefault(key, [])
        if cooldown_ms and any(x.event_time < t_a + cooldown_ms for t_a in emitted):
            continue  # suppressed: it does not extend the cooldown
        emitted.append(x.event_time)
        shadow = rule.rule_state is RuleState.SHADOW
        raised.append(RefAlert(rule.rule_id, x.transaction_id, key, verdict.value, shadow, verdict.baseline_value))
    return raised
