"""The parts of the live path a campaign kills and restarts: the broker, PostgreSQL, Kafka Connect (Debezium),
the rules CDC job and the engine (each of the last two a ``fraudlake`` subprocess of its own).

Each part is killed with a real signal to its real process: SIGKILL (a crash: no shutdown hook, no flush) or
SIGTERM (its own orderly stop, given ``TERM_WAIT_S`` before SIGKILL). PostgreSQL is its postmaster and every
backend (a SIGKILL of the postmaster alone leaves backends holding its shared memory, which a real crash of the
host would not); its SIGTERM is a smart shutdown, which waits for Debezium's sessions to end, so after
``TERM_WAIT_S`` it is made a fast one (SIGINT), and that escalation is reported.

Example::

    stack = LiveStack(broker, db, worker, connector, settings, conf_file, logs)
    stack.start_job("engine")
    note = stack.kill("postgres", signal.SIGKILL)
    stack.restart("postgres")
"""

from __future__ import annotations

import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipelines.base.settings import REPO_ROOT, Settings
from pipelines.chaos.plan import Part
from pipelines.local.connect_worker import ConnectWorker
from pipelines.local.kafka_broker import KafkaBroker
from pipelines.local.processes import alive, start_daemon, stop_processes
from pipelines.local.rules_database import RulesDb, RulesDbError

TERM_WAIT_S = 75.0
"""How long a SIGTERMed part may take to stop by itself (the engine: 30 s for its batch, 15 s for Spark's stop)."""
JOB_COMMANDS: dict[str, tuple[str, ...]] = {
    "engine": ("run", "--source", "kafka"),
    "rules_job": ("rules", "run", "--source", "kafka"),
}


@dataclass
class LiveStack:
    """The running parts: the daemons (objects of pipelines.local) and the two jobs' processes."""

    broker: KafkaBroker
    db: RulesDb
    worker: ConnectWorker
    connector: dict[str, Any]
    settings: Settings
    conf_file: Path
    logs: Path
    jobs: dict[str, int] = field(default_factory=dict)  # part -> pid (group leader)

    # ---- the jobs ------------------------------------------------------------------------------------------

    def start_job(self, part: str) -> int:
        """Start ``fraudlake <JOB_COMMANDS[part]>`` in a session of its own; its output appended to a log."""
        command = [sys.executable, "-m", "pipelines.cli", *JOB_COMMANDS[part], "--conf", str(self.conf_file)]
        command += ["--lakehouse", self.settings.lakehouse_root]
        env = {k: v for k, v in os.environ.items() if not k.startswith("FRAUDLAKE_")}
        env["PYSPARK_PYTHON"] = sys.executable
        env["PYTHONPATH"] = str(REPO_ROOT)
        self.logs.mkdir(parents=True, exist_ok=True)
        process = start_daemon(command, pid_file=self.logs / f"{part}.pid", output=self.logs / f"{part}.log", env=env)
        self.jobs[part] = process.pid
        return process.pid

    def job_alive(self, part: str) -> bool:
        pid = self.jobs.get(part)
        return pid is not None and alive(pid)

    def stop_jobs(self) -> None:
        """SIGTERM both jobs (each stops after its batch in flight), SIGKILL what is left after TERM_WAIT_S."""
        pids = [pid for pid in self.jobs.values() if alive(pid)]
        for pid in pids:
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + TERM_WAIT_S
        while time.monotonic() < deadline and any(alive(pid) for pid in pids):
            time.sleep(0.2)
        for pid in self.jobs.values():
            _kill_group(pid)
        self.jobs.clear()

    # ---- faults --------------------------------------------------------------------------------------------

    def kill(self, part: Part, sig: signal.Signals) -> str:
        """Send ``sig`` to ``part`` and wait until it is gone; return a note on how it went (may be empty)."""
        started = time.monotonic()
        if part in JOB_COMMANDS:
            pid = self.jobs.get(part)
            if pid is None or not alive(pid):
                return f"{part} was not running"
            if sig == signal.SIGTERM:
                # To the job's process alone, as `kill PID` or an orchestrator's stop would: signalled with its
                # group, its Spark JVM would shut down under the job's own orderly stop.
                _signal(pid, signal.SIGTERM)
                if not _wait_gone(pid, TERM_WAIT_S):
                    _kill_group(pid)
                    return f"did not stop within {TERM_WAIT_S:.0f} s of SIGTERM: SIGKILLed"
            _kill_group(pid)  # the job's group (its Spark JVM), whatever is left of it
        elif part == "broker":
            pid = self.broker.pid()
            if pid is None:
                return "broker was not running"
            stop_processes([pid], wait_s=TERM_WAIT_S, sig=sig)
        elif part == "connect":
            pid = self.worker.pid()
            if pid is None:
                return "connect was not running"
            stop_processes([pid], wait_s=TERM_WAIT_S, sig=sig)
        else:
            return self._kill_postgres(sig)
        return f"gone after {time.monotonic() - started:.1f} s" if sig == signal.SIGTERM else ""

    def _kill_postgres(self, sig: signal.Signals) -> str:
        postmaster = _postmaster_pid(self.db)
        if postmaster is None:
            return "postgres was not running"
        started = time.monotonic()
        if sig == signal.SIGKILL:
            cluster = [postmaster, *_children(postmaster)]
            for pid in cluster:
                _signal(pid, signal.SIGKILL)
            # Every process, not only the postmaster: a backend still exiting keeps the old shared memory attached,
            # and a new postmaster refuses to start beside it ("another server might be running").
            for pid in cluster:
                _wait_gone(pid, 10.0)
            return ""
        _signal(postmaster, signal.SIGTERM)
        if _wait_gone(postmaster, 15.0):
            return f"smart shutdown in {time.monotonic() - started:.1f} s"
        _signal(postmaster, signal.SIGINT)  # fast shutdown: ends the sessions the smart one waits for
        if _wait_gone(postmaster, 30.0):
            waited = time.monotonic() - started
            return f"smart shutdown waited on open sessions; fast shutdown (SIGINT) after 15 s, gone at {waited:.1f} s"
        for pid in [postmaster, *_children(postmaster)]:
            _signal(pid, signal.SIGKILL)
        _wait_gone(postmaster, 10.0)
        return "neither smart nor fast shutdown finished: SIGKILLed after 45 s"

    def restart(self, part: Part) -> str:
        """Start ``part`` again (the way its command would); return a note (e.g. a connector task restarted)."""
        if part in JOB_COMMANDS:
            self.start_job(part)
        elif part == "broker":
            self.broker.start()
        elif part == "connect":
            self.worker.start([self.connector])
        else:
            return _start_postgres(self.db)
        return ""

    def connector_note(self) -> str:
        """Restart a FAILED Debezium task (what an operator would do); say so. Empty when it runs."""
        name = str(self.connector["name"])
        states = self.worker.connector_status(name)
        tasks = [t.get("state") for t in states.get("tasks", [])]
        if "FAILED" in tasks or states.get("connector", {}).get("state") == "FAILED":
            self.worker.rest("POST", f"/connectors/{name}/restart?includeTasks=true&onlyFailed=true")
            return "Debezium task FAILED; restarted through Connect's REST API"
        return ""


