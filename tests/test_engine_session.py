"""A micro-batch run on a shared session leaves the session's SQL confs as it found them.

The handler runs a batch with its own confs (ANSI arithmetic, no adaptive execution, its shuffle layout, Delta's
Delta's auto compaction off). Called on a notebook's or the suite's session, as tests and notebooks
do, those confs must not outlive the batch: a later plain Delta write would otherwise be auto-compacted, or a
later query run with ANSI semantics it never asked for.
"""

from __future__ import annotations

from decimal import Decimal

from engine_fixtures import make_rule, put_rules, raw_frame
from lakehouse_template import fresh_lakehouse
from pyspark.sql import SparkSession

from pipelines.base.settings import Settings
from pipelines.base.spark_session import session_confs
from pipelines.engine.batch_handler import (
    ADAPTIVE_CONF,
    AUTO_COMPACT_CONF,
    CO_PARTITION_CONF,
    SHUFFLE_PARTITIONS_CONF,
    BatchHandler,
)
from pipelines.engine.units import ANSI_CONF

CONFS = (AUTO_COMPACT_CONF, SHUFFLE_PARTITIONS_CONF, CO_PARTITION_CONF, ANSI_CONF, ADAPTIVE_CONF)


def test_a_batch_leaves_the_session_confs_as_it_found_them(spark: SparkSession, settings: Settings) -> None:
    engine = settings.engine.model_copy(update={"retention_every_batches": 1, "state_partitions": 3})
    settings = settings.model_copy(update={"engine": engine})  # every retention step in this batch
    fresh_lakehouse(spark, settings)
    put_rules(spark, settings, [make_rule(1, limit=10)])
    # The test's own changes are put back too: the worker's session is the next module's (test_suite_isolation).
    compaction = spark.conf.get(AUTO_COMPACT_CONF, None)
    spark.conf.unset(AUTO_COMPACT_CONF)
    try:
        with session_confs(spark, {ADAPTIVE_CONF: "true"}):
            _run_a_batch(spark, settings)
    finally:
        if compaction is not None:
            spark.conf.set(AUTO_COMPACT_CONF, compaction)


def _run_a_batch(spark: SparkSession, settings: Settings) -> None:
    before = {key: spark.conf.get(key, None) for key in CONFS}
    assert before[ANSI_CONF] != "true" or before[SHUFFLE_PARTITIONS_CONF] != "3"  # the batch changes something

    record = {"transactionId": "t1", "eventTime": 1_700_006_400_000, "payerId": 1, "paymentAmount": Decimal("20")}
    counts = BatchHandler(settings, app_id="engine-session", report=lambda line: None).process(
        raw_frame(spark, [record, record | {"transactionId": "t2"}]), 0
    )

    assert counts["rows"] == 2 and counts["alerts"] == 2  # 20 and 40 > 10: the batch ran through its alerts
    assert {key: spark.conf.get(key, None) for key in CONFS} == before
