"""pipelines.local.processes: the daemons' pid files, readiness waits and stops, on real (tiny) processes."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from pipelines.local.processes import alive, read_pid, start_daemon, stop_daemon, wait_until

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
