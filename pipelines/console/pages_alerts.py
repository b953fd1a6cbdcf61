"""The live alerts list (polled: new alerts appear without a reload) and each alert's evidence."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import JSONResponse
from starlette.responses import Response

from delta_tables.alerts import ALERTS
from pipelines.console.alerts_data import AlertQuery, BadQuery, find_alert, recent_alerts
from pipelines.console.context import console_of
from pipelines.console.evidence import EvidenceUnavailable, alert_evidence
from pipelines.console.lake_reader import TableMissing

router = APIRouter()
LIST_LIMIT = 200


def _query(request: Request) -> AlertQuery:
    params = request.query_params
    return AlertQuery.parse(
        rule=params.get("rule"), key=params.get("key"), since=params.get("since"), until=params.get("until")
    )


@router.get("/alerts")
def alerts_page(request: Request) -> Response:
    console = console_of(request)
    if not console.reader.exists(ALERTS.name):
        raise TableMissing(ALERTS.name, console.reader.path(ALERTS.name))
    try:
        query = _query(request)
    except BadQuery as error:
        return console.page(
            request, "alerts.html", 400, alerts=[], query=None, error=str(error), params=dict(request.query_params)
        )
    alerts = recent_alerts(console.reader, query, limit=LIST_LIMIT)
    cursor = max((a["detectedAt"] for a in alerts), default=None)
    return console.page(
        request,
        "alerts.html",
        alerts=alerts,
        query=query,
        params=query.as_params(),
        cursor=cursor.isoformat() if cursor else "",
        limit=LIST_LIMIT,
    )


@router.get("/api/alerts")
def alerts_json(request: Request) -> JSONResponse:
    """Alerts detected after ``after`` (ISO time), matching the page's filters, newest first."""
    console = console_of(request)
    try:
        query = _query(request)
        after_text = request.query_params.get("after") or ""
        after = dt.datetime.fromisoformat(after_text) if after_text else None
    except (BadQuery, ValueError) as error:
        return JSONResponse({"error": str(error)}, status_code=400)
    if not console.reader.exists(ALERTS.name):
        return JSONResponse({"alerts": [], "cursor": after_text, "error": "no alerts table yet"})
    alerts = recent_alerts(console.reader, query, after=after, limit=LIST_LIMIT)
    cursor = max((a["detectedAt"] for a in alerts), default=after)
    return JSONResponse({"alerts": [_jsonable(a) for a in alerts], "cursor": cursor.isoformat() if cursor else ""})


@router.get("/alerts/evidence")
def evidence_page(request: Request, id: str = "") -> Response:
    console = console_of(request)
    if not console.reader.exists(ALERTS.name):
        raise TableMissing(ALERTS.name, console.reader.path(ALERTS.name))
    alert = find_alert(console.reader, id)
    if alert is None:
        raise HTTPException(404, f"There is no alert {id!r} in the alerts table (ids are <ruleId>:<transactionId>).")
    try:
        evidence = alert_evidence(console.reader, console.settings, alert)
    except (EvidenceUnavailable, TableMissing) as error:
        return console.page(request, "evidence.html", alert=alert, evidence=None, problem=str(error))
    return console.page(request, "evidence.html", alert=alert, evidence=evidence, problem=None)


def _jsonable(row: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in row.items():
        if isinstance(value, dt.datetime):
            out[key] = value.isoformat()
        elif isinstance(value, Decimal):
            text = format(value, "f")
            out[key] = text.rstrip("0").rstrip(".") if "." in text else text
        else:
            out[key] = value
    return out
