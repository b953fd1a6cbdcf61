"""Start and supervise the streaming engine: source -> ``foreachBatch(BatchHandler)``, checkpoint in the lakehouse.

``run_engine`` runs until the source is exhausted (``once=True``: availableNow, for scheduled jobs) or until
SIGTERM/SIGINT, on which it lets the micro-batch in flight finish and then stops the query (a kill without that
grace is still safe: the batch is replayed on restart, see batch_handler).

Example::

    run_engine(spark, settings, EngineRun(source="files", once=True))
"""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from delta_tables.catalog import init_lakehouse
from pipelines.engine.batch_handler import BatchHandler
from pipelines.engine.sources import SourceKind, read_source
from pipelines.settings import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EngineRun:
    """How to run the engine (the ``fraudlake run`` options)."""

    source: SourceKind = "files"
    input_path: str | None = None
    once: bool = False
    alerts_to_kafka: bool | None = None
    max_files_per_trigger: int | None = None
    checkpoint: str | None = None

    def checkpoint_path(self, settings: Settings) -> str:
        return self.checkpoint or settings.checkpoint_path(f"engine-{self.source}")


def app_id_reader(spark: SparkSession, checkpoint: str) -> Callable[[], str]:
    """``engine-<query id>``, read from the checkpoint's ``metadata`` file (written before the first batch)."""

    def read() -> str:
        row = spark.read.text(f"{checkpoint.rstrip('/')}/metadata").first()
        if row is None:
            raise RuntimeError(f"no streaming query metadata under {checkpoint}")
        return f"engine-{json.loads(row['value'])['id']}"

    return read


def start_engine(
    spark: SparkSession, settings: Settings, run: EngineRun, *, report: Callable[[str], None] | None = None
) -> StreamingQuery:
    """Create the lakehouse tables if needed and start the streaming query."""
    init_lakehouse(spark, settings)
    if run.source == "files" and not run.input_path and "://" not in settings.lakehouse_root:
        Path(settings.landing_path("transactions")).mkdir(parents=True, exist_ok=True)
    checkpoint = run.checkpoint_path(settings)
    raw = read_source(
        spark,
        settings,
        run.source,
        path=run.input_path,
        max_files_per_trigger=run.max_files_per_trigger or settings.engine.max_files_per_trigger,
    )
    handler = BatchHandler(
        settings, app_id=app_id_reader(spark, checkpoint), alerts_to_kafka=run.alerts_to_kafka, report=report
    )
    writer = raw.writeStream.queryName(f"fraudlake-engine-{run.source}").foreachBatch(handler)
    writer = writer.option("checkpointLocation", checkpoint)
    if run.once:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{settings.engine.trigger_interval_seconds} seconds")
    return writer.start()


@contextmanager
def stop_requested() -> Iterator[threading.Event]:
    """An event set by SIGTERM or SIGINT while inside (the previous handlers are restored after)."""
    event = threading.Event()

    def handle(signum: int, frame: FrameType | None) -> None:
        log.info("signal %s: stopping after the micro-batch in flight", signum)
        event.set()

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield event
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def supervise(query: StreamingQuery, stop: threading.Event, *, poll_seconds: int = 1) -> None:
    """Wait for the query to end; on ``stop``, let the running micro-batch finish, then stop it."""
    while query.isActive:
        if stop.is_set():
            while query.isActive and query.status["isTriggerActive"]:
                time.sleep(0.2)
            query.stop()
            break
        query.awaitTermination(poll_seconds)
    error = query.exception()
    if error is not None:
        raise RuntimeError(f"the engine's streaming query failed: {error}")


def run_engine(
    spark: SparkSession, settings: Settings, run: EngineRun, *, report: Callable[[str], None] | None = None
) -> None:
    """Start the engine and supervise it until it ends (``once``) or a stop signal."""
    with stop_requested() as stop:
        query = start_engine(spark, settings, run, report=report)
        print(
            f"engine: source {run.source} -> {settings.lakehouse_root} "
            f"({'until caught up' if run.once else 'continuous'}; checkpoint {run.checkpoint_path(settings)})",
            flush=True,
        )
        supervise(query, stop)
