"""``fraudlake generate``: realistic transactions with labelled fraud patterns, to the landing folder or Kafka.

Runs until ``--count`` records are sent or SIGINT/SIGTERM; a ``--seed`` (printed when not given) and
``--start-ms`` reproduce a run exactly.
"""

from __future__ import annotations

import argparse
import random
import time
from typing import Any

from pipelines.commands.context import settings_from
from pipelines.generator.sinks import FileSink, KafkaSink, RatePlan, Sink, run, stop_on_signals
from pipelines.generator.transactions import FraudRates, GeneratorConfig, TransactionGenerator

DEFAULT_RATE = 10.0


def register(subparsers: Any, parent: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser("generate", parents=[parent], help="generate transactions with fraud patterns")
    parser.add_argument("--sink", choices=["files", "kafka"], default="files", help="where to send (default: files)")
    parser.add_argument("--count", type=int, help="stop after N records (default: run until stopped)")
    parser.add_argument("--rate", type=float, default=DEFAULT_RATE, help="records per second; 0 = unlimited")
    parser.add_argument("--seed", type=int, help="random seed (default: a fresh one, printed)")
    parser.add_argument("--output", help="landing folder (default: the lakehouse's _landing/transactions)")
    parser.add_argument("--keys", type=int, default=10_000, help="number of payers and of beneficiaries")
    parser.add_argument("--start-ms", type=int, help="first eventTime, epoch ms (default: now)")
    parser.add_argument("--fraud-rate", type=float, default=0.002, help="fraud episodes per arrival, all patterns")
    parser.add_argument("--event-rate", type=float, help="arrivals per second of event time (default: --rate, or 10)")
    parser.add_argument("--jitter-ms", type=int, default=0, help="move eventTimes back by up to this (out of order)")
    parser.add_argument("--records-per-file", type=int, default=1000, help="records per landing file")
    parser.add_argument("--burst-every", type=float, help="seconds between bursts")
    parser.add_argument("--burst-size", type=int, default=0, help="records sent at once at each burst")
    parser.set_defaults(handler=run_generate)


def run_generate(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    start_ms = args.start_ms if args.start_ms is not None else int(time.time() * 1000)
    rate = args.rate if args.rate and args.rate > 0 else None
    config = GeneratorConfig(
        seed=seed,
        start_ms=start_ms,
        events_per_second=args.event_rate or rate or DEFAULT_RATE,
        payers=args.keys,
        beneficiaries=args.keys,
        fraud=FraudRates.split(args.fraud_rate),
        jitter_ms=args.jitter_ms,
    )
    plan = RatePlan(rate=rate, burst_every_seconds=args.burst_every, burst_size=args.burst_size)
    sink: Sink
    if args.sink == "kafka":
        sink = KafkaSink(settings)
        target = f"kafka topic {sink.topic} on {settings.kafka.bootstrap_servers}"
    else:
        sink = FileSink(args.output or settings.landing_path("transactions"), args.records_per_file)
        target = f"{sink.directory}"
    print(f"generate: seed {seed}, start-ms {start_ms}, to {target}", flush=True)
    generator = TransactionGenerator(config)
    with stop_on_signals() as stop:
        sent = run(generator, sink, plan, count=args.count, stop=stop)
    episodes = ", ".join(f"{p} {n}" for p, n in sorted(generator.episodes.items())) or "none"
    print(f"generate: {sent} records sent; fraud episodes started: {episodes}", flush=True)
    return 0
