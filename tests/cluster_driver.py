"""A driver process for tests/test_cluster.py: one random contract scenario through the engine, on a cluster.

Run as ``python tests/cluster_driver.py CONF LAKEHOUSE SEED BATCHES RESULT_JSON``: the settings in CONF point
``spark.master`` at a standalone cluster (``fraudlake cluster start`` writes such a file). The driver waits for its
executors, then runs the scenario's micro-batches through ``BatchHandler`` with the rules changing between them,
exactly as tests/test_engine_contract_random.py does in the local session, and writes what the test checks
(master, executors, per-batch counts) to RESULT_JSON. The test compares the alerts with the reference itself.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from contract_scenarios import put_batch_rules, scenario, scenario_settings
from engine_fixtures import raw_frame

from delta_tables.catalog import init_lakehouse
from pipelines.base.settings import load_settings
from pipelines.base.spark_session import get_spark
from pipelines.engine.batch_handler import BatchHandler

ROWS_PER_BATCH = 30
# The executors live for one short scenario: C1-compiled code is ready sooner, and the C2 compiler threads of four
# JVMs on two cores would compete with the tasks (measured: 88 -> 65 s for the driver's work). Semantics unchanged.
SHORT_LIVED_JVM = "-XX:TieredStopAtLevel=1"


def main(conf: str, lakehouse: str, seed: int, batches: int, result: Path) -> None:
    started = time.monotonic()
    case = scenario(seed, batches=batches, rows_per_batch=ROWS_PER_BATCH)
    settings = scenario_settings(load_settings(conf), case, lakehouse)
    extra = {**settings.spark.extra_conf, "spark.executor.extraJavaOptions": SHORT_LIVED_JVM}
    settings = settings.model_copy(update={"spark": settings.spark.model_copy(update={"extra_conf": extra})})
    spark = get_spark(settings, app_name=f"fraudlake-cluster-contract-{seed}")
    context = spark.sparkContext
    deadline = time.monotonic() + 120
    while context._jsc.sc().getExecutorMemoryStatus().size() < 3 and time.monotonic() < deadline:  # + the driver
        time.sleep(0.5)
    executors = context._jsc.sc().getExecutorMemoryStatus().size() - 1
    ready = time.monotonic()
    init_lakehouse(spark, settings)
    handler = BatchHandler(settings, app_id=f"engine-cluster-{seed}", report=lambda line: print(line, flush=True))
    counts, seconds = [], [round(ready - started, 1)]
    for batch_no, batch in enumerate(case.batches):
        put_batch_rules(spark, settings, case, batch_no)
        counts.append(handler.process(raw_frame(spark, [*batch.transactions, *batch.invalid]), batch_no))
        seconds.append(round(time.monotonic() - started - sum(seconds), 1))
    report = {"master": context.master, "executors": executors, "counts": counts, "seconds": seconds}
    result.write_text(json.dumps(report))
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), Path(sys.argv[5]))
