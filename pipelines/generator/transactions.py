"""A realistic, seeded generator of payment transactions with labelled, injected fraud patterns. Pure: no I/O.

Normal traffic: arrivals form a Poisson process at ``events_per_second`` of simulated (event) time; payers and
beneficiaries are drawn with Zipf-like skew (weight ``1/rank**s``) over a random permutation of their ids;
amounts are log-normal per payment type; channel follows the payment type; country and currency follow the payer.

Per-payer rates a person could make, whatever the total rate: no normal payer pays more than
``payer_max_per_minute`` a minute on average (1 by default; Poisson, so a busy minute may hold a few). Two things
keep it, and the velocity rules of the sample rules quiet on normal traffic (a payer who pays hundreds of times a
minute is exactly what they look for):

* the payer population grows with the rate: at least ``events_per_second * 60 / (payer_max_per_minute *
  PAYER_MEAN_TO_MAX)`` payers, so the average payer pays half the maximum (``payers`` is the least there are:
  10,000 payers at 10 tx/s stay 10,000; at 2,000 tx/s there are 240,000; never more than ``MAX_PAYERS``);
* the skew is capped: the busiest payers' weights are cut to the cap, and the rest keep their Zipf shape
  (``ZipfKeys`` with ``max_share``). Beneficiaries are not capped: a merchant may take thousands of payments a
  minute.

Set ``payer_max_per_minute`` to ``math.inf`` for the raw skew over exactly ``payers`` (a dense key space, for tests
of the engine's state); a configuration whose payers stay under the cap draws exactly what it drew without one.

Fraud: at every arrival, each pattern starts an *episode* with its configured probability instead of a normal
payment. Every record of an episode carries ``fraudPattern`` (the pattern) and ``fraudEpisode`` (its id); normal
records carry ``null`` in both (extra fields: the engine keeps them in ``extraFields``).

* ``large_payment``: one transfer of ``LARGE_PAYMENT_MIN`` or more.
* ``velocity_burst``: ``VELOCITY_BURST_SIZE`` online card payments by one payer within ``VELOCITY_BURST_SECONDS``.
* ``structuring``: ``STRUCTURING_SIZE`` transfers just under ``STRUCTURING_LIMIT`` from one payer to one
  beneficiary within ``STRUCTURING_MINUTES``.
* ``fan_out``: ``FAN_OUT_SIZE`` transfers from one payer to as many never-seen beneficiaries within
  ``FAN_OUT_SECONDS`` (a mule spreading money: one payer, many different beneficiaries within minutes).
* ``amount_spike``: a quiet payer (one of its own, from ``QUIET_PAYER_ID_BASE`` on, with no normal traffic) with a
  steady history, ``SPIKE_HISTORY_SIZE`` transfers of about one amount (within ``SPIKE_STEADY_SPREAD`` of its usual
  amount) to one regular beneficiary over ``SPIKE_HISTORY_MINUTES``; then, ``SPIKE_GAP_MINUTES`` after the last,
  one transfer of ``SPIKE_FACTOR`` times the usual amount to a never-seen beneficiary (an account taken over and
  emptied). The spike stays under ``SPIKE_AMOUNT_MAX``: only a limit relative to the payer's own history tells it
  apart. The whole episode is labelled (the history too, as a burst's first payments are); the spike is its last
  record. The history is compressed into minutes so that it fits a run.

Episode records are scheduled at their own event times and emitted interleaved with normal traffic, in event-time
order; ``jitter_ms`` then moves each record's eventTime back by up to that much (out of order, like a real feed).
A seed reproduces a run exactly: the same records with the same ids.

Example::

    records = generate(GeneratorConfig(seed=7, start_ms=1_700_000_000_000, fraud=FraudRates.split(0.01)), 1000)
"""

from __future__ import annotations

import heapq
import itertools
import json
import math
import random
import uuid
from array import array
from bisect import bisect_right
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

PATTERNS = ("large_payment", "velocity_burst", "structuring", "fan_out", "amount_spike")

