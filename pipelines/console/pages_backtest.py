"""The backtest pages: edit a candidate rule, run it over bronze for a range (``rules backtest``), see alerts per day
and a sample with evidence, publish it as a new rule in one click."""

from __future__ import annotations

import json

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import JSONResponse, RedirectResponse
from starlette.responses import Response

from delta_tables.bronze_transactions import bronze_spec
from pipelines.console.backtest_jobs import BacktestJob
from pipelines.console.context import console_of
from pipelines.console.evidence import EvidenceUnavailable, window_evidence
from pipelines.console.lake_reader import TableMissing
from pipelines.console.pages_rules import form_choices
from pipelines.console.rule_form import RuleFormValues
from pipelines.console.rules_data import rule_entry
from pipelines.engine.backtest import parse_instant_ms
from rules_cdc.rule_model import RuleValidationError

router = APIRouter()


def _job(request: Request, job_id: str) -> BacktestJob:
    job = console_of(request).backtests.get(job_id)
    if job is None:
        raise HTTPException(404, f"There is no backtest {job_id!r} in this console's memory (it keeps the newest 50).")
    return job


@router.get("/backtest")
def backtest_form(request: Request, rule: str = "") -> Response:
    """The form, blank or prefilled with a live rule (``?rule=ID``) to try a variant of it."""
    console = console_of(request)
    values = RuleFormValues()
    if rule.strip().isdigit():
        entry = rule_entry(console.reader, int(rule))
        if entry is not None and entry.live:
            values = RuleFormValues.from_rule(entry.document)
    return console.page(
        request, "backtest.html", values=values, since="", until="", error=None, job=None, **form_choices(console)
    )


@router.post("/backtest")
async def start_backtest(request: Request) -> Response:
    console = console_of(request)
    form = await request.form()
    values = RuleFormValues.from_form(form)
    since, until = str(form.get("since", "") or ""), str(form.get("until", "") or "")
    problem = None
    try:
        rule = values.to_rule(console.settings.transaction_schema)
        from_ms, to_ms = parse_instant_ms(since), parse_instant_ms(until)
    except RuleValidationError as error:
        problem = error.reason
    except ValueError as error:
        problem = f"from/to must be ISO dates or date-times (UTC): {error}"
    if problem is None and not console.reader.exists(bronze_spec(console.settings.transaction_schema).name):
        problem = "This lakehouse has no bronze_transactions table yet: there is no history to backtest on."
    if problem is not None:
        return console.page(
            request,
            "backtest.html",
            422,
            values=values,
            since=since,
            until=until,
            error=problem,
            job=None,
            **form_choices(console),
        )
    job = console.backtests.submit(rule, from_ms=from_ms, to_ms=to_ms, range_text=(since, until))
    return RedirectResponse(f"/backtest/{job.id}", status_code=303)


@router.get("/backtest/{job_id}")
def backtest_result(request: Request, job_id: str) -> Response:
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
        **form_choices(console),
    )


@router.get("/api/backtest/{job_id}")
def backtest_state(request: Request, job_id: str) -> JSONResponse:
    job = console_of(request).backtests.get(job_id)
    if job is None:
        return JSONResponse({"error": f"no backtest {job_id}"}, status_code=404)
    return JSONResponse({"state": job.state, "error": job.error, "total": job.total})


@router.get("/backtest/{job_id}/evidence/{number}")
def backtest_evidence(request: Request, job_id: str, number: int) -> Response:
    console = console_of(request)
    job = _job(request, job_id)
    if not 0 <= number < len(job.sample):
        raise HTTPException(404, f"Backtest {job_id} has no sample alert {number}.")
    alert = job.sample[number]
    document = {
        **alert,
        "alertId": f"{alert['ruleId']}:{alert['transactionId']}",
        "ruleSnapshot": json.dumps(job.rule.to_json_dict()),
    }
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
        )
    except (EvidenceUnavailable, TableMissing) as error:
        return console.page(request, "evidence.html", alert=document, evidence=None, problem=str(error), job=job)
    return console.page(request, "evidence.html", alert=document, evidence=evidence, problem=None, job=job)
