"""The engine beside the floor of the stack, on the same files in one process: median foreachBatch seconds.

Usage: .venv/bin/python -m pipelines.bench.floor_compare --rows 2000 --batches 8 [--conf k=v ...]
(the quick inner-loop version of the bench's floor rows; see pipelines/bench/floor.py).
"""

from __future__ import annotations

import argparse
import statistics
import sys

from pipelines.base.settings import REPO_ROOT
from pipelines.bench.engine_workload import add_workload_arguments, engine_lakehouse, fresh_landing, spark_with
from pipelines.bench.floor import FLOOR_KINDS, add_batch_seconds, run_floor
from pipelines.engine.job import EngineRun, start_engine


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_workload_arguments(parser)
    parser.add_argument("--no-floor", action="store_true", help="engine only")
    args = parser.parse_args()
    base, spark = spark_with(args.conf, "fraudlake-floor-compare")
    work = (REPO_ROOT / ".work" / "floor-compare").resolve()
    landing = fresh_landing(work, args)
    medians = {}
    for kind in () if args.no_floor else FLOOR_KINDS:
        result = run_floor(spark, landing, work / kind.replace("+", "-"), kind=kind)
        medians[kind] = result.median_batch_seconds
        print(f"floor {kind:13s} batches {[round(s, 2) for s in result.batch_seconds]}", flush=True)
    settings = engine_lakehouse(spark, base, work, args)
    run = EngineRun(source="files", input_path=str(landing), once=True, max_files_per_trigger=1)
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
