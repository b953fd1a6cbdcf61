"""Profile engine micro-batches: every Spark SQL execution of a ``--once`` run, from the Spark UI's REST API.

Usage (from the repository root, after scripts/setup.sh)::

    .venv/bin/python -m pipelines.bench.profile_batches --rows 20000 --batches 3 [--conf k=v ...] [--json out.json]

A fresh lakehouse under .work/profile (20 rules in 4 states, 1-hour windows, 10,000 keys), a backlog of
``--batches`` files of ``--rows`` transactions, then the engine over it with the UI on. Prints each batch's
progress line, the per-step medians of ``batch_log.metrics`` and each SQL execution (duration, plan operators),
the longest first; ``--json`` also writes the executions with their per-operator metrics (what
docs/benchmarks.md's profile notes were read from).
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.request
from pathlib import Path
from typing import Any

from pipelines.base.settings import REPO_ROOT
from pipelines.bench.engine_runs import run_backlog
from pipelines.bench.engine_workload import add_workload_arguments, engine_lakehouse, fresh_landing, spark_with

SKIPPED_NODES = {"WholeStageCodegen", "InputAdapter", "Project", "Filter", "ColumnarToRow"}


def _get(url: str) -> Any:
    with urllib.request.urlopen(url) as response:
        return json.load(response)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_workload_arguments(parser, rows=20_000, batches=3)
    parser.add_argument("--json", help="write the executions (with operator metrics) here")
    parser.add_argument("--top", type=int, default=25, help="how many executions to list")
    args = parser.parse_args()

    base, spark = spark_with(args.conf, "fraudlake-profile", ui=True)
    work = (REPO_ROOT / ".work" / "profile").resolve()
    landing = fresh_landing(work, args)
    settings = engine_lakehouse(spark, base, work, args)

    api = f"{spark.sparkContext.uiWebUrl}/api/v1/applications/{spark.sparkContext.applicationId}/sql"
    before = len(_get(f"{api}?length=100000&details=false"))
    result = run_backlog(spark, settings, landing, report=print)
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
