"""The load a campaign holds: the seeded generator (pipelines.generator) at a fixed rate into the transactions
topic, from a thread, through a producer that never stops the pacing.

The generator's own Kafka sink flushes every two seconds, which blocks while the broker is down; under a fault
campaign that would stop the load exactly when it matters. This sink only hands records to the (idempotent,
``acks=all``) producer and counts the acknowledgements and the failures in its callbacks; the topic itself is
the record of what was accepted.

Example::

    load = Load(settings, rate=20, seed=3); load.start(); ...; load.stop(); load.acked
"""

from __future__ import annotations

import threading
import time
from typing import Any

from kafka import KafkaProducer

from pipelines.base.kafka_clients import ensure_topics, python_client_config
from pipelines.base.settings import Settings
from pipelines.generator.sinks import RatePlan, run
from pipelines.generator.transactions import FraudRates, GeneratorConfig, Transaction, TransactionGenerator, to_json


class CountingSink:
    """Hands records to the producer; counts what the broker acknowledged and what failed."""

    def __init__(self, settings: Settings) -> None:
        self.topic = settings.kafka.topics.transactions
        ensure_topics(settings, [self.topic])
        # max_block_ms: with the broker down and the buffer full, give up on a record rather than stall the load.
        self._producer: Any = KafkaProducer(
            **python_client_config(settings), acks="all", linger_ms=20, max_block_ms=5000
        )
        self.offered = self.acked = self.failed = 0
        self._lock = threading.Lock()

    def _count(self, name: str) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + 1)

    def send(self, record: Transaction) -> None:
        self.offered += 1
        key = None if record.get("payerId") is None else str(record["payerId"]).encode()
        try:
            future = self._producer.send(self.topic, key=key, value=to_json(record).encode())
        except Exception:
            self._count("failed")
            return
        future.add_callback(lambda _meta: self._count("acked"))
        future.add_errback(lambda _error: self._count("failed"))

    def flush(self) -> None:
        """Nothing: the producer sends in the background; a blocking flush would stall the load in an outage."""

    def close(self) -> None:
        try:
            self._producer.flush(timeout=120)
        finally:
            self._producer.close(timeout=10)


class Load:
    """The generator in a thread at ``rate`` transactions/s with injected fraud, until ``stop``."""

    def __init__(self, settings: Settings, *, rate: float, seed: int, fraud_rate: float) -> None:
        config = GeneratorConfig(
            seed=seed,
            start_ms=int(time.time() * 1000),
            events_per_second=rate,
            payers=2000,
            beneficiaries=2000,
            fraud=FraudRates.split(fraud_rate),
        )
        self.generator = TransactionGenerator(config)
        self.sink = CountingSink(settings)
        self.rate = rate
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-load", daemon=True)
        self.started = self.stopped = 0.0

    def _run(self) -> None:
        run(self.generator, self.sink, RatePlan(rate=self.rate), stop=self._stop, flush_every_seconds=3600)

    def start(self) -> None:
        self.started = time.monotonic()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=180)
        self.stopped = time.monotonic()

    @property
    def seconds(self) -> float:
        return (self.stopped or time.monotonic()) - self.started
