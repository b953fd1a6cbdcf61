"""The shadow comparison page: a rule (usually SHADOW) beside the rule it would replace, over a range of days.

``/rules/{id}/shadow?compared=&from=&to=``: the parameters are parsed first (``shadow_data.ShadowQuery``: 400 with
a message), the rules table and the Spark jobs run on the console's lake pool (``blocking``); an id the rules table
lacks is a 404. Reading only: every signed-in role may open it."""

from __future__ import annotations

import datetime as dt

from fastapi import APIRouter, HTTPException, Request
from starlette.responses import Response

from pipelines.console import params
from pipelines.console.context import console_of
from pipelines.console.shadow_data import NoSuchRule, ShadowQuery, shadow_page
from pipelines.outcomes.shadow_comparison import CATEGORIES, DEFAULT_DAYS, MAX_DAYS

router = APIRouter()

CATEGORY_LABELS = {
    "both": "flagged by both",
    "shadow_only": "only the shadow rule flags",
    "compared_only": "only the compared rule flags",
}
assert set(CATEGORY_LABELS) == set(CATEGORIES)


@router.get("/rules/{rule_id}/shadow")
async def shadow_comparison_page(request: Request, rule_id: str) -> Response:
    console = console_of(request)
    number = params.rule_id(rule_id, "the rule id")
    query = ShadowQuery.parse(request.query_params)  # BadParameter: 400 with the message (app.py)
    today = dt.datetime.now(dt.UTC).date()
    try:
        page = await console.lake.run(shadow_page, console.spark, console.reader, number, query, today)
    except NoSuchRule as error:
        raise HTTPException(404, str(error)) from None
    peak = max(
        [max(d["shadowAlerts"], d["comparedAlerts"]) for d in (page.comparison.per_day if page.comparison else [])]
        or [0]
    )
    return console.page(
        request,
        "shadow.html",
        page=page,
        categories=CATEGORY_LABELS,
        peak=max(peak, 1),
        default_days=DEFAULT_DAYS,
        max_days=MAX_DAYS,
    )
