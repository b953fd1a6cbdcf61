"""What every notebook starts with: the ``conf``/``lakehouse`` widgets and the settings they select.

Works with Databricks' ``dbutils`` and with the local runner's stand-in alike.

Example (a notebook's first cells)::

    declare_settings_widgets(dbutils)
    settings = settings_from_widgets(dbutils)
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, SparkSession

from delta_tables.catalog import all_tables
from pipelines.base.settings import Settings, load_settings


def declare_settings_widgets(dbutils: Any) -> None:
    """The two widgets every notebook has; blank means the library's default (as on the command line)."""
    dbutils.widgets.text("conf", "", "Settings file (blank: $FRAUDLAKE_CONF or conf/local.yaml)")
    dbutils.widgets.text("lakehouse", "", "Lakehouse root (blank: from the settings file)")


def settings_from_widgets(dbutils: Any) -> Settings:
    return load_settings(dbutils.widgets.get("conf") or None, lakehouse=dbutils.widgets.get("lakehouse") or None)


def widget_flag(dbutils: Any, name: str) -> bool:
    """A ``true``/``false`` dropdown widget's value."""
    return str(dbutils.widgets.get(name)).strip().lower() == "true"


def lakehouse_overview(spark: SparkSession, settings: Settings) -> DataFrame:
    """One row per lakehouse table: name, path, partitioning, comment."""
    rows = [(s.name, settings.table_path(s.name), ", ".join(s.partition_by), s.comment) for s in all_tables(settings)]
    return spark.createDataFrame(rows, "table string, path string, partitionedBy string, comment string")
