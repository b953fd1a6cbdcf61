"""Synthetic, seeded benchmark input: transactions over a fixed set of keys, and rule sets of a given shape.

Pure Python, no Spark. Transactions arrive at a fixed event-time rate, each to a key drawn uniformly from
``keys`` payers; ``aligned=True`` puts every event time on a bucket start (a multiple of ``bucket_ms``), where a
bucketed lookback and an exact per-event one agree, so the baselines can be compared alert for alert.

Rules: ``rule_set(n, window_minutes=W, states=S)`` gives ``n`` rules in ``S`` shared states (same grouping key and
aggregate field, ``S`` distinct filters), cycling SUM, COUNT, AVG, MAX, MIN with limits that a small share of
transactions meets. ``mixed_rule_set(n, ...)`` is the same set with its last rules turned into the newer kinds:
``distinct`` COUNT_DISTINCT rules (different beneficiaries per payer) and ``relative`` rules (a limit relative to
the payer's own history over ``baseline_minutes``).

Example::

    rows = transactions(Workload(count=10_000, keys=1_000, rate_per_second=200.0, start_ms=START_MS))
    write_batches(rows, Path("/tmp/landing"), batch_size=2_000)     # 5 JSON-lines files
    rules = rule_set(20, window_minutes=60, states=4)
    mixed = mixed_rule_set(20, window_minutes=60, states=4, distinct=5, relative=5)   # 10 of the above + 10 new
    same = kind_rule_set("mixed", 20, states=4)   # the bench's kinds scenario's name for it
"""

from __future__ import annotations

import json
import os
import random
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rules_cdc.rule_model import Rule

START_MS = 1_767_225_600_000
"""2026-01-01T00:00:00Z: where benchmark event time starts (a day boundary, so tiles align)."""
PAYER_BASE = 1_000_000
BENEFICIARY_BASE = 5_000_000
BENEFICIARIES = 1_000
PAYMENT_TYPES = ("CRD", "CRD", "TRF", "CSH")  # drawn uniformly: CRD half of the time
AGGREGATORS = ("SUM", "COUNT", "AVG", "MAX", "MIN")


@dataclass(frozen=True)
class Workload:
    """``count`` transactions from ``start_ms`` on, ``rate_per_second`` of event time, over ``keys`` payers."""

    count: int
    keys: int
    rate_per_second: float
    start_ms: int = START_MS
    seed: int = 7
    aligned: bool = False
    bucket_ms: int = 60_000
    first_id: int = 0

    @classmethod
    def backlog(cls, count: int, keys: int) -> Workload:
        """The throughput runs' input: ``count`` transactions over ``keys`` payers, each paying every 6 s of event
        time (at least 50 tx/s in all)."""
        return cls(count=count, keys=keys, rate_per_second=max(50.0, keys / 6))

    @property
    def span_ms(self) -> int:
        return int(self.count / self.rate_per_second * 1000)

    @property
    def per_key_per_minute(self) -> float:
        return self.rate_per_second * 60 / self.keys


def transactions(workload: Workload) -> Iterator[dict[str, Any]]:
    """The workload's transactions in event-time order (JSON-ready dicts; amounts as strings with 2 places)."""
    rng = random.Random(workload.seed)
    step_ms = 1000.0 / workload.rate_per_second
    for i in range(workload.count):
        at = workload.start_ms + int(i * step_ms)
        if workload.aligned:
            at -= at % workload.bucket_ms
        cents = int(rng.lognormvariate(8.5, 1.0))  # median ~ 49.00
        yield {
            "transactionId": f"t{workload.first_id + i:010d}",
            "eventTime": at,
            "payerId": PAYER_BASE + rng.randrange(workload.keys),
            "beneficiaryId": BENEFICIARY_BASE + rng.randrange(BENEFICIARIES),
            "paymentAmount": f"{cents // 100}.{cents % 100:02d}",
            "paymentType": rng.choice(PAYMENT_TYPES),
            "channel": "WEB",
            "country": "NL",
            "currency": "EUR",
        }


def _line(record: dict[str, Any]) -> str:
    # paymentAmount as a JSON number with its exact digits (the engine reads it as decimal(18,2)).
    text = json.dumps({**record, "paymentAmount": "@@"}, separators=(",", ":"))
    return text.replace('"@@"', str(record["paymentAmount"]))


