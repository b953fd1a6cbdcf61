"""Who is asking, and may they: sign-in on every page, roles on every change, CSRF and same-origin on every POST.

* ``SignIn`` (ASGI middleware): finds the request's session (``sessions``) or, as a Databricks App, the person the
  App's proxy forwards (``X-Forwarded-Email``, else ``X-Forwarded-Preferred-Username``) with their role from the
  conf's or the users file's ``proxy_roles``. Without one, a page answers 303 to ``/login?next=...`` and anything
  else 401; only ``/login`` and ``/static/`` are open.
* ``csrf_guard`` (a dependency of every route, app.py): a request that is not GET/HEAD/OPTIONS must come from the
  console's own origin (``Origin``, else ``Referer``; neither: refused) and carry the session's synchronizer token
  (form field ``csrf_token`` or header ``X-CSRF-Token``); a viewer changes nothing. ``/login`` is checked against a
  signed pre-sign-in token instead (double submit: a random nonce in a cookie, its HMAC in the form).
* ``require(role)``: the dependency each changing route declares (403 with a message below it).
* ``check_listen``: the console listens beyond loopback only when sign-in is configured.

Example::

    auth = Auth.from_settings(settings)
    app = create_app(console, auth=auth)
    @router.post("/rules/new", dependencies=[Depends(require("analyst"))])
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import secrets
import urllib.parse
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from fastapi import HTTPException, Request
from starlette.datastructures import MutableHeaders
from starlette.requests import HTTPConnection
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pipelines.base.settings import ConsoleSettings, Settings
from pipelines.console.blocking import BlockingPool
from pipelines.console.sessions import LoginLimiter, Session, SessionStore, load_secret
from pipelines.console.users import Role, UsersFile, at_least

log = logging.getLogger(__name__)

COOKIE = "fraudlake_session"
LOGIN_COOKIE = "fraudlake_login"
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "x-csrf-token"
SESSION_KEY = "fraudlake.session"
SET_COOKIES_KEY = "fraudlake.set_cookies"
OPEN_PATHS = ("/login", "/static/")
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
PROXY_HEADERS = ("x-forwarded-email", "x-forwarded-preferred-username")


class NotListening(RuntimeError):
    """The console would listen beyond loopback without sign-in configured."""


@dataclass
class Auth:
    """Sign-in's state: settings, the users file, live sessions, the login limiter, the password-check pool."""

    settings: ConsoleSettings
    users: UsersFile
    store: SessionStore
    limiter: LoginLimiter
    passwords: BlockingPool
    """argon2 checks take ~0.1-0.5 s of CPU each: on their own bounded pool, never on the event loop."""

    @classmethod
    def from_settings(cls, settings: Settings) -> Auth:
        console = settings.console
        return cls(
            settings=console,
            users=UsersFile(console.users_path(settings.work_dir)),
            store=SessionStore(
                load_secret(console.secret_path(settings.work_dir)),
                idle_s=console.idle_minutes * 60.0,
                absolute_s=console.absolute_hours * 3600.0,
            ),
            limiter=LoginLimiter(),
            passwords=BlockingPool("the password check", name="passwords", workers=1, queue=8, timeout_s=10.0),
        )

    @property
    def proxied(self) -> bool:
        return self.settings.auth == "databricks_proxy"

    def configured(self) -> bool:
        """Someone can sign in: the proxy mode, or a users file with at least one user."""
        return self.proxied or self.users.count() > 0

    def proxy_role(self, who: str) -> Role | None:
        roles = {**self.users.proxy_roles(), **self.settings.proxy_roles}
        return roles.get(who, roles.get(who.lower(), self.settings.proxy_default_role))

    def login_token(self, nonce: str) -> str:
        return self.store.sign(nonce, "login")

    def shutdown(self) -> None:
        self.passwords.shutdown()


