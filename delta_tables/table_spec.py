"""A Delta table's definition, and its idempotent creation under the lakehouse root.

Example::

    spec = TableSpec(name="alerts", schema=ALERTS_SCHEMA, partition_by=("detectedDate",))
    create_table(spark, spec, settings.table_path(spec.name))   # twice: the second run changes nothing
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from delta.tables import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql.types import StructType

COMMON_PROPERTIES: dict[str, str] = {
    # Streaming appends write many small files; let Delta compact them as it goes.
    "delta.autoOptimize.optimizeWrite": "true",
    "delta.autoOptimize.autoCompact": "true",
}

RETENTION_PROPERTY = "delta.deletedFileRetentionDuration"
"""How long VACUUM keeps unreferenced files (Delta 4 reads this, not VACUUM's argument)."""


def retention_interval(hours: int) -> str:
    return f"interval {int(hours)} hours"


def file_retention(hours: int) -> dict[str, str]:
    """The retention property for ``hours``: set at creation, so the first VACUUM does not change the metadata
    (a metadata change fails every concurrent writer's commit)."""
    return {RETENTION_PROPERTY: retention_interval(hours)}


@dataclass(frozen=True)
class TableSpec:
    """Schema, layout and properties of one lakehouse table."""

    name: str
    schema: StructType
    comment: str
    partition_by: tuple[str, ...] = ()
    properties: dict[str, str] = field(default_factory=dict)

    def all_properties(self) -> dict[str, str]:
        return {**COMMON_PROPERTIES, **self.properties}


def create_table(
    spark: SparkSession, spec: TableSpec, path: str, *, properties: Mapping[str, str] | None = None
) -> bool:
    """Create the table at ``path`` unless a Delta table is there; return whether it was created.

    ``properties`` are lakehouse-wide ones added to the spec's (e.g. ``file_retention``)."""
    if DeltaTable.isDeltaTable(spark, path):
        add_missing_columns(spark, spec, path)
        return False
    builder = DeltaTable.createIfNotExists(spark).location(path).addColumns(spec.schema).comment(spec.comment)
    if spec.partition_by:
        builder = builder.partitionedBy(*spec.partition_by)
    for key, value in {**spec.all_properties(), **(properties or {})}.items():
        builder = builder.property(key, value)
    builder.execute()
    return True


def add_missing_columns(spark: SparkSession, spec: TableSpec, path: str) -> list[str]:
    """Add the spec's columns that an existing table lacks (a lakehouse made by an older release): nullable
    columns only, appended at the end, as ``ALTER TABLE ... ADD COLUMNS``. Returns their names."""
    have = {f.name for f in spark.read.format("delta").load(path).schema.fields}
    missing = [f for f in spec.schema.fields if f.name not in have]
    if not missing:
        return []
    if any(not f.nullable for f in missing):
        raise ValueError(f"{path} lacks required columns {[f.name for f in missing]}: recreate the table")
    columns = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in missing)
    spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS ({columns})")
    return [f.name for f in missing]
