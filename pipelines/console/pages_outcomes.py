"""Alerts' outcomes in the console: marking an alert (from its evidence page) and each rule's accuracy with the
watch list. Parameters are parsed first (``params``: 400 with a message); the Delta write and the Spark jobs run on
the console's lake pool (``blocking``), never on the event loop. The signed-in user is who decided."""

from __future__ import annotations

import datetime as dt
import urllib.parse

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import RedirectResponse
from starlette.responses import Response

from pipelines.console import params
from pipelines.console.auth import require, session_of
from pipelines.console.context import console_of
from pipelines.console.lake_reader import LakeReader
from pipelines.console.outcomes_data import LABELS, AccuracyQuery, accuracy_report, mark_alert
from pipelines.console.rules_data import rules_rows
from pipelines.outcomes.dispositions import MAX_NOTE, DispositionError
from rules_cdc.rule_model import RuleState

router = APIRouter()
ANALYST = Depends(require("analyst"))
"""Marking an alert needs the analyst role or above."""


@router.post("/alerts/disposition", dependencies=[ANALYST])
async def mark(request: Request) -> Response:
    console = console_of(request)
    session = session_of(request)
    assert session is not None  # SignIn lets no request without one this far
    form = await request.form()
    rule_id, transaction_id = params.alert_id(str(form.get("id") or ""))
    alert_id = f"{rule_id}:{transaction_id}"
    decision = str(form.get("disposition") or "").strip()
    if decision not in LABELS:
        raise params.BadParameter(f"disposition must be one of {', '.join(LABELS)}, got {decision[:40]!r}")
    note = params.text(str(form.get("note") or ""), "the note", limit=MAX_NOTE)
    try:
        await console.lake.run(mark_alert, console.spark, console.settings, alert_id, decision, session.user, note)
    except DispositionError as error:
        raise HTTPException(404 if "no alert" in str(error) else 422, f"Could not mark the alert: {error}.") from None
    return RedirectResponse("/alerts/evidence?" + urllib.parse.urlencode({"id": alert_id}), status_code=303)


def _query(request: Request) -> AccuracyQuery:
    query = request.query_params
    return AccuracyQuery(
        silent_days=params.bounded_int(query.get("silent_days") or "7", "silent days", low=1, high=3650),
        min_precision=params.fraction(query.get("min_precision"), "min precision", default=0.5),
        min_decided=params.bounded_int(query.get("min_decided") or "5", "min decided", low=1, high=1_000_000),
    )


def shadow_rule_ids(reader: LakeReader) -> set[int]:
    """The rules now in state SHADOW: the accuracy page labels them (their alerts were never acted on)."""
    return {int(r["ruleId"]) for r in rules_rows(reader) if r["ruleState"] == RuleState.SHADOW.value}


@router.get("/accuracy")
async def accuracy_page(request: Request) -> Response:
    console = console_of(request)
    query = _query(request)  # BadParameter: 400 with the message (app.py)
    now = dt.datetime.now(dt.UTC)
    report = await console.lake.run(accuracy_report, console.spark, console.reader, query, now)
    shadow = await console.lake.run(shadow_rule_ids, console.reader)
    return console.page(request, "accuracy.html", report=report, query=query, now=now, shadow_rules=shadow)
