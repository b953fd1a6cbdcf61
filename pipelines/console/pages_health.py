"""The health page: per-batch latency, durations and row counts as charts, quarantine reasons, the engine's
liveness and the last data-quality report. Everything is read on the console's lake pool (``blocking``)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import mistune
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from markupsafe import Markup
from starlette.responses import Response

from delta_tables.batch_log import BATCH_LOG
from pipelines.console.context import ConsoleContext, console_of
from pipelines.console.health_data import batch_series, chart_data, dq_report, engine_status, quarantine_reasons
from pipelines.console.lake_reader import TableMissing

router = APIRouter()
CHART_BATCHES = 200
_MARKDOWN = mistune.create_markdown(escape=True, plugins=["table"])


def _health(console: ConsoleContext) -> dict[str, Any]:
    batches = batch_series(console.reader, last=CHART_BATCHES)
    status = engine_status(batches, now=dt.datetime.now(dt.UTC), stale_after=console.stale_after)
    return {"batches": batches, "status": status, "charts": chart_data(batches)}


def _health_page_data(console: ConsoleContext) -> dict[str, Any]:
    if not console.reader.exists(BATCH_LOG.name):
        raise TableMissing(BATCH_LOG.name, console.reader.path(BATCH_LOG.name))
    health = _health(console)  # first: the backends listed below are those of the reads just made
    quarantined, reasons = quarantine_reasons(console.reader)
    report_path, report = dq_report(console.settings)
    backends = {
        name: console.reader.backend(name)
        for name in ("rules", "rule_changes", "alerts", "batch_log", "bronze_transactions", "quarantine")
    }
    return {
        **health,
        "quarantined": quarantined,
        "reasons": reasons,
        "report_path": report_path,
        "report_html": Markup(_MARKDOWN(report)) if report else None,
        "backends": backends,
    }


@router.get("/health")
async def health_page(request: Request) -> Response:
    console = console_of(request)
    return console.page(request, "health.html", **await console.lake.run(_health_page_data, console))


def _health_or_none(console: ConsoleContext) -> dict[str, Any] | None:
    return _health(console) if console.reader.exists(BATCH_LOG.name) else None


@router.get("/api/health")
async def health_json(request: Request) -> JSONResponse:
    console = console_of(request)
    health = await console.lake.run(_health_or_none, console)
    if health is None:
        return JSONResponse({"error": "no batch_log table yet"}, status_code=503)
    status = health["status"]
    return JSONResponse({"status": {"state": status.state, "message": status.message}, "charts": health["charts"]})
