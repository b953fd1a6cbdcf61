"""The engine's alerts equal the reference evaluator's, batch by batch, on generated data.

The data has equal timestamps, bucket edges, late and almost-late transactions, null and missing fields, invalid
records; the rules cover every aggregator and operator, empty and composite keys, filters, cooldowns, windows
from one minute to two days (so hour and day tiles are used), and change between batches: created (new state:
backfill), updated, widened (state rebuilt), paused, resumed, deleted (state dropped) and re-created; SHADOW rules
are evaluated beside them: r12 released in shadow and promoted, r8 demoted to shadow and promoted back, r13 in
shadow throughout on r1's state (alone on it once r1 is deleted). Retention runs every other batch, so trimmed
state must still give exact answers. Alerts carry their shadow flag, which must equal the reference's too.

The newer kinds run beside them, with a distinct cap of 4: COUNT_DISTINCT of a string field (r14, the transaction
id per payment type over 25 hours, which saturates at the cap), of a long field (r15, narrowed then widened on the
same id) and of a string field with nulls under a filter (r16, released in shadow); VALUE (r20, with a cooldown);
relative limits with an AVG (r17: VALUE against the payer's 25-hour average, in shadow, then its baseline window
narrowed to 61 minutes and widened back), a SUM per window (r18) and a COUNT baseline (r19, per window with
minCount 0, then widened to a plain two-day count and narrowed back; r21, a VALUE of a field with nulls against a
COUNT baseline: only the payments with a value count). Alerts of relative rules carry their baseline value,
compared too.
"""

from __future__ import annotations

import random
from decimal import Decimal
from typing import Any

from contract_scenarios import alert_differences, engine_alerts, reference_alerts
from engine_fixtures import make_rule, paused, put_rules, raw_frame
from lakehouse_template import fresh_lakehouse
from pyspark.sql import SparkSession
from reference_evaluator import RefBatch, evaluate

from pipelines.base.settings import EngineSettings, Settings
from pipelines.engine.batch_handler import BatchHandler
from pipelines.engine.recovery import EnginePaths
from rules_cdc.rule_model import Rule, RuleState

MIN = 60_000
DAY = 86_400_000
T0 = 1_700_006_400_000  # a UTC midnight: day tiles start here
DISTINCT_CAP = 4


def _rules() -> dict[str, Rule]:
    """Every rule version used below, by name."""
    web = {"field": "channel", "op": "EQUAL", "value": "WEB"}
    return {
        "r1": make_rule(1, limit=150, windowMinutes=7),
        "r2": make_rule(
            2,
            groupingKeyNames=[],
            aggregatorFunctionType="COUNT",
            limitOperatorType="GREATER_EQUAL",
            limit=12,
            windowMinutes=3,
            cooldownMinutes=2,
        ),
        "r2b": make_rule(
            2,
            groupingKeyNames=[],
            aggregatorFunctionType="COUNT",
            limitOperatorType="GREATER_EQUAL",
            limit=10,
            windowMinutes=3,
            cooldownMinutes=2,
        ),
        "r3": make_rule(
            3,
            groupingKeyNames=["payerId", "beneficiaryId"],
            aggregatorFunctionType="AVG",
            limitOperatorType="LESS",
            limit=30,
            windowMinutes=61,
        ),
        "r4": make_rule(
            4,
            groupingKeyNames=["paymentType"],
            aggregateFieldName="beneficiaryId",
            aggregatorFunctionType="MIN",
            limitOperatorType="LESS_EQUAL",
            limit=10,
            windowMinutes=2,
            filter={"field": "paymentAmount", "op": "GREATER", "value": 20},
        ),
        "r5": make_rule(
            5,
            aggregatorFunctionType="MAX",
            limitOperatorType="GREATER_EQUAL",
            limit=190,
            windowMinutes=1500,
            filter={"not": {"field": "paymentType", "op": "EQUAL", "value": "CSH"}},
        ),
        "r5b": make_rule(
            5,
            aggregatorFunctionType="MAX",
            limitOperatorType="GREATER_EQUAL",
            limit=190,
            windowMinutes=1500,
            filter={"field": "paymentType", "op": "IN", "value": ["CRD", "TRF"]},
        ),
        "r6": make_rule(
            6,
            aggregatorFunctionType="COUNT",
            limitOperatorType="EQUAL",
            limit=3,
            windowMinutes=1,
            filter={"field": "paymentType", "op": "IN", "value": ["CSH", "CRD"]},
        ),
        "r7": make_rule(
            7,
            groupingKeyNames=["beneficiaryId"],
            aggregateFieldName="COUNT_FLINK",
            limitOperatorType="NOT_EQUAL",
            limit=1,
            windowMinutes=61,
            cooldownMinutes=30,
        ),
        "r8": make_rule(8, aggregateFieldName="beneficiaryId", limitOperatorType="LESS", limit=25, windowMinutes=2),
        "r9": make_rule(9, limit=300, windowMinutes=61, filter=web),
        "r10": make_rule(
            10,
            aggregatorFunctionType="COUNT",
            limit=2,
            windowMinutes=2880,
            cooldownMinutes=5,
            aggregateFieldName="beneficiaryId",
        ),
        "r11": make_rule(11, limit=400, windowMinutes=1500),
        "r12": make_rule(12, groupingKeyNames=["beneficiaryId"], limit=250, windowMinutes=30, cooldownMinutes=5),
        "r13": make_rule(13, limit=100, windowMinutes=7),  # r1's state (same keys, field, filter)
        **_newer_rules(),
    }


