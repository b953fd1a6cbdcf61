"""The transaction generator: seeded determinism, schema, skew, injected patterns, and its sinks."""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import random
import re
import time
from collections import Counter, defaultdict
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from pipelines.base.settings import Settings
from pipelines.generator.landing import generate_landing
from pipelines.generator.transactions import (
    FAN_OUT_SIZE,
    LARGE_PAYMENT_MIN,
    MAX_PAYERS,
    NEW_BENEFICIARY_ID_BASE,
    NORMAL_AMOUNT_CAP,
    PATTERNS,
    QUIET_PAYER_ID_BASE,
    SPIKE_AMOUNT_MAX,
    SPIKE_FACTOR,
    SPIKE_GAP_MINUTES,
    SPIKE_HISTORY_MINUTES,
    SPIKE_HISTORY_SIZE,
    SPIKE_STEADY_SPREAD,
    SPIKE_USUAL_AMOUNT,
    STRUCTURING_FLOOR,
    STRUCTURING_LIMIT,
    STRUCTURING_SIZE,
    VELOCITY_BURST_SIZE,
    FraudRates,
    GeneratorConfig,
    Transaction,
    TransactionGenerator,
    ZipfKeys,
    generate,
    to_json,
)

START_MS = 1_700_000_000_000
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
AMOUNT = re.compile(r"^\d+\.\d{2}$")
EXTRA_FIELDS = ("fraudPattern", "fraudEpisode")
GOLDEN_SEED_4 = "4bd64a81ebc002b767d7465eddc2ce4cbe93cf818dc67fe824b9e12fefea89f1"
"""sha256 of seed 4's first 20,000 records (old patterns' rates), written by the generator before amount_spike
(and before the per-payer cap: uncapped, it still draws them)."""
GOLDEN_SEED_4_CAPPED = "7e14ebc7da8ba231104ad1a29cb54b17df1a4c352793a440cfd5535138ac527d"
"""The same run with the default cap of 1 payment a minute per payer (its busiest payers, ~3 a minute, cut)."""


def run_steps(config: GeneratorConfig, steps: int) -> tuple[TransactionGenerator, list[Transaction]]:
    """``steps`` arrivals, then every record still scheduled: all episodes complete."""
    generator = TransactionGenerator(config)
    records: list[Transaction] = []
    for _ in range(steps):
        records.extend(generator.step())
    records.extend(generator.drain())
    return generator, records


def episodes_of(records: list[Transaction]) -> dict[str, list[Transaction]]:
    grouped: dict[str, list[Transaction]] = defaultdict(list)
    for record in records:
        if record["fraudEpisode"] is not None:
            grouped[record["fraudEpisode"]].append(record)
    return grouped


def test_a_seed_reproduces_a_run_exactly() -> None:
    config = GeneratorConfig(seed=42, start_ms=START_MS, fraud=FraudRates.split(0.05), jitter_ms=500)
    first, again = generate(config, 3000), generate(config, 3000)
    assert first == again
    assert generate(config, 1000) == first[:1000]
    other = generate(GeneratorConfig(seed=43, start_ms=START_MS, fraud=FraudRates.split(0.05)), 3000)
    assert {r["transactionId"] for r in other}.isdisjoint(r["transactionId"] for r in first)
    assert len({r["transactionId"] for r in first}) == 3000


def test_records_match_the_transaction_schema(base_settings: Settings) -> None:
    records = generate(GeneratorConfig(seed=1, start_ms=START_MS, fraud=FraudRates.split(0.05)), 2000)
    names = base_settings.transaction_schema.names()
    for record in records:
        assert tuple(record) == (*names, *EXTRA_FIELDS)
        assert UUID.match(record["transactionId"])
        assert type(record["eventTime"]) is int and record["eventTime"] >= START_MS
        assert type(record["payerId"]) is int and type(record["beneficiaryId"]) is int
        assert AMOUNT.match(record["paymentAmount"]) and Decimal(record["paymentAmount"]) >= Decimal("0.01")
        assert record["paymentType"] in {"CRD", "TRF", "CSH", "DD", "CHQ"}
        assert re.match(r"^[A-Z]{3}$", record["currency"]) and re.match(r"^[A-Z]{2}$", record["country"])
        assert record["channel"] in {"POS", "WEB", "MOBILE", "BRANCH", "ATM", "BATCH"}
        assert json.loads(to_json(record)) == record
    mix = Counter(r["paymentType"] for r in records)
    assert mix.most_common(1)[0][0] == "CRD" and len(mix) == 5


