"""``fraudlake class-archive``: build the Spark driver's class-data-sharing archive (``pipelines.base.class_archive``).

``make setup`` runs it; it returns at once when the archive for this JDK and these jars exists (``--force`` builds it
again). The workload is the demo's backlog in a temporary lakehouse: a fresh lakehouse, the sample rules through
rules CDC, two landing files through the engine, in a JVM that dumps the classes it loaded when it exits. Failing to
build is not an error: Spark then starts without the archive, only slower.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from delta_tables.catalog import init_lakehouse
from pipelines.base.class_archive import DUMP_OPTION, QUIET, archive_path
from pipelines.base.settings import load_settings
from pipelines.base.spark_session import get_spark, local_spark_conf
from pipelines.commands.demo_cmd import load_rules
from pipelines.engine.job import EngineRun, run_engine
from pipelines.generator.landing import generate_landing

DRIVER_OPTIONS = "spark.driver.extraJavaOptions"


def register(subparsers: Any, parent: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser("class-archive", parents=[parent], help="build the Spark driver's class archive")
    parser.add_argument("--force", action="store_true", help="build it again even if it exists")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    path = archive_path()
    if path.is_file() and not args.force:
        return 0
    path.parent.mkdir(parents=True, exist_ok=True)
    for old in path.parent.glob("spark-driver-*.jsa"):
        old.unlink()  # made for another JDK or jar set
    print(f"class-archive: building {path} (once, ~1 min)", flush=True)
    try:
        build(path, getattr(args, "conf", None))
    except Exception as error:  # not fatal: Spark starts without it, only slower
        print(f"class-archive: none built ({error}); Spark JVMs start without one", file=sys.stderr)
        return 0
    print(f"class-archive: ready ({path.stat().st_size // 2**20} MB)", flush=True)
    return 0


def build(path: Path, conf: str | None = None) -> None:
    """Run the demo's backlog in a Spark JVM that dumps the classes it loaded to ``path`` when it exits."""
    work = Path(tempfile.mkdtemp(prefix="fraudlake-class-archive-"))
    partial = path.with_suffix(".partial")
    try:
        settings = load_settings(conf, lakehouse=str(work / "lakehouse")).model_copy(update={"work_dir": str(work)})
        # The session's own driver options (no archive to map: ``run`` removed it) plus the dump.
        options = f"{local_spark_conf(settings)[DRIVER_OPTIONS]} {DUMP_OPTION}={partial} {QUIET}"
        extra = {**settings.spark.extra_conf, DRIVER_OPTIONS: options}
        settings = settings.model_copy(update={"spark": settings.spark.model_copy(update={"extra_conf": extra})})
        spark = get_spark(settings, app_name="fraudlake-class-archive")
        spark.sparkContext.setLogLevel("ERROR")  # the workload's warnings (local checkpoints) are not news here
        init_lakehouse(spark, settings)
        load_rules(spark, settings)
        generate_landing(settings, count=1000, files=2, fraud_rate=0.004, seed=7)
        run_engine(
            spark, settings, EngineRun(source="files", once=True, max_files_per_trigger=1), report=lambda _: None
        )
        gateway: Any = spark.sparkContext._gateway
        spark.stop()
        gateway.proc.stdin.close()  # the JVM exits at the end of its input, writing the archive on the way out
        gateway.proc.wait(timeout=600)
        if not partial.is_file():
            raise RuntimeError(f"the JVM wrote no archive to {partial}")
        partial.replace(path)
    finally:
        partial.unlink(missing_ok=True)
        shutil.rmtree(work, ignore_errors=True)
