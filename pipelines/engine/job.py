"""Start and supervise the streaming engine: source -> ``foreachBatch(BatchHandler)``, checkpoint in the lakehouse.

``run_engine`` runs until the source is exhausted (``once=True``: availableNow, for scheduled jobs) or until
SIGTERM/SIGINT. On a stop signal it lets the micro-batch in flight finish, for at most ``STOP_GRACE_SECONDS``,
then stops the query, which abandons whatever runs then (a later batch started back to back, or a trigger stuck
retrying Kafka offsets against a broker that went away); Spark is given ``STOP_TIMEOUT_SECONDS`` to end its stream
thread, after which the query is left behind. So the process ends within about a minute of the signal whatever the
query is doing, and an abandoned batch is replayed on restart (it is idempotent, see batch_handler).

With a Kafka source the transactions topic is created first when it is missing (and the alerts topic, when alerts
go to Kafka): a fresh broker must not make the query die with ``UnknownTopicOrPartitionException``.

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
from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StreamingQueryListener,
)
from pyspark.sql.streaming.query import StreamingQuery

from delta_tables.catalog import init_lakehouse
from pipelines.base.settings import Settings
from pipelines.engine.batch_handler import BatchHandler
from pipelines.engine.sources import SourceKind, ensure_source_topics, read_source

log = logging.getLogger(__name__)

STOP_GRACE_SECONDS = 30.0
"""On a stop signal, how long the micro-batch in flight may take to finish before it is abandoned."""
STOP_TIMEOUT_SECONDS = 15
"""How long ``StreamingQuery.stop`` may wait for Spark's stream thread (``spark.sql.streaming.stopTimeout``)."""


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
    alerts_to_kafka = settings.engine.alerts_to_kafka if run.alerts_to_kafka is None else run.alerts_to_kafka
    if run.source == "kafka" or alerts_to_kafka:
        for topic in ensure_source_topics(settings, run.source, topic=run.input_path, alerts=alerts_to_kafka):
            print(f"engine: created the missing Kafka topic {topic}", flush=True)
    # Read when the query starts (its session is a clone): a stop must not wait forever for the stream thread.
    try:
        spark.conf.set("spark.sql.streaming.stopTimeout", str(STOP_TIMEOUT_SECONDS * 1000))
    except Exception as error:  # a runtime that fixes its confs: its own stop timeout applies
        log.warning("spark.sql.streaming.stopTimeout not set: %s", error)
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
    query = writer.start()
    ReleaseOnTermination(spark, handler, query).watch()
    return query


_WATCHERS: dict[str, ReleaseOnTermination] = {}
"""The listener of each query ``start_engine`` started, by run id, while it is on the session."""


def detach(query: StreamingQuery) -> None:
    """After ``query`` ended: wait for the listener bus to deliver the query's last event to its listener, then
    release its handler and take the listener off the session before returning.

    For a process about to exit (``run_engine``): the bus delivers events on a thread of its own, after the query has
    ended, and one still on its way (the last batch's progress) called back into a Python process that had gone; the
    JVM printed the failure, ~60 lines of ERROR, after every ``fraudlake run --once``."""
    watcher = _WATCHERS.pop(query.runId, None)
    if watcher is not None:
        watcher.close()


