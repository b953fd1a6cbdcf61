"""Reading lakehouse tables for the console: the ``deltalake`` library first, one shared SparkSession as fallback.

A page view must not start a Spark job. ``deltalake`` (delta-rs) reads the log, checkpoints included, and the
Parquet files straight into Arrow; it refuses tables whose reader features it lacks (deletion vectors, on
``bucket_state`` and ``alert_cooldown``: docs/console.md lists what was checked). Such a table is read through
the SparkSession the console shares for backtests (started on first use), so the console can read every table,
and says which way each one is read (``backend``).

Filters are ``(column, op, value)`` triples, turned into Arrow or Spark expressions: never SQL text.

Example::

    reader = LakeReader(settings, spark=lambda: get_spark(settings))
    rows = reader.rows("alerts", where=[("ruleId", "=", 7)], columns=["alertId", "aggregateValue"])
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
from deltalake import DeltaTable
from deltalake.exceptions import DeltaProtocolError, TableNotFoundError
from pyspark.sql import Column, SparkSession

from pipelines.base.settings import Settings

Op = Literal["=", "!=", "<", "<=", ">", ">=", "in", "startswith"]
Condition = tuple[str, Op, Any]
Backend = Literal["deltalake", "spark"]


class TableMissing(LookupError):
    """The lakehouse has no Delta table of that name (yet)."""

    def __init__(self, table: str, path: str) -> None:
        super().__init__(f"no Delta table {table!r} at {path}")
        self.table = table
        self.path = path


class LakeReader:
    """Reads lakehouse tables as Arrow: one cached ``DeltaTable`` per table, refreshed per read."""

    def __init__(self, settings: Settings, spark: Callable[[], SparkSession] | None = None) -> None:
        self.settings = settings
        self._spark = spark
        self._tables: dict[str, DeltaTable] = {}
        self._backends: dict[str, Backend] = {}
        # One lock per table (a DeltaTable is not to be refreshed and read at once), so that a slow table (a big
        # log to replay, slow storage) holds up only the pages that read it.
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()

    def path(self, table: str) -> str:
        return self.settings.table_path(table)

    def backend(self, table: str) -> Backend | None:
        """How ``table`` was read last (None: not read yet)."""
        return self._backends.get(table)

    def exists(self, table: str) -> bool:
        try:
            self.version(table)
        except TableMissing:
            return False
        return True

    def version(self, table: str) -> int:
        """The table's current version (read from its log, whatever its features); raises ``TableMissing``."""
        return int(self._delta(table).version())

    def columns(self, table: str) -> list[str]:
        """The table's column names (from its log: a column an older release lacks is not there)."""
        return [f.name for f in self._delta(table).schema().fields]

    def read(self, table: str, *, columns: Sequence[str] | None = None, where: Sequence[Condition] = ()) -> pa.Table:
        """The rows of ``table`` matching every condition of ``where`` (all columns unless ``columns``)."""
        delta = self._delta(table)
        if self._backends.get(table) != "spark":
            try:
                with self._lock(table):
                    dataset = delta.to_pyarrow_dataset()
            except DeltaProtocolError:  # reader features deltalake lacks (deletion vectors)
                if self._spark is None:
                    raise
                self._backends[table] = "spark"
            else:
                self._backends[table] = "deltalake"
                return dataset.to_table(columns=list(columns) if columns else None, filter=_arrow_filter(where))
        frame = self._session().read.format("delta").load(self.path(table))
        for condition in where:
            frame = frame.where(_spark_filter(condition))
        if columns:
            frame = frame.select(*columns)
        return frame.toArrow()

    def rows(
        self, table: str, *, columns: Sequence[str] | None = None, where: Sequence[Condition] = ()
    ) -> list[dict[str, Any]]:
        """``read`` as Python rows; map columns (``counts``, ``metrics``) become dicts."""
        arrow = self.read(table, columns=columns, where=where)
        maps = [f.name for f in arrow.schema if pa.types.is_map(f.type)]
        result: list[dict[str, Any]] = arrow.to_pylist()
        for row in result:
            for name in maps:
                row[name] = dict(row[name]) if row[name] is not None else None
        return result

    # ---- internals -------------------------------------------------------------------------------------

    def _delta(self, table: str) -> DeltaTable:
        """The refreshed ``DeltaTable`` of ``table`` (its log and checkpoints read by deltalake)."""
        with self._lock(table):
            cached = self._tables.get(table)
            try:
                if cached is None:
                    cached = DeltaTable(self.path(table))
                    self._tables[table] = cached
                else:
                    cached.update_incremental()
            except TableNotFoundError:
                self._tables.pop(table, None)
                raise TableMissing(table, self.path(table)) from None
            return cached

    def _lock(self, table: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(table, threading.Lock())

    def _session(self) -> SparkSession:
        if self._spark is None:
            raise RuntimeError("this table needs Spark to be read, and the console has no SparkSession")
        return self._spark()


def _compare(left: Any, op: Op, value: Any) -> Any:
    """``left op value`` for an Arrow field expression or a Spark column (both overload the operators)."""
    if op == "=":
        return left == value
    if op == "!=":
        return left != value
    if op == "<":
        return left < value
    if op == "<=":
        return left <= value
    if op == ">":
        return left > value
    if op == ">=":
        return left >= value
    raise ValueError(f"unknown filter operator {op!r}")


def _arrow_filter(where: Sequence[Condition]) -> pc.Expression | None:
    expression: pc.Expression | None = None
    for column, op, value in where:
        field = pads.field(column)
        if op == "in":
            term = field.isin(list(value))
        elif op == "startswith":
            term = pc.starts_with(field, pattern=str(value))
        else:
            term = _compare(field, op, value)
        expression = term if expression is None else expression & term
    return expression


def _spark_filter(condition: Condition) -> Column:
    from pyspark.sql import functions as F

    column_name, op, value = condition
    column = F.col(column_name)
    if op == "in":
        return column.isin(list(value))
    if op == "startswith":
        return column.startswith(str(value))
    result: Column = _compare(column, op, F.lit(value))
    return result
