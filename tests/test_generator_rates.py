"""The generator's normal traffic is quiet under the sample rules at the rates the demo and the benchmarks feed.

A payer who pays hundreds of times a minute trips the velocity rules of conf/sample_rules.json: before the
per-payer cap, about 3 % of normal transactions alerted at 2,000 tx/s (0.7 % at 500 tx/s, and the injected episodes
on the busiest payers went unnoticed behind their cooldowns). Here the reference evaluator (the alert contract in
plain Python, no Spark) runs the sample rules over what ``fraudlake generate --rate R`` sends with its defaults
(10,000 keys, fraud rate 0.002): under 1 % of the transactions alert, and every injected episode is caught.
"""

from __future__ import annotations

import json
from collections import defaultdict, deque
from collections.abc import Iterable
from typing import Any

import pytest
from engine_fixtures import SAMPLE_RULE_CATCHES
from reference_evaluator import RefAlert, RefBatch, evaluate, key_of

from pipelines.base.settings import REPO_ROOT, Settings
from pipelines.generator.transactions import PATTERNS, GeneratorConfig, Transaction, TransactionGenerator
from rules_cdc.rule_model import Rule, parse_rule

START_MS = 1_700_000_000_000
CLI_KEYS = 10_000
"""``fraudlake generate``'s ``--keys`` default (payers and beneficiaries); its ``--fraud-rate`` default is the
config's (0.002)."""
BUSY_MINUTE_MAX = 10
"""The most payments one normal payer makes in any 60 s (1 a minute on average at most: Poisson tails)."""


def sample_rules(settings: Settings) -> list[Rule]:
    raw: list[dict[str, Any]] = json.loads((REPO_ROOT / "conf" / "sample_rules.json").read_text())
    return [parse_rule(r, settings.transaction_schema) for r in raw]


def busiest_minute(records: Iterable[Transaction]) -> int:
    """The most records one payer has in any 60 s (sliding), over ``records`` in event-time order."""
    recent: dict[int, deque[int]] = defaultdict(deque)
    busiest = 0
    for record in records:
        times = recent[record["payerId"]]
        times.append(record["eventTime"])
        while times[0] <= record["eventTime"] - 60_000:
            times.popleft()
        busiest = max(busiest, len(times))
    return busiest


def missed_episodes(records: list[Transaction], alerts: list[RefAlert], rules: list[Rule]) -> dict[str, set[int]]:
    """Episode -> the rules designed for its pattern that did not catch it.

    A rule catches an episode when it alerts on one of the episode's records, or on the episode's key (under that
    rule) during the episode: a stolen card's owner still pays, and when the owner's own payment is the one that
    reaches a velocity limit, the alert is on it and the cooldown keeps the burst's later payments quiet; the payer
    is flagged all the same."""
    by_id = {r["transactionId"]: r for r in records}
    rule_of = {rule.rule_id: rule for rule in rules}
    members: dict[str, list[Transaction]] = defaultdict(list)
    for record in records:
        if record["fraudEpisode"] is not None:
            members[record["fraudEpisode"]].append(record)
    missed: dict[str, set[int]] = {}
    for episode, group in members.items():
        ids = {r["transactionId"] for r in group}
        first, last = min(r["eventTime"] for r in group), max(r["eventTime"] for r in group)
        pattern = group[0]["fraudPattern"]
        for rule_id in SAMPLE_RULE_CATCHES[pattern]:
            key = key_of(group[0], rule_of[rule_id])
            if not any(
                a.transaction_id in ids or (a.key == key and first <= by_id[a.transaction_id]["eventTime"] <= last)
                for a in alerts
                if a.rule_id == rule_id
            ):
                missed.setdefault(episode, set()).add(rule_id)
    return missed


@pytest.mark.parametrize(("rate", "seconds"), [(500, 60), (2000, 30)])
def test_under_one_percent_alert_and_every_episode_is_caught(base_settings: Settings, rate: int, seconds: int) -> None:
    config = GeneratorConfig(seed=1, start_ms=START_MS, events_per_second=rate, payers=CLI_KEYS, beneficiaries=CLI_KEYS)
    generator = TransactionGenerator(config)
    records: list[Transaction] = []
    for _ in range(rate * seconds):
        records.extend(generator.step())
    records.extend(generator.drain())  # the episodes in progress, complete
    rules = sample_rules(base_settings)
    alerts = evaluate([RefBatch(rules, records)])

    alerting = {a.transaction_id for a in alerts}
    normal = [r for r in records if r["fraudPattern"] is None]
    normal_alerting = sum(1 for r in normal if r["transactionId"] in alerting)
    assert normal_alerting < 0.01 * len(normal), (normal_alerting, len(normal))
    assert len(alerting) < 0.01 * len(records), (len(alerting), len(records))

    assert all(generator.episodes[p] >= 5 for p in PATTERNS), generator.episodes
    assert missed_episodes(records, alerts, rules) == {}

    # A person's rate: at most 1 payment a minute expected (however many payers that takes), a few at the busiest.
    assert generator.payer_keys.share(1) * config.payments_per_minute <= config.payer_max_per_minute * (1 + 1e-9)
    assert config.payer_population >= rate * 60 / config.payer_max_per_minute
    assert busiest_minute(normal) <= BUSY_MINUTE_MAX
