"""The one SparkSession factory, used by the CLI, the jobs, the notebooks and the tests.

Example::

    spark = get_spark(load_settings())
    spark.range(3).write.format("delta").save("/tmp/t")
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from pyspark.sql import SparkSession

from pipelines.base.class_archive import driver_options
from pipelines.base.jvm_classes import remember_jvm_lookups
from pipelines.base.runtime_env import ensure_java_home, jar_files, on_databricks
from pipelines.base.settings import Settings

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"


def local_spark_conf(settings: Settings) -> dict[str, str]:
    """Configuration of a local session: Delta, the jars from .jars/spark, loopback only, small shuffles."""
    conf = {
        "spark.jars": ",".join(str(p) for p in jar_files("spark")),
        "spark.sql.extensions": DELTA_EXTENSION,
        "spark.sql.catalog.spark_catalog": DELTA_CATALOG,
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.host": "127.0.0.1",
        "spark.ui.enabled": str(settings.spark.ui_enabled).lower(),
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(settings.spark.shuffle_partitions),
        "spark.default.parallelism": str(settings.spark.shuffle_partitions),
        "spark.driver.memory": settings.spark.driver_memory,
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.warehouse.dir": f"{settings.work_dir}/spark-warehouse",
        # The class archive (``class_archive``; made by `make setup`): the driver JVM maps its ~15,000 classes ready.
        # Then the collector and JIT options (``driver_jvm_options``).
        "spark.driver.extraJavaOptions": " ".join(
            o
            for o in (f"-Dderby.system.home={settings.work_dir}/derby", driver_options(), driver_jvm_options(settings))
            if o
        ),
        # Small local tables: skip Delta's per-commit checksum/stats overheads that only pay off at scale.
        "spark.databricks.delta.snapshotPartitions": "2",
        # File listing (VACUUM, partition discovery) fans out to 10,000 tasks by default: minutes on 2 cores.
        "spark.sql.sources.parallelPartitionDiscovery.parallelism": str(settings.spark.shuffle_partitions),
        "spark.databricks.delta.properties.defaults.enableChangeDataFeed": "false",
        # A micro-batch runs ~150 generated classes; the default cache of 100 would compile most of them again on
        # every batch (Janino: tens of ms each). Static: it must be set before the session starts.
        "spark.sql.codegen.cache.maxEntries": "4000",
        # PySpark's DataFrame debugging wraps every Column function in call-site capture: 12 py4j round trips for an
        # F.col instead of 3 (getActiveSession, a conf read, origin set and clear, the Python stack); the engine
        # builds its plans from ~12,000 such calls a batch. Off: Spark errors then lack the Python call site.
        "spark.python.sql.dataFrameDebugging.enabled": "false",
        # Tungsten's memory page. The default (64 MB with a 4 GB driver) is what every hash relation a broadcast
        # join builds takes at least, however few its rows, and the driver keeps each broadcast's relation in its
        # block manager while the plans that use it live: ~500 MB of the driver's heap after a full GC in a run of
        # 25 batches (docs/engine.md, Driver memory). A record larger than a page still gets a page of its own.
        "spark.buffer.pageSize": "2m",
        # HotSpot never compiles a method of more than 8,000 bytes of bytecode (DontCompileHugeMethods): a whole-stage
        # method past that runs interpreted for the JVM's life. At 8,000 (Spark's setting for HotSpot; its default,
        # 64 KB, is Java's own limit) Spark runs such a subtree's operators on their own generated code instead. The
        # evaluation with relative limits is such a method (docs/engine.md, "A method HotSpot would not compile").
        "spark.sql.codegen.hugeMethodLimit": str(HOTSPOT_HUGE_METHOD),
    }
    conf.update(settings.spark.extra_conf)
    return conf


HOTSPOT_HUGE_METHOD = 8000
"""Bytes of bytecode above which HotSpot leaves a method to its interpreter (``-XX:+DontCompileHugeMethods``)."""

JVM_OPTIONS_ENV = "JDK_JAVA_OPTIONS"
"""Read by the ``java`` launcher of every JVM (JDK 9+): where it is set, it decides the collector and the JIT."""


def driver_jvm_options(settings: Settings) -> str:
    """The local driver's collector and JIT options (``spark.driver_jvm_options``), or "" where ``JDK_JAVA_OPTIONS``
    is set: the launcher puts those first, and two collectors in one command line stop the JVM at its start (the test
    suite sets its own this way)."""
    return "" if os.environ.get(JVM_OPTIONS_ENV, "").strip() else settings.spark.driver_jvm_options.strip()


def get_spark(settings: Settings, app_name: str = "fraudlake") -> SparkSession:
    """Return the session to use: Databricks' own one there (nothing fetched), else a configured local one."""
    remember_jvm_lookups()
    if on_databricks():
        return SparkSession.builder.getOrCreate()
    ensure_java_home()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.appName(app_name)
    if settings.spark.master:
        builder = builder.master(settings.spark.master)
    for key, value in local_spark_conf(settings).items():
        builder = builder.config(key, value)
    with _jvm_ignores_stop_signals():
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


@contextmanager
def _jvm_ignores_stop_signals() -> Iterator[None]:
    """Start the driver JVM (if this call starts it) with SIGTERM and SIGHUP ignored.

    The JVM is a child in this process's group: a SIGTERM to the group (a service manager's stop, ``kill -- -PGID``)
    would otherwise kill it at once, under the engine's graceful stop, which needs it to finish the micro-batch in
    flight. An ignored signal stays ignored across exec, and the JVM installs no shutdown handler for a signal it
    starts with ignored. The JVM still ends with this process: PySpark's gateway exits when its stdin (a pipe from
    here) closes. SIGINT is already ignored by PySpark's launcher for the same reason."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal dispositions can only be changed from the main thread
        return
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextmanager
def session_confs(spark: SparkSession, confs: Mapping[str, str]) -> Iterator[None]:
    """Set SQL confs for the block and put back what was there before (unset if nothing), also on failure.

    A session may be shared (a notebook's, the tests'): what one job needs for a while must not outlive it."""
    previous: dict[str, str | None] = {key: spark.conf.get(key, None) for key in confs}
    for key, value in confs.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, before in previous.items():
            if before is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, before)