def write_batches(records: Iterator[dict[str, Any]], folder: Path, *, batch_size: int, prefix: str = "b") -> int:
    """Write JSON-lines files of ``batch_size`` records (atomically: temp name, then rename); return files written.

    Spark's files source takes files oldest first (by modification time, in milliseconds; ties in listing order),
    so each file is stamped at least a millisecond after the one before: a source with ``maxFilesPerTrigger=1``
    reads them in write order, one per batch.
    """
    folder.mkdir(parents=True, exist_ok=True)
    files, lines, stamp_ms = 0, [], 0
    for record in records:
        lines.append(_line(record))
        if len(lines) == batch_size:
            stamp_ms = _write(folder, f"{prefix}{files:06d}.jsonl", lines, after_ms=stamp_ms)
            files, lines = files + 1, []
    if lines:
        _write(folder, f"{prefix}{files:06d}.jsonl", lines, after_ms=stamp_ms)
        files += 1
    return files


def _write(folder: Path, name: str, lines: Sequence[str], *, after_ms: int) -> int:
    """Write ``name`` atomically, modified at least 1 ms after ``after_ms``; return its modification time (ms)."""
    temp = folder / f".{name}.tmp"
    temp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    stamp_ms = max(temp.stat().st_mtime_ns // 1_000_000, after_ms + 1)
    os.utime(temp, ns=(stamp_ms * 1_000_000, stamp_ms * 1_000_000))
    os.replace(temp, folder / name)
    return stamp_ms


DEFAULT_LIMITS: dict[str, float] = {"SUM": 20_000, "COUNT": 40, "AVG": 5_000, "MAX": 30_000, "MIN": 0.5}
"""Limits that the throughput workload's transactions seldom meet (a run of few minutes of event time)."""


def calibrated_limits(
    records: Iterable[dict[str, Any]], *, window_minutes: int, alert_share: float
) -> dict[str, float]:
    """Per aggregator, the limit that about ``alert_share / 5`` of ``records`` exceed (MIN: fall below), each
    transaction's aggregate taken over its payer's transactions of the last ``window_minutes`` (itself included):
    a rule set built on them alerts on about ``alert_share`` of the workload, whatever its per-payer rate.

    Pure Python over the records in event-time order (a deque per payer); ties (COUNT) make the share at most the
    target, never more.
    """
    window_ms = window_minutes * 60_000
    history: dict[int, deque[tuple[int, float]]] = {}
    values: dict[str, list[float]] = {name: [] for name in AGGREGATORS}
    for record in records:
        at, amount = int(record["eventTime"]), float(record["paymentAmount"])
        past = history.setdefault(int(record["payerId"]), deque())
        past.append((at, amount))
        while past[0][0] <= at - window_ms:
            past.popleft()
        amounts = [a for _, a in past]
        total = sum(amounts)
        values["SUM"].append(total)
        values["COUNT"].append(len(amounts))
        values["AVG"].append(total / len(amounts))
        values["MAX"].append(max(amounts))
        values["MIN"].append(min(amounts))
    share = alert_share / len(AGGREGATORS)
    limits = {}
    for name, seen in values.items():
        seen.sort()
        index = int(len(seen) * share) if name == "MIN" else min(len(seen) - 1, int(len(seen) * (1 - share)))
        limits[name] = round(seen[index], 2)
    return limits


def rule_set(
    count: int, *, window_minutes: int, states: int, first_id: int = 1, limits: Mapping[str, float] | None = None
) -> list[Rule]:
    """``count`` ACTIVE rules per payer over ``window_minutes``, sharing ``states`` states (distinct filters), with
    ``limits`` per aggregator (``DEFAULT_LIMITS`` when not given; ``calibrated_limits`` for a given alert share).

    State ``s`` = filter ``paymentAmount >= s/100`` (``s = 0``: no filter): nearly every transaction passes all,
    so each state holds about the same tiles and the only difference between them is bookkeeping.
    """
    if not 1 <= states <= count:
        raise ValueError("states must be between 1 and the number of rules")
    rules = []
    for i in range(count):
        state = i % states
        aggregator = AGGREGATORS[(i // states) % len(AGGREGATORS)]
        limit = (limits or DEFAULT_LIMITS)[aggregator]
        operator = "LESS" if aggregator == "MIN" else "GREATER"
        data: dict[str, Any] = {
            "ruleId": first_id + i,
            "groupingKeyNames": ["payerId"],
            "aggregateFieldName": "paymentAmount",
            "aggregatorFunctionType": aggregator,
            "limitOperatorType": operator,
            "limit": limit,
            "windowMinutes": window_minutes,
        }
        if state:
            data["filter"] = {"field": "paymentAmount", "op": "GREATER_EQUAL", "value": state / 100}
        rules.append(Rule.model_validate(data))
    return rules


def alerting_rule_set(
    count: int, workload: Workload, *, window_minutes: int, states: int, alert_share: float
) -> list[Rule]:
    """``rule_set`` with limits calibrated on ``workload``'s transactions so that about ``alert_share`` of them
    raise an alert (``alert_share`` 0: the seldom-met ``DEFAULT_LIMITS``)."""
    limits = (
        calibrated_limits(transactions(workload), window_minutes=window_minutes, alert_share=alert_share)
        if alert_share
        else None
    )
    return rule_set(count, window_minutes=window_minutes, states=states, limits=limits)


RELATIVE_SHAPES: tuple[tuple[str, str, int], ...] = (
    ("VALUE", "AVG", 8),  # this payment over 8x the payer's average payment
    ("SUM", "SUM", 3),  # the window's spend over 3x the baseline's (the row taken out)
    ("MAX", "AVG", 6),
    ("AVG", "AVG", 4),
    ("COUNT", "COUNT", 2),
)
"""(rule aggregator, baseline aggregator, factor) of the relative rules, cycled."""


def mixed_rule_set(
    count: int,
    *,
    window_minutes: int,
    states: int,
    distinct: int,
    relative: int,
    baseline_minutes: int = 7 * 1440,
    first_id: int = 1,
) -> list[Rule]:
    """``rule_set(count - distinct - relative, ...)`` followed by ``distinct`` COUNT_DISTINCT rules and ``relative``
    relative-limit rules, all per payer over ``window_minutes``, their ids following on.

    The new rules use the same ``states`` filters as the classic ones: the relative rules share the classic states
    (same key, field and filter; the baseline only reaches further back, ``baseline_minutes``), the COUNT_DISTINCT
    rules (different beneficiaries) add one state per filter they use. Their limits are met rarely or never: the
    comparison is of the evaluation's cost, not of the alerts written.
    """
    classic = count - distinct - relative
    if classic < 1 or distinct < 0 or relative < 0:
        raise ValueError("count must exceed distinct + relative")
    rules = rule_set(classic, window_minutes=window_minutes, states=min(states, classic), first_id=first_id)
    next_id = first_id + classic

    def with_filter(data: dict[str, Any], i: int) -> Rule:
        state = i % states
        if state:
            data["filter"] = {"field": "paymentAmount", "op": "GREATER_EQUAL", "value": state / 100}
        return Rule.model_validate(data)

    for i in range(distinct):
        data: dict[str, Any] = {
            "ruleId": next_id,
            "groupingKeyNames": ["payerId"],
            "aggregateFieldName": "beneficiaryId",
            "aggregatorFunctionType": "COUNT_DISTINCT",
            "limitOperatorType": "GREATER",
            "limit": 20 + 5 * i,
            "windowMinutes": window_minutes,
        }
        rules.append(with_filter(data, i))
        next_id += 1
    for i in range(relative):
        aggregator, baseline, factor = RELATIVE_SHAPES[i % len(RELATIVE_SHAPES)]
        data = {
            "ruleId": next_id,
            "groupingKeyNames": ["payerId"],
            "aggregateFieldName": "paymentAmount",
            "aggregatorFunctionType": aggregator,
            "limitOperatorType": "GREATER",
            "limit": factor,
            "windowMinutes": window_minutes,
            "baseline": {"aggregatorFunctionType": baseline, "windowMinutes": baseline_minutes, "minCount": 5},
        }
        rules.append(with_filter(data, i))
        next_id += 1
    return rules


KIND_SETS = ("today", "mixed")
"""The rule-kinds comparison's sets (``kind_rule_set``): today's kinds; a quarter COUNT_DISTINCT, a quarter relative."""
PROFILE_KINDS = (*KIND_SETS, "distinct", "relative")
"""``KIND_SETS`` and the mixed set's two halves apart (a quarter COUNT_DISTINCT; a quarter relative), to profile."""


def kind_rule_set(name: str, count: int, *, states: int) -> list[Rule]:
    """One of ``PROFILE_KINDS`` over 1-hour windows: ``rule_set``, or ``mixed_rule_set`` with a quarter of the ``count``
    rules COUNT_DISTINCT and a quarter relative (20 rules: 10 of today's, 5 and 5), or just one of those quarters."""
    if name == "today":
        return rule_set(count, window_minutes=60, states=states)
    quarter = count // 4
    halves = {"mixed": (quarter, quarter), "distinct": (quarter, 0), "relative": (0, quarter)}
    if name not in halves:
        raise ValueError(f"unknown rule kinds {name!r}; known: {list(PROFILE_KINDS)}")
    distinct, relative = halves[name]
    return mixed_rule_set(count, window_minutes=60, states=states, distinct=distinct, relative=relative)
