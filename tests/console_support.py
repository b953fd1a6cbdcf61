"""Helpers of the console tests: Debian's Chromium driven by Playwright, a console served from a thread, screenshots.

No browser is downloaded: Playwright launches the executable of the Debian package ``chromium`` (scripts/
ensure_chromium.sh installs it), headless, with a fresh profile and the flags a closed network needs. Screenshots go
to the test's folder; with ``WRITE_CONSOLE_SCREENSHOTS=1`` they are also copied to docs/console/ (as
``WRITE_DEBEZIUM_SAMPLES=1`` rewrites the Debezium samples), so a normal run leaves the work tree alone.
"""

from __future__ import annotations

import datetime as dt
import functools
import html
import json
import os
import re
import shutil
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from email.message import Message
from http.cookiejar import CookieJar
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from pipelines.base.settings import REPO_ROOT, Settings
from pipelines.console.app import create_app
from pipelines.console.auth import Auth
from pipelines.console.context import ConsoleContext
from pipelines.console.rule_writes import RuleWriter
from pipelines.console.server import ConsoleServer
from pipelines.console.users import FILE_VERSION, PasswordHasher

PASSWORD = "a test password, long enough"
TEST_USERS = {"ada": "admin", "ana": "analyst", "abe": "approver", "vic": "viewer"}
"""The people every test console knows, all with ``PASSWORD``."""

CHROMIUM_ENV = "FRAUDLAKE_CHROMIUM"
SCREENSHOTS = REPO_ROOT / "docs" / "console"
WRITE_SCREENSHOTS_ENV = "WRITE_CONSOLE_SCREENSHOTS"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_executable() -> str:
    """Debian's chromium; a missing browser fails the test (a set-up error, never a skip)."""
    for candidate in (os.environ.get(CHROMIUM_ENV), shutil.which("chromium"), "/usr/bin/chromium"):
        if candidate and Path(candidate).is_file():
            return candidate
    pytest.fail("Chromium not found: run `make setup` (scripts/ensure_chromium.sh installs Debian's chromium)")


@functools.cache
def _password_hash() -> str:
    return PasswordHasher().hash(PASSWORD)  # argon2id costs ~0.5 s: once per test process, not per user


def write_users(path: Path, users: dict[str, str]) -> None:
    """A users file (0600) with ``users`` (name -> role), all with ``PASSWORD``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    entries = {name: {"role": role, "hash": _password_hash()} for name, role in users.items()}
    path.write_text(json.dumps({"version": FILE_VERSION, "users": entries, "proxy_roles": {}}))
    path.chmod(0o600)


def signin_auth(
    settings: Settings, folder: Path | None = None, users: dict[str, str] | None = None, **console: object
) -> Auth:
    """Sign-in for a test console: a users file and a session key in ``folder`` (a fresh temporary one by
    default), ``TEST_USERS`` unless ``users``; ``console`` overrides settings of the conf's console section."""
    folder = folder or Path(tempfile.mkdtemp(prefix="console-auth-"))
    write_users(folder / "users.json", TEST_USERS if users is None else users)
    section = settings.console.model_copy(
        update={"users_file": str(folder / "users.json"), "secret_file": str(folder / "session.key"), **console}
    )
    return Auth.from_settings(settings.model_copy(update={"console": section}))


@contextmanager
def running_console(
    settings: Settings,
    *,
    writer: RuleWriter,
    spark: Callable[[], SparkSession],
    stale_after: dt.timedelta = dt.timedelta(minutes=5),
    auth: Auth | None = None,
    **options: float,
) -> Iterator[tuple[ConsoleServer, ConsoleContext]]:
    """A console on a free port of 127.0.0.1, served from a thread of this process, stopped after; ``options``
    are ``ConsoleContext.build``'s timeouts (``read_timeout_s``, ``write_timeout_s``); sign-in is ``auth``, else
    ``signin_auth(settings)`` (``TEST_USERS``). Reads get 90 s unless a test says otherwise: the production deadline
    (30 s) is for a person waiting, and a CI machine running two Spark test workers can take longer than that."""
    options.setdefault("read_timeout_s", 90.0)
    console = ConsoleContext.build(
        settings, writer=writer, spark=spark, stale_after=stale_after, poll_seconds=1.0, **options
    )
    auth = auth or signin_auth(settings)
    server = ConsoleServer(create_app(console, auth=auth), host="127.0.0.1", port=0)
    server.start_in_thread()
    try:
        yield server, console
    finally:
        server.stop()
        console.shutdown()
        auth.shutdown()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


