"""The local driver JVM's collector and JIT options (``spark.driver_jvm_options``): every local session starts with
them, and ``JDK_JAVA_OPTIONS`` replaces them (two collectors on one command line would stop the JVM at its start)."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from pipelines.base.settings import Settings
from pipelines.base.spark_session import JVM_OPTIONS_ENV, driver_jvm_options, local_spark_conf


def test_the_session_jvm_runs_with_the_settings_collector_and_jit(spark: SparkSession, base_settings: Settings) -> None:
    jvm = spark._jvm
    assert jvm is not None
    management = jvm.java.lang.management.ManagementFactory
    arguments = list(management.getRuntimeMXBean().getInputArguments())
    wanted = base_settings.spark.driver_jvm_options.split()
    assert wanted == ["-XX:+UseParallelGC", "-XX:CompileThresholdScaling=3"]
    assert all(option in arguments for option in wanted), arguments
    collectors = {bean.getName() for bean in management.getGarbageCollectorMXBeans()}
    assert collectors == {"PS Scavenge", "PS MarkSweep"}  # the parallel collector's, not G1's
    scaling = management.getPlatformMXBean(jvm.com.sun.management.HotSpotDiagnosticMXBean._java_lang_class)
    assert scaling.getVMOption("CompileThresholdScaling").getValue() == "3.0"


def test_jdk_java_options_replace_them(base_settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(JVM_OPTIONS_ENV, raising=False)
    assert driver_jvm_options(base_settings) == "-XX:+UseParallelGC -XX:CompileThresholdScaling=3"
    assert "-XX:+UseParallelGC" in local_spark_conf(base_settings)["spark.driver.extraJavaOptions"]
    monkeypatch.setenv(JVM_OPTIONS_ENV, "-XX:+UseSerialGC")
    assert driver_jvm_options(base_settings) == ""
    assert "-XX:+UseParallelGC" not in local_spark_conf(base_settings)["spark.driver.extraJavaOptions"]
    none = base_settings.spark.model_copy(update={"driver_jvm_options": ""})
    monkeypatch.delenv(JVM_OPTIONS_ENV)
    assert driver_jvm_options(base_settings.model_copy(update={"spark": none})) == ""
