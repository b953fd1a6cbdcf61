"""Backtests started from the console: ``pipelines.engine.backtest`` on the console's shared SparkSession, one at a
time, in the background, so that the page can say "running" and show the result when it is there.

A result keeps what the page needs and nothing more: the total, alerts and keys per day, and the first
``SAMPLE_SIZE`` alerts in (eventTime, transactionId) order (their evidence is recomputed from bronze on request).

Example::

    runner = BacktestRunner(settings, spark_provider)
    job = runner.submit(rule, from_ms=None, to_ms=None, range_text=("", ""))
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
from rules_cdc.rule_model import Rule

log = logging.getLogger(__name__)
SAMPLE_SIZE = 20
MAX_KEPT = 50


@dataclass
class BacktestJob:
    id: str
    rule: Rule
    range_text: tuple[str, str]
    started_at: dt.datetime
    state: str = "running"  # running | done | failed
    finished_at: dt.datetime | None = None
    error: str | None = None
    total: int = 0
    per_day: list[dict[str, Any]] = field(default_factory=list)
    sample: list[dict[str, Any]] = field(default_factory=list)

    @property
    def seconds(self) -> float | None:
        return None if self.finished_at is None else (self.finished_at - self.started_at).total_seconds()


class BacktestRunner:
    """Runs backtests one after another on one background thread; keeps the newest ``MAX_KEPT`` results."""

    def __init__(self, settings: Settings, spark: Callable[[], SparkSession]) -> None:
        self.settings = settings
        self._spark = spark
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="console-backtest")
        self._jobs: OrderedDict[str, BacktestJob] = OrderedDict()
        self._lock = threading.Lock()

    def submit(self, rule: Rule, *, from_ms: int | None, to_ms: int | None, range_text: tuple[str, str]) -> BacktestJob:
        job = BacktestJob(secrets.token_hex(6), rule, range_text, dt.datetime.now(dt.UTC))
        with self._lock:
            self._jobs[job.id] = job
            while len(self._jobs) > MAX_KEPT:
                self._jobs.popitem(last=False)
        self._pool.submit(self._run, job, from_ms, to_ms)
        return job

    def get(self, job_id: str) -> BacktestJob | None:
        with self._lock:
            return self._jobs.get(job_id)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _run(self, job: BacktestJob, from_ms: int | None, to_ms: int | None) -> None:
        from pipelines.engine.backtest import backtest_per_day, backtest_rule

        try:
            spark = self._spark()
            alerts = backtest_rule(spark, self.settings, job.rule, from_ms=from_ms, to_ms=to_ms).persist()
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
