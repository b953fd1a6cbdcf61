"""What every subcommand starts from: the settings its options select, and a Spark session on demand."""

from __future__ import annotations

import argparse

from pyspark.sql import SparkSession

from pipelines.base.settings import Settings, load_settings
from pipelines.base.spark_session import get_spark


def settings_from(args: argparse.Namespace) -> Settings:
    return load_settings(getattr(args, "conf", None), lakehouse=getattr(args, "lakehouse", None))


def spark_from(settings: Settings, app_name: str) -> SparkSession:
    return get_spark(settings, app_name=f"fraudlake-{app_name}")
