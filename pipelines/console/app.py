"""The console's FastAPI application: the pages' routers, static files, and error pages instead of stack traces.

Errors a person can meet get a page (or, under ``/api/``, JSON ``{"error": ...}``) that says what happened and what
to do: a lakehouse without tables yet (503: run ``fraudlake init`` or start the jobs), an unknown rule, alert, edit,
backtest or page (404), a malformed address (400, ``params``), a body over the bound (413), a backend that is busy
(503) or did not answer in time (504, ``blocking``); anything else a one-line message (500), with the traceback in
the server's log only.

Around the routes, outermost first: the allowed hosts (``console.allowed_hosts``: any other ``Host`` gets 400),
extra ``middleware`` given by the caller, sign-in (``auth.SignIn``: no page without a session), the request-body
bound. Every route depends on ``auth.csrf_guard`` (same origin + CSRF token on anything but GET/HEAD/OPTIONS); a
changing route also declares its role (``auth.require``). A new page module adds its router to ``ROUTERS``.

Example::

    console = ConsoleContext.build(settings, writer=choose_writer(settings), spark=SharedSpark(settings))
    app = create_app(console, auth=Auth.from_settings(settings))
    uvicorn.run(app, host="127.0.0.1", port=8050)
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.responses import JSONResponse, Response

from pipelines.console import (
    pages_alerts,
    pages_backtest,
    pages_health,
    pages_outcomes,
    pages_proposals,
    pages_rules,
    pages_shadow,
    pages_signin,
)
from pipelines.console.auth import Auth, SignIn, csrf_guard
from pipelines.console.blocking import PoolBusy, PoolTimeout
from pipelines.console.context import STATIC, ConsoleContext, console_of
from pipelines.console.lake_reader import TableMissing
from pipelines.console.params import BadParameter
from pipelines.console.request_limits import BodyLimit, BodyTooLarge

log = logging.getLogger(__name__)
ROUTERS = [
    pages_signin.router,
    pages_rules.router,
    pages_alerts.router,
    pages_outcomes.router,
    pages_shadow.router,
    pages_health.router,
    pages_backtest.router,
    pages_proposals.router,
]


def _error(request: Request, status: int, title: str, message: str, *, logged: bool = False) -> Response:
    """The error page, or JSON under ``/api/``."""
    if request.url.path.startswith("/api/"):
        return JSONResponse({"error": message}, status_code=status)
    return console_of(request).page(request, "error.html", status, title=title, message=message, logged=logged)


def create_app(console: ConsoleContext, *, auth: Auth, middleware: Sequence[Middleware] = ()) -> FastAPI:
    """The console app: hosts, ``middleware`` (outermost first), sign-in, body bound; CSRF on every route."""
    app = FastAPI(
        title="fraudlake console",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        dependencies=[Depends(csrf_guard)],
        middleware=[
            Middleware(TrustedHostMiddleware, allowed_hosts=list(auth.settings.allowed_hosts)),
            *middleware,
            Middleware(SignIn, auth=auth),
            Middleware(BodyLimit),
        ],
    )
    app.state.console = console
    app.state.auth = auth
    app.mount("/static", StaticFiles(directory=str(STATIC)), name="static")
    for router in ROUTERS:
        app.include_router(router)

    # Handlers are async: they only render (no I/O), so they never need a thread.
    @app.get("/")
    async def home() -> Response:
        return RedirectResponse("/rules", status_code=307)

    @app.exception_handler(TableMissing)
    async def no_tables(request: Request, error: TableMissing) -> Response:
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": str(error)}, status_code=503)
        return console_of(request).page(request, "no_tables.html", 503, table=error.table, path=error.path)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> Response:
        message = (
            str(error.detail)
            if error.status_code != 404 or error.detail != "Not Found"
            else (f"There is no page {request.url.path} in the console.")
        )
        title = "Not found" if error.status_code == 404 else f"Error {error.status_code}"
        return _error(request, error.status_code, title, message)

    @app.exception_handler(BadParameter)
    async def bad_parameter(request: Request, error: BadParameter) -> Response:
        return _error(request, 400, "Bad address", f"This address is malformed: {error}.")

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, error: RequestValidationError) -> Response:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ()) if p not in ('path', 'query'))}: {e.get('msg')}"
            for e in error.errors()
        )
        return _error(request, 400, "Bad address", f"This address is malformed ({problems}).")

    @app.exception_handler(BodyTooLarge)
    async def too_large(request: Request, error: BodyTooLarge) -> Response:
        return _error(request, 413, "Too large", str(error))

    @app.exception_handler(PoolBusy)
    async def busy(request: Request, error: PoolBusy) -> Response:
        response = _error(request, 503, "Busy", f"{str(error)[:1].upper()}{str(error)[1:]}.")
        response.headers["Retry-After"] = "5"
        return response

    @app.exception_handler(PoolTimeout)
    async def late(request: Request, error: PoolTimeout) -> Response:
        return _error(request, 504, "No answer in time", f"{str(error)[:1].upper()}{str(error)[1:]}.")

    @app.exception_handler(Exception)
    async def unexpected(request: Request, error: Exception) -> Response:
        log.exception("console: %s %s failed", request.method, request.url.path)
        first_line = (str(error).splitlines() or [""])[0][:500]
        message = f"{type(error).__name__}: {first_line}"
        return _error(request, 500, "Something went wrong", message, logged=True)

    return app
