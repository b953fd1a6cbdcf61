"""A Spark standalone cluster on this machine, from pyspark's own ``spark-class``: a master and N workers.

Each daemon is its own JVM (``org.apache.spark.deploy.master.Master`` / ``...worker.Worker``), in a process group of
its own, logging under ``<work_dir>/cluster``; every worker offers ``cores`` cores and ``memory`` to executors. It
is how ``fraudlake cluster start|stop|status`` and the cluster test show the engine running with executors in
other JVMs than the driver (``spark.master = spark://...``), as on a real cluster. No download: the jars are
pyspark's.

Example::

    cluster = StandaloneCluster(Path(".work/cluster"))
    cluster.start()                 # returns when both workers are registered and ALIVE
    conf = cluster.spark_conf()     # {"spark.master": "spark://127.0.0.1:17077", "spark.executor.cores": "1", ...}
    cluster.stop()
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyspark

from pipelines.base.file_lock import exclusive_lock
from pipelines.base.runtime_env import ensure_java_home
from pipelines.local.ports import port_open
from pipelines.local.processes import read_pid, remove_if_stale, start_daemon, stop_processes, wait_until

MASTER_PORT = 17077
MASTER_UI_PORT = 17080
DAEMON_MEMORY = "256m"  # the master and worker JVMs themselves; executors get the worker's ``memory``
LOCK_WAIT_S = 300.0
"""How long a start or stop waits for another one of this cluster (a start waits up to 120 s for its workers)."""


class ClusterError(RuntimeError):
    """The cluster could not be started, or did not come up in time."""


def spark_home() -> Path:
    """pyspark's own Spark distribution (bin/spark-class, jars/)."""
    return Path(pyspark.__file__).resolve().parent


@dataclass(frozen=True)
class StandaloneCluster:
    """A master on ``master_port`` (web UI on ``ui_port``) and ``workers`` workers of ``cores`` cores each."""

    work_dir: Path
    master_port: int = MASTER_PORT
    ui_port: int = MASTER_UI_PORT
    workers: int = 2
    cores: int = 1
    memory: str = "1g"
    executor_memory: str = "768m"
    host: str = "127.0.0.1"

    @property
    def master_url(self) -> str:
        return f"spark://{self.host}:{self.master_port}"

    def spark_conf(self) -> dict[str, str]:
        """What a driver needs to run on this cluster: one executor per worker, each using its cores."""
        return {
            "spark.master": self.master_url,
            "spark.executor.cores": str(self.cores),
            "spark.executor.memory": self.executor_memory,
            "spark.cores.max": str(self.cores * self.workers),
        }

    def _pid_file(self, name: str) -> Path:
        return self.work_dir / f"{name}.pid"

    def _names(self) -> list[str]:
        return ["master", *[f"worker-{n}" for n in range(1, self.workers + 1)]]

    def _environment(self) -> dict[str, str]:
        conf_dir = self.work_dir / "conf"  # empty: no spark-defaults.conf or spark-env.sh from elsewhere
        conf_dir.mkdir(parents=True, exist_ok=True)
        return {
            **os.environ,
            "SPARK_HOME": str(spark_home()),
            "SPARK_CONF_DIR": str(conf_dir),
            "JAVA_HOME": ensure_java_home(),
            "SPARK_LOCAL_IP": self.host,
            "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
        }

    def _command(self, name: str) -> list[str]:
        spark_class = str(spark_home() / "bin" / "spark-class")
        if name == "master":
            return [
                spark_class,
                "org.apache.spark.deploy.master.Master",
                *("--host", self.host, "--port", str(self.master_port), "--webui-port", str(self.ui_port)),
            ]
        work = self.work_dir / name
        work.mkdir(parents=True, exist_ok=True)
        return [
            spark_class,
            "org.apache.spark.deploy.worker.Worker",
            *("--host", self.host, "--webui-port", "0", "--cores", str(self.cores), "--memory", self.memory),
            *("--work-dir", str(work), self.master_url),
        ]

    def pid(self, name: str) -> int | None:
        """The pid of one daemon if it is alive."""
        return read_pid(self._pid_file(name))

    def state(self) -> dict[str, Any] | None:
        """The master's JSON status (``aliveworkers``, ``workers``, ``activeapps``, ...), None if it does not answer."""
        try:
            with urllib.request.urlopen(f"http://{self.host}:{self.ui_port}/json/", timeout=3) as response:
                state: dict[str, Any] = json.loads(response.read())
                return state
        except (OSError, urllib.error.URLError, ValueError):
            return None

    def alive_workers(self) -> int:
        state = self.state()
        return sum(1 for w in (state or {}).get("workers", []) if w.get("state") == "ALIVE")

    def start(self, wait_s: float = 120.0) -> None:
        """Start the master and the workers (idempotent); return when every worker is registered and ALIVE. One
        start or stop at a time (``<work_dir>/cluster.lock``): two at once would each start a set of daemons."""
        self.work_dir.mkdir(parents=True, exist_ok=True)
        with self._lock("cluster start"):
            self._start(wait_s)

    def _start(self, wait_s: float) -> None:
        if all(self.pid(name) for name in self._names()) and self.alive_workers() >= self.workers:
            return
        if self.pid("master") is None and port_open(self.master_port, self.host):
            raise ClusterError(f"port {self.master_port} is taken by another process")
        env = self._environment()
        for name in self._names():
            if self.pid(name) is not None:
                continue
            remove_if_stale(self._pid_file(name))
            start_daemon(
                self._command(name), pid_file=self._pid_file(name), output=self.work_dir / f"{name}.log", env=env
            )
        outcome = wait_until(
            lambda: self.alive_workers() >= self.workers,
            wait_s=wait_s,
            exited=lambda: any(self.pid(name) is None for name in self._names()),
        )
        if outcome == "ready":
            return
        dead = [name for name in self._names() if self.pid(name) is None]
        self._stop(20.0)
        if outcome == "exited":
            raise ClusterError(f"{', '.join(dead)} exited; see {self.work_dir}/<name>.log")
        raise ClusterError(f"{self.workers} workers did not register within {wait_s:.0f} s; see {self.work_dir}")

    def stop(self, wait_s: float = 20.0) -> list[str]:
        """Stop every daemon (SIGTERM to its group, SIGKILL after ``wait_s``); return the names that were running.
        Only the processes the pid files record are signalled (stale files are removed with a warning)."""
        if not self.work_dir.exists():
            return []
        with self._lock("cluster stop"):
            return self._stop(wait_s)

    def _stop(self, wait_s: float) -> list[str]:
        names = sorted({p.stem for p in self.work_dir.glob("*.pid")} | set(self._names()), reverse=True)
        running = {name: pid for name in names if (pid := self.pid(name)) is not None}
        stop_processes(running.values(), wait_s=wait_s)
        for name in names:
            if name not in running:
                remove_if_stale(self._pid_file(name))
            self._pid_file(name).unlink(missing_ok=True)
        return list(running)

    @contextmanager
    def _lock(self, what: str) -> Iterator[None]:
        with exclusive_lock(self.work_dir / "cluster.lock", wait_s=LOCK_WAIT_S, what=f"{what} ({self.work_dir})"):
            yield

    def status(self) -> str:
        if self.pid("master") is None:
            return "stopped"
        daemons = sum(1 for name in self._names() if self.pid(name) is not None)
        return f"{self.master_url}: {daemons} daemon(s) running, {self.alive_workers()}/{self.workers} workers alive"
