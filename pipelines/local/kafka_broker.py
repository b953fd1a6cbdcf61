"""A real single-node Apache Kafka broker (KRaft) run from the Maven jars in .jars/broker.

``fraudlake kafka start|stop|status`` and the tests' session fixture use it: it formats storage with
``kafka.tools.StorageTool``, starts ``kafka.Kafka`` on 127.0.0.1 with a capped heap, and waits until the
broker answers a metadata request. No Docker, no downloaded tarball.

Example::

    broker = KafkaBroker.from_settings(settings)
    broker.start()          # idempotent: returns at once if this broker already answers
    broker.stop()

    with started_broker(tmp / "kafka") as broker:   # one of its own, on free ports (tests, the bench)
        ...
"""

from __future__ import annotations

import base64
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pipelines.base.runtime_env import ensure_java_home, jar_files, jars_dir, log4j2_config
from pipelines.base.settings import Settings
from pipelines.local.ports import free_port, port_open
from pipelines.local.processes import daemon_lock, read_pid, remove_if_stale, start_daemon, stop_daemon, wait_until

_LOG_LEVELS = {"kafka": "INFO", "org.apache.kafka": "WARN"}
"""Logger levels of the daemon's log file (the rest: WARN and up)."""

LOCK_WAIT_S = 300.0
"""How long a start or stop waits for another one of this broker (a start takes up to its format + ready waits)."""


class BrokerError(RuntimeError):
    """The broker could not be started, or did not answer in time."""


@dataclass(frozen=True)
class KafkaBroker:
    """One local KRaft broker+controller: its ports, its data folder, its heap."""

    data_dir: Path
    port: int
    controller_port: int
    heap: str = "512m"

    @classmethod
    def from_settings(cls, settings: Settings) -> KafkaBroker:
        broker = settings.kafka.broker
        return cls(
            data_dir=Path(settings.work_dir) / "kafka",
            port=broker.port,
            controller_port=broker.controller_port,
            heap=broker.heap,
        )

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def _pid_file(self) -> Path:
        return self.data_dir / "broker.pid"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "broker.log"

    def _properties(self) -> str:
        return "\n".join(
            [
                "process.roles=broker,controller",
                "node.id=1",
                f"controller.quorum.voters=1@127.0.0.1:{self.controller_port}",
                f"listeners=PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
                f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}",
                "controller.listener.names=CONTROLLER",
                "inter.broker.listener.name=PLAINTEXT",
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                f"log.dirs={self.data_dir / 'logs'}",
                "num.partitions=3",
                "offsets.topic.replication.factor=1",
                "offsets.topic.num.partitions=3",
                "transaction.state.log.replication.factor=1",
                "transaction.state.log.min.isr=1",
                "share.coordinator.state.topic.replication.factor=1",
                "share.coordinator.state.topic.min.isr=1",
                "group.initial.rebalance.delay.ms=0",
                "auto.create.topics.enable=true",
                "log.retention.hours=168",
                "log.segment.bytes=67108864",
                "",
            ]
        )

    def _java(self) -> list[str]:
        java = Path(ensure_java_home()) / "bin" / "java"
        jar_files("broker")  # a clear error if `make setup` has not run
        log4j = self.data_dir / "log4j2.xml"
        return [
            str(java),
            f"-Xmx{self.heap}",
            f"-Xms{self.heap}",
            # No collector named: the JVM's choice (G1 on 2+ cores), and room for one set in JDK_JAVA_OPTIONS
            # (the test suite's serial collector; two named collectors stop the JVM at start).
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={log4j}",
            f"-Dkafka.logs.dir={self.data_dir}",
            "-cp",
            str(jars_dir() / "broker" / "*"),
        ]

    def _format_storage(self, config: Path) -> None:
        if (self.data_dir / "logs" / "meta.properties").exists():
            return
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        result = subprocess.run(
            [
                *self._java(),
                "kafka.tools.StorageTool",
                "format",
                f"--cluster-id={cluster_id}",
                "-c",
                str(config),
                "--ignore-formatted",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if result.returncode != 0:
            raise BrokerError(f"formatting Kafka storage failed:\n{result.stdout}\n{result.stderr}")

    def pid(self) -> int | None:
        """The pid of this broker's process if it is alive."""
        return read_pid(self._pid_file)

    def answers(self, timeout_s: float = 2.0) -> bool:
        """Whether the broker answers a Kafka metadata request."""
        if not port_open(self.port):
            return False
        from kafka import KafkaAdminClient

        try:
            admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=int(timeout_s * 1000))
        except Exception:
            return False
        try:
            admin.list_topics()
            return True
        except Exception:
            return False
        finally:
            admin.close()

    def start(self, wait_s: float = 90.0) -> None:
        """Format storage once, start the broker in the background, and wait until it answers. Idempotent, and one
        start (or stop) at a time: a second ``kafka start`` meanwhile waits, then finds this broker answering."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with daemon_lock(self._pid_file, wait_s=LOCK_WAIT_S, what=f"kafka start ({self.data_dir})"):
            self._start(wait_s)

    def _start(self, wait_s: float) -> None:
        pid = self.pid()
        if pid is not None:  # ours, alive: answering, or still starting after a start that gave up waiting
            if wait_until(self.answers, wait_s=wait_s) == "ready":
                return
            raise BrokerError(f"the broker (pid {pid}) runs but does not answer on {self.bootstrap}: stop it first")
        remove_if_stale(self._pid_file)
        if port_open(self.port):
            raise BrokerError(f"port {self.port} is taken by another process; set kafka.broker.port in conf")
        config = self.data_dir / "server.properties"
        config.write_text(self._properties())
        (self.data_dir / "log4j2.xml").write_text(log4j2_config(self.log_file, _LOG_LEVELS))
        self._format_storage(config)
        process = start_daemon(
            [*self._java(), "kafka.Kafka", str(config)], pid_file=self._pid_file, output=self.data_dir / "stdout.log"
        )
        outcome = wait_until(self.answers, wait_s=wait_s, exited=lambda: process.poll() is not None)
        if outcome == "exited":
            raise BrokerError(f"Kafka exited with {process.returncode}; see {self.data_dir / 'stdout.log'}")
        if outcome == "timed out":
            stop_daemon(self._pid_file, wait_s=30.0)
            raise BrokerError(f"Kafka did not answer on {self.bootstrap} within {wait_s:.0f}s; see {self.log_file}")

    def stop(self, wait_s: float = 30.0) -> bool:
        """Stop the broker (SIGTERM, then SIGKILL after ``wait_s``); return whether one was running. Only the
        process the pid file records is signalled (a stale file is removed with a warning)."""
        if not self.data_dir.exists():
            return False
        with daemon_lock(self._pid_file, wait_s=LOCK_WAIT_S, what=f"kafka stop ({self.data_dir})"):
            return stop_daemon(self._pid_file, wait_s=wait_s)

    def status(self) -> str:
        pid = self.pid()
        if pid is None:
            return "stopped"
        return f"running (pid {pid}, {self.bootstrap}, {'answering' if self.answers() else 'not answering'})"


@contextmanager
def started_broker(data_dir: Path, *, heap: str = "512m") -> Iterator[KafkaBroker]:
    """A broker of its own under ``data_dir`` on free ports, started, and stopped on leaving the block."""
    broker = KafkaBroker(data_dir=data_dir, port=free_port(), controller_port=free_port(), heap=heap)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()
