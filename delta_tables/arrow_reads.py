"""A small Delta table's rows at a version, read on the driver without a Spark job (delta-rs, into Arrow).

The engine reads two small tables at a pinned version on a micro-batch's path: the rules table (at each new version,
i.e. after every rule change, and once in a fresh engine) and the state registry. A Spark read of a table version
it has not read yet reconstructs the snapshot's state from the log (a Spark job) and then scans the Parquet files:
0.5-0.75 s on two warm cores for a table of a few rows, seconds in a fresh JVM. The ``deltalake`` library (delta-rs,
the console's reader) replays the same log and reads the same files in ~5 ms.

It answers only where it reads what Spark would: a table on the local file system (a path without a scheme, or
``file:``; an object store's credentials are Spark's Hadoop configuration, not delta-rs's), with the library
installed, and whose reader features delta-rs has — the rules table and the registry use none (no deletion
vectors, no column mapping); delta-rs refuses a table with a reader feature it lacks. Anything else, and any error,
answers None: the caller reads with Spark, as before.

Example::

    rows = table_rows_at(settings.table_path("rules"), version=12)   # list of dicts, or None: ask Spark
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlparse

log = logging.getLogger(__name__)


def is_local_path(path: str) -> bool:
    """A path on this machine's file system: no scheme (``/lake/rules``) or ``file:``."""
    return urlparse(path).scheme in ("", "file")


def table_rows_at(path: str, *, version: int, columns: Sequence[str] | None = None) -> list[dict[str, Any]] | None:
    """The rows of the Delta table at ``path`` at ``version`` (only ``columns`` when given; a column the table lacks
    at that version is absent from the rows), as dicts of Python values; None where this path does not apply (not a
    local table, no ``deltalake``, a reader feature it lacks, any error): the caller then reads with Spark."""
    if not is_local_path(path):
        return None
    try:
        from deltalake import DeltaTable
    except ImportError:  # an install without the console's extra: Spark reads it
        return None
    try:
        table = DeltaTable(urlparse(path).path if path.startswith("file:") else path, version=version)
        present = {field.name for field in table.schema().fields}
        wanted = None if columns is None else [c for c in columns if c in present]
        rows: list[dict[str, Any]] = table.to_pyarrow_table(columns=wanted).to_pylist()
        return rows
    except Exception as error:  # not readable this way: Spark reads it
        log.debug("delta-rs did not read %s at version %s: %s", path, version, error)
        return None