def test_event_time_advances_at_the_simulated_rate_and_jitter_reorders_a_little() -> None:
    config = GeneratorConfig(seed=2, start_ms=START_MS, events_per_second=50, fraud=FraudRates())
    records = generate(config, 5000)
    times = [r["eventTime"] for r in records]
    assert times == sorted(times)
    assert 95_000 <= times[-1] - START_MS <= 105_000  # 5000 arrivals at 50/s: ~100 s
    jittered = [r["eventTime"] for r in generate(replace(config, jitter_ms=300), 5000)]
    assert jittered != sorted(jittered)
    assert all(t >= max(jittered[: i + 1]) - 300 for i, t in enumerate(jittered))


def test_keys_are_skewed() -> None:
    """The raw skew (no per-payer cap): what ``ZipfKeys`` draws."""
    config = GeneratorConfig(
        seed=3, start_ms=START_MS, payers=1000, beneficiaries=1000, fraud=FraudRates(), payer_max_per_minute=math.inf
    )
    generator = TransactionGenerator(config)
    records = [r for _ in range(20_000) for r in generator.step()]
    payers = Counter(r["payerId"] for r in records)
    top_share = payers.most_common(1)[0][1] / len(records)
    assert top_share > 10 * (1 / 1000)  # uniform would be 0.1 %
    assert top_share == pytest.approx(generator.payer_keys.share(1), rel=0.25)
    top_tenth = sum(n for _, n in payers.most_common(100)) / len(records)
    assert top_tenth > 0.25
    beneficiaries = Counter(r["beneficiaryId"] for r in records)
    assert beneficiaries.most_common(1)[0][1] / len(records) > top_share  # merchants are more concentrated


