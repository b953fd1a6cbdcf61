"""Random contract scenarios: rule sets, rule lifecycles between micro-batches, and transaction batches.

One seed gives one scenario (``scenario(seed)``), reproducibly, so a failing seed can be replayed alone
(``FRAUDLAKE_CONTRACT_SEEDS=1234 pytest tests/test_engine_contract_random.py``). The scenario exercises what
the contract says and the fixed contract test does not reach by construction:

* rules: every aggregator and limit operator, the COUNT pseudo-field, 0-3 grouping keys (a boolean key
  included), windows from 1 minute to 2 days, filters of any shape (all / any / not, every leaf operator on
  numeric, string and boolean fields, IN lists), cooldowns;
* lifecycles between batches, on the *same* rule id: limit, window (widened or narrowed), filter, grouping keys,
  aggregator and field changed; paused, resumed, deleted, disabled, re-created; created in SHADOW, promoted
  (SHADOW -> ACTIVE), demoted (ACTIVE -> SHADOW), a shadow rule paused and resumed into shadow;
* batches: equal timestamps, bucket edges, late and almost-late rows, nulls and missing fields, negative and zero
  amounts, invalid records (not JSON, a required field missing, a field of the wrong type, an exact duplicate);
* settings: bucket sizes of 20 s to 5 min, lateness, retention every batch or (in effect) never;
* the newer kinds (ids from 101, drawn from a second random stream of the seed, so the rules and batches above are
  those the seed always drew): COUNT_DISTINCT over string, long, decimal and boolean fields (the transaction id
  too, so that counts run past the cap), with every key shape, filters and windows up to 2 days, and a distinct
  cap drawn low now and then (``engine.distinct_cap``, and the reference's ``distinct_cap``) so that saturation
  is exercised; VALUE rules; relative limits (a baseline of every aggregator, per window or not, minCount 0-5,
  baseline windows up to 2 days) on VALUE, SUM, AVG, COUNT, MIN and MAX; the same lifecycles, including a change
  of kind (an id turning from a distinct count into a relative rule or one of the classic aggregators).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from delta_tables.rules_seed import put_rule_rows
from pipelines.base.settings import Settings, TransactionField
from rules_cdc.rule_model import COUNT_FIELD, Rule, RuleState
from rules_cdc.rule_rows import rule_to_row, tombstone_row

MIN = 60_000
T0 = 1_700_006_400_000  # a UTC midnight: day tiles start here

NUMERIC_FIELDS = ("payerId", "beneficiaryId", "paymentAmount")
KEY_FIELDS = ("payerId", "beneficiaryId", "paymentType", "channel", "flagged")
WINDOWS = (1, 2, 3, 5, 7, 30, 61, 180, 1440, 1500, 2880)
BUCKET_SECONDS = (20, 30, 60, 60, 60, 120, 300)
STRING_VALUES = {
    "paymentType": ("CSH", "CRD", "TRF"),
    "channel": ("WEB", "POS", "ATM"),
    "country": ("DE", "FR", "NL"),
}
NUMERIC_VALUES = {
    "payerId": (1, 2, 3),
    "beneficiaryId": (10, 11, 12),
    "paymentAmount": (Decimal("-5.00"), Decimal("0"), Decimal("20.50"), 50, 75, Decimal("99.99"), 150),
}
NUMERIC_OPS = ("GREATER", "GREATER_EQUAL", "LESS", "LESS_EQUAL", "EQUAL", "NOT_EQUAL", "IN")
STRING_OPS = ("EQUAL", "NOT_EQUAL", "IN", "GREATER", "LESS_EQUAL")


@dataclass
class Scenario:
    """What one seed drives through the engine: settings knobs, then (live rules, tombstones, records) per batch."""

    seed: int
    bucket_seconds: int
    allowed_lateness_seconds: int
    retention_every_batches: int
    batches: list[Batch] = field(default_factory=list)
    distinct_cap: int = 100  # engine.distinct_cap: where COUNT_DISTINCT saturates


@dataclass
class Batch:
    live: list[Rule]  # ACTIVE, PAUSED and SHADOW rules in force for this batch
    deleted: list[int]  # ids tombstoned before this batch (DELETED)
    disabled: list[Rule]  # rules tombstoned by disabled = true before this batch
    transactions: list[dict[str, Any]]  # valid records (the reference's input)
    invalid: list[str]  # raw lines the engine must quarantine


# ---- rules ----------------------------------------------------------------------------------------------------


def _leaf(rng: random.Random) -> dict[str, Any]:
    kind = rng.choice(("numeric", "numeric", "string", "string", "boolean"))
    if kind == "boolean":
        return {"field": "flagged", "op": rng.choice(("EQUAL", "NOT_EQUAL")), "value": rng.random() < 0.5}
    if kind == "string":
        name = rng.choice(tuple(STRING_VALUES))
        op = rng.choice(STRING_OPS)
        pool = STRING_VALUES[name]
        value: Any = list(rng.sample(pool, rng.randint(1, 2))) if op == "IN" else rng.choice(pool)
        return {"field": name, "op": op, "value": value}
    name = rng.choice(NUMERIC_FIELDS)
    op = rng.choice(NUMERIC_OPS)
    pool = NUMERIC_VALUES[name]
    value = [_plain(v) for v in rng.sample(pool, rng.randint(1, 3))] if op == "IN" else _plain(rng.choice(pool))
    return {"field": name, "op": op, "value": value}


def _plain(value: Any) -> Any:
    """Numbers as a JSON filter holds them: ints stay ints, decimals become floats of the same digits."""
    return float(value) if isinstance(value, Decimal) else value


def random_filter(rng: random.Random, depth: int = 0) -> dict[str, Any] | None:
    """A filter tree (or None) of depth at most 3."""
    if depth == 0 and rng.random() < 0.35:
        return None
    pick = rng.random()
    if depth >= 2 or pick < 0.45:
        return _leaf(rng)
    if pick < 0.65:
        return {"not": random_filter(rng, depth + 1) or _leaf(rng)}
    children = [random_filter(rng, depth + 1) or _leaf(rng) for _ in range(rng.randint(1, 3))]
    return {("all" if pick < 0.85 else "any"): children}


def _aggregation(rng: random.Random) -> dict[str, Any]:
    """Aggregator, field, operator and a limit that alerts now and then on the generated data."""
    aggregator = rng.choice(("SUM", "COUNT", "AVG", "MIN", "MAX"))
    if aggregator == "COUNT":
        name = rng.choice(("COUNT", "paymentAmount", "payerId"))
    elif aggregator == "SUM" and rng.random() < 0.2:
        name = COUNT_FIELD
    else:
        name = rng.choice(("paymentAmount", "paymentAmount", "beneficiaryId"))
    operator = rng.choice(("GREATER", "GREATER_EQUAL", "LESS", "LESS_EQUAL", "EQUAL", "NOT_EQUAL"))
    if aggregator == "COUNT" or name == COUNT_FIELD:
        limit: Any = rng.randint(1, 6)
    elif name == "beneficiaryId":
        limit = rng.choice((10, 11, 12, 25, 40)) if aggregator != "SUM" else rng.choice((30, 60, 120))
    elif aggregator == "SUM":
        limit = rng.choice((0, 100, 250, Decimal("400.25"), 800))
    elif aggregator == "AVG":
        limit = rng.choice((Decimal("50.5"), 75, 100, Decimal("33.333333")))
    else:
        limit = rng.choice((0, Decimal("20.50"), 50, 150, Decimal("199.99")))
    return {
        "aggregatorFunctionType": aggregator,
        "aggregateFieldName": name,
        "limitOperatorType": operator,
        "limit": limit,
    }


def random_rule(rng: random.Random, rule_id: int) -> Rule:
    keys = rng.sample(KEY_FIELDS, rng.choice((0, 1, 1, 1, 2, 2, 3)))
    data: dict[str, Any] = {
        "ruleId": rule_id,
        "groupingKeyNames": keys,
        "windowMinutes": rng.choice(WINDOWS),
        "filter": random_filter(rng),
        "cooldownMinutes": rng.choice((None, None, None, 0, 1, 2, 5, 30)),
        **_aggregation(rng),
    }
    return Rule.model_validate(data)


def _changed(rng: random.Random, rule: Rule) -> Rule:
    """The same rule id with one aspect changed (what an analyst's UPDATE does)."""
    data = rule.to_json_dict()
    what = rng.choice(("limit", "window", "filter", "keys", "aggregator", "cooldown"))
    if what == "limit":
        data["limit"] = _aggregation(rng)["limit"]
    elif what == "window":
        data["windowMinutes"] = rng.choice(WINDOWS)
    elif what == "filter":
        data["filter"] = random_filter(rng)
    elif what == "keys":
        data["groupingKeyNames"] = rng.sample(KEY_FIELDS, rng.choice((0, 1, 2, 3)))
    elif what == "aggregator":
        data.update(_aggregation(rng))
    else:
        data["cooldownMinutes"] = rng.choice((None, 0, 1, 3, 10))
    return Rule.model_validate(data)


# ---- the newer kinds: COUNT_DISTINCT, VALUE, relative limits ---------------------------------------------------

DISTINCT_FIELDS = (
    "paymentType",
    "channel",
    "country",
    "payerId",
    "beneficiaryId",
    "transactionId",
    "paymentAmount",
    "flagged",
)
DISTINCT_CAPS = (2, 3, 5, 8, 100, 100, 100)
FACTORS = (0, Decimal("0.5"), 1, 1, Decimal("1.5"), 2, 3, Decimal("0.333333"), -1)
OPERATORS = ("GREATER", "GREATER_EQUAL", "LESS", "LESS_EQUAL", "EQUAL", "NOT_EQUAL")


def _common(rng: random.Random, rule_id: int) -> dict[str, Any]:
    return {
        "ruleId": rule_id,
        "groupingKeyNames": rng.sample(KEY_FIELDS, rng.choice((0, 1, 1, 2, 3))),
        "filter": random_filter(rng),
        "cooldownMinutes": rng.choice((None, None, None, 0, 2, 30)),
        "limitOperatorType": rng.choice(OPERATORS),
    }


def _distinct_aggregation(rng: random.Random) -> dict[str, Any]:
    name = rng.choice(DISTINCT_FIELDS)
    limit = rng.choice((1, 2, 3, 4, 5, 8)) if name in ("transactionId", "paymentAmount") else rng.choice((1, 2, 3))
    return {
        "aggregatorFunctionType": "COUNT_DISTINCT",
        "aggregateFieldName": name,
        "limit": limit,
        "windowMinutes": rng.choice(WINDOWS),
    }


def _value_aggregation(rng: random.Random) -> dict[str, Any]:
    name = rng.choice(("paymentAmount", "paymentAmount", "beneficiaryId", "payerId"))
    pool: tuple[Any, ...] = (0, Decimal("20.50"), 50, 150) if name == "paymentAmount" else (1, 2, 10, 11, 12)
    return {
        "aggregatorFunctionType": "VALUE",
        "aggregateFieldName": name,
        "limit": rng.choice(pool),
        "windowMinutes": rng.choice(WINDOWS),
    }


def random_baseline(rng: random.Random, rule_window: int, *, count_field: bool = False) -> dict[str, Any]:
    """A baseline at least as wide as the rule's window (AVG is refused over the COUNT pseudo-field)."""
    aggregators = ("COUNT", "SUM") if count_field else ("AVG", "AVG", "SUM", "COUNT")
    return {
        "aggregatorFunctionType": rng.choice(aggregators),
        "windowMinutes": rng.choice([w for w in WINDOWS if w >= rule_window]),
        "minCount": rng.randint(0, 5),
        "perWindow": rng.random() < 0.5,
    }


def _relative_aggregation(rng: random.Random) -> dict[str, Any]:
    aggregator = rng.choice(("VALUE", "VALUE", "SUM", "AVG", "COUNT", "MIN", "MAX"))
    if aggregator == "COUNT":
        name = rng.choice(("COUNT", "paymentAmount", "beneficiaryId"))
    elif aggregator == "SUM" and rng.random() < 0.2:
        name = COUNT_FIELD
    else:
        name = rng.choice(("paymentAmount", "paymentAmount", "beneficiaryId"))
    window = rng.choice(WINDOWS)
    return {
        "aggregatorFunctionType": aggregator,
        "aggregateFieldName": name,
        "limit": rng.choice(FACTORS),
        "windowMinutes": window,
        "baseline": random_baseline(rng, window, count_field=name == COUNT_FIELD),
    }


def random_kind_rule(rng: random.Random, rule_id: int) -> Rule:
    """A COUNT_DISTINCT, VALUE or relative rule."""
    kind = rng.choice((_distinct_aggregation, _distinct_aggregation, _value_aggregation, _relative_aggregation))
    if kind is _value_aggregation and rng.random() < 0.4:
        kind = _relative_aggregation
    return Rule.model_validate(_common(rng, rule_id) | kind(rng))


def _changed_kind(rng: random.Random, rule: Rule) -> Rule:
    """The same rule id with one aspect changed: windows (the rule's or its baseline's, widened or narrowed), the
    baseline (replaced, added or taken away), the limit, keys, filter, cooldown, or the kind itself."""
    data = rule.to_json_dict()
    what = rng.choice(("window", "window", "baseline", "limit", "keys", "filter", "cooldown", "kind", "classic"))
    baseline = data.get("baseline")
    if what == "window" and baseline is not None and rng.random() < 0.5:
        baseline["windowMinutes"] = rng.choice([w for w in WINDOWS if w >= data["windowMinutes"]])
    elif what == "window":
        data["windowMinutes"] = rng.choice(WINDOWS)
        if baseline is not None and baseline["windowMinutes"] < data["windowMinutes"]:
            baseline["windowMinutes"] = rng.choice([w for w in WINDOWS if w >= data["windowMinutes"]])
    elif what == "baseline" and data["aggregatorFunctionType"] != "COUNT_DISTINCT":
        count_field = data["aggregateFieldName"] == COUNT_FIELD
        take_away = baseline is not None and rng.random() < 0.3
        data["baseline"] = None if take_away else random_baseline(rng, data["windowMinutes"], count_field=count_field)
        data["limit"] = rng.choice(FACTORS) if data["baseline"] else 2
    elif what == "limit":
        data["limit"] = rng.choice(FACTORS) if baseline is not None else data["limit"] + rng.choice((-1, 1))
    elif what == "keys":
        data["groupingKeyNames"] = rng.sample(KEY_FIELDS, rng.choice((0, 1, 2, 3)))
    elif what == "filter":
        data["filter"] = random_filter(rng)
    elif what == "cooldown":
        data["cooldownMinutes"] = rng.choice((None, 0, 1, 3, 10))
    elif what == "kind":
        return random_kind_rule(rng, rule.rule_id).model_copy(update={"rule_state": rule.rule_state})
    elif what == "classic":
        return random_rule(rng, rule.rule_id).model_copy(update={"rule_state": rule.rule_state})
    return Rule.model_validate(data)


def _with_state(rule: Rule, state: RuleState) -> Rule:
    return rule.model_copy(update={"rule_state": state})


_NEXT_STATES = {
    RuleState.ACTIVE: (RuleState.PAUSED, RuleState.SHADOW),  # paused, or demoted to shadow
    RuleState.PAUSED: (RuleState.ACTIVE, RuleState.SHADOW),  # resumed live or into shadow
    RuleState.SHADOW: (RuleState.ACTIVE, RuleState.ACTIVE, RuleState.PAUSED),  # promoted (mostly), or paused
}


def _born_state(rng: random.Random) -> RuleState:
    """A new rule's state: now and then released in shadow mode first."""
    return RuleState.SHADOW if rng.random() < 0.3 else RuleState.ACTIVE


# ---- transactions -------------------------------------------------------------------------------------------


def _record(rng: random.Random, tx_id: str, event_time: int) -> dict[str, Any]:
    amount = rng.choice(
        (
            Decimal(rng.randint(1, 20_000)) / 100,
            Decimal(rng.randint(1, 20_000)) / 100,
            Decimal(rng.randint(-500, 0)) / 100,
            Decimal(0),
            Decimal(rng.choice((20.5, 50, 75, 150))).quantize(Decimal("0.01")),
        )
    )
    record: dict[str, Any] = {
        "transactionId": tx_id,
        "eventTime": event_time,
        "payerId": rng.choice((1, 2, 3, None)),
        "beneficiaryId": rng.choice((10, 11, 12, None)),
        "paymentAmount": amount,
        "paymentType": rng.choice(("CSH", "CRD", "TRF", None)),
        "channel": rng.choice(("WEB", "POS", "ATM", None)),
        "country": rng.choice(("DE", "FR", "NL", None)),
        "flagged": rng.choice((True, False, None)),
    }
    # A null field is sometimes written as null, sometimes left out of the record.
    return {k: v for k, v in record.items() if v is not None or rng.random() < 0.5}


def _event_times(
    rng: random.Random, n: int, center: int, bucket_ms: int, high_water: int | None, late_ms: int
) -> list[int]:
    times: list[int] = []
    for _ in range(n):
        pick = rng.random()
        if pick < 0.15 and times:
            t = rng.choice(times)  # an equal timestamp
        elif pick < 0.35:
            edge = (center // bucket_ms + rng.randint(-10, 10)) * bucket_ms
            t = edge + rng.choice((0, -1, 1))  # on, just before or just after a bucket edge
        elif pick < 0.45 and high_water is not None:
            t = high_water - late_ms + rng.choice((-1, 0, 1, 60_000, -60_000, -3_600_000))  # (almost) late
        else:
            t = center + rng.randint(-15 * MIN, 15 * MIN)
        times.append(t)
    return times


def _invalid(rng: random.Random, batch: int, valid: list[dict[str, Any]]) -> list[str]:
    from engine_fixtures import json_line  # tests/ is on sys.path under pytest

    lines = [
        f'{{"transactionId": "b{batch}-broken"',
        json.dumps({"transactionId": f"b{batch}-no-amount", "eventTime": T0}),
        json.dumps({"transactionId": f"b{batch}-bad-payer", "eventTime": T0, "paymentAmount": 1, "payerId": "x"}),
    ]
    if valid:
        lines.append(json_line(rng.choice(valid)))  # an exact duplicate of a valid record: one copy counts
    return rng.sample(lines, rng.randint(1, len(lines)))


# ---- the scenario -------------------------------------------------------------------------------------------


KIND_IDS_FROM = 101  # the newer kinds' rule ids: far above the classic rules' (at most 7 + one per batch)


@dataclass
class _Pool:
    """The rules one random stream draws and evolves: live ones, and gone ones that may come back."""

    draw: Callable[[random.Random, int], Rule]
    change: Callable[[random.Random, Rule], Rule]
    live: dict[int, Rule]
    next_id: int
    gone: dict[int, Rule] = field(default_factory=dict)  # deleted or disabled: may come back


def _new_pool(
    rng: random.Random,
    first_id: int,
    count: int,
    draw: Callable[[random.Random, int], Rule],
    change: Callable[[random.Random, Rule], Rule],
) -> _Pool:
    live = {i: _with_state(draw(rng, i), _born_state(rng)) for i in range(first_id, first_id + count)}
    return _Pool(draw, change, live, first_id + count)


def _lifecycle_step(rng: random.Random, pool: _Pool) -> tuple[list[int], list[Rule]]:
    """Between two batches: rules changed, paused/resumed/promoted/demoted, deleted, disabled, re-created, added.
    Returns the ids deleted and the rules disabled now."""
    deleted: list[int] = []
    disabled: list[Rule] = []
    live, gone = pool.live, pool.gone
    for rule_id in sorted(live):
        rule = live[rule_id]
        pick = rng.random()
        if pick < 0.2:
            live[rule_id] = pool.change(rng, rule)
        elif pick < 0.3:
            live[rule_id] = _with_state(rule, rng.choice(_NEXT_STATES[rule.rule_state]))
        elif pick < 0.36:
            gone[rule_id] = live.pop(rule_id)
            deleted.append(rule_id)
        elif pick < 0.4:
            gone[rule_id] = live.pop(rule_id)
            disabled.append(rule.model_copy(update={"disabled": True}))
    for rule_id in sorted(gone):
        if rule_id not in deleted and rule_id not in {r.rule_id for r in disabled} and rng.random() < 0.4:
            old = gone.pop(rule_id)  # re-created: maybe as it was, maybe changed
            live[rule_id] = _with_state(old if rng.random() < 0.5 else pool.change(rng, old), _born_state(rng))
    if rng.random() < 0.4:
        live[pool.next_id] = _with_state(pool.draw(rng, pool.next_id), _born_state(rng))
        pool.next_id += 1
    return deleted, disabled


def scenario(seed: int, *, batches: int = 5, rows_per_batch: int = 40, new_kinds: bool = True) -> Scenario:
    """A reproducible scenario for one seed. ``new_kinds=False``: without the COUNT_DISTINCT, VALUE and relative
    rules (ids from 101) and with the default distinct cap; the rest is the same either way."""
    rng = random.Random(seed)
    kinds_rng = random.Random(f"{seed}-kinds")  # a stream of its own: the classic draws stay what they were
    bucket_seconds = rng.choice(BUCKET_SECONDS)
    lateness = rng.choice((0, 120, 300, 900))
    result = Scenario(
        seed=seed,
        bucket_seconds=bucket_seconds,
        allowed_lateness_seconds=lateness,
        retention_every_batches=rng.choice((1, 2, 1000)),
    )
    bucket_ms = bucket_seconds * 1000
    pools = [_new_pool(rng, 1, rng.randint(3, 7) - 1, random_rule, _changed)]
    if new_kinds:
        result.distinct_cap = kinds_rng.choice(DISTINCT_CAPS)
        pools.append(_new_pool(kinds_rng, KIND_IDS_FROM, kinds_rng.randint(2, 4), random_kind_rule, _changed_kind))
    high_water: int | None = None
    center = T0 + rng.randint(0, 30) * 60 * MIN
    for batch_no in range(batches):
        deleted: list[int] = []
        disabled: list[Rule] = []
        if batch_no:
            for pool, pool_rng in zip(pools, (rng, kinds_rng), strict=False):
                gone_ids, gone_rules = _lifecycle_step(pool_rng, pool)
                deleted += gone_ids
                disabled += gone_rules
            center += rng.choice((0, 2, 7, 45, 90, 600, 1500)) * MIN
        times = _event_times(rng, rows_per_batch, center, bucket_ms, high_water, lateness * 1000)
        records = [_record(rng, f"s{seed}-b{batch_no}-{i:03d}", t) for i, t in enumerate(times)]
        live = {rule_id: rule for pool in pools for rule_id, rule in pool.live.items()}
        result.batches.append(
            Batch(
                live=[live[i] for i in sorted(live)],
                deleted=deleted,
                disabled=disabled,
                transactions=records,
                invalid=_invalid(rng, batch_no, records),
            )
        )
        latest = max(times)
        high_water = latest if high_water is None else max(high_water, latest)
    return result


# ---- running it ----------------------------------------------------------------------------------------------


def scenario_settings(settings: Settings, case: Scenario, lakehouse: str) -> Settings:
    """The settings a scenario runs with: its bucket size, lateness and retention; the ``flagged`` field."""
    schema = settings.transaction_schema
    with_flag = schema.model_copy(update={"fields": (*schema.fields, TransactionField(name="flagged", type="boolean"))})
    engine = settings.engine.model_copy(
        update={
            "bucket_seconds": case.bucket_seconds,
            "allowed_lateness_seconds": case.allowed_lateness_seconds,
            "retention_every_batches": case.retention_every_batches,
            "distinct_cap": case.distinct_cap,
        }
    )
    return settings.with_lakehouse(lakehouse).model_copy(update={"engine": engine, "transaction_schema": with_flag})


def put_batch_rules(spark: SparkSession, settings: Settings, case: Scenario, batch_no: int) -> None:
    """The rules table as the scenario has it before batch ``batch_no``: live rules, disabled ones, tombstones."""
    batch = case.batches[batch_no]
    position = f"test:{batch_no:08d}"
    rows = [rule_to_row(r, source_position=position, source_op="u", source_ts_ms=None) for r in batch.live]
    rows += [rule_to_row(r, source_position=position, source_op="u", source_ts_ms=None) for r in batch.disabled]
    rows += [tombstone_row(i, source_position=position, source_op="d", source_ts_ms=None) for i in batch.deleted]
    put_rule_rows(spark, settings.table_path("rules"), rows)


# ---- comparing ----------------------------------------------------------------------------------------------

AlertFacts = dict[tuple[int, str], tuple[str, Decimal, bool, Decimal | None]]
"""(ruleId, transactionId) -> (keyValue, aggregateValue, shadow, baselineValue): what the contract fixes about each
alert (baselineValue is None for a rule without a baseline)."""


def engine_alerts(spark: SparkSession, settings: Settings) -> AlertFacts:
    """The alerts table's alerts, with their shadow flag (null, an older release's row, would read as live) and
    baseline value (None for a table without the column)."""
    frame = spark.read.format("delta").load(settings.table_path("alerts"))
    if "baselineValue" not in frame.columns:
        frame = frame.withColumn("baselineValue", F.lit(None).cast("decimal(38,6)"))
    columns = ("ruleId", "transactionId", "keyValue", "aggregateValue", "shadow", "baselineValue")
    return {
        (r["ruleId"], r["transactionId"]): (r["keyValue"], r["aggregateValue"], bool(r["shadow"]), r["baselineValue"])
        for r in frame.select(*columns).collect()
    }


def reference_alerts(alerts: Sequence[Any]) -> AlertFacts:
    """``reference_evaluator.evaluate``'s alerts as ``AlertFacts``."""
    from pipelines.engine.keys import encode_key

    return {
        (a.rule_id, a.transaction_id): (encode_key(a.key), a.aggregate_value, a.shadow, a.baseline_value)
        for a in alerts
    }


def scenario_reference(case: Scenario) -> list[Any]:
    """``reference_evaluator.evaluate`` over the scenario, with its bucket size, lateness and distinct cap."""
    from reference_evaluator import RefBatch, evaluate  # tests/ is on sys.path under pytest

    return evaluate(
        [RefBatch(rules=b.live, transactions=b.transactions) for b in case.batches],
        bucket_seconds=case.bucket_seconds,
        allowed_lateness_seconds=case.allowed_lateness_seconds,
        distinct_cap=case.distinct_cap,
    )


def alert_differences(expected: AlertFacts, actual: AlertFacts, shown: int = 8) -> str:
    """'' when equal; else the first few missing, extra and wrong alerts."""
    missing = sorted(set(expected) - set(actual))[:shown]
    extra = sorted(set(actual) - set(expected))[:shown]
    wrong = sorted(k for k in set(expected) & set(actual) if expected[k] != actual[k])[:shown]
    if not (missing or extra or wrong):
        return ""
    return (
        f"{len(expected)} expected, {len(actual)} actual\nmissing {[(k, expected[k]) for k in missing]}\n"
        f"extra {[(k, actual[k]) for k in extra]}\nwrong {[(k, expected[k], actual[k]) for k in wrong]}"
    )
