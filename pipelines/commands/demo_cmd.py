"""``fraudlake demo``: the main job end to end on embedded defaults (no Kafka needed).

Sets up a lakehouse (by default a fresh ``<work_dir>/demo-lakehouse``), loads the sample rules
(conf/sample_rules.json, the seed's rule among them) through rules CDC, generates transactions with injected
fraud patterns into the landing folder, runs the engine until it has caught up (``fraudlake run --once``) and
prints a summary: rules, transactions, alerts per rule, latency percentiles. Then a live phase: the engine runs
continuously while transactions arrive at a fixed rate, and the demo prints what a user would see — ingestion
to alerts committed, p50/p95/p99 over every live transaction (``pipelines.bench.live_latency``). With ``--dq``,
last, the data-quality suites on the demo's lakehouse, as ``fraudlake dq`` runs them but in the demo's warm
session (``make dq-ci``): ``fraudlake dq`` in a JVM of its own took ~40 s, in the demo's ~18 s.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from delta_tables.catalog import init_lakehouse
from pipelines.base.settings import LAKEHOUSE_ENV, REPO_ROOT, Settings
from pipelines.bench.live_latency import format_live, run_live
from pipelines.commands.context import settings_from, spark_from
from pipelines.commands.dq_cmd import validate_and_report
from pipelines.engine.job import EngineRun, run_engine
from pipelines.engine.run_summary import engine_summary, format_summary
from pipelines.generator.landing import generate_landing
from rules_cdc.manage import edit_rules
from rules_cdc.rule_model import Rule, parse_rule

SAMPLE_RULES = REPO_ROOT / "conf" / "sample_rules.json"


def register(subparsers: Any, parent: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser("demo", parents=[parent], help="run the main job end to end on embedded defaults")
    parser.add_argument("--transactions", type=int, default=4000, help="how many to generate (default 4000)")
    parser.add_argument("--files", type=int, default=2, help="landing files = micro-batches (default 2)")
    parser.add_argument("--fraud-rate", type=float, default=0.004, help="fraud episodes per arrival")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--live-rate", type=float, default=500, help="live phase: transactions/s (default 500)")
    parser.add_argument("--live-seconds", type=float, default=20, help="live phase: seconds of input (0: none)")
    parser.add_argument(
        "--dq",
        action="store_true",
        help="then validate the lakehouse as `fraudlake dq` does, in this session; exit 1 on a failure",
    )
    parser.set_defaults(handler=run)


def load_rules(spark: SparkSession, settings: Settings, path: Path = SAMPLE_RULES) -> list[Rule]:
    """Validate the rules in a JSON array file and apply them through rules CDC (Debezium-style ``c`` events,
    the same MERGE the rules job runs; ``fraudlake rules history`` shows them)."""
    rules = [parse_rule(item, settings.transaction_schema) for item in json.loads(path.read_text())]
    edit_rules(spark, settings, "upsert", rules=rules)
    return rules


def run(args: argparse.Namespace) -> int:
    started = time.monotonic()
    settings = settings_from(args)
    if not args.lakehouse and not _env_lakehouse():
        settings = settings.with_lakehouse(str(Path(settings.work_dir) / "demo-lakehouse"))
        shutil.rmtree(settings.lakehouse_root, ignore_errors=True)  # the demo's own folder: start fresh
    spark = spark_from(settings, "demo")
    init_lakehouse(spark, settings)
    rules = load_rules(spark, settings)
    print(f"demo: lakehouse {settings.lakehouse_root}; {len(rules)} sample rules loaded from {SAMPLE_RULES.name}")
    episodes = generate_landing(
        settings, count=args.transactions, files=args.files, fraud_rate=args.fraud_rate, seed=args.seed
    )
    print(
        f"demo: about {args.transactions} transactions (+2 malformed) in {settings.landing_path('transactions')};"
        f" fraud episodes injected: {', '.join(f'{k} {v}' for k, v in sorted(episodes.items())) or 'none'}"
    )
    run_engine(spark, settings, EngineRun(source="files", once=True, max_files_per_trigger=1))
    print(format_summary(engine_summary(spark, settings)))
    print("demo: the backlog's latency counts from each file's landing time, so it includes the wait for Spark")
    if args.live_seconds > 0:
        print(f"demo: live phase: the engine runs continuously while {args.live_rate:,.0f} transactions/s arrive")
        # Payers at about one payment every two minutes, as the generator's (a person's rate, not a bot's).
        keys = max(500, int(args.live_rate * 120))
        live = run_live(spark, settings, source="files", rate=args.live_rate, seconds=args.live_seconds, keys=keys)
        print(f"demo: live: {format_live(live)}")
        print(
            "demo: live latency = each transaction's landing-file time -> its micro-batch's alerts commit, over"
            " every live transaction (the first live micro-batch included; the JVM is warm from the backlog)"
        )
    status = 0
    if args.dq:
        status = validate_and_report(spark, settings)
    print(f"demo: done in {time.monotonic() - started:.0f}s")
    return status


def _env_lakehouse() -> bool:
    return bool(os.environ.get(LAKEHOUSE_ENV))
