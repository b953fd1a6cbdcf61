"""Column expressions built once per JVM (pipelines/base/column_memo.py): the same arguments give the same
expressions without building them again, and those expressions read each frame they are used on."""

from __future__ import annotations

import pytest
from pyspark import SparkContext
from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F

from pipelines.base import column_memo
from pipelines.base.column_memo import per_jvm


def test_the_same_arguments_reuse_the_built_columns_on_any_frame(spark: SparkSession) -> None:
    built: list[int] = []

    @per_jvm
    def scaled(factor: int) -> tuple[Column, ...]:
        built.append(factor)
        return ((F.col("x") * F.lit(factor)).alias("y"),)

    first, again, other = scaled(2), scaled(2), scaled(3)
    assert again is first and other is not first
    assert built == [2, 3]
    # The kept expression names its column: it reads whichever frame it is used on.
    assert [r.y for r in spark.range(3).withColumnRenamed("id", "x").select(*first).collect()] == [0, 2, 4]
    assert [r.y for r in spark.range(5, 7).withColumnRenamed("id", "x").select(*again).collect()] == [10, 12]
    assert [r.y for r in spark.range(2).withColumnRenamed("id", "x").select(*other).collect()] == [0, 3]


def test_unhashable_arguments_and_a_new_gateway_build_anew(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[object] = []

    @per_jvm
    def named(names: object) -> tuple[Column, ...]:
        built.append(names)
        return tuple(F.col(n) for n in names)  # type: ignore[attr-defined]

    named(["id"])
    named(["id"])  # a list: not kept
    assert len(built) == 2
    named(("id",))
    named(("id",))
    assert len(built) == 3
    # Another JVM gateway (a new process's, or a restarted one): its expressions are not the old JVM's.
    monkeypatch.setattr(SparkContext, "_gateway", object())
    named(("id",))
    assert len(built) == 4


def test_at_most_max_entries_are_kept_the_oldest_dropped_first(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(column_memo, "MAX_ENTRIES", 2)
    built: list[int] = []

    @per_jvm
    def literal(n: int) -> Column:
        built.append(n)
        return F.lit(n)

    for n in (1, 2, 3, 3, 2, 1):
        literal(n)
    assert built == [1, 2, 3, 1]  # 1 was dropped when 3 came; 2 and 3 were still kept
