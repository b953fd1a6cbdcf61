"""Profile the engine's foreachBatch handler in-process, batch by batch: wall time, driver CPU, JVM CPU.

Usage (from the repository root, after scripts/setup.sh)::

    .venv/bin/python -m pipelines.bench.profile_handler --rows 2000 --batches 8 [--cprofile out.prof] [--conf k=v ...]

A fresh lakehouse under .work/profile-handler (20 rules in 4 states, 1-hour windows, 10,000 keys, as the bench's
throughput runs; ``--kinds mixed``: the bench's rule-kinds set, a quarter COUNT_DISTINCT and a quarter relative limits),
then ``BatchHandler.process`` called directly on each JSON-lines file read as a RAW_SCHEMA frame (no streaming query
around it). Per batch it prints wall seconds, the Python driver's CPU seconds and the JVM's CPU seconds (``/proc``),
which stay meaningful on a loaded machine where wall time does not; ``--cprofile``
writes a cProfile of the batches after the first (open with ``python -m pstats``). ``--rule-change-at N`` widens the
first rule's window to 2 hours before batch N, as an analyst would: that batch drops and rebuilds its state from
bronze (state maintenance) before it evaluates.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import re
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

from delta_tables.rules_seed import put_rule_rows
from pipelines.base.settings import REPO_ROOT, Settings
from pipelines.bench.driver_memory import heap_after_gc
from pipelines.bench.engine_workload import (
    add_workload_arguments,
    engine_lakehouse,
    fresh_landing,
    raw_file_frame,
    spark_with,
    workload_rules,
)
from pipelines.engine.batch_handler import BatchHandler
from rules_cdc.rule_model import Rule
from rules_cdc.rule_rows import rule_to_row


def _jvm_cpu_seconds() -> float:
    """CPU seconds of the Java children of this process (the Spark driver JVM), exited threads included."""
    ticks, total = os.sysconf("SC_CLK_TCK"), 0.0
    for pid in _java_children():
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(stat[11]) + int(stat[12])) / ticks
    return total


def _java_children() -> list[str]:
    """The pids of this process's Java children (the Spark driver JVM)."""
    pids = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if parent == os.getpid() and b"java" in cmd:
            pids.append(pid)
    return pids


THREAD_KINDS = (("JIT", ("Compiler",)), ("tasks", ("Executor task",)), ("GC", ("GC", "G1", "Conc#")))


def _jvm_thread_ticks() -> Counter[str]:
    """CPU time so far (clock ticks) of the driver JVM's live threads by kind: the JIT's compiler threads, the task
    threads, GC, and the rest by name (``Thread-N``: py4j's, where the driver plans and commits)."""
    spent = Counter[str]()
    for pid in _java_children():
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                name = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
                stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            kind = next((k for k, marks in THREAD_KINDS if any(m in name for m in marks)), re.sub(r"\d+", "N", name))
            spent[kind] += int(stat[11]) + int(stat[12])
    return spent


def _codegen(spark: Any) -> tuple[int, float]:
    """(classes compiled, compilation ms) so far: Spark's CodegenMetrics histograms."""
    metrics = spark._jvm.org.apache.spark.metrics.source.CodegenMetrics
    timer = metrics.METRIC_COMPILATION_TIME()
    return int(timer.getCount()), float(
        timer.getSnapshot().getValues().__len__() and sum(timer.getSnapshot().getValues())
    )


def _stages(spark: Any) -> tuple[int, int, int]:
    """(SQL executions, stages, tasks) so far, from the Spark UI's REST API."""
    api = f"{spark.sparkContext.uiWebUrl}/api/v1/applications/{spark.sparkContext.applicationId}"
    with urllib.request.urlopen(f"{api}/stages") as response:
        stages = json.load(response)
    with urllib.request.urlopen(f"{api}/sql?length=100000&details=false") as response:
        executions = len(json.load(response))
    return executions, len(stages), sum(s["numTasks"] for s in stages)


def _delta(now: tuple[int, float], before: tuple[int, float]) -> str:
    return f"{now[0] - before[0]} classes"


def _jvm(spark: Any) -> Any:
    """The driver's JVM gateway (present on a classic, non-Connect session)."""
    jvm = spark._jvm
    assert jvm is not None, "profile_handler needs a classic SparkSession"
    return jvm