@pytest.mark.parametrize(
    ("rate", "payers", "population"),
    [
        (0.05, 20, 20),  # the notebooks' test
        (2.0, 500, 500),  # the demo's landing
        (10.0, 10_000, 10_000),  # fraudlake generate's defaults
        (500.0, 10_000, 60_000),
        (2000.0, 10_000, 240_000),
    ],
)
def test_no_payer_pays_more_than_once_a_minute_on_average_whatever_the_rate(
    rate: float, payers: int, population: int
) -> None:
    """The population grows with the rate (the average payer at half the cap), the busiest payers are cut to the
    cap, and the rest keep their skew."""
    config = GeneratorConfig(seed=3, start_ms=START_MS, events_per_second=rate, payers=payers)
    assert config.payer_population == population
    keys = TransactionGenerator(config).payer_keys
    assert len(keys.ids) == population and len(set(keys.ids)) == population
    per_minute = [keys.share(rank) * config.payments_per_minute for rank in range(1, population + 1)]
    assert max(per_minute) <= config.payer_max_per_minute * (1 + 1e-9)
    assert sum(per_minute) == pytest.approx(config.payments_per_minute)
    assert all(busier >= next_one * (1 - 1e-9) for busier, next_one in itertools.pairwise(per_minute))  # by rank
    # Still skewed: the busiest tenth of the payers make a fifth of the payments or more.
    assert sum(per_minute[: population // 10]) > 0.19 * config.payments_per_minute
    if rate >= 500:  # grown: the average payer pays half the cap, and one in twelve or so is at it
        assert sum(per_minute) / population == pytest.approx(config.payer_max_per_minute / 2, rel=0.01)
        assert 0.05 < sum(1 for r in per_minute if r > 0.999 * config.payer_max_per_minute) / population < 0.15


def test_payers_under_the_cap_draw_what_they_drew_without_one() -> None:
    """A cap that binds no payer changes nothing: the same weights, so the same records."""
    config = GeneratorConfig(seed=9, start_ms=START_MS, events_per_second=0.05, payers=20, fraud=FraudRates.split(0.05))
    assert generate(config, 2000) == generate(replace(config, payer_max_per_minute=math.inf), 2000)
    capped = GeneratorConfig(seed=9, start_ms=START_MS, fraud=FraudRates.split(0.05))  # 10/s over 10,000: ~3/min top
    assert generate(capped, 2000) != generate(replace(capped, payer_max_per_minute=math.inf), 2000)


def test_the_cap_is_exact_and_the_population_has_a_ceiling() -> None:
    keys = ZipfKeys(random.Random(1), 100, 1.0, 0, max_share=0.05)
    shares = [keys.share(rank) for rank in range(1, 101)]
    assert max(shares) == pytest.approx(0.05) and sum(shares) == pytest.approx(1.0)
    capped = sum(1 for share in shares if share == pytest.approx(0.05))
    assert 1 < capped < 100
    assert shares[-1] / shares[capped] == pytest.approx((capped + 1) / 100)  # the tail keeps its 1/rank shape
    even = ZipfKeys(random.Random(1), 100, 1.0, 0, max_share=0.01)
    assert [even.share(rank) for rank in (1, 50, 100)] == pytest.approx([0.01] * 3)
    with pytest.raises(ValueError):
        ZipfKeys(random.Random(1), 100, 1.0, 0, max_share=0.009)
    huge = GeneratorConfig(events_per_second=1_000_000)
    assert huge.payer_population == MAX_PAYERS and huge.payer_max_share == pytest.approx(1 / MAX_PAYERS)


def test_each_pattern_appears_at_its_rate_and_is_labelled() -> None:
    rates = FraudRates(large_payment=0.01, velocity_burst=0.004, structuring=0.006, fan_out=0.003, amount_spike=0.003)
    steps = 20_000
    generator, records = run_steps(GeneratorConfig(seed=4, start_ms=START_MS, fraud=rates), steps)
    episodes = episodes_of(records)
    started = Counter(e.split(":")[0] for e in episodes)
    assert started == generator.episodes
    for pattern, rate in rates.as_dict().items():
        expected, sigma = steps * rate, (steps * rate * (1 - rate)) ** 0.5
        assert abs(started[pattern] - expected) <= 4 * sigma, (pattern, started[pattern], expected)
    normal = [r for r in records if r["fraudPattern"] is None]
    assert all(r["fraudEpisode"] is None and Decimal(r["paymentAmount"]) <= NORMAL_AMOUNT_CAP for r in normal)
    assert len(normal) == steps - sum(started.values())
    normal_beneficiaries = {r["beneficiaryId"] for r in normal}
    for episode, members in episodes.items():
        pattern = episode.split(":")[0]
        assert {r["fraudPattern"] for r in members} == {pattern}
        assert len({r["payerId"] for r in members}) == 1
        span_ms = max(r["eventTime"] for r in members) - min(r["eventTime"] for r in members)
        amounts = [Decimal(r["paymentAmount"]) for r in members]
        if pattern == "large_payment":
            assert len(members) == 1 and amounts[0] >= LARGE_PAYMENT_MIN
        elif pattern == "velocity_burst":
            assert VELOCITY_BURST_SIZE[0] <= len(members) <= VELOCITY_BURST_SIZE[1] and span_ms <= 90_000
            assert {r["paymentType"] for r in members} == {"CRD"}
        elif pattern == "structuring":
            assert STRUCTURING_SIZE[0] <= len(members) <= STRUCTURING_SIZE[1] and span_ms <= 30 * 60_000
            assert len({r["beneficiaryId"] for r in members}) == 1
            assert all(STRUCTURING_FLOOR <= a < STRUCTURING_LIMIT for a in amounts)
        elif pattern == "fan_out":
            assert FAN_OUT_SIZE[0] <= len(members) <= FAN_OUT_SIZE[1] and span_ms <= 150_000
            beneficiaries = {r["beneficiaryId"] for r in members}
            assert len(beneficiaries) == len(members) and beneficiaries.isdisjoint(normal_beneficiaries)
        else:
            assert pattern == "amount_spike"
            assert SPIKE_HISTORY_SIZE[0] + 1 <= len(members) <= SPIKE_HISTORY_SIZE[1] + 1
            assert span_ms <= (SPIKE_HISTORY_MINUTES[1] + SPIKE_GAP_MINUTES[1]) * 60_000
            assert {r["paymentType"] for r in members} == {"TRF"}


def test_an_amount_spike_is_a_steady_history_then_one_transfer_many_times_the_usual() -> None:
    generator, records = run_steps(
        GeneratorConfig(seed=8, start_ms=START_MS, fraud=FraudRates(amount_spike=0.01)), 5000
    )
    episodes = {e: m for e, m in episodes_of(records).items() if e.startswith("amount_spike:")}
    assert len(episodes) == generator.episodes["amount_spike"] >= 30
    low, high = SPIKE_USUAL_AMOUNT
    for members in episodes.values():
        *history, spike = sorted(members, key=lambda r: r["eventTime"])
        amounts = [Decimal(r["paymentAmount"]) for r in history]
        assert len({r["beneficiaryId"] for r in history}) == 1  # one regular beneficiary
        assert spike["beneficiaryId"] >= NEW_BENEFICIARY_ID_BASE  # the spike goes somewhere new
        assert spike["payerId"] >= QUIET_PAYER_ID_BASE  # a payer of its own: no other traffic blurs its history
        usual = sum(amounts) / len(amounts)
        assert low * Decimal(1 - SPIKE_STEADY_SPREAD) <= usual <= high * Decimal(1 + SPIKE_STEADY_SPREAD)
        assert max(amounts) <= min(amounts) * Decimal((1 + SPIKE_STEADY_SPREAD) / (1 - SPIKE_STEADY_SPREAD)) + 1
        # Many times the history's amounts, yet below what an absolute large-payment rule would flag.
        spiked = Decimal(spike["paymentAmount"])
        assert spiked >= max(amounts) * SPIKE_FACTOR[0] / Decimal(1 + SPIKE_STEADY_SPREAD)
        assert spiked <= SPIKE_AMOUNT_MAX < LARGE_PAYMENT_MIN
        assert spike["eventTime"] - history[-1]["eventTime"] >= SPIKE_GAP_MINUTES[0] * 60_000


def test_a_new_pattern_at_rate_zero_leaves_the_old_patterns_runs_as_they_were() -> None:
    """The rates of the old patterns alone draw exactly the records they drew before amount_spike existed: these
    are the first records of seed 4's run as the generator wrote them before (a new pattern is appended last)."""
    rates = FraudRates(large_payment=0.01, velocity_burst=0.004, structuring=0.006, fan_out=0.003)
    config = GeneratorConfig(seed=4, start_ms=START_MS, fraud=rates, payer_max_per_minute=math.inf)
    records = generate(config, 20_000)
    assert PATTERNS[-1] == "amount_spike" and "amount_spike" not in {r["fraudPattern"] for r in records}
    digest = hashlib.sha256("\n".join(map(to_json, records)).encode()).hexdigest()
    assert digest == GOLDEN_SEED_4
    capped = generate(replace(config, payer_max_per_minute=1.0), 20_000)
    assert hashlib.sha256("\n".join(map(to_json, capped)).encode()).hexdigest() == GOLDEN_SEED_4_CAPPED


def test_split_spreads_the_total_over_every_pattern() -> None:
    assert FraudRates.split(0.01).as_dict() == {p: pytest.approx(0.002) for p in PATTERNS}


def test_no_fraud_means_no_labels() -> None:
    records = generate(GeneratorConfig(seed=5, start_ms=START_MS, fraud=FraudRates()), 3000)
    assert {(r["fraudPattern"], r["fraudEpisode"]) for r in records} == {(None, None)}


@pytest.mark.parametrize(
    "bad",
    [
        {"events_per_second": 0},
        {"payers": 0},
        {"payer_skew": -1.0},
        {"jitter_ms": -5},
        {"payer_max_per_minute": 0.0},
        {"payer_max_per_minute": math.nan},
    ],
)
def test_config_rejects_nonsense(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        GeneratorConfig(**bad)
    with pytest.raises(ValueError):
        FraudRates(large_payment=0.6, fan_out=0.6)


def test_the_demos_landing_ends_about_now_with_every_episode_complete(settings: Settings) -> None:
    """Episodes in progress at the end are completed, and the run moved back so that none of it is in the future
    (data quality refuses event times past ingestion + quality.max_future_skew_minutes)."""
    before = int(time.time() * 1000)
    episodes = generate_landing(settings, count=4000, files=2, fraud_rate=0.004, seed=7)
    after = int(time.time() * 1000)
    lines = [line for path in sorted(Path(settings.landing_path("transactions")).iterdir()) for line in path.open()]
    records = [json.loads(line) for line in lines[:-2]]  # the last two: the malformed ones
    assert len(records) >= 4000 and set(episodes) == set(PATTERNS)
    assert before - 1000 <= max(r["eventTime"] for r in records) <= after
    grouped = episodes_of(records)
    assert Counter(e.split(":")[0] for e in grouped) == Counter(episodes)
    spikes = [m for e, m in grouped.items() if e.startswith("amount_spike:")]
    assert all(len(m) >= SPIKE_HISTORY_SIZE[0] + 1 for m in spikes)
