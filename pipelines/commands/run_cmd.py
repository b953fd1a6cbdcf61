"""``fraudlake run``: the streaming engine (files, Kafka or a Delta table -> bronze, state, alerts).

Examples::

    fraudlake run                              # continuous, landing folder, until SIGTERM / Ctrl-C
    fraudlake run --once                       # everything available now, then stop (scheduled jobs)
    fraudlake run --source kafka --alerts-to-kafka
    fraudlake run --source delta --input /lake/raw_transactions --once
"""

from __future__ import annotations

import argparse
from typing import Any

from pipelines.commands.context import settings_from, spark_from
from pipelines.engine.job import EngineRun, run_engine
from pipelines.engine.sources import SOURCES


def register(subparsers: Any, parent: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser("run", parents=[parent], help="run the streaming engine")
    parser.add_argument("--source", choices=SOURCES, default="files", help="where transactions come from")
    parser.add_argument(
        "--input",
        help="files: the landing folder (default <lakehouse>/_landing/transactions); kafka: the topic; "
        "delta: the table path (required)",
    )
    parser.add_argument("--once", action="store_true", help="process what is available now, then stop")
    parser.add_argument("--alerts-to-kafka", action="store_true", default=None, help="also send alerts to Kafka")
    parser.add_argument("--max-files-per-trigger", type=int, help="files source: at most N files per micro-batch")
    parser.add_argument("--checkpoint", help="checkpoint folder (default <lakehouse>/_checkpoints/engine-<source>)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    spark = spark_from(settings, "engine")
    run_engine(
        spark,
        settings,
        EngineRun(
            source=args.source,
            input_path=args.input,
            once=args.once,
            alerts_to_kafka=args.alerts_to_kafka,
            max_files_per_trigger=args.max_files_per_trigger,
            checkpoint=args.checkpoint,
        ),
    )
    return 0
