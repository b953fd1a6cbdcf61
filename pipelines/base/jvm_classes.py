"""JVM classes by their full name, for the driver's few direct JVM calls (Delta's log, Hadoop paths, driver rows).

``spark._jvm.org.apache.spark.sql.delta.DeltaLog`` walks the name one segment at a time: a py4j round trip per
segment, and each segment that is not a class yet (``org``, ``org.apache``, ...) is a failed class lookup across
every jar of the class path. ``jvm_class`` names the class in one step: the handle is made in Python, and the first
call on it is the first round trip. Measured on a warm local session (one run each): ``table_version`` (the newest
version of a table's log, asked about a dozen times a micro-batch) 5.2 ms a call through the package walk, 2.6 ms
with the classes named at once; ``local_frame`` of 500 rows (two classes per row) 1,238 ms, 334 ms.

``remember_jvm_lookups`` (installed by ``get_spark``) makes py4j keep the names PySpark itself resolves (the class of
``F.col`` and friends, and the function in it): one round trip per column function instead of three.

Example::

    log = jvm_class(spark, "org.apache.spark.sql.delta.DeltaLog").forTable(spark._jsparkSession, path)
"""

from __future__ import annotations

from typing import Any

from py4j.java_gateway import JavaClass, JavaMember, JVMView  # type: ignore[import-untyped]
from pyspark.sql import SparkSession


def jvm_class(spark: SparkSession, name: str) -> Any:
    """The JVM class ``name`` (fully qualified) of the session's gateway; raises where there is no JVM gateway
    (Spark Connect), as ``spark._jvm`` does."""
    gateway: Any = spark.sparkContext._gateway
    return JavaClass(name, gateway._gateway_client)


def remember_jvm_lookups() -> None:
    """Make py4j remember what a class or static-method name resolves to, process-wide (idempotent).

    Every ``F.col``/``F.lit``/``F.when`` of PySpark asks the gateway twice before it calls anything: which class
    ``org.apache.spark.sql.functions`` is (``JVMView.__getattr__``) and whether ``col`` is a static method of it
    (``JavaClass.__getattr__``); ``_to_seq`` and friends do the same for ``PythonUtils``. py4j answers each with a
    round trip and keeps nothing, so building a micro-batch's plans cost ~4,900 round trips, ~40% of them these
    lookups (cProfile of ``BatchHandler.process``, 2,000-row batches, 20 rules: 19,473 lookups, 4.1 s of 40.7 s over
    9 batches). A class name resolved to a class, and a class member resolved to a static method or a nested class,
    never resolve to anything else in a running JVM: each is remembered on the view or class object (its instance
    attribute), so the next lookup is a plain attribute read. Static field values and unresolved names (packages,
    errors) are asked every time, as before; so is everything on a fresh gateway (new view and class objects)."""
    if getattr(JVMView, "_fraudlake_remembers", False):
        return
    view_lookup, class_lookup = JVMView.__getattr__, JavaClass.__getattr__

    def view_getattr(self: Any, name: str) -> Any:
        found = view_lookup(self, name)
        if isinstance(found, JavaClass):
            self.__dict__[name] = found
        return found

    def class_getattr(self: Any, name: str) -> Any:
        found = class_lookup(self, name)
        if isinstance(found, JavaMember | JavaClass):
            self.__dict__[name] = found
        return found

    JVMView.__getattr__ = view_getattr
    JavaClass.__getattr__ = class_getattr
    JVMView._fraudlake_remembers = True
