"""Signing in and out: the sign-in form (local users), its POST (rate-limited, failures logged without the
password), and sign-out. As a Databricks App the proxy signs people in: the form says so.

A successful sign-in starts a new session (a session id known before sign-in is never promoted: no fixation) and
returns to ``next`` when that is a path of this console."""

from __future__ import annotations

import logging
import re

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse
from starlette.responses import Response

from pipelines.console.auth import (
    COOKIE,
    LOGIN_COOKIE,
    auth_of,
    cookie_header,
    new_login_nonce,
    queue_cookie,
    secure_request,
    session_of,
)
from pipelines.console.context import console_of

router = APIRouter()
log = logging.getLogger(__name__)
MAX_NAME_FIELD = 200
NONCE = re.compile(r"[A-Za-z0-9_-]{32}", re.ASCII)


def safe_next(target: str | None) -> str:
    """A path of this console to return to, else ``/rules`` (never another site: ``//x``, ``/\\x``, ``https:``).

    >>> safe_next("/alerts?rule=1"), safe_next("//evil.example"), safe_next("https://evil.example")
    ('/alerts?rule=1', '/rules', '/rules')
    """
    value = (target or "").strip()
    if not value.startswith("/") or value.startswith(("//", "/\\")) or len(value) > 2000:
        return "/rules"
    return value


def _client(request: Request) -> str:
    return request.client.host if request.client else "?"


def _form(request: Request, status: int = 200, *, error: str | None = None, username: str = "") -> Response:
    auth = auth_of(request)
    # The nonce a form of this browser already holds is kept: a second GET of /login (a favicon request redirected
    # here, another tab) must not invalidate the form on screen.
    held = request.cookies.get(LOGIN_COOKIE, "")
    nonce = held if NONCE.fullmatch(held) else new_login_nonce()
    response = console_of(request).page(
        request,
        "login.html",
        status,
        login_token=auth.login_token(nonce),
        next=safe_next(request.query_params.get("next")),
        error=error,
        username=username,
        proxied=auth.proxied,
        no_users=not auth.proxied and auth.users.count() == 0,
        users_file=str(auth.users.path),
    )
    response.headers.append(
        "set-cookie", cookie_header(LOGIN_COOKIE, nonce, secure=secure_request(request.scope, auth))
    )
    return response


@router.get("/login")
async def login_form(request: Request) -> Response:
    if session_of(request) is not None:
        return RedirectResponse(safe_next(request.query_params.get("next")), status_code=303)
    return _form(request)


@router.post("/login")
async def login(request: Request) -> Response:
    """csrf_guard has checked the origin and the form's token; then the limiter, then the password (on a pool)."""
    auth = auth_of(request)
    form = await request.form()
    name = str(form.get("username") or "").strip()[:MAX_NAME_FIELD]
    password = str(form.get("password") or "")
    target = safe_next(str(form.get("next") or ""))
    client = _client(request)
    if auth.proxied:
        return _form(request, 400, error="This console signs people in through the Databricks App's proxy.")
    wait = auth.limiter.wait_s(name, client)
    if wait > 0:
        log.warning("console: sign-in of %r from %s refused: too many failures", name, client)
        error = f"Too many failed sign-ins: try again in {int(wait) + 1} s."
        response = _form(request, 429, error=error, username=name)
        response.headers["Retry-After"] = str(int(wait) + 1)
        return response
    user = await auth.passwords.run(auth.users.verify, name, password)
    if user is None:
        auth.limiter.failed(name, client)
        log.warning("console: sign-in failed for %r from %s", name, client)  # never the password
        return _form(request, 401, error="Wrong user name or password.", username=name)
    auth.limiter.succeeded(name)
    previous = session_of(request)
    if previous is not None:
        auth.store.drop(previous.id)
    session = auth.store.new(user.name, user.role, via="password")
    log.info("console: %s (%s) signed in from %s", user.name, user.role, client)
    secure = secure_request(request.scope, auth)
    queue_cookie(request.scope, cookie_header(COOKIE, auth.store.cookie_value(session), secure=secure))
    queue_cookie(request.scope, cookie_header(LOGIN_COOKIE, "", secure=secure, clear=True))
    return RedirectResponse(target, status_code=303)


@router.post("/logout")
async def logout(request: Request) -> Response:
    auth = auth_of(request)
    session = session_of(request)
    if session is not None:
        auth.store.drop(session.id)
        log.info("console: %s signed out", session.user)
    queue_cookie(request.scope, cookie_header(COOKIE, "", secure=secure_request(request.scope, auth), clear=True))
    return RedirectResponse("/login", status_code=303)
