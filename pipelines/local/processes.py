"""Local daemons one command starts and a later one stops: each in a process group of its own, its pid in a file.

The Kafka broker, the Kafka Connect worker and the Spark standalone daemons are started in the background by one
``fraudlake ... start`` and stopped by a later ``... stop`` (another process): the pid file is the link between the
two. Each daemon leads a new session (``start_new_session``), so a terminal's Ctrl-C does not reach it and its whole
group (a launcher script and its JVM) is signalled at once.

Example::

    process = start_daemon([java, "kafka.Kafka", config], pid_file=folder / "broker.pid", output=folder / "out.log")
    outcome = wait_until(answers, wait_s=90, exited=lambda: process.poll() is not None)   # "ready", "exited", ...
    stop_daemon(folder / "broker.pid", wait_s=30)   # SIGTERM to its group; SIGKILL after 30 s
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Literal

KILL_WAIT_S = 10.0
"""How long a SIGKILLed process may take to be gone (it cannot refuse; the kernel still has to tear it down)."""

Readiness = Literal["ready", "exited", "timed out"]


def start_daemon(
    command: Sequence[str], *, pid_file: Path, output: Path, env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start ``command`` in the background, in a session of its own, its output appended to ``output``; write its
    pid to ``pid_file``. ``env`` None: this process's environment."""
    with open(output, "ab") as out:
        process = subprocess.Popen(
            list(command),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
    pid_file.write_text(str(process.pid))
    return process


def read_pid(pid_file: Path) -> int | None:
    """The pid in ``pid_file`` if that process is alive; None without a file, with garbage in it or a dead pid."""
    try:
        pid = int(pid_file.read_text().strip())
        os.kill(pid, 0)
    except (FileNotFoundError, ValueError, ProcessLookupError, PermissionError):
        return None
    return pid


def alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a child of ours that exited is reaped here, not left as a zombie)."""
    try:
        reaped, _ = os.waitpid(pid, os.WNOHANG)
        if reaped == pid:
            return False
    except ChildProcessError:
        pass  # not our child: another command started it
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


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
    them to be gone."""
    for pid in pids:
        _signal_group(pid, sig)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and any(alive(pid) for pid in pids):
        time.sleep(0.2)
    survivors = [pid for pid in pids if alive(pid)]
    for pid in survivors:
        _signal_group(pid, signal.SIGKILL)
    deadline = time.monotonic() + KILL_WAIT_S
    while time.monotonic() < deadline and any(alive(pid) for pid in survivors):
        time.sleep(0.1)


def stop_daemon(pid_file: Path, *, wait_s: float, sig: signal.Signals = signal.SIGTERM) -> bool:
    """Stop the daemon of ``pid_file`` (``stop_processes``) and remove the file; return whether one was running."""
    pid = read_pid(pid_file)
    if pid is None:
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
