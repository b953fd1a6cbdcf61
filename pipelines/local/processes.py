"""Local daemons one command starts and a later one stops: each in a process group of its own, recorded in a pid file
with its identity, started and stopped under a lock.

The Kafka broker, the Kafka Connect worker and the Spark standalone daemons are started in the background by one
``fraudlake ... start`` and stopped by a later ``... stop`` (another process): the pid file is the link between the
two. Each daemon leads a new session (``start_new_session``), so a terminal's Ctrl-C does not reach it and its whole
group (a launcher script and its JVM) is signalled at once.

A pid alone is not an identity: once the daemon is gone the kernel hands its pid to any new process, and a stop that
trusted the file would signal that one. The pid file therefore holds the process's identity (``DaemonRecord``): the
machine's boot id, the pid, its start time (clock ticks after boot, field 22 of ``/proc/<pid>/stat``: fixed for the
life of a process, different for any later holder of the pid) and the command started. Only a live process with the
same boot id and start time, still running that command (its last argument, the daemon's config or port, is in its
command line: a launcher script ``exec`` s the JVM, so the rest changes), is signalled; a stale file is removed
with a warning saying why. A pid file of an older release (a bare pid) is trusted only for a process started before
the file was written (a recycled pid starts after).

Two commands starting (or stopping) one daemon at once would both see "not running" and start two, the second's pid
file orphaning the first JVM: ``daemon_lock`` (an ``flock`` on ``<pid file>.lock``) makes them take turns.

Example::

    with daemon_lock(folder / "broker.pid", wait_s=150, what="kafka start"):
        if read_pid(folder / "broker.pid") is None:
            process = start_daemon([java, "kafka.Kafka", config], pid_file=folder / "broker.pid", output=folder / "out")
            outcome = wait_until(answers, wait_s=90, exited=lambda: process.poll() is not None)  # "ready", ...
    stop_daemon(folder / "broker.pid", wait_s=30)   # SIGTERM to its group; SIGKILL after 30 s
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pipelines.base.file_lock import exclusive_lock

log = logging.getLogger(__name__)

KILL_WAIT_S = 10.0
"""How long a SIGKILLed process may take to be gone (it cannot refuse; the kernel still has to tear it down)."""

Readiness = Literal["ready", "exited", "timed out"]


@dataclass(frozen=True)
class DaemonRecord:
    """What a pid file holds: which process, on which boot, started when (clock ticks after boot), running what."""

    pid: int
    boot_id: str
    start_ticks: int
    command: tuple[str, ...]

    def to_json(self) -> str:
        return json.dumps({"pid": self.pid, "boot_id": self.boot_id, "start_ticks": self.start_ticks,
                           "command": list(self.command)}) + "\n"  # fmt: skip

    @classmethod
    def of(cls, pid: int, command: Sequence[str]) -> DaemonRecord | None:
        """The record of the live process ``pid`` started with ``command``; None if it is gone."""
        ticks = start_ticks(pid)
        return None if ticks is None else cls(pid, boot_id(), ticks, tuple(command))


def boot_id() -> str:
    """This boot of the machine (start ticks count from it)."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def start_ticks(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks after boot (``/proc/<pid>/stat`` field 22); None if no such process.

    The command name (field 2, in parentheses) may hold spaces and parentheses: fields are counted after the last
    ``)``, where field 3 is the first."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def command_line(pid: int) -> tuple[str, ...]:
    try:
        return tuple(Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1])
    except OSError:
        return ()


