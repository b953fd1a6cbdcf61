"""Where generated transactions go, and how fast: the landing folder (atomic JSON-lines files) or Kafka.

Thin on purpose: generation lives in ``pipelines.generator.transactions``; here are only the writes and the pacing.

Example::

    with stop_on_signals() as stop:
        sent = run(TransactionGenerator(config), FileSink(landing), RatePlan(rate=100), count=10_000, stop=stop)
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

from pipelines.base.kafka_clients import ensure_topics, python_client_config
from pipelines.base.settings import Settings
from pipelines.generator.transactions import Transaction, to_json

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RatePlan:
    """Wall-clock pacing: ``rate`` records/s (None = as fast as possible), plus an optional burst of
    ``burst_size`` records sent at once at the start of every ``burst_every_seconds``."""

    rate: float | None = None
    burst_every_seconds: float | None = None
    burst_size: int = 0

    def __post_init__(self) -> None:
        if self.rate is not None and self.rate <= 0:
            raise ValueError("rate must be positive (or None for unlimited)")
        if self.burst_size < 0 or (self.burst_every_seconds is not None and self.burst_every_seconds <= 0):
            raise ValueError("burst_size must not be negative and burst_every_seconds must be positive")

    def due_at(self, index: int) -> float:
        """Seconds after the start at which record ``index`` (0-based) may be sent."""
        if self.rate is None:
            return 0.0
        if not self.burst_every_seconds or not self.burst_size:
            return index / self.rate
        per_period = self.burst_size + math.floor(self.rate * self.burst_every_seconds)
        period, within = divmod(index, per_period)
        steady = max(0, within - self.burst_size + 1)
        return period * self.burst_every_seconds + steady / self.rate


class Sink(Protocol):
    def send(self, record: Transaction) -> None: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


class FileSink:
    """JSON-lines files of at most ``records_per_file`` records, each written under a hidden temporary name
    (``.<name>.tmp``, which Spark's file source ignores) and then renamed: readers only ever see complete files."""

    def __init__(self, directory: str | Path, records_per_file: int = 1000, run_id: str | None = None) -> None:
        if records_per_file < 1:
            raise ValueError("records_per_file must be at least 1")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.records_per_file = records_per_file
        self.run_id = run_id or f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:8]}"
        self.files: list[Path] = []
        self._buffer: list[str] = []

    def send(self, record: Transaction) -> None:
        self._buffer.append(to_json(record))
        if len(self._buffer) >= self.records_per_file:
            self.flush()

    def flush(self) -> None:
        """Write what is buffered as one complete file (nothing if the buffer is empty)."""
        if not self._buffer:
            return
        final = self.directory / f"transactions-{self.run_id}-{len(self.files):06d}.jsonl"
        temporary = self.directory / f".{final.name}.tmp"
        with temporary.open("w", encoding="utf-8") as out:
            out.write("\n".join(self._buffer) + "\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, final)
        self.files.append(final)
        self._buffer.clear()

    def close(self) -> None:
        self.flush()


class KafkaSink:
    """A kafka-python producer: key = payerId, value = the record's JSON. Creates the topic when missing."""

    def __init__(self, settings: Settings, topic: str | None = None) -> None:
        from kafka import KafkaProducer

        self.topic = topic or settings.kafka.topics.transactions
        ensure_topics(settings, [self.topic])
        self._producer: Any = KafkaProducer(**python_client_config(settings), acks="all", linger_ms=20)

    def send(self, record: Transaction) -> None:
        key = None if record.get("payerId") is None else str(record["payerId"]).encode()
        self._producer.send(self.topic, key=key, value=to_json(record).encode())

    def flush(self) -> None:
        self._producer.flush()

    def close(self) -> None:
        self._producer.flush()
        self._producer.close()


def run(
    records: Iterable[Transaction],
    sink: Sink,
    plan: RatePlan,
    *,
    count: int | None = None,
    stop: threading.Event | None = None,
    flush_every_seconds: float = 2.0,
) -> int:
    """Send records to the sink at the plan's pace until ``count`` are sent or ``stop`` is set; return how many.

    The sink is flushed every ``flush_every_seconds`` (so a slow stream still lands files) and closed at the end.
    The schedule starts when the first record is ready: the time to make it (a generator's set-up) is not a delay
    the next records would catch up on, faster than the pace.
    """
    stop = stop or threading.Event()
    last_flush = last_log = time.monotonic()
    started: float | None = None
    sent = 0
    try:
        for record in itertools.islice(records, count):
            now = time.monotonic()
            started = now if started is None else started
            wait = started + plan.due_at(sent) - now
            if (wait > 0 and stop.wait(wait)) or stop.is_set():
                break
            sink.send(record)
            sent += 1
            now = time.monotonic()
            if now - last_flush >= flush_every_seconds:
                sink.flush()
                last_flush = now
            if now - last_log >= 10:
                log.info("generate: %d records sent (eventTime %s)", sent, record.get("eventTime"))
                last_log = now
    finally:
        sink.close()
    return sent


@contextmanager
def stop_on_signals() -> Iterator[threading.Event]:
    """An Event set by SIGINT or SIGTERM while the block runs (the previous handlers come back after)."""
    stop = threading.Event()

    def handle(signum: int, frame: FrameType | None) -> None:
        log.info("generate: signal %d, stopping", signum)
        stop.set()

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
