"""The campaign's plan, pure and seeded: which part is killed with which signal when, and the analysts' SQL edits.

A seed reproduces a plan exactly. Faults are spread over the run in turn (every part once before any twice),
each at a random moment of its own slot; the edits are fixed statements (no text from outside), spread evenly.

Example::

    plan = plan_faults(ChaosConfig(seconds=120, seed=7))
    [(f.part, f.signal.name) for f in plan][:2]     # e.g. [('engine', 'SIGKILL'), ('broker', 'SIGTERM')]
"""

from __future__ import annotations

import random
import signal
from dataclasses import dataclass
from typing import Literal

Part = Literal["broker", "postgres", "connect", "rules_job", "engine"]
PARTS: tuple[Part, ...] = ("broker", "postgres", "connect", "rules_job", "engine")
SIGNALS = (signal.SIGKILL, signal.SIGTERM)


@dataclass(frozen=True)
class ChaosConfig:
    """One campaign: how long the load runs, at what rate, the seed, and how many faults of each part."""

    seconds: float = 120.0
    rate: float = 10.0  # transactions per second offered to the broker
    seed: int = 1
    faults_per_part: int = 1
    parts: tuple[Part, ...] = PARTS
    fraud_rate: float = 0.01
    warmup_seconds: float = 5.0  # after the first engine batch, before the first fault

    def __post_init__(self) -> None:
        if self.seconds <= 0 or self.rate <= 0 or self.faults_per_part < 0:
            raise ValueError("seconds and rate must be positive, faults_per_part not negative")
        unknown = set(self.parts) - set(PARTS)
        if unknown:
            raise ValueError(f"unknown parts {sorted(unknown)}; known: {list(PARTS)}")


@dataclass(frozen=True)
class Fault:
    """Kill ``part`` with ``signal`` at ``at_s`` seconds after the warm-up (or as soon after as the one before
    it has recovered: faults are injected one at a time, so that each recovery is measured alone)."""

    part: Part
    signal: signal.Signals
    at_s: float


def plan_faults(config: ChaosConfig) -> list[Fault]:
    """``faults_per_part`` rounds over the parts (shuffled per round), each fault at a random moment of its slot;
    signals alternate per part from a random first one, so a part killed twice sees SIGKILL and SIGTERM."""
    rng = random.Random(config.seed)
    rounds = [rng.sample(list(config.parts), len(config.parts)) for _ in range(config.faults_per_part)]
    order = [part for one_round in rounds for part in one_round]
    if not order:
        return []
    first = {part: rng.randrange(2) for part in config.parts}
    seen: dict[Part, int] = {}
    slot = config.seconds / len(order)
    faults = []
    for index, part in enumerate(order):
        nth = seen.get(part, 0)
        seen[part] = nth + 1
        at = index * slot + rng.uniform(0.1, 0.6) * slot
        faults.append(Fault(part, SIGNALS[(first[part] + nth) % 2], round(at, 1)))
    return faults


@dataclass(frozen=True)
class Edit:
    """One analyst's SQL edit of ``fraud_rules`` (a fixed statement) and what it does, for the report."""

    what: str
    sql: str


INSERT_RULE_9 = (  # 9: the sample rules are 1-8
    "INSERT INTO fraud_rules (rule_id, rule_name, grouping_key_names, aggregate_field_name, aggregator_function_type,"
    " limit_operator_type, limit_value, window_minutes, filter) VALUES (9, 'one transfer of 9,000 or more',"
    " '{payerId}', 'paymentAmount', 'MAX', 'GREATER_EQUAL', 9000, 1,"
    ' \'{"field": "paymentType", "op": "EQUAL", "value": "TRF"}\'::jsonb)'
)
EDITS: tuple[Edit, ...] = (
    Edit("rule 3: limit 15 -> 12", "UPDATE fraud_rules SET limit_value = 12 WHERE rule_id = 3"),
    Edit("rule 6 paused", "UPDATE fraud_rules SET rule_state = 'PAUSED' WHERE rule_id = 6"),
    Edit("rule 9 inserted", INSERT_RULE_9),
    Edit("rule 5 deleted", "DELETE FROM fraud_rules WHERE rule_id = 5"),
    Edit("rule 6 resumed", "UPDATE fraud_rules SET rule_state = 'ACTIVE' WHERE rule_id = 6"),
    Edit("rule 4: limit 4 -> 3", "UPDATE fraud_rules SET limit_value = 3 WHERE rule_id = 4"),
)
"""The planned edits, in order: an UPDATE of a limit, a pause, an insert, a delete, a resume, another limit."""


def probe_edit(n: int) -> Edit:
    """The ``n``-th probe: a change of rule 1's limit, made after a fault of the rules side, whose arrival
    (on the rules topic, in the rules table) says the part is back."""
    limit = 1_000_000 + n
    return Edit(f"rule 1: limit -> {limit} (probe)", f"UPDATE fraud_rules SET limit_value = {limit} WHERE rule_id = 1")


def edit_times(config: ChaosConfig, count: int = len(EDITS)) -> list[float]:
    """When the planned edits are due (seconds after the warm-up): evenly over the run, none at its very end."""
    return [round(config.seconds * (i + 0.5) / (count + 1), 1) for i in range(count)]