def is_loopback(host: str) -> bool:
    """>>> is_loopback("127.0.0.1"), is_loopback("localhost"), is_loopback("0.0.0.0")
    (True, True, False)"""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_listen(host: str, auth: Auth) -> None:
    """Refuse (``NotListening``) a non-loopback address unless someone can sign in."""
    if is_loopback(host) or auth.configured():
        return
    raise NotListening(
        f"the console will not listen on {host} (beyond this machine) without sign-in: add a user first "
        f"(fraudlake console add-user NAME --role admin, into {auth.users.path}), or run it as a Databricks App "
        "(console.auth: databricks_proxy), or listen on 127.0.0.1"
    )


def cookie_header(name: str, value: str, *, secure: bool, clear: bool = False) -> str:
    """A ``Set-Cookie`` value: HttpOnly, SameSite=Lax (docs/console.md says why not Strict), Path=/, Secure over
    https; a session cookie (no Max-Age): the session's own clocks end it server-side."""
    parts = [f"{name}={value}", "Path=/", "HttpOnly", "SameSite=Lax"]
    if clear:
        parts.append("Max-Age=0")
    if secure:
        parts.append("Secure")
    return "; ".join(parts)


def secure_request(scope: Scope, auth: Auth) -> bool:
    return auth.settings.secure_cookie == "always" or scope.get("scheme") == "https"


def queue_cookie(scope: Scope, header: str) -> None:
    """A ``Set-Cookie`` for ``SignIn`` to add to this request's response (whatever the route returns)."""
    scope.setdefault(SET_COOKIES_KEY, []).append(header)


