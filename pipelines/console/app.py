"""The console's FastAPI application: the pages' routers, static files, and error pages instead of stack traces.

Errors a person can meet get a page that says what happened and what to do: a lakehouse without tables yet (run
``fraudlake init`` or start the jobs), an unknown rule, alert, edit or page (404), a malformed URL (400); anything
else a one-line message (500), with the traceback in the server's log only.

Example::

    app = create_app(ConsoleContext.build(settings, writer=choose_writer(settings), spark=SharedSpark(settings)))
    uvicorn.run(app, host="127.0.0.1", port=8050)
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse, Response

from pipelines.console import pages_alerts, pages_backtest, pages_health, pages_rules
from pipelines.console.context import STATIC, ConsoleContext, console_of
from pipelines.console.lake_reader import TableMissing

log = logging.getLogger(__name__)


def create_app(console: ConsoleContext) -> FastAPI:
    app = FastAPI(title="fraudlake console", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.console = console
    app.mount("/static", StaticFiles(directory=str(STATIC)), name="static")
    for router in (pages_rules.router, pages_alerts.router, pages_health.router, pages_backtest.router):
        app.include_router(router)

    @app.get("/")
    def home() -> Response:
        return RedirectResponse("/rules", status_code=307)

    @app.exception_handler(TableMissing)
    def no_tables(request: Request, error: TableMissing) -> Response:
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": str(error)}, status_code=503)
        return console_of(request).page(request, "no_tables.html", 503, table=error.table, path=error.path)

    @app.exception_handler(StarletteHTTPException)
    def http_error(request: Request, error: StarletteHTTPException) -> Response:
        message = (
            str(error.detail)
            if error.status_code != 404 or error.detail != "Not Found"
            else (f"There is no page {request.url.path} in the console.")
        )
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": message}, status_code=error.status_code)
        title = "Not found" if error.status_code == 404 else f"Error {error.status_code}"
        return console_of(request).page(request, "error.html", error.status_code, title=title, message=message)

    @app.exception_handler(RequestValidationError)
    def bad_request(request: Request, error: RequestValidationError) -> Response:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ()) if p not in ('path', 'query'))}: {e.get('msg')}"
            for e in error.errors()
        )
        message = f"This address is malformed ({problems})."
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": message}, status_code=400)
        return console_of(request).page(request, "error.html", 400, title="Bad address", message=message)

    @app.exception_handler(Exception)
    def unexpected(request: Request, error: Exception) -> Response:
        log.exception("console: %s %s failed", request.method, request.url.path)
        first_line = (str(error).splitlines() or [""])[0][:500]
        message = f"{type(error).__name__}: {first_line}"
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": message}, status_code=500)
        return console_of(request).page(
            request, "error.html", 500, title="Something went wrong", message=message, logged=True
        )

    return app
