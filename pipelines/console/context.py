"""What every page of the console shares: settings, the lake reader, the rule writer, edits, backtests, templates.

Example::

    console = ConsoleContext.build(settings, writer=choose_writer(settings), spark=SharedSpark(settings))
    app = create_app(console)
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.templating import Jinja2Templates
from pyspark.sql import SparkSession
from starlette.responses import Response

from pipelines.base.settings import Settings
from pipelines.console.auth import page_values
from pipelines.console.backtest_jobs import BacktestRunner
from pipelines.console.blocking import BlockingPool
from pipelines.console.edit_progress import EditLog
from pipelines.console.lake_reader import LakeReader
from pipelines.console.rule_writes import RuleWriter
from pipelines.console.rules_data import plain_number
from pipelines.console.window_math import exact_text

READ_TIMEOUT_S = 30.0
"""Longest a page waits for the lakehouse (a Delta read, the evidence's bronze scan) before it answers 504."""
WRITE_TIMEOUT_S = 30.0
"""Longest a save waits for the rules database or the rules topic before it answers 504 (the database's own
lock and statement timeouts, rule_writes.py, are meant to end it sooner with a clear refusal)."""
HERE = Path(__file__).resolve().parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"


class SharedSpark:
    """The console's one SparkSession (backtests, and tables ``deltalake`` cannot read), started on first use."""

    def __init__(self, settings: Settings, session: SparkSession | None = None) -> None:
        self.settings = settings
        self._session = session
        self._lock = threading.Lock()

    @property
    def started(self) -> bool:
        return self._session is not None

    def __call__(self) -> SparkSession:
        with self._lock:
            if self._session is None:
                from pipelines.base.spark_session import get_spark

                self._session = get_spark(self.settings, app_name="fraudlake-console")
            return self._session


def _time(value: Any) -> str:
    if isinstance(value, dt.datetime):
        aware = value if value.tzinfo else value.replace(tzinfo=dt.UTC)
        return aware.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
    return "-" if value is None else str(value)


def _number(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return plain_number(value) if isinstance(value, Decimal | int | float) else ("-" if value is None else str(value))


@dataclass
class ConsoleContext:
    settings: Settings
    reader: LakeReader
    writer: RuleWriter
    edits: EditLog
    backtests: BacktestRunner
    templates: Jinja2Templates
    spark: Callable[[], SparkSession]
    stale_after: dt.timedelta
    poll_seconds: float = 2.0
    lake: BlockingPool = field(default_factory=lambda: lake_pool(READ_TIMEOUT_S))
    """Every read of the lakehouse (and the few local files pages show) runs here, off the event loop."""
    writes: BlockingPool = field(default_factory=lambda: write_pool(WRITE_TIMEOUT_S, "the rules database or topic"))
    """Every rule edit (rules database transaction or rules-topic publish) runs here, off the event loop."""

    @classmethod
    def build(
        cls,
        settings: Settings,
        *,
        writer: RuleWriter,
        spark: Callable[[], SparkSession],
        stale_after: dt.timedelta = dt.timedelta(minutes=5),
        poll_seconds: float = 2.0,
        read_timeout_s: float = READ_TIMEOUT_S,
        write_timeout_s: float = WRITE_TIMEOUT_S,
    ) -> ConsoleContext:
        templates = Jinja2Templates(directory=str(TEMPLATES))
        templates.env.filters["time"] = _time
        templates.env.filters["num"] = _number
        templates.env.filters["exact"] = exact_text  # a fraction (k * B * W / W2) exactly, or ≈ 6 decimals
        return cls(
            settings=settings,
            reader=LakeReader(settings, spark=spark),
            writer=writer,
            edits=EditLog(),
            backtests=BacktestRunner(settings, spark),
            templates=templates,
            spark=spark,
            stale_after=stale_after,
            poll_seconds=poll_seconds,
            lake=lake_pool(read_timeout_s),
            writes=write_pool(write_timeout_s, "the rules database" if writer.mode == "rulesdb" else "the rules topic"),
        )

    def shutdown(self) -> None:
        """Stop taking backtests and blocking calls (running ones finish on their threads)."""
        self.backtests.shutdown()
        self.lake.shutdown()
        self.writes.shutdown()

    def page(self, request: Request, name: str, status_code: int = 200, **values: Any) -> Response:
        """A rendered page; every page gets the console's header values."""
        common = {
            "lakehouse": self.settings.lakehouse_root,
            "writes_to": self.writer.target(),
            "writes_mode": self.writer.mode,
            "poll_ms": int(self.poll_seconds * 1000),
            "bucket_seconds": self.settings.engine.bucket_seconds,
            **page_values(request),
        }
        return self.templates.TemplateResponse(request, name, {**common, **values}, status_code=status_code)


def lake_pool(timeout_s: float) -> BlockingPool:
    """Lake reads: a few at once (deltalake reads Parquet on its own threads too), a short queue behind them."""
    return BlockingPool("the lakehouse", name="lake", workers=4, queue=16, timeout_s=timeout_s)


def write_pool(timeout_s: float, backend: str) -> BlockingPool:
    """Rule edits: analysts' saves are rare; two at once, a few waiting, beyond that a clear 503."""
    return BlockingPool(backend, name="writes", workers=2, queue=4, timeout_s=timeout_s, writes=True)


def console_of(request: Request) -> ConsoleContext:
    console: ConsoleContext = request.app.state.console
    return console
