"""``fraudlake chaos``: a fault campaign over the whole live path, on daemons of its own (see pipelines/chaos).

Examples::

    fraudlake chaos                                   # 120 s at 10 tx/s, each part killed once, a random seed
    fraudlake chaos --seconds 600 --faults-per-part 3 --rate 20 --seed 42
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path
from typing import Any

from pipelines.base.spark_session import get_spark
from pipelines.chaos.campaign import run_campaign
from pipelines.chaos.plan import PARTS, ChaosConfig
from pipelines.chaos.report import as_markdown, write_report
from pipelines.chaos.stack import live_stack, own_daemons, remove_connector
from pipelines.commands.context import settings_from


def register(subparsers: Any, parent: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser("chaos", parents=[parent], help="a fault campaign over the live path")
    parser.add_argument("--seconds", type=float, default=120.0, help="how long the load runs (default 120)")
    parser.add_argument("--rate", type=float, default=10.0, help="transactions per second (default 10)")
    parser.add_argument("--seed", type=int, help="random seed of the fault plan and the load (default: printed)")
    parser.add_argument("--faults-per-part", type=int, default=1, help="how many times each part is killed")
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS), help="parts to kill")
    parser.add_argument("--folder", type=Path, help="work folder (default <work_dir>/chaos/<time>)")
    parser.set_defaults(handler=run_chaos)


def run_chaos(args: argparse.Namespace) -> int:
    base = settings_from(args)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    config = ChaosConfig(
        seconds=args.seconds, rate=args.rate, seed=seed, faults_per_part=args.faults_per_part, parts=tuple(args.parts)
    )
    folder = (args.folder or Path(base.work_dir) / "chaos" / time.strftime("%Y%m%dT%H%M%S")).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    print(f"chaos: seed {seed}; work folder {folder}", flush=True)
    with own_daemons(folder) as (broker, cluster, worker):
        stack = live_stack(base, folder, broker, cluster, worker)
        try:
            report = run_campaign(
                stack, config, spark=lambda: get_spark(stack.settings, app_name="fraudlake-chaos-checks")
            )
        finally:
            stack.stop_jobs()
            remove_connector(stack)
    json_path, md_path = write_report(report, folder)
    print(as_markdown(report), flush=True)
    print(f"chaos: report {json_path} and {md_path}", flush=True)
    return 0 if report.passed else 1