def _distinct(rule_id: int, field: str, **fields: Any) -> Rule:
    return make_rule(rule_id, aggregatorFunctionType="COUNT_DISTINCT", aggregateFieldName=field, **fields)


def _relative(rule_id: int, baseline: dict[str, Any], **fields: Any) -> Rule:
    return make_rule(rule_id, baseline=baseline, **fields)


def _newer_rules() -> dict[str, Rule]:
    """COUNT_DISTINCT, VALUE and relative rules (the distinct cap is DISTINCT_CAP)."""
    per_type = {"groupingKeyNames": ["paymentType"], "limitOperatorType": "EQUAL", "limit": DISTINCT_CAP}
    per_payer = {"limitOperatorType": "GREATER_EQUAL", "limit": 3}
    channels = {"groupingKeyNames": [], "limitOperatorType": "GREATER_EQUAL", "limit": 2, "windowMinutes": 3}
    above_payer_avg = {"aggregatorFunctionType": "VALUE", "limit": Decimal("1.5"), "windowMinutes": 1}
    count_field = {"groupingKeyNames": [], "aggregateFieldName": "COUNT", "aggregatorFunctionType": "COUNT"}
    return {
        "r14": _distinct(14, "transactionId", windowMinutes=1500, **per_type),
        "r15": _distinct(15, "beneficiaryId", windowMinutes=61, **per_payer),
        "r15narrow": _distinct(15, "beneficiaryId", windowMinutes=7, **per_payer),
        "r15wide": _distinct(15, "beneficiaryId", windowMinutes=2880, **per_payer),
        "r16": _distinct(16, "channel", filter={"field": "paymentAmount", "op": "GREATER", "value": 50}, **channels),
        "r17": _relative(
            17, {"aggregatorFunctionType": "AVG", "windowMinutes": 1500, "minCount": 3}, **above_payer_avg
        ),
        "r17narrow": _relative(
            17, {"aggregatorFunctionType": "AVG", "windowMinutes": 61, "minCount": 3}, **above_payer_avg
        ),
        "r18": _relative(
            18,
            {"aggregatorFunctionType": "SUM", "windowMinutes": 61, "minCount": 5, "perWindow": True},
            groupingKeyNames=["beneficiaryId"],
            limit=2,
            windowMinutes=7,
        ),
        "r19": _relative(
            19,
            {"aggregatorFunctionType": "COUNT", "windowMinutes": 30, "minCount": 0, "perWindow": True},
            limit=3,
            windowMinutes=3,
            **count_field,
        ),
        "r19wide": _relative(
            19,
            {"aggregatorFunctionType": "COUNT", "windowMinutes": 2880},
            limit=Decimal("0.05"),
            windowMinutes=3,
            limitOperatorType="LESS",
            **count_field,
        ),
        "r20": make_rule(
            20,
            groupingKeyNames=[],
            aggregatorFunctionType="VALUE",
            limitOperatorType="GREATER_EQUAL",
            limit=190,
            cooldownMinutes=5,
        ),
        # The beneficiary id against 5x the payer's earlier payments in 30 minutes that have one: a payment
        # without a beneficiary does not count for this rule, so not in its baseline count either.
        "r21": _relative(
            21,
            {"aggregatorFunctionType": "COUNT", "windowMinutes": 30, "minCount": 1},
            aggregatorFunctionType="VALUE",
            aggregateFieldName="beneficiaryId",
            limitOperatorType="GREATER_EQUAL",
            limit=5,
            windowMinutes=1,
        ),
    }