class SignIn:
    """ASGI middleware: every request but ``/login`` and ``/static/`` needs a session (module docs)."""

    def __init__(self, app: ASGIApp, auth: Auth) -> None:
        self.app = app
        self.auth = auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        connection = HTTPConnection(scope)
        session = self.auth.store.get(connection.cookies.get(COOKIE))
        if self.auth.proxied:
            session, refusal = self._proxied(connection, session)
            if refusal is not None:
                await refusal(scope, receive, send)
                return
        elif session is not None:
            role = self.auth.users.role_of(session.user)  # removed or demoted: at once
            if role is None:
                self.auth.store.drop(session.id)
                session = None
            else:
                session.role = role
        path = scope["path"]
        if session is None and not path.startswith(OPEN_PATHS):
            await self._ask_to_sign_in(connection)(scope, receive, send)
            return
        scope[SESSION_KEY] = session

        async def send_with_cookies(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for header in scope.get(SET_COOKIES_KEY, []):
                    headers.append("set-cookie", header)
                headers.setdefault("cache-control", "no-store")  # signed-in pages stay out of shared caches
            await send(message)

        await self.app(scope, receive, send_with_cookies)

    def _proxied(self, connection: HTTPConnection, session: Session | None) -> tuple[Session | None, Response | None]:
        """The person the App's proxy forwards, in a session of theirs (a new one when the person changed)."""
        who = next((connection.headers[h].strip() for h in PROXY_HEADERS if connection.headers.get(h, "").strip()), "")
        if not who:
            message = "No signed-in person was forwarded by the Databricks App's proxy (X-Forwarded-Email)."
            return None, PlainTextResponse(message, status_code=401)
        role = self.auth.proxy_role(who)
        if role is None:
            log.warning("console: %r has no role in console.proxy_roles: refused", who[:200])
            return None, PlainTextResponse(f"{who} has no role in this console; ask its admin.", status_code=403)
        if session is None or session.user != who:
            if session is not None:
                self.auth.store.drop(session.id)
            session = self.auth.store.new(who, role, via="proxy")
            secure = secure_request(connection.scope, self.auth)
            queue_cookie(connection.scope, cookie_header(COOKIE, self.auth.store.cookie_value(session), secure=secure))
        session.role = role
        return session, None

    def _ask_to_sign_in(self, connection: HTTPConnection) -> Response:
        path = connection.url.path
        if connection.scope["method"] == "GET" and not path.startswith("/api/"):
            target = path + (f"?{connection.url.query}" if connection.url.query else "")
            return RedirectResponse("/login?" + urllib.parse.urlencode({"next": target}), status_code=303)
        message = "Sign in first: this console needs a signed-in user."
        if path.startswith("/api/"):
            return JSONResponse({"error": message}, status_code=401)
        return PlainTextResponse(message, status_code=401)


def session_of(request: Request) -> Session | None:
    session: Session | None = request.scope.get(SESSION_KEY)
    return session


def auth_of(request: Request) -> Auth:
    auth: Auth = request.app.state.auth
    return auth


def own_origin(request: Request, auth: Auth) -> str:
    """``scheme://host[:port]`` this console is reached at (as a Databricks App: the host its proxy was asked for)."""
    host = request.headers.get("host", "")
    if auth.proxied and request.headers.get("x-forwarded-host"):
        host = request.headers["x-forwarded-host"].split(",")[0].strip()
        return f"https://{host}"
    return f"{request.url.scheme}://{host}"


def _same_origin(request: Request, auth: Auth) -> str | None:
    """None when the request comes from the console's own origin, else why not."""
    expected = own_origin(request, auth)
    origin = request.headers.get("origin")
    if origin is not None:
        return None if origin == expected else f"it was sent from another origin ({origin[:100]})"
    referer = request.headers.get("referer")
    if referer is None:
        return "it names no origin (neither Origin nor Referer)"
    parts = urllib.parse.urlsplit(referer)
    if f"{parts.scheme}://{parts.netloc}" != expected:
        return f"it was sent from another page ({parts.scheme}://{parts.netloc[:100]})"
    return None


async def _sent_token(request: Request) -> str:
    header = request.headers.get(CSRF_HEADER)
    if header:
        return header
    content_type = request.headers.get("content-type", "")
    if content_type.startswith(("application/x-www-form-urlencoded", "multipart/form-data")):
        value = (await request.form()).get(CSRF_FIELD)  # cached: the route's own form() reads the same
        return value if isinstance(value, str) else ""
    return ""


async def csrf_guard(request: Request) -> None:
    """Every request that is not GET/HEAD/OPTIONS: same origin, the right token, and more than a viewer's role."""
    if request.method in SAFE_METHODS:
        return
    auth = auth_of(request)
    problem = _same_origin(request, auth)
    sent = await _sent_token(request) if problem is None else ""
    session = session_of(request)
    if problem is None:
        if request.url.path == "/login":
            nonce = request.cookies.get(LOGIN_COOKIE, "")
            if not nonce or not hmac.compare_digest(sent, auth.login_token(nonce)):
                problem = "its sign-in form is stale or was not made by this console (reload the page)"
        elif session is None or not sent or not hmac.compare_digest(sent, session.csrf):
            problem = "its CSRF token is missing or wrong (reload the page and try again)"
    if problem is not None:
        log.warning("console: refused %s %s: %s", request.method, request.url.path, problem)
        raise HTTPException(403, f"This request was refused: {problem}. Nothing was changed.")
    if session is not None and request.url.path != "/logout" and not at_least(session.role, "analyst"):
        raise HTTPException(403, f"Your role ({session.role}) may only read this console. Nothing was changed.")


def require(role: Role) -> Callable[[Request], Awaitable[None]]:
    """A route's dependency: the signed-in user's role is ``role`` or above (403 otherwise)."""

    async def check(request: Request) -> None:
        session = session_of(request)
        if session is None or not at_least(session.role, role):
            have = session.role if session else "none"
            raise HTTPException(403, f"This needs the {role} role or above; yours is {have}. Nothing was changed.")

    return check


def page_values(request: Request) -> dict[str, object]:
    """What every page shows of the person: name, role, CSRF token (for the forms and the fetch calls)."""
    session = session_of(request)
    return {
        "me": session,
        "csrf_token": session.csrf if session else "",
        "may_change": session is not None and at_least(session.role, "analyst"),
    }


def new_login_nonce() -> str:
    return secrets.token_urlsafe(24)


def users_path_hint(settings: Settings) -> Path:
    return settings.console.users_path(settings.work_dir)
