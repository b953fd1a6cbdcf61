"""The Python and JVM halves of the runtime are the same releases, and Spark loads the jars from .jars/spark."""

from __future__ import annotations

import re
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pyspark
from delta.tables import DeltaTable
from py4j.java_gateway import JavaPackage  # type: ignore[import-untyped]
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from pipelines.base.runtime_env import REPO_ROOT, jar_files


def _pom_property(pom: Path, name: str) -> str:
    match = re.search(rf"<{re.escape(name)}>([^<]+)</{re.escape(name)}>", pom.read_text())
    assert match, f"{name} missing from {pom}"
    return match.group(1)


def test_pip_pins_equal_the_maven_jars() -> None:
    pom = REPO_ROOT / "jvm" / "spark" / "pom.xml"
    assert pyspark.__version__ == _pom_property(pom, "spark.version")
    assert version("delta-spark") == _pom_property(pom, "delta.version")
    names = {p.name for p in jar_files("spark")}
    assert f"delta-spark_4.1_2.13-{version('delta-spark')}.jar" in names
    assert f"spark-sql-kafka-0-10_2.13-{pyspark.__version__}.jar" in names
    assert not any(n.startswith(("spark-sql_", "spark-core_", "scala-library")) for n in names), names


def test_session_runs_delta_sql_and_knows_its_jars(spark: SparkSession, tmp_path: Path) -> None:
    assert spark.version == pyspark.__version__
    jars = spark.conf.get("spark.jars") or ""
    assert "delta-spark_4.1_2.13" in jars and "spark-sql-kafka" in jars
    assert spark.conf.get("spark.sql.extensions") == "io.delta.sql.DeltaSparkSessionExtension"
    assert spark.conf.get("spark.driver.host") == "127.0.0.1"
    assert spark.sql("SELECT 1 AS one").first()["one"] == 1
    # The Python API drives the JVM Delta, and the JVM Delta that commits is the release pip pinned.
    path = str(tmp_path / "t")
    spark.range(3).write.format("delta").save(path)
    table = DeltaTable.forPath(spark, path)
    table.delete("id = 1")
    assert sorted(r["id"] for r in table.toDF().collect()) == [0, 2]
    history = table.history().orderBy("version").select("version", "operation", "engineInfo").collect()
    assert [(h["version"], h["operation"]) for h in history] == [(0, "WRITE"), (1, "DELETE")]
    engine = f"Apache-Spark/{pyspark.__version__} Delta-Lake/{version('delta-spark')}"
    assert all(h["engineInfo"] == engine for h in history), [h["engineInfo"] for h in history]


def test_the_gateway_is_asked_once_what_a_class_or_a_static_method_is(spark: SparkSession) -> None:
    """get_spark makes py4j remember resolved class and static-method names (jvm_classes.remember_jvm_lookups):
    building a column is then one call to the JVM, not three; a name that is no class (py4j answers a package) is
    still asked every time."""
    client = spark.sparkContext._gateway._gateway_client
    sent: list[str] = []
    send = client.send_command

    def counting(command: str, *args: Any, **kwargs: Any) -> Any:
        sent.append(command.split("\n", 1)[0])  # "c": a call, "r": a reflection (lookup)
        return send(command, *args, **kwargs)

    client.send_command = counting
    try:
        F.col("warm") + F.lit(0)  # whichever lookups no earlier code of this process made
        sent.clear()
        column = F.col("id") + F.lit(1)
        assert sent == ["c", "c", "c"], sent  # col, lit, plus: calls only
        assert spark.range(1).select(column.alias("b")).first()["b"] == 1
        for _ in range(2):
            sent.clear()
            assert isinstance(getattr(spark.sparkContext._jvm, "org.example.NoSuchClass"), JavaPackage)
            assert sent == ["r"], sent
    finally:
        del client.send_command  # the class's method again
