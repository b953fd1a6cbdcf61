"""What the engine profiling scripts share: Spark with ``--conf key=value`` items added to conf/local.yaml's, and a
work folder with the bench's throughput workload (landing files, one per micro-batch; a lakehouse with its rules).

Imported by the profilers beside it (run as modules: ``python -m pipelines.bench.profile_handler``). Example::

    parser = argparse.ArgumentParser()
    add_workload_arguments(parser)
    args = parser.parse_args()
    base, spark = spark_with(args.conf, "fraudlake-profile", ui=True)
    landing = fresh_landing(work, args)                  # work emptied first
    settings = engine_lakehouse(spark, base, work, args)
"""

from __future__ import annotations

import argparse
import shutil
from collections.abc import Sequence
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pipelines.base.settings import Settings, load_settings
from pipelines.base.spark_session import get_spark
from pipelines.bench.engine_runs import lakehouse_for
from pipelines.bench.workload import (
    KIND_SETS,
    PROFILE_KINDS,
    Workload,
    alerting_rule_set,
    kind_rule_set,
    transactions,
    write_batches,
)
from pipelines.engine.parse_transactions import RAW_COLUMNS
from rules_cdc.rule_model import Rule


def add_workload_arguments(parser: argparse.ArgumentParser, *, rows: int = 2000, batches: int = 8) -> None:
    """``--rows --batches --keys --rules --states --kinds --conf``, with the bench's throughput values as defaults."""
    parser.add_argument("--rows", type=int, default=rows, help="transactions per micro-batch (one landing file each)")
    parser.add_argument("--batches", type=int, default=batches, help="micro-batches (the first warms up)")
    parser.add_argument("--keys", type=int, default=10_000, help="distinct payers")
    parser.add_argument("--rules", type=int, default=20, help="rules, each per payer over 1 hour")
    parser.add_argument("--states", type=int, default=4, help="states the rules share (distinct filters)")
    parser.add_argument(
        "--kinds",
        choices=PROFILE_KINDS,
        default=KIND_SETS[0],
        help="mixed: the bench's rule-kinds set, a quarter of the rules COUNT_DISTINCT and a quarter relative limits"
        " (their limits seldom met; compare with today's kinds at --alert-share 0); distinct, relative: one quarter"
        " only",
    )
    parser.add_argument("--conf", action="append", default=[], help="extra Spark conf key=value")
    parser.add_argument(
        "--alert-share",
        type=float,
        default=0.01,
        help="limits calibrated so that about this share of the transactions alert (0: the bench's seldom-met limits)",
    )


def spark_with(conf: Sequence[str], app_name: str, *, ui: bool = False) -> tuple[Settings, SparkSession]:
    """conf/local.yaml with the ``key=value`` items added to its Spark conf (and the Spark UI on, for its REST API,
    with ``ui``); a session on them."""
    base = load_settings()
    extra = {**base.spark.extra_conf, **dict(item.split("=", 1) for item in conf)}
    spark_settings = base.spark.model_copy(update={"extra_conf": extra, **({"ui_enabled": True} if ui else {})})
    base = base.model_copy(update={"spark": spark_settings})
    return base, get_spark(base, app_name)


def fresh_landing(work: Path, args: argparse.Namespace) -> Path:
    """``work`` emptied, then ``args.batches`` JSON-lines files of ``args.rows`` transactions over ``args.keys``
    payers in ``work/landing`` (returned)."""
    shutil.rmtree(work, ignore_errors=True)
    write_batches(transactions(_workload(args)), work / "landing", batch_size=args.rows)
    return work / "landing"


def _workload(args: argparse.Namespace) -> Workload:
    return Workload.backlog(args.rows * args.batches, args.keys)


def engine_lakehouse(spark: SparkSession, base: Settings, work: Path, args: argparse.Namespace) -> Settings:
    """A fresh lakehouse in ``work/lakehouse`` with ``args.rules`` rules in ``args.states`` states (1-hour
    windows, limits met by ``args.alert_share`` of the workload): the settings that point at it."""
    return lakehouse_for(base, str(work / "lakehouse"), workload_rules(args), spark=spark)


def workload_rules(args: argparse.Namespace) -> list[Rule]:
    """The rules ``engine_lakehouse`` puts in the rules table."""
    if args.kinds != "today":
        return kind_rule_set(args.kinds, args.rules, states=args.states)
    return alerting_rule_set(
        args.rules, _workload(args), window_minutes=60, states=args.states, alert_share=args.alert_share
    )


def raw_file_frame(spark: SparkSession, path: Path) -> DataFrame:
    """A landing file as the engine's raw frame (``RAW_COLUMNS``), as the file source hands it to ``foreachBatch``:
    for calling ``BatchHandler.process`` directly, batch by batch."""
    return (
        spark.read.text(str(path))
        .select(
            F.col("value").alias("raw"),
            F.lit("files").alias("source"),
            F.lit(f"file:{path}").alias("sourceOffset"),
            F.lit(None).cast("int").alias("kafkaPartition"),
            F.lit(None).cast("long").alias("kafkaOffset"),
            F.lit(None).cast("timestamp").alias("ingestedAt"),
        )
        .select(*RAW_COLUMNS)
    )
