"""The demo's landing files: generated transactions with injected fraud, ending about now, and two malformed records.

The episodes still in progress at the last arrival are completed (an amount spike's history spans up to half an
hour), and the whole run is then moved back in time so that its last record is now, not in the future: data quality
refuses event times more than ``quality.max_future_skew_minutes`` after their ingestion.

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
    now_ms = int(time.time() * 1000)
    start_ms = now_ms - int(count / events_per_second * 1000)
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
    overshoot = max((r["eventTime"] for r in records), default=now_ms) - now_ms
    for record in records if overshoot > 0 else ():
        record["eventTime"] -= overshoot
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
