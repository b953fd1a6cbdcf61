"""Checks of a Delta table written outside Spark's writer, by Delta's own code."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession

from delta_tables.table_snapshot import newest_snapshot


def checksum_agrees(spark: SparkSession, path: str, version: int | None = None) -> None:
    """The newest version's checksum (``version``: it is that one, and its ``.crc`` file exists) passes Delta's own
    validation against the state it reconstructs from the log (it raises on a mismatch: ``checksum.mismatch.fatal``).
    """
    snapshot = newest_snapshot(spark, path)
    if version is not None:
        assert Path(path, "_delta_log", f"{version:020d}.crc").is_file()
        assert snapshot.version() == version and snapshot.checksumOpt().isDefined()
    assert snapshot.validateChecksum(getattr(snapshot, "validateChecksum$default$1")())