class Visitor:
    """A person at the console over HTTP (stdlib client, cookies kept): signs in, then GETs and POSTs forms the way
    the console's pages do (same Origin, the page's CSRF token) unless told otherwise."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url.rstrip("/")
        self.cookies = CookieJar()
        cookie_handler = urllib.request.HTTPCookieProcessor(self.cookies)
        self._follow = urllib.request.build_opener(cookie_handler)
        self._stay = urllib.request.build_opener(cookie_handler, _NoRedirect())
        self.csrf = ""

    def fetch(
        self,
        url: str,
        *,
        form: dict[str, str] | None = None,
        body: bytes | None = None,
        timeout: float = 120.0,
        headers: dict[str, str | None] | None = None,
        csrf: bool = True,
        follow: bool = True,
    ) -> tuple[int, str, Message]:
        """GET (or POST a form / raw body); (status, text, headers). A POST sends ``Origin`` and, with ``csrf``,
        the token of the last page read; ``headers`` add or replace (``{"Origin": ...}``; None: not sent)."""
        full = url if url.startswith("http") else self.base_url + url
        if form is not None and csrf:
            form = {"csrf_token": self.csrf, **form}
        data = body if body is not None else (urllib.parse.urlencode(form).encode() if form is not None else None)
        sent = {"Origin": self.base_url} if data is not None else {}
        merged = {name: value for name, value in {**sent, **(headers or {})}.items() if value is not None}
        request = urllib.request.Request(full, data=data, headers=merged)
        opener = self._follow if follow else self._stay
        try:
            with opener.open(request, timeout=timeout) as response:
                status, text, got = response.status, response.read().decode(), response.headers
        except urllib.error.HTTPError as error:
            status, text, got = error.code, error.read().decode(), error.headers
        token = re.search(r'<meta name="csrf-token" content="([^"]*)"', text)
        if token and token.group(1):
            self.csrf = html.unescape(token.group(1))
        return status, text, got

    def sign_in(self, name: str = "ana", password: str = PASSWORD) -> tuple[int, str, Message]:
        status, text, _ = self.fetch("/login")
        assert status == 200, text[:1000]
        login_token = re.search(r'name="csrf_token" value="([^"]*)"', text)
        assert login_token, text[:2000]
        form = {"csrf_token": html.unescape(login_token.group(1)), "username": name, "password": password}
        return self.fetch("/login", form=form, csrf=False)


@functools.cache
def visitor(base_url: str, name: str = "ana") -> Visitor:
    """One signed-in ``Visitor`` per console and person (the tests' ``fetch``)."""
    person = Visitor(base_url)
    status, text, _ = person.sign_in(name)
    assert status in (200, 503), text[:2000]  # the landing page: 503 in a lakehouse without tables
    return person


def fetch(
    url: str, *, form: dict[str, str] | None = None, body: bytes | None = None, timeout: float = 120.0
) -> tuple[int, str, Message]:
    """GET (or POST a form / raw body) as the analyst ana, signed in once per console; redirects followed."""
    parts = urllib.parse.urlsplit(url)
    return visitor(f"{parts.scheme}://{parts.netloc}").fetch(url, form=form, body=body, timeout=timeout)


class Screenshots:
    """Full-page PNGs of the console, named by page."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.folder.mkdir(parents=True, exist_ok=True)
        self.taken: list[Path] = []

    def take(self, page: object, name: str) -> Path:
        path = self.folder / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)  # type: ignore[attr-defined]
        assert path.stat().st_size > 5_000, f"screenshot {name} is nearly empty"
        self.taken.append(path)
        if os.environ.get(WRITE_SCREENSHOTS_ENV) == "1":
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, SCREENSHOTS / path.name)
        return path
