"""Profile engine micro-batches: every Spark SQL execution of a ``--once`` run, from the Spark UI's REST API.

Usage (from the repository root, after scripts/setup.sh)::

    .venv/bin/python scripts/profile_batches.py --rows 20000 --batches 3 [--conf spark.x=y ...] [--json out.json]

A fresh lakehouse under .work/profile (20 rules in 4 states, 1-hour windows, 10,000 keys), a backlog of
``--batches`` files of ``--rows`` transactions, then the engine over it with the UI on. Prints each batch's
progress line, the per-step medians of ``batch_log.metrics`` and each SQL execution (duration, plan operators),
the longest first; ``--json`` also writes the executions with their per-operator metrics (what
docs/benchmarks.md's profile notes were read from).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import urllib.request
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from pipelines.bench.engine_runs import lakehouse_for, run_backlog  # noqa: E402
from pipelines.bench.workload import Workload, rule_set, transactions, write_batches  # noqa: E402
from pipelines.settings import load_settings  # noqa: E402
from pipelines.spark_session import get_spark  # noqa: E402

SKIPPED_NODES = {"WholeStageCodegen", "InputAdapter", "Project", "Filter", "ColumnarToRow"}


def _get(url: str) -> Any:
    with urllib.request.urlopen(url) as response:
        return json.load(response)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000, help="transactions per micro-batch")
    parser.add_argument("--batches", type=int, default=3, help="micro-batches (the first warms up)")
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--conf", action="append", default=[], help="extra Spark conf key=value")
    parser.add_argument("--json", help="write the executions (with operator metrics) here")
    parser.add_argument("--top", type=int, default=25, help="how many executions to list")
    args = parser.parse_args()

    base = load_settings()
    extra = dict(item.split("=", 1) for item in args.conf)
    spark_conf = base.spark.model_copy(update={"ui_enabled": True, "extra_conf": {**base.spark.extra_conf, **extra}})
    base = base.model_copy(update={"spark": spark_conf})
    spark = get_spark(base, "fraudlake-profile")
    work = (REPO_ROOT / ".work" / "profile").resolve()
    shutil.rmtree(work, ignore_errors=True)
    settings = lakehouse_for(base, str(work / "lakehouse"), rule_set(20, window_minutes=60, states=4), spark=spark)
    workload = Workload(count=args.rows * args.batches, keys=args.keys, rate_per_second=max(50.0, args.keys / 6))
    write_batches(transactions(workload), work / "landing", batch_size=args.rows)

    api = f"{spark.sparkContext.uiWebUrl}/api/v1/applications/{spark.sparkContext.applicationId}/sql"
    before = len(_get(f"{api}?length=100000&details=false"))
    result = run_backlog(spark, settings, work / "landing", report=print)
    print(f"sustained {result.sustained_tps:,.0f} tx/s; batch seconds {[round(s, 1) for s in result.batch_seconds]}")
    print("median ms per step (batches after the first):", {k: v for k, v in result.steps.items() if "P" not in k})
    executions = _get(f"{api}?length=100000&details=true&planDescription=false")[before:]
    print(f"{len(executions)} SQL executions; the longest (the foreachBatch one spans the whole batch):")
    for execution in sorted(executions, key=lambda e: -e["duration"])[: args.top]:
        nodes = [n["nodeName"] for n in execution.get("nodes", []) if n["nodeName"].split(" (")[0] not in SKIPPED_NODES]
        label = execution["description"].splitlines()[0][:28]
        print(f"{execution['duration']:>8,} ms  {label:28}  {' '.join(nodes)[:150]}")
    if args.json:
        Path(args.json).write_text(json.dumps(executions, indent=1), encoding="utf-8")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