class ReleaseOnTermination(StreamingQueryListener):
    """Frees an engine handler's caches (``BatchHandler.release``) once its query has terminated: stopped, finished
    (``availableNow``) or failed. Without it a stopped engine's cached state stayed on the executors until the session
    ended: a notebook that restarts the engine, or a process that runs several, held every earlier one's state."""

    def __init__(self, spark: SparkSession, handler: BatchHandler, query: StreamingQuery) -> None:
        self._spark, self._handler, self._run_id = spark, handler, query.runId
        self._query, self._lock, self._released = query, threading.Lock(), False
        self._ended = threading.Event()  # the query's termination event was delivered (or went by before we listened)

    def watch(self) -> None:
        """Listen for the query's end; a query that has already ended is released at once."""
        _WATCHERS[self._run_id] = self
        self._spark.streams.addListener(self)
        if not self._query.isActive:  # ended before the listener was added: its event went by
            try:
                self._release()
            finally:
                self._ended.set()

    def close(self, *, wait_seconds: float = 10.0) -> None:
        """Once the bus has delivered the query's last event to this listener (events arrive in order, the
        termination last; at most ``wait_seconds``): release (if the listener had not; if it is releasing, once it is
        done), and remove the listener on the caller's thread."""
        self._ended.wait(wait_seconds)
        self._release(remove=False)
        self._remove()

    def _remove(self) -> None:
        self._spark.streams.removeListener(self)
        _WATCHERS.pop(self._run_id, None)

    def onQueryStarted(self, event: QueryStartedEvent) -> None:
        pass

    def onQueryProgress(self, event: QueryProgressEvent) -> None:
        pass

    def onQueryIdle(self, event: QueryIdleEvent) -> None:
        pass

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:
        if str(event.runId) == self._run_id:
            try:
                self._release()
            finally:  # ``close`` woken even if the release failed (Spark logs a listener's exception)
                self._ended.set()

    def _release(self, *, remove: bool = True) -> None:
        """Release the handler once; a caller that comes while another thread releases returns when it is done.

        The lock is held through the release: ``close`` once returned while the listener's callback was still
        unpersisting the caches, a process exiting then cut the JVM's call into Python off mid-way, and Spark logged
        the listener's failure (~60 lines of ERROR after a second ``run_engine`` in one process)."""
        with self._lock:
            if self._released:
                return
            self._released = True
            self._handler.release()
        if remove:  # not from the listener bus's own callback: the removal runs on a thread of its own
            threading.Thread(target=self._remove, daemon=True).start()


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


def _last_batch(query: StreamingQuery) -> int:
    """The id of the last completed micro-batch (-1 before the first)."""
    progress = query.lastProgress
    return int(progress["batchId"]) if progress else -1


def finish_in_flight(query: StreamingQuery, grace_seconds: float) -> str:
    """Wait, for at most ``grace_seconds``, until no micro-batch is in flight or the one that was has completed;
    say which: ``idle``, ``finished``, ``getting offsets`` (a trigger that has not started a batch, perhaps Kafka
    retrying against a broker that is gone) or ``abandoned``. ``isTriggerActive`` alone stays true across
    back-to-back batches and during Kafka offset retries, so the batch in flight is recognised by its id."""
    deadline = time.monotonic() + grace_seconds
    in_flight = _last_batch(query) + 1
    while query.isActive and time.monotonic() < deadline:
        status = query.status
        if not status["isTriggerActive"]:
            return "idle"
        if _last_batch(query) >= in_flight:
            return "finished"
        if str(status["message"]).startswith("Getting offsets"):
            return "getting offsets"
        time.sleep(0.2)
    return "abandoned" if query.isActive else "idle"


_OUTCOMES = {
    "idle": "no micro-batch was in flight",
    "finished": "the micro-batch in flight finished",
    "getting offsets": "the trigger in flight had not started a micro-batch",
    "abandoned": "abandoned the micro-batch in flight (it replays on restart)",
}


def stop_query(query: StreamingQuery, *, grace_seconds: float = STOP_GRACE_SECONDS) -> str:
    """Stop the query within about ``grace_seconds + STOP_TIMEOUT_SECONDS``; say how it went."""
    outcome = _OUTCOMES[finish_in_flight(query, grace_seconds)]
    try:
        query.stop()
    except Exception as error:  # Spark's TimeoutException: its stream thread is stuck (e.g. in a Kafka call)
        log.warning("the streaming query did not stop within %s s: %s", STOP_TIMEOUT_SECONDS, error)
        return f"{outcome}; Spark's stream thread did not stop within {STOP_TIMEOUT_SECONDS} s and is left behind"
    return outcome


def supervise(
    query: StreamingQuery,
    stop: threading.Event,
    *,
    poll_seconds: int = 1,
    grace_seconds: float = STOP_GRACE_SECONDS,
    report: Callable[[str], None] | None = None,
) -> None:
    """Wait for the query to end; on ``stop``, let the micro-batch in flight finish (for at most
    ``grace_seconds``), then stop it."""
    say = report or print
    while query.isActive:
        if stop.is_set():
            started = time.monotonic()
            say(f"engine: stop requested; letting the micro-batch in flight finish (at most {grace_seconds:.0f} s)")
            how = stop_query(query, grace_seconds=grace_seconds)
            say(f"engine: stopped in {time.monotonic() - started:.1f} s; {how}")
            return
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
        try:
            supervise(query, stop, report=lambda line: print(line, flush=True))
        finally:
            if not query.isActive:
                detach(query)