def shadow(rule: Rule) -> Rule:
    return rule.model_copy(update={"rule_state": RuleState.SHADOW})


def _timeline() -> list[list[Rule]]:
    """The live rules of each batch."""
    r = _rules()
    r12, r13 = shadow(r["r12"]), shadow(r["r13"])
    newer = [
        [r["r14"], r["r15"], r["r16"], shadow(r["r17"]), r["r18"], r["r19"], r["r20"], r["r21"]],
        [r["r14"], r["r15"], shadow(r["r16"]), r["r17"], r["r18"], r["r19"], r["r20"], r["r21"]],
        [r["r14"], r["r15"], r["r16"], r["r17narrow"], r["r18"], r["r19wide"], paused(r["r20"]), r["r21"]],
        [r["r14"], r["r15narrow"], r["r16"], r["r17narrow"], r["r18"], r["r19wide"], r["r20"], r["r21"]],
        [r["r14"], r["r15wide"], r["r16"], r["r17"], r["r18"], r["r19"], r["r20"], r["r21"]],
    ]
    classic = [
        [r["r1"], r["r2"], paused(r["r3"]), r["r4"], r["r5"], r["r6"], r["r7"], r["r8"], r12, r13],
        [r["r1"], r["r2b"], paused(r["r3"]), r["r4"], r["r5"], paused(r["r6"]), r["r7"], r["r8"], r["r9"], r12, r13],
        [
            r["r1"],
            r["r2b"],
            r["r3"],
            r["r5b"],
            r["r6"],
            r["r7"],
            shadow(r["r8"]),
            r["r9"],
            r["r11"],
            r["r10"],
            r12,
            r13,
        ],
        [
            r["r2b"],
            r["r3"],
            r["r4"],
            r["r5b"],
            r["r6"],
            r["r7"],
            shadow(r["r8"]),
            r["r9"],
            r["r11"],
            r["r10"],
            r["r12"],
            r13,
        ],
        [
            paused(r["r2b"]),
            r["r3"],
            r["r4"],
            r["r5b"],
            r["r6"],
            r["r7"],
            r["r8"],
            paused(r["r11"]),
            r["r10"],
            r["r12"],
            r13,
        ],
    ]
    return [old + new for old, new in zip(classic, newer, strict=True)]


CENTERS = [
    T0 + 10 * 60 * MIN,
    T0 + 10 * 60 * MIN + 25 * MIN,
    T0 + 20 * 60 * MIN,
    T0 + 34 * 60 * MIN,
    T0 + 35 * 60 * MIN,
]


