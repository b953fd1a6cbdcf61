"""The batch's appends (``BatchWrites``): each at most once per batch, tagged, in the background, waited for.

No Spark: the writes are plain functions here; the engine tests (replay, recovery, faults) run the real appends.
"""

from __future__ import annotations

import threading
import time

import pytest

from delta_tables.idempotent import CommitTag
from pipelines.engine.batch_writes import BatchWrites
from pipelines.engine.recovery import Attempt, Pins

PINS = Pins(rules=3, registry=1, bronze=7, m_before=1_700_000_000_000, state=2, cooldown=0)


def test_a_write_an_earlier_attempt_committed_is_skipped_the_others_run_tagged_then_pass_their_crash_point() -> None:
    attempt = Attempt("engine-x", 5, committed=frozenset({"bronze"}), pins=PINS)
    committed: list[tuple[CommitTag, str]] = []
    crash_points: list[tuple[str, int]] = []
    with BatchWrites(attempt, PINS, after=lambda point, batch: crash_points.append((point, batch))) as writes:
        writes.append("bronze", lambda tag: committed.append((tag, threading.current_thread().name)))
        writes.append("state", lambda tag: committed.append((tag, threading.current_thread().name)))
    assert [tag for tag, _ in committed] == [CommitTag("engine-x", 5, "state", PINS.as_map())]
    assert all(thread.startswith("fraudlake-write") for _, thread in committed)  # in the background
    assert crash_points == [("state", 5)]


def test_leaving_the_block_waits_for_every_write_and_raises_the_first_error() -> None:
    attempt = Attempt.first("engine-x", 6)
    done: list[str] = []
    crash_points: list[str] = []

    def fails(tag: CommitTag) -> None:
        raise RuntimeError(f"{tag.write}: disk full")

    def slow(tag: CommitTag) -> None:
        time.sleep(0.3)
        done.append(tag.write)

    with pytest.raises(RuntimeError, match="alerts: disk full"):
        with BatchWrites(attempt, PINS, after=lambda point, _batch: crash_points.append(point)) as writes:
            writes.append("alerts", fails)
            writes.append("cooldown", slow)
    assert done == ["cooldown"]  # the slow write finished before the error came out: none outlives the attempt
    assert crash_points == ["cooldown"]  # a failed write does not pass its crash point