LARGE_PAYMENT_MIN = Decimal("75000.00")
LARGE_PAYMENT_MAX = Decimal("2500000.00")
VELOCITY_BURST_SIZE = (25, 40)
VELOCITY_BURST_SECONDS = (30, 90)
STRUCTURING_LIMIT = Decimal("10000.00")
STRUCTURING_FLOOR = Decimal("9000.00")
STRUCTURING_SIZE = (5, 8)
STRUCTURING_MINUTES = (5, 30)
FAN_OUT_SIZE = (12, 20)
FAN_OUT_SECONDS = (60, 150)
SPIKE_HISTORY_SIZE = (6, 10)
SPIKE_HISTORY_MINUTES = (10, 25)
SPIKE_GAP_MINUTES = (1, 5)
SPIKE_USUAL_AMOUNT = (Decimal("150.00"), Decimal("600.00"))
SPIKE_STEADY_SPREAD = 0.1
SPIKE_FACTOR = (20, 50)
SPIKE_AMOUNT_MAX = Decimal("45000.00")
NORMAL_AMOUNT_CAP = Decimal("20000.00")

PAYER_ID_BASE = 1_000_000
BENEFICIARY_ID_BASE = 5_000_000
NEW_BENEFICIARY_ID_BASE = 9_000_000
QUIET_PAYER_ID_BASE = 4_000_000
"""Payers with no normal traffic: an amount spike's payer, whose steady history is all the run holds of it."""
MAX_PAYERS = QUIET_PAYER_ID_BASE - PAYER_ID_BASE - 1
"""The most payers a run has: their ids stay below the quiet payers' (the cap holds up to ~50,000 tx/s)."""
PAYER_MEAN_TO_MAX = 0.5
"""The population's average payer pays this share of ``payer_max_per_minute``: room for the skew under the cap."""

Transaction = dict[str, Any]
"""One record, JSON-ready: camelCase fields of conf's transaction schema plus ``fraudPattern``/``fraudEpisode``."""

# payment type -> (weight, median amount, log-normal sigma, channels with weights)
_PAYMENT_TYPES: dict[str, tuple[float, float, float, tuple[tuple[str, float], ...]]] = {
    "CRD": (0.55, 35.0, 1.0, (("POS", 0.5), ("WEB", 0.3), ("MOBILE", 0.2))),
    "TRF": (0.22, 250.0, 1.0, (("WEB", 0.5), ("MOBILE", 0.4), ("BRANCH", 0.1))),
    "CSH": (0.10, 100.0, 0.8, (("ATM", 0.85), ("BRANCH", 0.15))),
    "DD": (0.08, 80.0, 0.7, (("BATCH", 1.0),)),
    "CHQ": (0.05, 300.0, 1.0, (("BRANCH", 1.0),)),
}
_COUNTRIES = (("NL", 0.30, "EUR"), ("DE", 0.25, "EUR"), ("FR", 0.20, "EUR"), ("BE", 0.10, "EUR"), ("GB", 0.15, "GBP"))
_FOREIGN_CURRENCY_SHARE = 0.03
_CENT = Decimal("0.01")


@dataclass(frozen=True)
class FraudRates:
    """Per arrival, the probability that an episode of each pattern starts (instead of a normal payment)."""

    large_payment: float = 0.0
    velocity_burst: float = 0.0
    structuring: float = 0.0
    fan_out: float = 0.0
    amount_spike: float = 0.0

    def __post_init__(self) -> None:
        rates = self.as_dict().values()
        if any(not 0.0 <= r <= 1.0 for r in rates) or sum(rates) > 1.0:
            raise ValueError(f"fraud rates must be in [0, 1] and sum to at most 1, got {self}")

    @classmethod
    def split(cls, total: float) -> FraudRates:
        """``total`` spread evenly over the patterns."""
        return cls(*(total / len(PATTERNS),) * len(PATTERNS))

    def as_dict(self) -> dict[str, float]:
        return {name: getattr(self, name) for name in PATTERNS}


@dataclass(frozen=True)
class GeneratorConfig:
    """What a run looks like. Defaults suit the sample rules at any rate (``payer_max_per_minute``: see above)."""

    seed: int = 0
    start_ms: int = 0
    events_per_second: float = 10.0
    payers: int = 10_000
    beneficiaries: int = 10_000
    payer_skew: float = 0.5
    beneficiary_skew: float = 1.0
    fraud: FraudRates = field(default_factory=lambda: FraudRates.split(0.002))
    jitter_ms: int = 0
    payer_max_per_minute: float = 1.0

    def __post_init__(self) -> None:
        if self.events_per_second <= 0:
            raise ValueError("events_per_second must be positive")
        if not self.payer_max_per_minute > 0:
            raise ValueError("payer_max_per_minute must be positive (math.inf: no cap)")
        if self.payers < 1 or self.beneficiaries < 1:
            raise ValueError("payers and beneficiaries must be at least 1")
        if self.payer_skew < 0 or self.beneficiary_skew < 0 or self.jitter_ms < 0:
            raise ValueError("skews and jitter_ms must not be negative")

    @property
    def payments_per_minute(self) -> float:
        return self.events_per_second * 60.0

    @property
    def payer_population(self) -> int:
        """How many payers normal traffic draws from: ``payers``, or more when the rate needs them (see above)."""
        if math.isinf(self.payer_max_per_minute):
            return self.payers
        needed = math.ceil(self.payments_per_minute / (self.payer_max_per_minute * PAYER_MEAN_TO_MAX))
        return max(self.payers, min(needed, MAX_PAYERS))

    @property
    def payer_max_share(self) -> float | None:
        """The most of normal traffic one payer may draw (None: no cap); never below an even split."""
        if math.isinf(self.payer_max_per_minute):
            return None
        return max(self.payer_max_per_minute / self.payments_per_minute, 1.0 / self.payer_population)