def _widen_first_rule(spark: Any, settings: Settings, rules: list[Rule]) -> None:
    widened = rules[0].model_copy(update={"window_minutes": 2 * rules[0].window_minutes})
    row = rule_to_row(widened, source_position="bench:2", source_op="u", source_ts_ms=None)
    put_rule_rows(spark, settings.table_path("rules"), [row])
    print(f"rule {widened.rule_id}: window {rules[0].window_minutes} -> {widened.window_minutes} min", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_workload_arguments(parser)
    parser.add_argument("--cprofile", help="write a cProfile of the batches after the first here")
    parser.add_argument("--stages", action="store_true", help="list the Spark stages of the last batch")
    parser.add_argument("--sql", help="write the last batch's SQL executions (plan nodes with metrics) here")
    parser.add_argument("--jfr", help="write a Java Flight Recording of the JVM over the batches after the second")
    parser.add_argument("--rule-change-at", type=int, help="widen the first rule's window before this batch")
    parser.add_argument(
        "--heap", action="store_true", help="after each batch: the JVM's heap after a full GC, and its cached blocks"
    )
    args = parser.parse_args()

    base, spark = spark_with(args.conf, "fraudlake-profile-handler", ui=True)
    work = (REPO_ROOT / ".work" / "profile-handler").resolve()
    landing = fresh_landing(work, args)
    settings = engine_lakehouse(spark, base, work, args)
    files = sorted(landing.glob("*.jsonl"))
    handler = BatchHandler(settings, app_id="engine-profile", report=print)
    profiler = cProfile.Profile() if args.cprofile else None
    for batch_id, path in enumerate(files):
        if batch_id == args.rule_change_at:
            _widen_first_rule(spark, settings, workload_rules(args))
        raw = raw_file_frame(spark, path)
        stages = _stages(spark)
        last_execution, last_stage = stages[0], stages[1]
        wall, cpu, jvm, compiled = time.perf_counter(), time.process_time(), _jvm_cpu_seconds(), _codegen(spark)
        threads = _jvm_thread_ticks()
        if profiler and batch_id:
            profiler.enable()
        if args.jfr and batch_id == 2:
            recording = _jvm(spark).jdk.jfr.Recording(_jvm(spark).jdk.jfr.Configuration.getConfiguration("profile"))
            recording.start()
        handler.process(raw, batch_id)
        if profiler:
            profiler.disable()
        spent = " / ".join(str(a - b) for a, b in zip(_stages(spark), stages, strict=True))
        print(
            f"  batch {batch_id}: wall {time.perf_counter() - wall:.2f} s, python cpu {time.process_time() - cpu:.2f}"
            f" s, jvm cpu {_jvm_cpu_seconds() - jvm:.2f} s, codegen {_delta(_codegen(spark), compiled)},"
            f" {spent} executions / stages / tasks; steps {handler.last_steps}",
            flush=True,
        )
        by_thread, ticks = _jvm_thread_ticks() - threads, os.sysconf("SC_CLK_TCK")
        print("    jvm cpu by thread: " + ", ".join(f"{k} {v / ticks:.1f} s" for k, v in by_thread.most_common(5)))
        if args.heap:
            print(f"    memory: {heap_after_gc(spark)}", flush=True)
    if args.stages:
        api = f"{spark.sparkContext.uiWebUrl}/api/v1/applications/{spark.sparkContext.applicationId}"
        with urllib.request.urlopen(f"{api}/stages") as response:
            stages = json.load(response)
        last = [s for s in stages if s["stageId"] >= last_stage]
        for stage in sorted(last, key=lambda s: s["stageId"]):
            print(
                f"  stage {stage['stageId']:5d} {stage['status']:8s} tasks {stage['numTasks']:3d}"
                f" run {stage.get('executorRunTime', 0):5d} ms  {stage['name'][:60]}"
            )
    if args.sql:
        api = f"{spark.sparkContext.uiWebUrl}/api/v1/applications/{spark.sparkContext.applicationId}"
        with urllib.request.urlopen(f"{api}/sql?length=100000&details=true&planDescription=true") as response:
            executions = json.load(response)
        Path(args.sql).write_text(json.dumps(executions[last_execution:], indent=1), encoding="utf-8")
    if profiler and args.cprofile:
        profiler.dump_stats(args.cprofile)
    if args.jfr and args.batches > 2:
        recording.stop()
        recording.dump(_jvm(spark).java.io.File(args.jfr).toPath())
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
