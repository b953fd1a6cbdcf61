"""How far back a state must keep (and a backfill must read) buckets: the horizon.

Every transaction evaluated from now on has ``t >= M - L`` (``M`` the max event time seen so far, ``L`` the
allowed lateness): anything older is late and not evaluated. Its lookback starts at bucket
``index(t) - reach >= index(M - L) - reach``, so a state needs no tile starting before

    horizon = (floor((M - L) / bucket) - reach(widest live window of the state)) * bucket      [epoch ms]

Retention deletes a state's tiles older than its horizon every ``retention_every_batches`` batches; a new or
rebuilt state is backfilled from bronze from its horizon on. Both are per state (the widest window of *its*
ACTIVE and PAUSED rules), which is never less than what the contract needs and often far less than the global
widest window. The cooldown memory needs no row older than ``M - L - 30 days`` (the longest cooldown).

Example::

    horizon_ms(high_water_ms=1_700_000_000_000, lateness_ms=300_000, bucket_ms=60_000, reach=60)
"""

from __future__ import annotations

from collections.abc import Sequence

from pipelines.engine.evaluate import reach_buckets
from pipelines.engine.states import StateSpec
from rules_cdc.rule_model import MAX_WINDOW_MINUTES


def horizon_ms(*, high_water_ms: int, lateness_ms: int, bucket_ms: int, reach: int) -> int:
    """Start (epoch ms) of the oldest bucket any future in-time lookback of that reach can touch."""
    return ((high_water_ms - lateness_ms) // bucket_ms - reach) * bucket_ms


def state_horizons(
    states: Sequence[StateSpec], *, high_water_ms: int, lateness_ms: int, bucket_seconds: int
) -> dict[str, int]:
    """Per state id, the horizon of its widest live window."""
    return {
        s.state_id: horizon_ms(
            high_water_ms=high_water_ms,
            lateness_ms=lateness_ms,
            bucket_ms=bucket_seconds * 1000,
            reach=reach_buckets(s.window_minutes, bucket_seconds),
        )
        for s in states
    }


def cooldown_horizon_ms(*, high_water_ms: int, lateness_ms: int) -> int:
    """Cooldown memory older than this cannot suppress any future in-time alert, whatever the cooldown."""
    return high_water_ms - lateness_ms - MAX_WINDOW_MINUTES * 60_000


def retention_due(batch_id: int, every: int) -> bool:
    """Whether this batch runs retention: every ``every`` batches (batch ids ``every-1``, ``2*every-1``, ...)."""
    return (batch_id + 1) % every == 0