class ZipfKeys:
    """Ids drawn with probability proportional to ``1/rank**skew``, no id above ``max_share`` of the draws (the
    heaviest weights cut to one level, the rest untouched); which id has which rank is seeded.

    Arrays, not lists: a fast run has hundreds of thousands of payers (the draws are the same).
    """

    def __init__(
        self, rng: random.Random, count: int, skew: float, base: int, *, max_share: float | None = None
    ) -> None:
        self.ids: array[int] = array("q", range(base + 1, base + count + 1))
        rng.shuffle(self.ids)
        weights = [1.0 / float(rank) ** skew for rank in range(1, count + 1)]
        if max_share is not None:
            level = _cap_level(weights, max_share)
            weights = [min(w, level) for w in weights]
        self.cumulative: array[float] = array("d", itertools.accumulate(weights))

    def draw(self, rng: random.Random) -> int:
        point = rng.random() * self.cumulative[-1]
        return self.ids[min(bisect_right(self.cumulative, point), len(self.ids) - 1)]

    def share(self, rank: int) -> float:
        """The probability of the id at ``rank`` (1 = the most frequent)."""
        previous = self.cumulative[rank - 2] if rank > 1 else 0.0
        return (self.cumulative[rank - 1] - previous) / self.cumulative[-1]


def _cap_level(weights: Sequence[float], max_share: float) -> float:
    """The level ``c`` that caps decreasing ``weights`` so that the heaviest holds ``max_share`` of the total:
    ``c = max_share * sum(min(w, c))`` (the first weight when it already holds no more).

    With the ``k`` heaviest cut, ``c = max_share * (k*c + rest_k)``, so ``c = max_share * rest_k / (1 -
    max_share*k)``; the answer is the first ``k`` whose ``c`` is at least the next weight. An even split
    (``max_share * len(weights) == 1``) cuts every weight to the lightest.
    """
    slack = 1e-9  # 1/n * n may round below 1
    if max_share * len(weights) < 1.0 - slack:
        raise ValueError(f"{len(weights)} keys cannot hold each at most {max_share:g} of the draws")
    rest = math.fsum(weights)
    if weights[0] <= max_share * rest:
        return weights[0]
    for k, weight in enumerate(weights[:-1], start=1):
        rest -= weight
        if max_share * k >= 1.0 - slack:
            break
        level = max_share * rest / (1.0 - max_share * k)
        if level >= weights[k]:
            return level
    return weights[-1]


def _weighted(rng: random.Random, options: Sequence[tuple[str, float]]) -> str:
    return rng.choices([o for o, _ in options], weights=[w for _, w in options])[0]


def _cents(value: float | Decimal) -> Decimal:
    return Decimal(str(value)).quantize(_CENT)


