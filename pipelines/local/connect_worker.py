"""A real Kafka Connect standalone worker, run from the Maven jars in .jars/connect, with the Debezium plugin.

``fraudlake connect start|stop|status`` and the tests' session fixture use it. The worker runs
``org.apache.kafka.connect.cli.ConnectStandalone`` (the same Kafka release as the broker) with a capped heap,
its REST API on 127.0.0.1, plugins from ``.jars/connect/plugins`` and its source offsets in a file under its
folder, flushed every second: a restarted worker resumes where the last flush left it (the changes after it
are sent again: duplicates, which the rules MERGE ignores by position). The connector is given as a JSON
file at start (standalone workers keep no connector configs of their own).

Example::

    worker = ConnectWorker.from_settings(settings)
    worker.start([connector_config(settings, db_port=15432)])  # waits until the connector's task runs
    worker.connector_state("fraudlake-rules-postgres")         # 'RUNNING'
    worker.stop()
"""

from __future__ import annotations

import json
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipelines.base.runtime_env import SetupMissingError, ensure_java_home, jars_dir, log4j2_config
from pipelines.base.settings import Settings
from pipelines.local.ports import port_open
from pipelines.local.processes import daemon_lock, read_pid, remove_if_stale, start_daemon, stop_daemon, wait_until

_LOG_LEVELS = {
    "io.debezium": "INFO",
    "org.apache.kafka.connect": "INFO",
    "org.apache.kafka.clients": "WARN",
    "org.reflections": "ERROR",
}
"""Logger levels of the daemon's log file (the rest: WARN and up)."""

LOCK_WAIT_S = 300.0
"""How long a start or stop waits for another one of this worker (a start waits up to 120 s for its REST API)."""


class ConnectError(RuntimeError):
    """The worker or its connector could not be started, or did not run in time."""