def _transactions(rng: random.Random, batch: int, high_water: int | None, n: int) -> list[dict[str, Any]]:
    center = CENTERS[batch]
    times: list[int] = []
    records: list[dict[str, Any]] = []
    for _ in range(n):
        pick = rng.random()
        if pick < 0.15 and times:
            t = rng.choice(times)  # an equal timestamp
        elif pick < 0.3:
            t = center + rng.randint(-8, 20) * MIN + rng.choice([0, -1])  # on or just before a bucket edge
        elif pick < 0.38 and high_water is not None:
            t = high_water - rng.choice([290_000, 310_000, 3_600_000])  # almost late, late, very late
        else:
            t = center + rng.randint(-8 * MIN, 20 * MIN)
        times.append(t)
        record: dict[str, Any] = {
            "transactionId": f"b{batch}-{rng.randrange(10**6):06d}",
            "eventTime": t,
            "payerId": rng.choice([1, 2, 3, None]),
            "beneficiaryId": rng.choice([10, 11, 20, None]),
            "paymentAmount": Decimal(rng.randint(1, 20_000)) / 100,
            "paymentType": rng.choice(["CSH", "CRD", "TRF", None]),
            "channel": rng.choice(["WEB", "POS", None]),
        }
        records.append({k: v for k, v in record.items() if v is not None or rng.random() < 0.5})
    unique = {r["transactionId"]: r for r in records}
    return list(unique.values())


def test_engine_alerts_equal_the_reference(spark: SparkSession, settings: Settings) -> None:
    # Log checkpoints every 2 commits, so that later batches read logs that delta-rs checkpointed.
    engine = EngineSettings(retention_every_batches=2, distinct_cap=DISTINCT_CAP, log_checkpoint_every=2)
    settings = settings.model_copy(update={"engine": engine})
    fresh_lakehouse(spark, settings)
    handler = BatchHandler(settings, app_id="engine-contract", report=lambda line: None)
    rng = random.Random(20240607)
    ref_batches: list[RefBatch] = []
    high_water: int | None = None
    totals = {"late": 0, "quarantined": 0, "alerts": 0, "shadowAlerts": 0}
    previous_ids: set[int] = set()
    for batch_id, live in enumerate(_timeline()):
        ids = {rule.rule_id for rule in live}
        put_rules(spark, settings, live, deleted=sorted(previous_ids - ids), tick=batch_id)
        previous_ids = ids
        transactions = _transactions(rng, batch_id, high_water, 45)
        invalid = ['{"transactionId": "bad-json"', '{"transactionId": "no-amount", "eventTime": 1}']
        counts = handler.process(raw_frame(spark, [*transactions, *invalid]), batch_id)
        for name in totals:
            totals[name] += counts[name]
        ref_batches.append(RefBatch(rules=live, transactions=transactions))
        latest = max(t["eventTime"] for t in transactions)
        high_water = latest if high_water is None else max(high_water, latest)

    checkpointed = {path for path, _ in handler.checkpoints.written}
    paths = EnginePaths.of(settings)
    assert set(paths.every_batch()) <= checkpointed, checkpointed
    reference = evaluate(ref_batches, bucket_seconds=60, allowed_lateness_seconds=300, distinct_cap=DISTINCT_CAP)
    expected = reference_alerts(reference)
    differences = alert_differences(expected, engine_alerts(spark, settings), shown=10)
    assert not differences, differences
    # The run exercised what it claims to: late data, quarantine, and alerts of every rule that was ever ACTIVE
    # or SHADOW; live and shadow alerts of r8 and r12 (promoted and demoted), shadow ones of r13.
    assert totals["late"] > 0 and totals["quarantined"] == 10
    shadow_ids = {key for key, facts in expected.items() if facts[2]}
    assert totals["alerts"] == len(expected) - len(shadow_ids) and totals["shadowAlerts"] == len(shadow_ids)
    assert {rule_id for rule_id, _ in expected} >= set(range(1, 21))
    assert {rule_id for rule_id, _ in shadow_ids} == {8, 12, 13, 16, 17}
    assert {rule_id for rule_id, _ in set(expected) - shadow_ids} >= {8, 12, 16, 17}
    # r14 saturates: with the cap at 100 it would see exactly 4 transaction ids far less often.
    uncapped = evaluate(ref_batches, bucket_seconds=60, allowed_lateness_seconds=300)
    assert sum(1 for a in uncapped if a.rule_id == 14) < sum(1 for rule_id, _ in expected if rule_id == 14)
    # Relative rules (and only they) carry a baseline value.
    assert {key[0] for key, facts in expected.items() if facts[3] is not None} == {17, 18, 19, 21}
