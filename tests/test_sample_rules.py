"""conf/sample_rules.json: every rule parses against conf's schema, and together they catch every injected pattern.

The recall check runs the reference evaluator (the alert contract, in plain Python) over a generated run.
"""

from __future__ import annotations

import json
from typing import Any

from reference_evaluator import RefBatch, evaluate
from rules_cdc_support import SEED

from pipelines.base.settings import REPO_ROOT, Settings
from pipelines.generator.transactions import PATTERNS, FraudRates, GeneratorConfig, Transaction, TransactionGenerator
from rules_cdc.rule_model import Rule, RuleState, parse_rule

SAMPLE_RULES = REPO_ROOT / "conf" / "sample_rules.json"
CATCHES = {"large_payment": {6}, "velocity_burst": {2, 3}, "structuring": {4}, "fan_out": {5}}
"""Which sample rules are designed to catch which pattern."""


def sample_rules(settings: Settings) -> list[Rule]:
    raw: list[dict[str, Any]] = json.loads(SAMPLE_RULES.read_text())
    return [parse_rule(r, settings.transaction_schema) for r in raw]


def test_sample_rules_parse_and_start_with_the_seed_rule(base_settings: Settings) -> None:
    raw = json.loads(SAMPLE_RULES.read_text())
    assert raw[0] == SEED
    rules = sample_rules(base_settings)
    assert len(rules) == 6 and len({r.rule_id for r in rules}) == 6
    assert all(r.rule_state is RuleState.ACTIVE for r in rules)
    assert set().union(*CATCHES.values()) <= {r.rule_id for r in rules} and set(CATCHES) == set(PATTERNS)


def test_sample_rules_alert_on_every_injected_episode(base_settings: Settings) -> None:
    """Each labelled episode of a generated run raises an alert from every rule designed for its pattern."""
    config = GeneratorConfig(
        seed=11,
        start_ms=1_700_000_000_000,
        payers=2000,
        beneficiaries=2000,
        fraud=FraudRates.split(0.02),
        jitter_ms=2000,
    )
    generator = TransactionGenerator(config)
    records: list[Transaction] = []
    for _ in range(4000):
        records.extend(generator.step())
    records.extend(generator.drain())
    rules = sample_rules(base_settings)
    batches = [RefBatch(rules, records[i : i + 500]) for i in range(0, len(records), 500)]
    alerts = evaluate(batches)

    episode_of = {r["transactionId"]: r["fraudEpisode"] for r in records}
    caught: dict[str, set[int]] = {}
    for alert in alerts:
        episode = episode_of[alert.transaction_id]
        if episode is not None:
            caught.setdefault(episode, set()).add(alert.rule_id)
    episodes = {r["fraudEpisode"]: r["fraudPattern"] for r in records if r["fraudEpisode"] is not None}
    assert {p: sum(1 for q in episodes.values() if q == p) for p in PATTERNS} == dict(generator.episodes)
    assert min(generator.episodes.values()) >= 10
    missed = {e: CATCHES[p] - caught.get(e, set()) for e, p in episodes.items() if CATCHES[p] - caught.get(e, set())}
    assert missed == {}