class TransactionGenerator:
    """An endless, seeded stream of transactions. ``step()`` simulates one arrival; iterate for records."""

    def __init__(self, config: GeneratorConfig) -> None:
        self.config = config
        self._rng = random.Random(config.seed)
        self._payers = ZipfKeys(
            self._rng, config.payer_population, config.payer_skew, PAYER_ID_BASE, max_share=config.payer_max_share
        )
        self._beneficiaries = ZipfKeys(self._rng, config.beneficiaries, config.beneficiary_skew, BENEFICIARY_ID_BASE)
        self._profiles: dict[int, tuple[str, str]] = {}
        self._pending: list[tuple[float, int, Transaction]] = []  # (scheduled ms, sequence, record)
        self._sequence = itertools.count()
        self._new_beneficiaries = itertools.count(NEW_BENEFICIARY_ID_BASE)
        self._quiet_payers = itertools.count(QUIET_PAYER_ID_BASE)
        self._clock_ms = float(config.start_ms)
        self.steps = 0
        self.episodes: Counter[str] = Counter()

    @property
    def payer_keys(self) -> ZipfKeys:
        return self._payers

    def step(self) -> list[Transaction]:
        """Advance the simulated clock by one arrival; return the records now due, in scheduled order."""
        self._clock_ms += self._rng.expovariate(self.config.events_per_second) * 1000.0
        self.steps += 1
        pattern = self._pattern_for_this_arrival()
        if pattern is None:
            self._schedule(self._clock_ms, self._normal())
        else:
            self.episodes[pattern] += 1
            episode = f"{pattern}:{self.episodes[pattern]}"
            for offset_ms, record in self._episode(pattern):
                record["fraudPattern"], record["fraudEpisode"] = pattern, episode
                self._schedule(self._clock_ms + offset_ms, record)
        return self._due(self._clock_ms)

    def drain(self) -> list[Transaction]:
        """Every record still scheduled (the rest of episodes in progress), in scheduled order."""
        return self._due(math.inf)

    def __iter__(self) -> Iterator[Transaction]:
        while True:
            yield from self.step()

    # ---- scheduling --------------------------------------------------------------------------------------

    def _pattern_for_this_arrival(self) -> str | None:
        point = self._rng.random()
        for pattern, rate in self.config.fraud.as_dict().items():
            if point < rate:
                return pattern
            point -= rate
        return None

    def _schedule(self, at_ms: float, record: Transaction) -> None:
        heapq.heappush(self._pending, (at_ms, next(self._sequence), record))

    def _due(self, until_ms: float) -> list[Transaction]:
        due: list[Transaction] = []
        while self._pending and self._pending[0][0] <= until_ms:
            at_ms, _, record = heapq.heappop(self._pending)
            jitter = self._rng.randint(0, self.config.jitter_ms) if self.config.jitter_ms else 0
            record["eventTime"] = math.floor(at_ms) - jitter
            due.append(record)
        return due

    # ---- records -----------------------------------------------------------------------------------------

    def _record(self, payer: int, beneficiary: int, amount: Decimal, payment_type: str, channel: str) -> Transaction:
        country, currency = self._profile(payer)
        if self._rng.random() < _FOREIGN_CURRENCY_SHARE:
            currency = "USD"
        return {
            "transactionId": str(uuid.UUID(int=self._rng.getrandbits(128), version=4)),
            "eventTime": None,  # set when the record is emitted
            "payerId": payer,
            "beneficiaryId": beneficiary,
            "paymentAmount": str(amount),
            "paymentType": payment_type,
            "currency": currency,
            "country": country,
            "channel": channel,
            "fraudPattern": None,
            "fraudEpisode": None,
        }

    def _profile(self, payer: int) -> tuple[str, str]:
        """A payer's home country and currency: fixed per payer, seeded by the run's seed and the payer id."""
        if payer not in self._profiles:
            rng = random.Random(f"{self.config.seed}:{payer}")
            country = rng.choices([c for c, _, _ in _COUNTRIES], weights=[w for _, w, _ in _COUNTRIES])[0]
            self._profiles[payer] = (country, next(cur for c, _, cur in _COUNTRIES if c == country))
        return self._profiles[payer]

    def _amount(self, median: float, sigma: float) -> Decimal:
        amount = min(_cents(self._rng.lognormvariate(math.log(median), sigma)), NORMAL_AMOUNT_CAP)
        return max(amount, _CENT)

    def _normal(self) -> Transaction:
        payment_type = _weighted(self._rng, [(t, spec[0]) for t, spec in _PAYMENT_TYPES.items()])
        _, median, sigma, channels = _PAYMENT_TYPES[payment_type]
        amount = self._amount(median, sigma)
        if payment_type == "CSH":
            amount = max(_cents(round(amount, -1)), Decimal("10.00"))  # cash comes in tens
        payer, beneficiary = self._payers.draw(self._rng), self._beneficiaries.draw(self._rng)
        return self._record(payer, beneficiary, amount, payment_type, _weighted(self._rng, channels))

    def _episode(self, pattern: str) -> list[tuple[float, Transaction]]:
        """An episode's records with their offsets (ms) from its start."""
        builders = {
            "large_payment": self._large_payment,
            "velocity_burst": self._velocity_burst,
            "structuring": self._structuring,
            "fan_out": self._fan_out,
            "amount_spike": self._amount_spike,
        }
        return builders[pattern]()

    def _spread(self, count: int, span_ms: float) -> list[float]:
        """Offsets for an episode: the first at 0, the rest uniform within ``span_ms``, sorted."""
        return [0.0, *sorted(self._rng.uniform(0, span_ms) for _ in range(count - 1))]

    def _large_payment(self) -> list[tuple[float, Transaction]]:
        low, high = math.log(LARGE_PAYMENT_MIN), math.log(LARGE_PAYMENT_MAX)
        amount = min(max(_cents(math.exp(self._rng.uniform(low, high))), LARGE_PAYMENT_MIN), LARGE_PAYMENT_MAX)
        payer, beneficiary = self._payers.draw(self._rng), self._beneficiaries.draw(self._rng)
        channel = _weighted(self._rng, [("WEB", 0.6), ("BRANCH", 0.4)])
        return [(0.0, self._record(payer, beneficiary, amount, "TRF", channel))]

    def _velocity_burst(self) -> list[tuple[float, Transaction]]:
        payer = PAYER_ID_BASE + self._rng.randint(1, self.config.payer_population)  # any card can be stolen
        count = self._rng.randint(*VELOCITY_BURST_SIZE)
        offsets = self._spread(count, self._rng.uniform(*VELOCITY_BURST_SECONDS) * 1000)
        return [
            (
                offset,
                self._record(
                    payer,
                    self._beneficiaries.draw(self._rng),
                    self._amount(25.0, 0.8),
                    "CRD",
                    _weighted(self._rng, [("WEB", 0.7), ("MOBILE", 0.3)]),
                ),
            )
            for offset in offsets
        ]

    def _structuring(self) -> list[tuple[float, Transaction]]:
        payer, beneficiary = self._payers.draw(self._rng), self._beneficiaries.draw(self._rng)
        count = self._rng.randint(*STRUCTURING_SIZE)
        offsets = self._spread(count, self._rng.uniform(*STRUCTURING_MINUTES) * 60_000)
        top = float(STRUCTURING_LIMIT - _CENT)
        return [
            (
                offset,
                self._record(
                    payer, beneficiary, _cents(self._rng.uniform(float(STRUCTURING_FLOOR), top)), "TRF", "WEB"
                ),
            )
            for offset in offsets
        ]

    def _fan_out(self) -> list[tuple[float, Transaction]]:
        payer = self._payers.draw(self._rng)
        count = self._rng.randint(*FAN_OUT_SIZE)
        offsets = self._spread(count, self._rng.uniform(*FAN_OUT_SECONDS) * 1000)
        channel = _weighted(self._rng, [("WEB", 0.5), ("MOBILE", 0.5)])
        return [
            (offset, self._record(payer, next(self._new_beneficiaries), self._amount(400.0, 0.6), "TRF", channel))
            for offset in offsets
        ]

    def _amount_spike(self) -> list[tuple[float, Transaction]]:
        # A quiet account of its own: its history is the steady transfers alone, so the spike stands out against
        # them whatever else the run holds (a busy payer's own large transfers would blur it).
        payer = next(self._quiet_payers)
        regular = self._beneficiaries.draw(self._rng)
        low, high = (float(a) for a in SPIKE_USUAL_AMOUNT)
        usual = self._rng.uniform(low, high)
        count = self._rng.randint(*SPIKE_HISTORY_SIZE)
        offsets = self._spread(count, self._rng.uniform(*SPIKE_HISTORY_MINUTES) * 60_000)
        channel = _weighted(self._rng, [("WEB", 0.5), ("MOBILE", 0.5)])
        history = [
            (
                offset,
                self._record(
                    payer,
                    regular,
                    _cents(usual * self._rng.uniform(1 - SPIKE_STEADY_SPREAD, 1 + SPIKE_STEADY_SPREAD)),
                    "TRF",
                    channel,
                ),
            )
            for offset in offsets
        ]
        spike_at = offsets[-1] + self._rng.uniform(*SPIKE_GAP_MINUTES) * 60_000
        amount = min(_cents(usual * self._rng.uniform(*SPIKE_FACTOR)), SPIKE_AMOUNT_MAX)
        return [*history, (spike_at, self._record(payer, next(self._new_beneficiaries), amount, "TRF", channel))]


def generate(config: GeneratorConfig, count: int) -> list[Transaction]:
    """The first ``count`` records of a run (the last episode may be cut short)."""
    return list(itertools.islice(TransactionGenerator(config), count))


def to_json(record: Mapping[str, Any]) -> str:
    """One record as compact JSON (paymentAmount stays an exact decimal string)."""
    return json.dumps(record, separators=(",", ":"))
