"""The engine's evaluation compiles to methods HotSpot compiles.

HotSpot leaves a method of more than 8,000 bytes of bytecode to its interpreter for the life of the JVM
(``-XX:+DontCompileHugeMethods``, the default), and Spark compiles a whole-stage subtree into one such method up to
64 KB. The evaluation's method once computed each (row, rule) pair's aggregate inside the fan-out's join condition,
twice over (Spark inlines the projected aggregate into the limit check it pushes into the join): 8,803 bytes, run
interpreted, ~1.5 s of a 50,000-row batch (docs/engine.md, "A method HotSpot would not compile"). Now each row's
aggregates are computed once before the fan-out (``evaluate.row_aggregates``). Spark reports each whole-stage
subtree's largest method (``codegenStringSeq``); the suite's sessions run interpreted (``WORKER_SPARK_CONF``), so the
plan is made here with whole-stage code generation on, as production's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from engine_fixtures import raw_frame
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pipelines.base.settings import Settings
from pipelines.base.spark_session import HOTSPOT_HUGE_METHOD, local_spark_conf, session_confs
from pipelines.bench.workload import kind_rule_set
from pipelines.engine.buckets import tag_rows, tiles
from pipelines.engine.evaluate import candidate_alerts, has_baselines, rules_frame, running_in_bucket
from pipelines.engine.lookback import with_coordinates
from pipelines.engine.parse_transactions import parse_raw
from pipelines.engine.states import LiveRule, states_of
from pipelines.engine.units import LONG_UNITS
from rules_cdc.rule_model import Rule

WHOLE_STAGE, FACTORY_MODE = "spark.sql.codegen.wholeStage", "spark.sql.codegen.factoryMode"


def _candidates(spark: SparkSession, settings: Settings, rules: list[Rule]) -> DataFrame:
    """The engine's evaluation chain (``batch_evaluation``) over a few transactions, in 64-bit units."""
    states = tuple(states_of([LiveRule(r, None) for r in rules]))
    records = [
        json.dumps({"transactionId": f"t{i}", "eventTime": 1_700_000_000_000 + i * 1000, "paymentAmount": 10 + i,
                    "payerId": i % 3, "beneficiaryId": 1, "paymentType": "CRD"})
        for i in range(6)
    ]  # fmt: skip
    parsed = parse_raw(raw_frame(spark, records), settings.transaction_schema).withColumns(
        {"isLate": F.lit(False), "ingestedAt": F.current_timestamp()}
    )
    tagged = tag_rows(parsed, states, bucket_ms=60_000, keep=("transactionId", "eventTime", "isLate", "ingestedAt"),
                      units=LONG_UNITS)  # fmt: skip
    batch_tiles = with_coordinates(tiles(tagged, bucket_ms=60_000, distinct_cap=100), bucket_ms=60_000)
    rules_df = rules_frame(spark, states, bucket_seconds=60, units=LONG_UNITS)
    running = running_in_bucket(tagged).where(~F.col("isLate"))
    distinct = 100 if any(s.distinct for s in states) else None
    return candidate_alerts(
        running, rules_df, batch_tiles, batch_tiles, bucket_ms=60_000, distinct_cap=distinct,
        relative=has_baselines(states),
    )  # fmt: skip


def _largest_methods(spark: SparkSession, frame: Callable[[], DataFrame]) -> list[int]:
    """Per whole-stage subtree of the physical plan of the frame ``frame`` makes (planned with whole-stage code
    generation on), its largest compiled method in bytes of bytecode."""
    jvm: Any = spark.sparkContext._jvm
    # Production's code generation in the suite's session for a while (whole-stage code needs a factory mode that
    # generates code).
    with session_confs(spark, {WHOLE_STAGE: "true", FACTORY_MODE: "FALLBACK"}):
        plan = frame()._jdf.queryExecution().executedPlan()
        subtrees = (
            getattr(jvm.org.apache.spark.sql.execution.debug, "package$").__getattr__("MODULE$").codegenStringSeq(plan)
        )
        return [subtrees.apply(i)._3().maxMethodCodeSize() for i in range(subtrees.size())]


@pytest.mark.parametrize("kinds", ["today", "distinct"])
def test_the_evaluation_compiles_to_methods_hotspot_compiles(
    spark: SparkSession, settings: Settings, kinds: str
) -> None:
    """The bench's 20 rules in 4 states: today's kinds (COUNT, SUM, AVG, MIN, MAX), and a quarter COUNT_DISTINCT."""
    sizes = _largest_methods(spark, lambda: _candidates(spark, settings, kind_rule_set(kinds, 20, states=4)))
    assert len(sizes) >= 5  # the evaluation's whole-stage subtrees: the check is not vacuous
    assert max(sizes) < HOTSPOT_HUGE_METHOD, sizes


def test_a_method_hotspot_would_not_compile_runs_on_its_operators_own_code(
    spark: SparkSession, settings: Settings
) -> None:
    """Relative limits still make the fan-out's method larger than HotSpot compiles (10,763 bytes: their exact
    comparison in 38-digit decimals, inlined three times over); production's sessions have Spark run such a subtree's
    operators on their own generated code instead (``spark.sql.codegen.hugeMethodLimit``)."""
    sizes = _largest_methods(spark, lambda: _candidates(spark, settings, kind_rule_set("relative", 20, states=4)))
    limit = int(local_spark_conf(settings)["spark.sql.codegen.hugeMethodLimit"])
    if max(sizes) >= HOTSPOT_HUGE_METHOD:
        assert limit <= HOTSPOT_HUGE_METHOD, (limit, sizes)
