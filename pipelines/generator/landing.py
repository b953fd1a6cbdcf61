"""The demo's landing files: generated transactions with injected fraud, ending about now, and two malformed records.

Example::

    episodes = generate_landing(settings, count=4000, files=2, fraud_rate=0.004, seed=7)
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path

from pipelines.base.settings import Settings
from pipelines.generator.sinks import FileSink
from pipelines.generator.transactions import FraudRates, GeneratorConfig, TransactionGenerator


def generate_landing(settings: Settings, *, count: int, files: int, fraud_rate: float, seed: int) -> dict[str, int]:
    """About ``count`` transactions ending about now, in ``files`` landing files, two of them malformed."""
    events_per_second = 2.0  # ~33 minutes of event time for 4000: every pattern's episode fits in it
    start_ms = int(time.time() * 1000) - int(count / events_per_second * 1000)
    config = GeneratorConfig(
        seed=seed,
        start_ms=start_ms,
        events_per_second=events_per_second,
        payers=500,
        beneficiaries=2000,
        fraud=FraudRates.split(fraud_rate),
    )
    generator = TransactionGenerator(config)
    records = [*itertools.islice(generator, count), *generator.drain()]  # drain: the episodes in progress
    landing = Path(settings.landing_path("transactions"))
    sink = FileSink(landing, records_per_file=-(-len(records) // files))
    for record in records:
        sink.send(record)
    sink.close()
    # Two malformed records, in the last file: they go to quarantine, the rest of that batch goes on.
    last = sink.files[-1]
    with last.open("a", encoding="utf-8") as out:
        out.write(
            '{"transactionId": "broken", "eventTime": \n{"transactionId": "no-amount", "eventTime": 1700000000000}\n'
        )
    return dict(generator.episodes)
