"""Idempotent Delta writes: each write of a micro-batch is tagged ``(appId, batchId)`` and Delta skips a repeat.

Appends take the writer options ``txnAppId``/``txnVersion``; MERGE, DELETE and UPDATE read the SQL confs
``spark.databricks.delta.write.txnAppId/txnVersion``, which :func:`idempotent_dml` sets on the session for the
duration of one statement and always unsets afterwards (they would otherwise tag every later write too).

Delta records the highest ``txnVersion`` committed per ``txnAppId`` in the table's log and skips any write whose
version is not higher, so *each distinct write of a batch needs its own app id* (``Txn.part``).

Example::

    txn = Txn("engine-1234", batch_id)
    frame.write.format("delta").mode("append").options(**txn.part("bronze").writer_options()).save(path)
    with idempotent_dml(spark, txn.part("state")):
        DeltaTable.forPath(spark, path).merge(...).execute()
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession

TXN_APP_ID_CONF = "spark.databricks.delta.write.txnAppId"
TXN_VERSION_CONF = "spark.databricks.delta.write.txnVersion"


@dataclass(frozen=True)
class Txn:
    """One idempotent write: Delta commits it at most once per (app_id, version)."""

    app_id: str
    version: int

    def part(self, name: str) -> Txn:
        """The same batch's write to another table or of another kind: ``<app_id>:<name>``."""
        return Txn(f"{self.app_id}:{name}", self.version)

    def writer_options(self) -> dict[str, str]:
        return {"txnAppId": self.app_id, "txnVersion": str(self.version)}


@contextmanager
def idempotent_dml(spark: SparkSession, txn: Txn | None) -> Iterator[None]:
    """Tag the DML statements run inside (MERGE/DELETE/UPDATE) with ``txn``; no-op for ``txn=None``."""
    if txn is None:
        yield
        return
    spark.conf.set(TXN_APP_ID_CONF, txn.app_id)
    spark.conf.set(TXN_VERSION_CONF, str(txn.version))
    try:
        yield
    finally:
        spark.conf.unset(TXN_APP_ID_CONF)
        spark.conf.unset(TXN_VERSION_CONF)


def table_version(spark: SparkSession, path: str) -> int:
    """The newest committed version of the Delta table at ``path`` (from its log; no data scanned).

    Asks the JVM ``DeltaLog`` for its updated snapshot (milliseconds); where that internal API is not reachable
    (e.g. Spark Connect) it falls back to ``DESCRIBE HISTORY`` (a Spark job).
    """
    try:
        jvm: Any = spark._jvm
        none = jvm.scala.Option.empty()
        log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path)
        return int(log.update(False, none, none).version())
    except Exception:  # any failure of the fast path: use the public API
        row = DeltaTable.forPath(spark, path).history(1).select("version").first()
        if row is None:
            raise RuntimeError(f"{path} has no commits") from None
        version: int = row["version"]
        return version


def append_idempotent(frame: DataFrame, path: str, txn: Txn | None) -> None:
    """Append ``frame`` to the Delta table at ``path``; with ``txn``, a repeat of the same write is skipped."""
    writer = frame.write.format("delta").mode("append")
    if txn is not None:
        writer = writer.options(**txn.writer_options())
    writer.save(path)
