"""Backtests started from the console: ``pipelines.engine.backtest`` on the console's shared SparkSession, one at a
time, in the background, so that the page can say "running" and show the result when it is there.

Bounded twice, so that a few clicks cannot occupy Spark for hours: at most ``MAX_PENDING`` backtests queued or
running (one more is refused with ``BacktestQueueFull``, the page's 429), and each over at most ``MAX_RANGE_DAYS``
of event time (``backtest_range``: a blank end is now, a blank start that many days before the end).

A result keeps what the page needs and nothing more: the total, alerts and keys per day, and the first
``SAMPLE_SIZE`` alerts in (eventTime, transactionId) order (their evidence is recomputed from bronze on request).

Example::

    runner = BacktestRunner(settings, spark_provider)
    start, end = backtest_range(since, until, now=dt.datetime.now(dt.UTC))     # BadParameter when too wide
    job = runner.submit(rule, start=start, end=end, range_text=(since_text, until_text))
    runner.get(job.id).state          # 'running', then 'done' or 'failed'
"""

from __future__ import annotations

import datetime as dt
import logging
import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import SparkSession

from pipelines.base.settings import Settings
from pipelines.console.params import BadParameter
from rules_cdc.rule_model import Rule

log = logging.getLogger(__name__)
SAMPLE_SIZE = 20
MAX_KEPT = 50
MAX_PENDING = 4
"""Backtests queued or running at once (they run one at a time on the console's SparkSession)."""
MAX_RANGE_DAYS = 92
"""The widest event-time range one backtest may cover (a quarter; a rule's window is at most 30 days)."""


class BacktestQueueFull(RuntimeError):
    """``MAX_PENDING`` backtests are queued or running already; nothing was started."""


def backtest_range(
    since: dt.datetime | None, until: dt.datetime | None, *, now: dt.datetime, max_days: int = MAX_RANGE_DAYS
) -> tuple[dt.datetime, dt.datetime]:
    """The event-time range ``[start, end)`` a backtest runs over: blank end = ``now``, blank start = ``max_days``
    before the end; refused (``BadParameter``) when empty or wider than ``max_days``.

    >>> now = dt.datetime(2024, 6, 30, tzinfo=dt.UTC)
    >>> [d.date().isoformat() for d in backtest_range(None, None, now=now, max_days=30)]
    ['2024-05-31', '2024-06-30']
    """
    end = until if until is not None else now
    start = since if since is not None else end - dt.timedelta(days=max_days)
    if start >= end:
        raise BadParameter(f"from must be before to ({start:%Y-%m-%d %H:%M} ≥ {end:%Y-%m-%d %H:%M} UTC)")
    if end - start > dt.timedelta(days=max_days):
        raise BadParameter(
            f"a backtest covers at most {max_days} days of event time; from {start:%Y-%m-%d} to {end:%Y-%m-%d} "
            f"is {(end - start) / dt.timedelta(days=1):.1f} days: narrow the range"
        )
    return start, end


@dataclass
class BacktestJob:
    id: str
    rule: Rule
    range_text: tuple[str, str]
    started_at: dt.datetime
    start: dt.datetime | None = None  # the event-time range evaluated, [start, end)
    end: dt.datetime | None = None
    state: str = "queued"  # queued | running | done | failed
    finished_at: dt.datetime | None = None
    error: str | None = None
    total: int = 0
    per_day: list[dict[str, Any]] = field(default_factory=list)
    sample: list[dict[str, Any]] = field(default_factory=list)

    @property
    def seconds(self) -> float | None:
        return None if self.finished_at is None else (self.finished_at - self.started_at).total_seconds()


class BacktestRunner:
    """Runs backtests one after another on one background thread, at most ``max_pending`` queued or running; keeps
    the newest ``MAX_KEPT`` results."""

    def __init__(
        self, settings: Settings, spark: Callable[[], SparkSession], *, max_pending: int = MAX_PENDING
    ) -> None:
        self.settings = settings
        self.max_pending = max_pending
        self._spark = spark
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="console-backtest")
        self._jobs: OrderedDict[str, BacktestJob] = OrderedDict()
        self._pending = 0
        self._lock = threading.Lock()

    @property
    def pending(self) -> int:
        """Backtests queued or running."""
        with self._lock:
            return self._pending

    def submit(self, rule: Rule, *, start: dt.datetime, end: dt.datetime, range_text: tuple[str, str]) -> BacktestJob:
        """Queue a backtest of ``rule`` over ``[start, end)``; ``BacktestQueueFull`` when ``max_pending`` are."""
        job = BacktestJob(secrets.token_hex(6), rule, range_text, dt.datetime.now(dt.UTC), start=start, end=end)
        with self._lock:
            if self._pending >= self.max_pending:
                raise BacktestQueueFull(
                    f"{self._pending} backtests are queued or running, the most this console takes at once "
                    "(they share one SparkSession): try again when one has finished"
                )
            self._pending += 1
            self._jobs[job.id] = job
            while len(self._jobs) > MAX_KEPT:
                self._jobs.popitem(last=False)
        try:
            self._pool.submit(self._run, job)
        except RuntimeError:  # shut down
            self._done()
            raise
        return job

    def get(self, job_id: str) -> BacktestJob | None:
        with self._lock:
            return self._jobs.get(job_id)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _done(self) -> None:
        with self._lock:
            self._pending -= 1

    def _run(self, job: BacktestJob) -> None:
        from pipelines.engine.backtest import backtest_per_day, backtest_rule

        job.state = "running"
        try:
            spark = self._spark()
            alerts = backtest_rule(
                spark, self.settings, job.rule, from_ms=_epoch_ms(job.start), to_ms=_epoch_ms(job.end)
            ).persist()
            try:
                days = [r.asDict() for r in backtest_per_day(alerts).collect()]  # one small row per day
                sample = alerts.orderBy("eventTime", "transactionId").limit(SAMPLE_SIZE).toArrow().to_pylist()
            finally:
                alerts.unpersist()
            job.per_day = [
                {"day": d["day"].isoformat(), "alerts": int(d["alerts"]), "keys": int(d["keys"])} for d in days
            ]
            job.total = sum(d["alerts"] for d in job.per_day)
            job.sample = sample
            job.state = "done"
        except Exception as error:  # shown on the page; the console keeps serving
            log.exception("backtest %s failed", job.id)
            job.error = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
            job.state = "failed"
        finally:
            job.finished_at = dt.datetime.now(dt.UTC)
            self._done()


def _epoch_ms(instant: dt.datetime | None) -> int | None:
    if instant is None:
        return None
    return (instant - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(milliseconds=1)  # exact, no float
