"""The live alerts list (polled: new alerts appear without a reload) and each alert's evidence.

Parameters are parsed first (``params``: 400 with a message); every lakehouse read runs on the console's lake pool
(``blocking``), never on the event loop."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import JSONResponse
from starlette.responses import Response

from delta_tables.alerts import ALERTS
from pipelines.console import params
from pipelines.console.alerts_data import AlertQuery, BadQuery, find_alert, recent_alerts
from pipelines.console.context import ConsoleContext, console_of
from pipelines.console.evidence import Evidence, EvidenceUnavailable, alert_evidence
from pipelines.console.lake_reader import TableMissing
from pipelines.console.outcomes_data import LABELS, disposition_history

router = APIRouter()
LIST_LIMIT = 200


def _query(request: Request) -> AlertQuery:
    query = request.query_params
    return AlertQuery.parse(
        rule=query.get("rule"), key=query.get("key"), since=query.get("since"), until=query.get("until")
    )


def _alerts_or_missing(console: ConsoleContext, query: AlertQuery) -> list[dict[str, Any]]:
    """The page's alerts; ``TableMissing`` (the no-tables page) without an alerts table."""
    if not console.reader.exists(ALERTS.name):
        raise TableMissing(ALERTS.name, console.reader.path(ALERTS.name))
    return recent_alerts(console.reader, query, limit=LIST_LIMIT)


@router.get("/alerts")
async def alerts_page(request: Request) -> Response:
    console = console_of(request)
    try:
        query = _query(request)
    except BadQuery as error:
        return console.page(
            request, "alerts.html", 400, alerts=[], query=None, error=str(error), params=dict(request.query_params)
        )
    alerts = await console.lake.run(_alerts_or_missing, console, query)
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


def _new_alerts(console: ConsoleContext, query: AlertQuery, after: dt.datetime | None) -> list[dict[str, Any]] | None:
    """Alerts detected after ``after``; None without an alerts table."""
    if not console.reader.exists(ALERTS.name):
        return None
    return recent_alerts(console.reader, query, after=after, limit=LIST_LIMIT)


@router.get("/api/alerts")
async def alerts_json(request: Request) -> JSONResponse:
    """Alerts detected after ``after`` (an instant, ``params``), matching the page's filters, newest first."""
    console = console_of(request)
    query = _query(request)  # BadParameter: 400 with the message (app.py)
    after = params.instant(request.query_params.get("after"), "after")
    alerts = await console.lake.run(_new_alerts, console, query, after)
    if alerts is None:
        return JSONResponse(
            {"alerts": [], "cursor": after.isoformat() if after else "", "error": "no alerts table yet"}
        )
    cursor = max((a["detectedAt"] for a in alerts), default=after)
    return JSONResponse({"alerts": [_jsonable(a) for a in alerts], "cursor": cursor.isoformat() if cursor else ""})


def _alert_and_evidence(
    console: ConsoleContext, rule_id: int, transaction_id: str
) -> tuple[dict[str, Any], Evidence | None, str | None]:
    if not console.reader.exists(ALERTS.name):
        raise TableMissing(ALERTS.name, console.reader.path(ALERTS.name))
    alert = find_alert(console.reader, rule_id, transaction_id)
    if alert is None:
        raise HTTPException(
            404, f"There is no alert {rule_id}:{transaction_id} in the alerts table (ids are <ruleId>:<transactionId>)."
        )
    try:
        return alert, alert_evidence(console.reader, console.settings, alert), None
    except (EvidenceUnavailable, TableMissing) as error:
        return alert, None, str(error)


@router.get("/alerts/evidence")
async def evidence_page(request: Request) -> Response:
    console = console_of(request)
    rule_id, transaction_id = params.alert_id(request.query_params.get("id"))
    alert, evidence, problem = await console.lake.run(_alert_and_evidence, console, rule_id, transaction_id)
    dispositions = await console.lake.run(disposition_history, console.reader, f"{rule_id}:{transaction_id}")
    return console.page(
        request,
        "evidence.html",
        alert=alert,
        evidence=evidence,
        problem=problem,
        dispositions=dispositions,
        disposition_labels=LABELS,
    )


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
