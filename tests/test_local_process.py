"""pipelines.local.processes: the daemons' pid files (identity, not a bare pid), start/stop locks, readiness waits
and stops, on real (tiny) processes."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipelines.local.processes import (
    DaemonRecord,
    alive,
    command_line,
    read_pid,
    start_daemon,
    stop_daemon,
    wait_until,
)

IGNORES_SIGTERM = "; ".join(
    [
        "import signal, time",
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)",
        "print('up', flush=True)",
        "time.sleep(60)",
    ]
)


def _gone(pid: int) -> bool:
    """Ended (a zombie waiting for its reaper counts: it runs no more)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_a_daemon_is_found_by_its_pid_file_and_stopped_with_its_group(tmp_path: Path) -> None:
    pid_file, output = tmp_path / "d.pid", tmp_path / "d.log"
    # A launcher shell and its child (what spark-class does): stopping the daemon stops both.
    process = start_daemon(["sh", "-c", "sleep 60 & echo $!; wait"], pid_file=pid_file, output=output)
    assert read_pid(pid_file) == process.pid
    assert wait_until(lambda: output.read_text().strip().isdigit(), wait_s=30, every_s=0.05) == "ready"
    child = int(output.read_text())
    assert stop_daemon(pid_file, wait_s=10) is True
    assert process.poll() is not None and not pid_file.exists()
    assert wait_until(lambda: _gone(child), wait_s=10, every_s=0.05) == "ready"
    assert stop_daemon(pid_file, wait_s=10) is False  # nothing running: nothing to do


def test_a_daemon_that_ignores_sigterm_is_killed_after_the_wait(tmp_path: Path) -> None:
    pid_file, output = tmp_path / "d.pid", tmp_path / "d.log"
    process = start_daemon([sys.executable, "-c", IGNORES_SIGTERM], pid_file=pid_file, output=output)
    assert wait_until(lambda: "up" in output.read_text(), wait_s=30, every_s=0.05) == "ready"
    started = time.monotonic()
    assert stop_daemon(pid_file, wait_s=1) is True
    assert process.poll() is not None and 1 <= time.monotonic() - started < 10
    assert not alive(process.pid)


def test_stale_or_garbage_pid_files_read_as_no_daemon(tmp_path: Path) -> None:
    pid_file = tmp_path / "d.pid"
    assert read_pid(pid_file) is None
    pid_file.write_text("not a pid")
    assert read_pid(pid_file) is None
    finished = start_daemon(["true"], pid_file=pid_file, output=tmp_path / "d.log")
    finished.wait()
    assert read_pid(pid_file) is None


def test_wait_until_says_why_it_stopped_waiting() -> None:
    assert wait_until(lambda: True, wait_s=1) == "ready"
    assert wait_until(lambda: False, wait_s=0.2, every_s=0.05) == "timed out"
    assert wait_until(lambda: True, wait_s=1, exited=lambda: True) == "exited"  # a dead daemon is not ready


def _sleeper(token: str) -> subprocess.Popen[bytes]:
    """An unrelated live process (not started through start_daemon), recognisable by ``token`` in its command."""
    return subprocess.Popen([sys.executable, "-c", "import sys, time; time.sleep(60)", token])


def test_a_pid_file_whose_pid_is_now_an_unrelated_process_is_not_signalled(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="pipelines.local.processes")
    unrelated = _sleeper("unrelated")
    try:
        pid_file = tmp_path / "d.pid"
        live = DaemonRecord.of(unrelated.pid, ["java", "kafka.Kafka", "server.properties"])
        assert live is not None
        # The daemon that wrote the file died and the kernel gave its pid to `unrelated`: another start time.
        pid_file.write_text(dataclasses.replace(live, start_ticks=live.start_ticks - 1).to_json())
        assert read_pid(pid_file) is None
        assert stop_daemon(pid_file, wait_s=1) is False
        assert not pid_file.exists() and "is now another process" in caplog.text
        # Same start time but another command than the one started (the record is not this process's).
        pid_file.write_text(live.to_json())
        assert stop_daemon(pid_file, wait_s=1) is False and "no longer runs 'server.properties'" in caplog.text
        # An older release's bare pid, written before `unrelated` started: not trusted either.
        pid_file.write_text(str(unrelated.pid))
        os.utime(pid_file, (time.time() - 3600, time.time() - 3600))
        assert stop_daemon(pid_file, wait_s=1) is False and "started after the pid file was written" in caplog.text
        assert unrelated.poll() is None  # never signalled
    finally:
        unrelated.kill()
        unrelated.wait()


def test_a_bare_pid_of_an_older_release_still_stops_its_daemon(tmp_path: Path) -> None:
    pid_file, output = tmp_path / "d.pid", tmp_path / "d.log"
    process = start_daemon([sys.executable, "-c", "import time; time.sleep(60)"], pid_file=pid_file, output=output)
    assert json.loads(pid_file.read_text())["pid"] == process.pid  # this release records an identity
    pid_file.write_text(str(process.pid))  # as an older release wrote it, after the start
    assert read_pid(pid_file) == process.pid
    assert stop_daemon(pid_file, wait_s=10) is True and process.poll() is not None


STARTER = """
import sys, time
from pathlib import Path
from pipelines.local.processes import daemon_lock, read_pid, start_daemon
pid_file, go, token = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
while not go.exists():
    time.sleep(0.001)
with daemon_lock(pid_file, wait_s=60, what="test start"):
    if read_pid(pid_file) is None:
        command = [sys.executable, "-c", "import time; time.sleep(60)", token]
        start_daemon(command, pid_file=pid_file, output=pid_file.with_suffix(".log"))
        time.sleep(1.0)  # a daemon's readiness wait: the window two unlocked starts both fall into
print(read_pid(pid_file))
"""


def _running_with(token: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and token in command_line(int(entry.name)) and not _gone(int(entry.name)):
            found.append(int(entry.name))
    return found


def test_two_starts_at_once_leave_exactly_one_daemon(tmp_path: Path) -> None:
    pid_file, go, token = tmp_path / "d.pid", tmp_path / "go", f"daemon-{os.getpid()}-{time.monotonic_ns()}"
    starters = [
        subprocess.Popen(
            [sys.executable, "-c", STARTER, str(pid_file), str(go), token], stdout=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    try:
        time.sleep(0.5)  # both interpreters up and polling
        go.touch()
        outputs = [starter.communicate(timeout=60)[0].strip() for starter in starters]
        running = _running_with(token)
        assert len(running) == 1, running
        assert outputs == [str(running[0])] * 2  # the second starter found the first's daemon
        assert stop_daemon(pid_file, wait_s=10) is True
        assert wait_until(lambda: not _running_with(token), wait_s=10, every_s=0.05) == "ready"
    finally:
        for pid in _running_with(token):
            os.kill(pid, signal.SIGKILL)
