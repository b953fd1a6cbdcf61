"""The backtest pages: edit a candidate rule, run it over bronze for a range (``rules backtest``), see alerts per day
and a sample with evidence, publish it as a new rule in one click.

A backtest is bounded (``backtest_jobs``): at most ``MAX_RANGE_DAYS`` of event time, at most ``MAX_PENDING`` queued
or running (one more gets 429 with the reason). Lakehouse reads run on the console's lake pool (``blocking``)."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import JSONResponse, RedirectResponse
from starlette.responses import Response

from delta_tables.bronze_transactions import bronze_spec
from pipelines.console import params
from pipelines.console.auth import require
from pipelines.console.backtest_jobs import (
    MAX_RANGE_DAYS,
    SAMPLE_SIZE,
    BacktestJob,
    BacktestQueueFull,
    backtest_range,
)
from pipelines.console.context import ConsoleContext, console_of
from pipelines.console.evidence import BASELINE_COLUMN, Evidence, EvidenceUnavailable, window_evidence
from pipelines.console.lake_reader import TableMissing
from pipelines.console.pages_rules import form_choices
from pipelines.console.rule_form import RuleFormValues
from pipelines.console.rules_data import rule_entry
from rules_cdc.rule_model import RuleValidationError

router = APIRouter()
ANALYST = Depends(require("analyst"))
"""Changing rules and running backtests need the analyst role or above (auth.py)."""


def _job(request: Request, job_id: str) -> BacktestJob:
    job = console_of(request).backtests.get(params.token(job_id, "a backtest"))
    if job is None:
        raise HTTPException(404, f"There is no backtest {job_id!r} in this console's memory (it keeps the newest 50).")
    return job


def _choices(console: ConsoleContext) -> dict[str, Any]:
    return {**form_choices(console), "max_range_days": MAX_RANGE_DAYS}


def _live_rule_values(console: ConsoleContext, rule_id: int) -> RuleFormValues:
    entry = rule_entry(console.reader, rule_id)
    if entry is None or not entry.live:
        raise HTTPException(404, f"There is no live rule {rule_id} to start a backtest from.")
    return RuleFormValues.from_rule(entry.document)


@router.get("/backtest")
async def backtest_form(request: Request) -> Response:
    """The form, blank or prefilled with a live rule (``?rule=ID``) to try a variant of it."""
    console = console_of(request)
    rule_id = params.optional_rule_id(request.query_params.get("rule"))
    values = RuleFormValues() if rule_id is None else await console.lake.run(_live_rule_values, console, rule_id)
    return console.page(
        request, "backtest.html", values=values, since="", until="", error=None, job=None, **_choices(console)
    )


@router.post("/backtest", dependencies=[ANALYST])
async def start_backtest(request: Request) -> Response:
    console = console_of(request)
    form = await request.form()
    values = RuleFormValues.from_form(form)
    since, until = str(form.get("since", "") or ""), str(form.get("until", "") or "")
    status, problem = 422, None
    try:
        rule = values.to_rule(console.settings.transaction_schema)
        start, end = backtest_range(*params.time_range(since, until), now=dt.datetime.now(dt.UTC))
    except RuleValidationError as error:
        problem = error.reason
    except params.BadParameter as error:
        problem = str(error)
    bronze = bronze_spec(console.settings.transaction_schema).name
    if problem is None and not await console.lake.run(console.reader.exists, bronze):
        problem = "This lakehouse has no bronze_transactions table yet: there is no history to backtest on."
    if problem is None:
        try:
            job = console.backtests.submit(rule, start=start, end=end, range_text=(since, until))
        except BacktestQueueFull as error:
            status, problem = 429, str(error)
        else:
            return RedirectResponse(f"/backtest/{job.id}", status_code=303)
    response = console.page(
        request,
        "backtest.html",
        status,
        values=values,
        since=since,
        until=until,
        error=problem,
        job=None,
        **_choices(console),
    )
    if status == 429:
        response.headers["Retry-After"] = "30"
    return response


@router.get("/backtest/{job_id}")
async def backtest_result(request: Request, job_id: str) -> Response:
    console = console_of(request)
    job = _job(request, job_id)
    values = RuleFormValues.from_rule(job.rule.to_json_dict())
    return console.page(
        request,
        "backtest.html",
        values=values,
        since=job.range_text[0],
        until=job.range_text[1],
        error=None,
        job=job,
        **_choices(console),
    )


@router.get("/api/backtest/{job_id}")
async def backtest_state(request: Request, job_id: str) -> JSONResponse:
    job = _job(request, job_id)
    return JSONResponse({"state": job.state, "error": job.error, "total": job.total})


def _sample_evidence(
    console: ConsoleContext, job: BacktestJob, alert: dict[str, Any]
) -> tuple[Evidence | None, str | None]:
    try:
        evidence = window_evidence(
            console.reader,
            console.settings,
            rule=job.rule,
            key_value=str(alert["keyValue"]),
            transaction_id=str(alert["transactionId"]),
            event_time=alert["eventTime"],
            batch_id=None,
            alert_value=alert["aggregateValue"],
            precedence="history",
            baseline_value=alert.get(BASELINE_COLUMN),  # when the engine's backtest gives it
        )
    except (EvidenceUnavailable, TableMissing) as error:
        return None, str(error)
    return evidence, None


@router.get("/backtest/{job_id}/evidence/{number}")
async def backtest_evidence(request: Request, job_id: str, number: str) -> Response:
    console = console_of(request)
    job = _job(request, job_id)
    index = params.bounded_int(number, "the sample alert's number", low=0, high=SAMPLE_SIZE - 1)
    if index >= len(job.sample):
        raise HTTPException(404, f"Backtest {job.id} has no sample alert {index}.")
    alert = job.sample[index]
    document = {
        **alert,
        "alertId": f"{alert['ruleId']}:{alert['transactionId']}",
        "ruleSnapshot": json.dumps(job.rule.to_json_dict()),
    }
    evidence, problem = await console.lake.run(_sample_evidence, console, job, alert)
    return console.page(request, "evidence.html", alert=document, evidence=evidence, problem=problem, job=job)