def _postmaster_pid(db: RulesDb) -> int | None:
    try:
        pid = int((db.pgdata / "postmaster.pid").read_text().split()[0])
    except (FileNotFoundError, ValueError, IndexError, PermissionError):
        return None
    return pid if alive(pid) else None


def _children(parent: int) -> list[int]:
    """Processes whose parent is ``parent`` (PostgreSQL's backends, checkpointer, walsenders...)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Field 4 is the ppid; the command name (field 2) may hold spaces, so split after its closing paren.
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 1 and int(fields[1]) == parent:
            found.append(int(entry.name))
    return found


def _signal(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _kill_group(leader: int) -> None:
    """SIGKILL the process group ``leader`` led (a job started by start_daemon), even after the leader exited;
    wait until its members are gone."""
    try:
        os.killpg(leader, signal.SIGKILL)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline:
        alive(leader)  # reaps the leader if it is our child (a zombie would keep the group "alive")
        try:
            os.killpg(leader, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)


def _wait_gone(pid: int, seconds: float) -> bool:
    """Wait until ``pid`` has exited (a zombie has: its memory and shared-memory attachments are released)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not alive(pid):  # gone, or a zombie
            return True
        time.sleep(0.1)
    return not alive(pid)


def _start_postgres(db: RulesDb, seconds: float = 60.0) -> str:
    """Start the killed cluster as ``fraudlake rulesdb start`` would, trying again while the crashed one's leftovers
    (its shared memory, its port) are still being released; say how many tries it took."""
    deadline = time.monotonic() + seconds
    tries = 1
    while True:
        try:
            db.start()
            return "" if tries == 1 else f"started at try {tries} (the crashed cluster's leftovers were still held)"
        except RulesDbError:
            if time.monotonic() > deadline:
                raise
            tries += 1
            time.sleep(1.0)
