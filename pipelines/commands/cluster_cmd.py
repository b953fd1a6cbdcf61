"""``fraudlake cluster start|stop|status``: a Spark standalone cluster on this machine (a master, two workers).

``start`` also writes ``<work_dir>/cluster/conf.yaml``: the settings it was given with ``spark.master`` pointing at
the cluster, so every command can run on it::

    fraudlake cluster start
    fraudlake run --once --conf .work/cluster/conf.yaml      # the driver here, the executors on the workers
    fraudlake cluster stop
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from pipelines.base.file_lock import LockTimeout
from pipelines.base.settings import Settings
from pipelines.commands.context import settings_from
from pipelines.local.standalone_cluster import MASTER_PORT, MASTER_UI_PORT, ClusterError, StandaloneCluster


def register(subparsers: Any, parent: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser(
        "cluster", parents=[parent], help="start, stop or inspect a local Spark standalone cluster"
    )
    parser.add_argument("action", choices=["start", "stop", "status"])
    parser.add_argument("--workers", type=int, default=2, help="workers (one JVM each; default 2)")
    parser.add_argument("--cores", type=int, default=1, help="cores each worker offers (default 1)")
    parser.add_argument("--port", type=int, default=MASTER_PORT, help=f"master port (default {MASTER_PORT})")
    parser.add_argument("--ui-port", type=int, default=MASTER_UI_PORT, help="master web UI port (its JSON status)")
    parser.set_defaults(handler=run)


def cluster_of(args: argparse.Namespace, settings: Settings) -> StandaloneCluster:
    return StandaloneCluster(
        Path(settings.work_dir) / "cluster",
        master_port=args.port,
        ui_port=args.ui_port,
        workers=args.workers,
        cores=args.cores,
    )


def cluster_conf(settings: Settings, cluster: StandaloneCluster) -> Settings:
    """The settings with the driver pointed at the cluster (the rest, jars included, as they were)."""
    conf = cluster.spark_conf()
    spark = settings.spark.model_copy(
        update={"master": conf.pop("spark.master"), "extra_conf": {**settings.spark.extra_conf, **conf}}
    )
    return settings.model_copy(update={"spark": spark})


def run(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    cluster = cluster_of(args, settings)
    try:
        return _run(args.action, settings, cluster)
    except (ClusterError, LockTimeout) as error:  # LockTimeout: another start/stop of this cluster held on too long
        print(f"cluster {args.action}: {error}", file=sys.stderr)
        return 1


def _run(action: str, settings: Settings, cluster: StandaloneCluster) -> int:
    if action == "start":
        cluster.start()
        conf = cluster.work_dir / "conf.yaml"
        conf.write_text(yaml.safe_dump(cluster_conf(settings, cluster).model_dump(mode="json"), sort_keys=False))
        print(f"cluster: {cluster.status()}; logs in {cluster.work_dir}")
        print(f"cluster: settings for it in {conf} (e.g. fraudlake run --once --conf {conf})")
    elif action == "stop":
        stopped = cluster.stop()
        print(f"cluster: stopped {', '.join(stopped)}" if stopped else "cluster: was not running")
    else:
        print(f"cluster: {cluster.status()}")
    return 0
