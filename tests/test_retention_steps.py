"""Retention in small steps: each cycle of ``retention_every_batches`` batches runs every step once, spread out.

The steps are one per state, one for the cooldown memory and one per append-only table's small files; before,
they all ran on one batch in the cycle (with Delta's auto compaction after each of its appends), which made that
batch several times as long as the others.
"""

from __future__ import annotations

from collections import Counter

from engine_fixtures import make_rule

from pipelines.engine.retention import FILE_COMPACTED, RetentionStep, retention_due, retention_steps
from pipelines.engine.states import LiveRule, StateSpec, states_of


def _states(count: int) -> list[StateSpec]:
    """``count`` states: rules with distinct filters."""
    filters = [{"field": "paymentAmount", "op": "GREATER_EQUAL", "value": i} for i in range(count)]
    return states_of([LiveRule(make_rule(i, filter=f), None) for i, f in enumerate(filters)])


def _cycle(every: int, states: list[StateSpec], start: int = 0) -> list[list[RetentionStep]]:
    return [retention_steps(batch, every, states) for batch in range(start, start + every)]


def test_a_cycle_runs_every_step_once_spread_over_its_batches() -> None:
    states = _states(4)
    assert len({s.state_id for s in states}) == 4
    everything = {RetentionStep("state", s.state_id) for s in states}
    everything |= {RetentionStep("cooldown"), *(RetentionStep("files", t) for t in FILE_COMPACTED)}
    for every in (20, 9, 5, 2):
        for start in (0, 7 * every):  # any cycle, not only the first
            cycle = _cycle(every, states, start)
            ran = Counter(step for steps in cycle for step in steps)
            assert set(ran) == everything and set(ran.values()) == {1}, every
            # Spread: no batch runs more than its share (rounded up).
            assert max(len(steps) for steps in cycle) <= -(-len(everything) // every), every
    # The first step still falls where the whole cycle used to run.
    assert [
        b
        for b in range(40)
        if RetentionStep("state", min(s.state_id for s in states)) in retention_steps(b, 20, states)
    ] == [b for b in range(40) if retention_due(b, 20)]


def test_retention_every_batch_runs_every_step_on_every_batch() -> None:
    states = _states(3)
    assert len(retention_steps(0, 1, states)) == len(retention_steps(5, 1, states)) == 3 + 1 + len(FILE_COMPACTED)