def start_daemon(
    command: Sequence[str], *, pid_file: Path, output: Path, env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start ``command`` in the background, in a session of its own, its output appended to ``output``; record its
    identity in ``pid_file``. ``env`` None: this process's environment."""
    with open(output, "ab") as out:
        process = subprocess.Popen(
            list(command),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
    # Popen returns once the child has exec'd; if it died already, its zombie (our child) still has its stat.
    record = DaemonRecord.of(process.pid, command)
    text = record.to_json() if record else str(process.pid)
    temporary = pid_file.with_name(f".{pid_file.name}.{os.getpid()}")
    temporary.write_text(text)
    temporary.replace(pid_file)  # a reader never sees half a record
    return process


def read_record(pid_file: Path) -> DaemonRecord | None:
    """The record in ``pid_file`` (not checked against the live process); None without a file or with garbage.

    A bare pid (a file of an older release) reads as a record of unknown start (``start_ticks`` -1)."""
    try:
        text = pid_file.read_text().strip()
    except (FileNotFoundError, IsADirectoryError):
        return None
    if text.isdigit():
        return DaemonRecord(int(text), boot_id(), -1, ())
    try:
        data = json.loads(text)
        return DaemonRecord(int(data["pid"]), str(data["boot_id"]), int(data["start_ticks"]), tuple(data["command"]))
    except (ValueError, KeyError, TypeError):
        return None


def mismatch(record: DaemonRecord, pid_file: Path | None = None) -> str | None:
    """Why the live process ``record.pid`` is not the recorded daemon (None: it is): gone, another boot, started at
    another time (the pid was handed to a new process), running another command."""
    ticks = start_ticks(record.pid)
    if ticks is None:
        return f"pid {record.pid} is gone"
    if record.boot_id and record.boot_id != boot_id():
        return f"recorded before the machine restarted (pid {record.pid} is now another process)"
    if record.start_ticks < 0:  # an older release's bare pid: trust only a process older than the file
        if pid_file is None or _started_at(ticks) > _modified_at(pid_file) + 1.0:
            return (
                f"pid {record.pid} started after the pid file was written: another process ({_described(record.pid)})"
            )
        return None
    if ticks != record.start_ticks:
        return f"pid {record.pid} is now another process ({_described(record.pid)})"
    if _zombie(record.pid):
        return f"pid {record.pid} has exited"
    # An empty command line is no evidence: /proc/<pid>/cmdline reads empty while the process is between two
    # programs (spark-class execs java), which under load made a starting Spark worker look gone (test_cluster).
    running = _settled_command_line(record.pid)
    if record.command and running and record.command[-1] not in running:
        return f"pid {record.pid} no longer runs {record.command[-1]!r} ({_described(record.pid)})"
    return None


def _settled_command_line(pid: int, *, tries: int = 10) -> tuple[str, ...]:
    """``command_line``, read again a few times (20 ms apart) while it reads empty; still empty: ``()``."""
    for _ in range(tries - 1):
        if running := command_line(pid):
            return running
        time.sleep(0.02)
    return command_line(pid)


def read_pid(pid_file: Path) -> int | None:
    """The pid in ``pid_file`` if that very process still runs; None without a file, with garbage in it, or when
    the pid is dead or now belongs to another process."""
    record = read_record(pid_file)
    if record is None or mismatch(record, pid_file) is not None:
        return None
    return record.pid


def remove_if_stale(pid_file: Path) -> str | None:
    """Remove ``pid_file`` unless its daemon runs; return why it was stale (None: no file, or its daemon runs)."""
    if not pid_file.exists():
        return None
    record = read_record(pid_file)
    reason = "it holds no pid" if record is None else mismatch(record, pid_file)
    if reason is not None:
        pid_file.unlink(missing_ok=True)
        log.warning("%s: stale pid file removed, nothing signalled: %s", pid_file, reason)
    return reason


@contextmanager
def daemon_lock(pid_file: Path, *, wait_s: float, what: str) -> Iterator[None]:
    """One start or stop of the daemon of ``pid_file`` at a time (across processes): ``<pid file>.lock``."""
    with exclusive_lock(pid_file.with_name(pid_file.name + ".lock"), wait_s=wait_s, what=what):
        yield


def alive(pid: int, ticks: int | None = None) -> bool:
    """Whether ``pid`` still runs (a child of ours that exited is reaped here, not left as a zombie); with
    ``ticks``, only the process that started then counts (not a later holder of the pid)."""
    try:
        reaped, _ = os.waitpid(pid, os.WNOHANG)
        if reaped == pid:
            return False
    except ChildProcessError:
        pass  # not our child: another command started it
    now = start_ticks(pid)
    return now is not None and (ticks is None or now == ticks) and not _zombie(pid)


def wait_until(
    ready: Callable[[], bool],
    *,
    wait_s: float,
    every_s: float = 0.5,
    exited: Callable[[], bool] = lambda: False,
) -> Readiness:
    """Poll until ``ready()`` (``"ready"``), ``exited()`` (``"exited"``: the daemon died starting) or ``wait_s``
    have passed (``"timed out"``)."""
    deadline = time.monotonic() + wait_s
    while True:
        if exited():
            return "exited"
        if ready():
            return "ready"
        if time.monotonic() > deadline:
            return "timed out"
        time.sleep(every_s)


def stop_processes(pids: Collection[int], *, wait_s: float, sig: signal.Signals = signal.SIGTERM) -> None:
    """Send ``sig`` to each process's group, wait up to ``wait_s`` for all to end, SIGKILL the rest and wait for
    them to be gone. Each is followed by its start time: a pid the kernel hands to a new process meanwhile is
    neither waited for nor killed."""
    started = {pid: ticks for pid in pids if (ticks := start_ticks(pid)) is not None}
    for pid in started:
        _signal_group(pid, sig)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and any(alive(pid, ticks) for pid, ticks in started.items()):
        time.sleep(0.2)
    survivors = {pid: ticks for pid, ticks in started.items() if alive(pid, ticks)}
    for pid in survivors:
        _signal_group(pid, signal.SIGKILL)
    deadline = time.monotonic() + KILL_WAIT_S
    while time.monotonic() < deadline and any(alive(pid, ticks) for pid, ticks in survivors.items()):
        time.sleep(0.1)


def stop_daemon(pid_file: Path, *, wait_s: float, sig: signal.Signals = signal.SIGTERM) -> bool:
    """Stop the daemon of ``pid_file`` (``stop_processes``) and remove the file; return whether one was running.

    A stale file (its process gone, or the pid now another process's) is removed without signalling anything."""
    pid = read_pid(pid_file)
    if pid is None:
        remove_if_stale(pid_file)
        return False
    stop_processes([pid], wait_s=wait_s, sig=sig)
    pid_file.unlink(missing_ok=True)
    return True


def _signal_group(pid: int, sig: signal.Signals) -> None:
    """Signal the group ``pid`` leads (``start_daemon`` makes each daemon a leader), else the process alone."""
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except ProcessLookupError:
        pass  # gone already


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False


def _started_at(ticks: int) -> float:
    """Start ticks as a Unix time (to the second: the boot time is whole seconds)."""
    boot = next(
        int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime ")
    )
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def _modified_at(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _described(pid: int) -> str:
    return " ".join(command_line(pid))[:120] or "no command line"
