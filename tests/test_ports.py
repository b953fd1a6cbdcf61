"""Ports for the local servers: picked below the kernel's ephemeral range (where outgoing connections take their
local ports from, so a picked port could be taken before the server binds it) and claimed per process, so that two
processes picking at once never get the same port."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from pipelines.local import ports
from pipelines.local.ports import free_port


def test_a_free_port_is_below_the_ephemeral_range_and_never_handed_out_twice() -> None:
    low, _ = ports._ephemeral_range()
    picked = [free_port() for _ in range(30)]
    assert all(20000 <= port < low for port in picked), picked
    assert len(set(picked)) == len(picked)


def test_a_port_claimed_by_another_live_process_is_not_handed_out(tmp_path: Path) -> None:
    # Another process claims ports, stays alive while this one picks; its ports must not come back.
    script = "from pipelines.local.ports import free_port; import sys, time\n"
    script += "print(' '.join(str(free_port()) for _ in range(200)), flush=True); time.sleep(60)\n"
    other = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout is not None
        theirs = {int(p) for p in other.stdout.readline().split()}
        ours = {free_port() for _ in range(200)}
        assert len(theirs) == 200 and not theirs & ours
    finally:
        other.kill()
        other.wait()
    # Once it is gone, its claims are stale and may be taken over.
    stale = next(iter(theirs))
    assert ports._claim(stale)
