"""The engine beside the floor of the stack, on the same files in one process: median foreachBatch seconds.

Usage: .venv/bin/python scripts/floor_compare.py --rows 2000 --batches 8 [--conf k=v ...]
(the quick inner-loop version of the bench's floor rows; see pipelines/bench/floor.py).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from pipelines.bench.engine_runs import lakehouse_for  # noqa: E402
from pipelines.bench.floor import FLOOR_KINDS, add_batch_seconds, run_floor  # noqa: E402
from pipelines.bench.workload import Workload, rule_set, transactions, write_batches  # noqa: E402
from pipelines.engine.job import EngineRun, start_engine  # noqa: E402
from pipelines.settings import load_settings  # noqa: E402
from pipelines.spark_session import get_spark  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--rules", type=int, default=20)
    parser.add_argument("--states", type=int, default=4)
    parser.add_argument("--no-floor", action="store_true", help="engine only")
    parser.add_argument("--conf", action="append", default=[])
    args = parser.parse_args()
    base = load_settings()
    extra = dict(item.split("=", 1) for item in args.conf)
    base = base.model_copy(update={"spark": base.spark.model_copy(update={"extra_conf": extra})})
    spark = get_spark(base, "fraudlake-floor-compare")
    work = (REPO_ROOT / ".work" / "floor-compare").resolve()
    shutil.rmtree(work, ignore_errors=True)
    workload = Workload(count=args.rows * args.batches, keys=args.keys, rate_per_second=max(50.0, args.keys / 6))
    write_batches(transactions(workload), work / "landing", batch_size=args.rows)
    medians = {}
    for kind in () if args.no_floor else FLOOR_KINDS:
        result = run_floor(spark, work / "landing", work / kind.replace("+", "-"), kind=kind)
        medians[kind] = result.median_batch_seconds
        print(f"floor {kind:13s} batches {[round(s, 2) for s in result.batch_seconds]}", flush=True)
    settings = lakehouse_for(
        base, str(work / "lakehouse"), rule_set(args.rules, window_minutes=60, states=args.states), spark=spark
    )
    run = EngineRun(source="files", input_path=str(work / "landing"), once=True, max_files_per_trigger=1)
    query = start_engine(spark, settings, run, report=lambda line: print(line[:100]))
    query.awaitTermination()
    seconds = add_batch_seconds(query)
    engine = statistics.median(seconds[1:])
    print(f"engine               batches {[round(s, 2) for s in seconds]}")
    if args.no_floor:
        print(f"median: engine {engine:.2f} s")
        spark.stop()
        return 0
    floor = medians["append+merge"]
    print(
        f"median: engine {engine:.2f} s, append+merge {floor:.2f} s, append {medians['append']:.2f} s;"
        f" engine / append+merge = {engine / floor:.2f}x"
    )
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
