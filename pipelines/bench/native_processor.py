"""The native baseline's per-key logic: a ``StatefulProcessor`` keeping each key's window as per-bucket aggregates.

**State: one map per grouping key, bucket -> that bucket's aggregates** (``MapState``: key ``bucket``, value the
sum, count, value count, min and max of every state the rules share, in units of 10^-6 like the engine's). Not a
list of the events: the contract's window is whole buckets (``[bucket(x) - floor(W*60/bs), bucket(x)]``), so
per-bucket aggregates answer it exactly, and a key holds at most ``widest window / bucket + 1`` entries whatever its
rate (a list holds every event: 600 at 10 tx/min over an hour, all read back on every batch that touches the key).

For each key, the batch's rows in ``(eventTime, transactionId)`` order (the engine's precedence; earlier batches'
rows are already in the map): a row folds into its bucket, then each rule it counts for is evaluated over the
buckets of its window, so its aggregate holds exactly the rows up to and including it. After the batch, the changed
buckets are written back and those before ``bucket(key's latest event - lateness) - widest reach`` removed: no
later evaluated row can reach them. The map's TTL (processing time) is the backstop for keys never seen again.

Input rows (``native_state.tagged_transactions``): ``eventTimeMs``, ``transactionId``, ``passes`` (per state: the
row passes its filter) and ``units`` (per state: its field's value in units, null for a null field or the COUNT
pseudo-field). Output rows: ``ALERTS_DDL``.

Kept apart from ``native_state`` because this module is what the Python workers import (it pulls in no Delta, no
engine runner). Example::

    checks = rule_checks(rules, states, bucket_seconds=60)
    frame.groupBy("payerId").transformWithState(
        WindowProcessor(checks, states=len(states), bucket_ms=60_000, lateness_ms=300_000, ttl_ms=None),
        ALERTS_DDL, "Append", "None")
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from pyspark.sql import Row
from pyspark.sql.streaming.stateful_processor import MapState, StatefulProcessor, StatefulProcessorHandle, TimerValues

from pipelines.engine.keys import encode_key
from pipelines.engine.units import UNITS_PER_ONE
from rules_cdc.rule_model import Aggregator, LimitOperator, Rule

if TYPE_CHECKING:
    from pipelines.engine.states import StateSpec

BUCKET_KEY = "bucket LONG"
# One element per state in each array.
BUCKET_VALUE = "sums ARRAY<LONG>, counts ARRAY<LONG>, valueCounts ARRAY<LONG>, mins ARRAY<LONG>, maxs ARRAY<LONG>"
ALERTS_DDL = (
    "ruleId LONG, transactionId STRING, keyValue STRING, aggregateValue DECIMAL(38,6), eventTimeMs LONG, shadow BOOLEAN"
)
SUPPORTED = frozenset(
    {Aggregator.SUM, Aggregator.COUNT, Aggregator.AVG, Aggregator.MIN, Aggregator.MAX, Aggregator.VALUE}
)
_MICRO = Decimal(1).scaleb(-6)


@dataclass(frozen=True)
class RuleCheck:
    """A rule as the processor evaluates it (plain values: it is pickled to the Python workers)."""

    rule_id: int
    state: int  # index of its state in the processor's states
    aggregator: Aggregator
    operator: LimitOperator
    limit_units: Decimal  # limit * 10^6, exact
    reach: int  # buckets before x's own in its window: floor(W*60 / bucket_seconds)
    counts_transactions: bool
    shadow: bool


def rule_checks(rules: Sequence[Rule], states: Sequence[StateSpec], *, bucket_seconds: int) -> tuple[RuleCheck, ...]:
    """The evaluated (ACTIVE, SHADOW) rules as checks; ValueError for what this baseline does not implement."""
    keys = {r.grouping_key_names for r in rules}
    if len(keys) != 1:
        raise ValueError(f"the native baseline groups by one key for all rules, got {sorted(keys)}")
    index = {state.state_id: i for i, state in enumerate(states)}
    checks = []
    for rule in rules:
        if rule.aggregator_function_type not in SUPPORTED or rule.baseline is not None or rule.cooldown_minutes:
            raise ValueError(f"rule {rule.rule_id}: the native baseline has no COUNT_DISTINCT, baselines or cooldowns")
        if rule.evaluated:
            checks.append(
                RuleCheck(
                    rule_id=rule.rule_id,
                    state=index[rule.state_id],
                    aggregator=rule.aggregator_function_type,
                    operator=rule.limit_operator_type,
                    limit_units=rule.limit.scaleb(6),
                    reach=rule.window_minutes * 60 // bucket_seconds,
                    counts_transactions=rule.counts_transactions,
                    shadow=rule.shadow,
                )
            )
    return tuple(checks)


class Bucket:
    """One bucket of one key: per state, sum / count / valueCount / min / max (units; min, max None when empty)."""

    __slots__ = ("counts", "maxs", "mins", "sums", "value_counts")

    def __init__(self, states: int, stored: Row | tuple[Any, ...] | None = None) -> None:
        if stored is None:
            self.sums, self.counts, self.value_counts = [0] * states, [0] * states, [0] * states
            self.mins: list[int | None] = [None] * states
            self.maxs: list[int | None] = [None] * states
        else:
            self.sums, self.counts, self.value_counts = list(stored[0]), list(stored[1]), list(stored[2])
            self.mins, self.maxs = list(stored[3]), list(stored[4])

    def add(self, state: int, units: int | None) -> None:
        self.counts[state] += 1
        if units is not None:
            self.sums[state] += units
            self.value_counts[state] += 1
            low, high = self.mins[state], self.maxs[state]
            self.mins[state] = units if low is None else min(low, units)
            self.maxs[state] = units if high is None else max(high, units)

    def stored(self) -> tuple[list[int], list[int], list[int], list[int | None], list[int | None]]:
        """The map value (``BUCKET_VALUE``)."""
        return (self.sums, self.counts, self.value_counts, self.mins, self.maxs)


def half_up(numerator: int, denominator: int) -> int:
    """``numerator / denominator`` rounded half away from zero (the contract's HALF_UP), exactly."""
    whole, rest = divmod(abs(numerator), denominator)
    rounded = whole + (2 * rest >= denominator)
    return rounded if numerator >= 0 else -rounded


def window_units(check: RuleCheck, buckets: Mapping[int, Bucket], at: int, own: int | None) -> int:
    """The rule's aggregate (units) over the buckets in ``[at - reach, at]``, which must hold exactly the
    transactions up to and including x (``own``: x's value, for VALUE)."""
    if check.aggregator is Aggregator.VALUE:
        assert own is not None
        return own
    s, total, count, value_count = check.state, 0, 0, 0
    low: int | None = None
    high: int | None = None
    for index, bucket in buckets.items():
        if at - check.reach <= index <= at and bucket.counts[s]:
            total += bucket.sums[s]
            count += bucket.counts[s]
            value_count += bucket.value_counts[s]
            b_low, b_high = bucket.mins[s], bucket.maxs[s]
            if b_low is not None:
                low = b_low if low is None else min(low, b_low)
            if b_high is not None:
                high = b_high if high is None else max(high, b_high)
    if check.counts_transactions:  # COUNT, or any aggregator over the COUNT pseudo-field
        return count * UNITS_PER_ONE
    if check.aggregator is Aggregator.SUM:
        return total
    if check.aggregator is Aggregator.AVG:
        return half_up(total, value_count)
    value = low if check.aggregator is Aggregator.MIN else high
    assert value is not None  # x itself counts for the rule, with a value
    return value


class WindowProcessor(StatefulProcessor):
    """Per grouping key: the map ``buckets`` (bucket -> ``Bucket``); emits the alerts of the key's new rows."""

    def __init__(
        self, checks: Sequence[RuleCheck], *, states: int, bucket_ms: int, lateness_ms: int, ttl_ms: int | None
    ) -> None:
        self.checks = tuple(checks)
        self.states = states
        self.bucket_ms = bucket_ms
        self.lateness_ms = lateness_ms
        self.ttl_ms = ttl_ms
        self.widest_reach = max((c.reach for c in checks), default=0)

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.buckets: MapState = handle.getMapState("buckets", BUCKET_KEY, BUCKET_VALUE, self.ttl_ms)

    def handleInputRows(self, key: Any, rows: Any, timerValues: TimerValues) -> Iterator[Row]:
        """Fold each row into its bucket in precedence order and evaluate it; then write back the changed buckets
        and remove those no later transaction can reach."""
        batch = sorted(rows, key=lambda r: (r["eventTimeMs"], r["transactionId"]))
        buckets = {k[0]: Bucket(self.states, v) for k, v in self.buckets.iterator()}
        stored, touched = set(buckets), set()
        key_value = encode_key(list(key))
        alerts = []
        for row in batch:
            at = row["eventTimeMs"] // self.bucket_ms
            bucket = buckets.setdefault(at, Bucket(self.states))
            touched.add(at)
            passes, units = row["passes"], row["units"]
            for s in range(self.states):
                if passes[s]:
                    bucket.add(s, units[s])
            for check in self.checks:
                own = units[check.state]
                if not passes[check.state] or (own is None and not check.counts_transactions):
                    continue  # x does not count for the rule: not evaluated
                value = window_units(check, buckets, at, own)
                if check.operator.holds(Decimal(value), check.limit_units):
                    alerts.append(
                        Row(
                            ruleId=check.rule_id,
                            transactionId=row["transactionId"],
                            keyValue=key_value,
                            aggregateValue=(Decimal(value) * _MICRO).quantize(_MICRO),
                            eventTimeMs=row["eventTimeMs"],
                            shadow=check.shadow,
                        )
                    )
        # Every later evaluated transaction is at or after (this key's latest - lateness): keep what it can reach.
        horizon = (max(buckets) * self.bucket_ms - self.lateness_ms) // self.bucket_ms - self.widest_reach
        for index in stored:
            if index < horizon:
                self.buckets.removeKey((index,))
        for index in touched:
            if index >= horizon:
                self.buckets.updateValue((index,), buckets[index].stored())
        return iter(alerts)

    def close(self) -> None:
        pass
