"""TCP ports on this machine, for the local servers a command or a test starts: a free one, or whether one is taken.

A port the OS hands out for ``bind(0)`` comes from the kernel's ephemeral range, the same range it draws the local
ports of outgoing connections from: between the pick and the server's own bind, any client on the machine (a Kafka
producer, Spark's block manager) may take it, and the server then dies on "address already in use" (seen in CI: a
broker exiting with 1 on a port picked this way). So ``free_port`` picks below the ephemeral range, and claims the
port for this process in a small file (``O_EXCL``) so that two processes picking at once never get the same one; a
claim whose process is gone is taken over.
"""

from __future__ import annotations

import os
import random
import socket
import tempfile
from pathlib import Path

from pipelines.local.processes import alive

# Below Linux's default ephemeral range (32768-60999) and above the well-known/registered services people run.
_PICK_FROM = 20000
_EPHEMERAL_FALLBACK = (32768, 60999)
_CLAIMS = Path(tempfile.gettempdir(), "fraudlake-ports")


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return _EPHEMERAL_FALLBACK


def _bindable(port: int, host: str) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def _claim(port: int) -> bool:
    """Claim ``port`` for this process; False when a live process holds the claim."""
    _CLAIMS.mkdir(mode=0o1777, exist_ok=True)
    claim = _CLAIMS / str(port)
    for _ in range(2):
        try:
            fd = os.open(claim, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            try:
                holder = int(claim.read_text() or "0")
            except (OSError, ValueError):
                return False  # being written this instant: someone else's
            if holder == os.getpid() or alive(holder):
                return False
            claim.unlink(missing_ok=True)  # its process is gone: take it over
            continue
        with os.fdopen(fd, "w") as out:
            out.write(str(os.getpid()))
        return True
    return False


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that nothing listens on right now, outside the ephemeral range, claimed for this process.

    Example::

        broker = KafkaBroker(data_dir=folder, port=free_port(), controller_port=free_port())
    """
    low, _ = _ephemeral_range()
    high = max(_PICK_FROM + 1000, low - 1)
    candidates = random.sample(range(_PICK_FROM, high), k=min(200, high - _PICK_FROM))
    for port in candidates:
        if _bindable(port, host) and _claim(port):
            return port
    raise OSError(f"no free TCP port on {host} in {_PICK_FROM}-{high}")


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something accepts TCP connections on ``host:port`` (half a second to answer)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0