@dataclass(frozen=True)
class ConnectWorker:
    """One standalone worker: its folder (offsets, configs, logs), broker, REST port and heap."""

    data_dir: Path
    bootstrap: str
    rest_port: int = 18083
    heap: str = "384m"

    @classmethod
    def from_settings(cls, settings: Settings) -> ConnectWorker:
        conf = settings.connect
        return cls(
            data_dir=Path(conf.data_dir or Path(settings.work_dir) / "connect").resolve(),
            bootstrap=settings.kafka.bootstrap_servers,
            rest_port=conf.rest_port,
            heap=conf.heap,
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}"

    @property
    def offsets_file(self) -> Path:
        return self.data_dir / "offsets.dat"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "connect.log"

    @property
    def _pid_file(self) -> Path:
        return self.data_dir / "worker.pid"

    def worker_properties(self) -> str:
        plugins = jars_dir() / "connect" / "plugins"
        lines = {
            "bootstrap.servers": self.bootstrap,
            "key.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "key.converter.schemas.enable": "false",
            "value.converter.schemas.enable": "false",
            "offset.storage.file.filename": str(self.offsets_file),
            "offset.flush.interval.ms": "1000",
            "plugin.path": str(plugins),
            # Every plugin here (Debezium 3, Kafka's own converters and transforms) declares itself in
            # META-INF/services: no classpath scan, a faster start.
            "plugin.discovery": "service_load",
            "listeners": f"http://127.0.0.1:{self.rest_port}",
            "rest.advertised.host.name": "127.0.0.1",
            "task.shutdown.graceful.timeout.ms": "5000",
            # Secrets by reference (the Debezium role's password, debezium_config): ${env:NAME} or
            # ${directory:FOLDER:FILE}, resolved in memory, so no connector file, REST answer or log holds them.
            "config.providers": "env,directory",
            "config.providers.env.class": "org.apache.kafka.common.config.provider.EnvVarConfigProvider",
            "config.providers.directory.class": "org.apache.kafka.common.config.provider.DirectoryConfigProvider",
        }
        return "\n".join(f"{k}={v}" for k, v in lines.items()) + "\n"

    def _java(self) -> list[str]:
        java = Path(ensure_java_home()) / "bin" / "java"
        worker_jars = jars_dir() / "connect" / "worker"
        plugin = jars_dir() / "connect" / "plugins" / "debezium-postgres"
        for folder in (worker_jars, plugin):
            if not any(folder.glob("*.jar")):
                raise SetupMissingError(f"no jars in {folder}: run `make setup` (copies them from Maven Central)")
        return [
            str(java),
            f"-Xmx{self.heap}",
            f"-Xms{self.heap}",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.xml'}",
            "-cp",
            str(worker_jars / "*"),
            "org.apache.kafka.connect.cli.ConnectStandalone",
        ]

    # ---- lifecycle -------------------------------------------------------------------------------------

    def pid(self) -> int | None:
        return read_pid(self._pid_file)

    def answers(self) -> bool:
        if not port_open(self.rest_port):
            return False
        try:
            self.rest("GET", "/")
        except ConnectError:
            return False
        return True

    def start(self, connectors: Sequence[Mapping[str, Any]] = (), wait_s: float = 120.0) -> None:
        """Start the worker with ``connectors`` (each ``{"name", "config"}``, given as files) and wait until each
        connector's task runs. An already running worker is left as it is: stop it to change its connectors."""
        deadline = time.monotonic() + wait_s
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # One start or stop at a time: two `connect start` at once would otherwise both launch a JVM, the second's
        # pid file orphaning the first. The second waits here, then finds the first's worker answering.
        with daemon_lock(self._pid_file, wait_s=LOCK_WAIT_S, what=f"connect start ({self.data_dir})"):
            pid = self.pid()
            if pid is None:
                remove_if_stale(self._pid_file)
                self._launch(connectors, wait_s)
            elif wait_until(self.answers, wait_s=wait_s, every_s=0.3) != "ready":
                raise ConnectError(f"the worker (pid {pid}) runs but its REST API {self.url} does not answer: stop it")
        for connector in connectors:
            self.wait_running(str(connector["name"]), max(5.0, deadline - time.monotonic()))

    def _launch(self, connectors: Sequence[Mapping[str, Any]], wait_s: float) -> None:
        if port_open(self.rest_port):
            raise ConnectError(f"port {self.rest_port} is taken by another process; set connect.rest_port in conf")
        (self.data_dir / "worker.properties").write_text(self.worker_properties())
        (self.data_dir / "log4j2.xml").write_text(log4j2_config(self.log_file, _LOG_LEVELS))
        files = []
        for connector in connectors:
            path = self.data_dir / f"connector-{connector['name']}.json"
            path.write_text(json.dumps(connector, indent=2, sort_keys=True) + "\n")
            files.append(str(path))
        command = [*self._java(), str(self.data_dir / "worker.properties"), *files]
        process = start_daemon(command, pid_file=self._pid_file, output=self.data_dir / "stdout.log")
        outcome = wait_until(self.answers, wait_s=wait_s, every_s=0.3, exited=lambda: process.poll() is not None)
        if outcome == "exited":
            raise ConnectError(f"Kafka Connect exited with {process.returncode}; see {self.log_file}")
        if outcome == "timed out":
            stop_daemon(self._pid_file, wait_s=30.0)  # the lock is ours already
            raise ConnectError(f"Kafka Connect did not answer on {self.url} in {wait_s:.0f}s; see {self.log_file}")

    def add_connector(self, connector: Mapping[str, Any], wait_s: float = 60.0) -> None:
        """Create a connector on the running worker (standalone: not kept across restarts) and wait until it runs."""
        self.rest("POST", "/connectors", dict(connector))
        self.wait_running(str(connector["name"]), wait_s)

    def remove_connector(self, name: str) -> None:
        self.rest("DELETE", f"/connectors/{name}")

    def wait_running(self, name: str, wait_s: float) -> None:
        """Wait until the connector and its task are RUNNING; a FAILED one raises with its trace."""
        deadline = time.monotonic() + wait_s
        while True:
            status = self.connector_status(name)
            states = [status.get("connector", {}).get("state")] + [t.get("state") for t in status.get("tasks", [])]
            if "FAILED" in states:
                traces = [t.get("trace", "") for t in [status.get("connector", {}), *status.get("tasks", [])]]
                raise ConnectError(f"connector {name} failed: {' '.join(t for t in traces if t)[:3000]}")
            if len(states) > 1 and all(s == "RUNNING" for s in states):
                return
            if time.monotonic() > deadline:
                raise ConnectError(f"connector {name} not running within {wait_s:.0f}s ({states}); see {self.log_file}")
            time.sleep(0.3)

    def stop(self, wait_s: float = 30.0) -> bool:
        """Stop the worker (SIGTERM: offsets flushed; SIGKILL after ``wait_s``); return whether one ran. Only the
        process the pid file records is signalled (a stale file is removed with a warning)."""
        return self._stop(wait_s, signal.SIGTERM, "connect stop")

    def kill(self) -> bool:
        """SIGKILL the worker: no offset flush, no goodbye (what a crash looks like)."""
        return self._stop(10.0, signal.SIGKILL, "connect kill")

    def _stop(self, wait_s: float, sig: signal.Signals, what: str) -> bool:
        if not self.data_dir.exists():
            return False
        with daemon_lock(self._pid_file, wait_s=LOCK_WAIT_S, what=f"{what} ({self.data_dir})"):
            return stop_daemon(self._pid_file, wait_s=wait_s, sig=sig)

    def status(self) -> str:
        pid = self.pid()
        if pid is None:
            return "stopped"
        if not self.answers():
            return f"running (pid {pid}, REST {self.url} not answering)"
        connectors = self.rest("GET", "/connectors")
        states = []
        for name in connectors if isinstance(connectors, list) else []:
            status = self.connector_status(str(name))
            tasks = ",".join(str(t.get("state")) for t in status.get("tasks", []))
            states.append(f"{name}: {status.get('connector', {}).get('state')} (tasks {tasks or '-'})")
        return f"running (pid {pid}, REST {self.url}; {'; '.join(states) or 'no connectors'})"

    # ---- REST ------------------------------------------------------------------------------------------

    def connector_status(self, name: str) -> dict[str, Any]:
        try:
            status = self.rest("GET", f"/connectors/{name}/status")
        except ConnectError:
            return {}
        return status if isinstance(status, dict) else {}

    def connector_state(self, name: str) -> str | None:
        state = self.connector_status(name).get("connector", {}).get("state")
        return None if state is None else str(state)

    def rest(self, method: str, path: str, body: Any = None) -> Any:
        """One call to the worker's REST API; the JSON answer (None for an empty one)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as error:
            raise ConnectError(f"{method} {path}: HTTP {error.code} {error.read().decode()[:500]}") from None
        except (urllib.error.URLError, OSError) as error:
            raise ConnectError(f"{method} {path}: {error}") from None
        return json.loads(text) if text.strip() else None
