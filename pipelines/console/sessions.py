"""Sign-in sessions kept in the console's memory, named by a signed random id in a cookie; the session key; the
login attempts' limiter.

A session holds who signed in, their role, the CSRF synchronizer token and two clocks: it ends ``idle_s`` after its
last use and ``absolute_s`` after sign-in, whichever comes first. Keeping sessions server-side (rather than in the
cookie) makes sign-out and a removed user take effect at once; a restart signs everyone out, which a console can
afford. The cookie carries ``<id>.<HMAC-SHA256(key, id)>``: an id not made with this console's key is refused
without a lookup. The key comes from ``$FRAUDLAKE_CONSOLE_SECRET`` or a 0600 file generated once, never the repo.

Example::

    store = SessionStore(load_secret(path), idle_s=1800, absolute_s=43200)
    session = store.new("ana", "analyst", via="password")
    store.get(store.cookie_value(session)) is session      # True, until it expires or store.drop(session.id)
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

SECRET_ENV = "FRAUDLAKE_CONSOLE_SECRET"
MIN_SECRET = 32
MAX_SESSIONS = 10_000
"""Beyond this many live sessions the least recently used is dropped: memory stays bounded."""


class SecretProblem(RuntimeError):
    """The session key is missing, too short, or in a file others may read."""


def load_secret(path: Path) -> bytes:
    """``$FRAUDLAKE_CONSOLE_SECRET``, else the key file (generated 0600 when missing; refused when others may read
    it)."""
    from_env = os.environ.get(SECRET_ENV)
    if from_env is not None:
        if len(from_env) < MIN_SECRET:
            raise SecretProblem(f"{SECRET_ENV} must be at least {MIN_SECRET} characters long")
        return from_env.encode()
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another console made it first: use theirs
            pass
        else:
            with os.fdopen(fd, "w") as out:
                out.write(secrets.token_hex(32))
    mode = path.stat().st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise SecretProblem(f"{path} may be read by others (mode {stat.S_IMODE(mode):04o}): chmod 600 it")
    key = path.read_text().strip()
    if len(key) < MIN_SECRET:
        raise SecretProblem(f"{path} holds fewer than {MIN_SECRET} characters")
    return key.encode()


@dataclass
class Session:
    id: str
    user: str
    role: str
    via: str
    """How they signed in: "password" or "proxy"."""
    created: float
    seen: float
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32))


class SessionStore:
    """Live sessions by id; expired ones are refused and forgotten when met (and the oldest beyond ``max_sessions``)."""

    def __init__(
        self,
        secret: bytes,
        *,
        idle_s: float,
        absolute_s: float,
        max_sessions: int = MAX_SESSIONS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._secret = secret
        self.idle_s = idle_s
        self.absolute_s = absolute_s
        self.max_sessions = max_sessions
        self._clock = clock
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self._lock = threading.Lock()

    def sign(self, value: str, purpose: str = "session") -> str:
        return hmac.new(self._secret, f"{purpose}:{value}".encode(), hashlib.sha256).hexdigest()

    def cookie_value(self, session: Session) -> str:
        return f"{session.id}.{self.sign(session.id)}"

    def new(self, user: str, role: str, *, via: str) -> Session:
        now = self._clock()
        session = Session(secrets.token_urlsafe(32), user, role, via, created=now, seen=now)
        with self._lock:
            self._sessions[session.id] = session
            while len(self._sessions) > self.max_sessions:
                self._sessions.popitem(last=False)
        return session

    def get(self, cookie: str | None) -> Session | None:
        """The live session a cookie names (its last use now), or None: unsigned, unknown or expired."""
        session_id, dot, signature = (cookie or "").partition(".")
        if not dot or not hmac.compare_digest(signature, self.sign(session_id)):
            return None
        now = self._clock()
        with self._lock:
            session = self._sessions.get(session_id)
            if session is None:
                return None
            if now - session.seen > self.idle_s or now - session.created > self.absolute_s:
                del self._sessions[session_id]
                return None
            session.seen = now
            self._sessions.move_to_end(session_id)
            return session

    def drop(self, session_id: str) -> None:
        with self._lock:
            self._sessions.pop(session_id, None)

    def __len__(self) -> int:
        return len(self._sessions)


class LoginLimiter:
    """At most ``max_failures`` failed sign-ins per user name and ``max_address_failures`` per client address (a
    team behind one NAT shares it) within ``window_s``; then refused until the oldest failure leaves the window. A
    success clears the name's failures."""

    def __init__(
        self,
        *,
        max_failures: int = 5,
        max_address_failures: int = 20,
        window_s: float = 300.0,
        max_keys: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_failures = max_failures
        self.max_address_failures = max_address_failures
        self.window_s = window_s
        self.max_keys = max_keys
        self._clock = clock
        self._failures: OrderedDict[str, list[float]] = OrderedDict()
        self._lock = threading.Lock()

    def _recent(self, key: str, now: float) -> list[float]:
        times = [t for t in self._failures.get(key, []) if now - t < self.window_s]
        if times:
            self._failures[key] = times
        else:
            self._failures.pop(key, None)
        return times

    def wait_s(self, name: str, address: str) -> float:
        """Seconds until ``name`` from ``address`` may try again; 0 when it may now."""
        now = self._clock()
        with self._lock:
            waits = [
                self.window_s - (now - times[0])
                for key, bound in ((f"user:{name}", self.max_failures), (f"ip:{address}", self.max_address_failures))
                if len(times := self._recent(key, now)) >= bound
            ]
        return max(waits, default=0.0)

    def failed(self, name: str, address: str) -> None:
        now = self._clock()
        with self._lock:
            for key in (f"user:{name}", f"ip:{address}"):
                self._failures.setdefault(key, []).append(now)
                self._failures.move_to_end(key)
            while len(self._failures) > self.max_keys:
                self._failures.popitem(last=False)

    def succeeded(self, name: str) -> None:
        with self._lock:
            self._failures.pop(f"user:{name}", None)
