"""The rules pages: the rules in force and the tombstones, one rule with its history, the form, edits' progress.

Four eyes: where the console writes to the rules database, a create, edit, pause, resume or delete is a *proposal*
(``rules_cdc.proposals``, with the signed-in user as its author and a required reason); the page after it is the
proposal, pending until another person with the approver role approves it (pages_proposals.py), and only then does
``fraud_rules`` change. Where there is no rules database (the rules topic, a development set-up without
PostgreSQL) there is nowhere to keep a proposal, and the edit is published directly as before.

Path parameters are parsed first (``params``: 400 with a message, then 404 for an id nothing has); lakehouse reads
run on the console's lake pool and edits on its write pool (``blocking``), never on the event loop: a save waiting
on a locked row delays only itself."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import JSONResponse, RedirectResponse
from starlette.responses import Response

from delta_tables.alerts import ALERTS
from delta_tables.rules import RULES
from pipelines.console import params
from pipelines.console.alerts_data import AlertQuery, recent_alerts
from pipelines.console.auth import require
from pipelines.console.blocking import PoolBusy, PoolTimeout
from pipelines.console.context import ConsoleContext, console_of
from pipelines.console.edit_progress import EditRecord, edit_progress
from pipelines.console.pages_proposals import acting_user, proposals_connect
from pipelines.console.rule_form import AGGREGATORS, BASELINE_AGGREGATORS, OPERATORS, STATES, RuleFormValues
from pipelines.console.rule_writes import Action, Committed, EditRefused, RulesDbWriter, WriteFailed
from pipelines.console.rules_data import RuleEntry, rule_entry, rule_history, rules_overview, table_view
from rules_cdc.proposals import Proposal, ProposalRefused, ProposalsUnavailable, propose
from rules_cdc.rule_model import COUNT_FIELD, Rule, RuleValidationError

router = APIRouter()
ANALYST = Depends(require("analyst"))
"""Changing rules and running backtests need the analyst role or above (auth.py)."""


def form_choices(console: ConsoleContext) -> dict[str, Any]:
    schema = console.settings.transaction_schema
    return {
        "aggregators": AGGREGATORS,
        "operators": OPERATORS,
        "states": STATES,
        "numeric_fields": [COUNT_FIELD, *(f.name for f in schema.fields if f.is_numeric)],
        "other_fields": [f.name for f in schema.fields if not f.is_numeric],  # COUNT_DISTINCT counts any type
        "key_fields": list(schema.names()),
        "baseline_aggregators": BASELINE_AGGREGATORS,
        "distinct_cap": console.settings.engine.distinct_cap,
    }


@router.get("/rules")
async def rules_page(request: Request) -> Response:
    console = console_of(request)
    overview = await console.lake.run(rules_overview, console.reader)
    return console.page(request, "rules.html", overview=overview, edits=console.edits.recent())


@router.get("/rules/new")
async def new_rule_form(request: Request) -> Response:
    console = console_of(request)
    return console.page(request, "rule_form.html", values=RuleFormValues(), mode="create", **form_choices(console))


def proposing(console: ConsoleContext) -> bool:
    """Changes are proposals wherever the console writes to the rules database (where proposals live)."""
    return isinstance(console.writer, RulesDbWriter)


def _reason(form: Any) -> str:
    return str(form.get("reason", "") or "")


@router.post("/rules/new", dependencies=[ANALYST])
async def create_rule(request: Request) -> Response:
    form = await request.form()
    return await submit_rule(request, RuleFormValues.from_form(form), "create", reason=_reason(form))


def _rule_page_data(console: ConsoleContext, rule_id: int) -> dict[str, Any]:
    entry = rule_entry(console.reader, rule_id)
    history = rule_history(console.reader, rule_id)
    if entry is None and not history:
        raise HTTPException(404, f"There is no rule {rule_id} in the rules table of this lakehouse.")
    alerts = []
    if console.reader.exists(ALERTS.name):
        alerts = recent_alerts(console.reader, AlertQuery(rule_id=rule_id), limit=20)
    return {"rule_id": rule_id, "entry": entry, "history": history, "alerts": alerts}


@router.get("/rules/{rule_id}")
async def rule_page(request: Request, rule_id: str) -> Response:
    console = console_of(request)
    data = await console.lake.run(_rule_page_data, console, params.rule_id(rule_id, "the rule id"))
    return console.page(request, "rule.html", **data)


def _live_entry(console: ConsoleContext, rule_id: int) -> RuleEntry:
    entry = rule_entry(console.reader, rule_id)
    if entry is None or not entry.live:
        raise HTTPException(404, f"Rule {rule_id} is not a live rule of this lakehouse: there is nothing to edit.")
    return entry


@router.get("/rules/{rule_id}/edit")
async def edit_rule_form(request: Request, rule_id: str) -> Response:
    console = console_of(request)
    entry = await console.lake.run(_live_entry, console, params.rule_id(rule_id, "the rule id"))
    values = RuleFormValues.from_rule(entry.document)
    return console.page(request, "rule_form.html", values=values, mode="update", **form_choices(console))


@router.post("/rules/{rule_id}/edit", dependencies=[ANALYST])
async def update_rule(request: Request, rule_id: str) -> Response:
    checked = params.rule_id(rule_id, "the rule id")
    form = await request.form()
    values = RuleFormValues.from_form(form).with_rule_id(str(checked))
    return await submit_rule(request, values, "update", reason=_reason(form))


@router.post("/rules/{rule_id}/{action}", dependencies=[ANALYST])
async def rule_action(request: Request, rule_id: str, action: str) -> Response:
    if action not in ("pause", "resume", "delete"):
        raise HTTPException(404, f"There is no action {action!r} for rules (pause, resume or delete).")
    checked: Action = "pause" if action == "pause" else "resume" if action == "resume" else "delete"
    number = params.rule_id(rule_id, "the rule id")
    console = console_of(request)
    try:
        if proposing(console):
            proposal = await _propose(request, console, checked, number, None, _reason(await request.form()))
            return RedirectResponse(f"/proposals/{proposal.id}?submitted=1", status_code=303)
        committed = await _write(console, checked, number, None)
    except (EditRefused, WriteFailed, ProposalRefused, ProposalsUnavailable, PoolBusy, PoolTimeout) as error:
        status = 409 if isinstance(error, EditRefused | WriteFailed | ProposalRefused) else _status(error)
        verb = f"propose to {action}" if proposing(console) else action
        return console.page(request, "error.html", status, title=f"Could not {verb} rule {number}", message=str(error))
    record = console.edits.add(committed)
    return RedirectResponse(f"/edits/{record.id}", status_code=303)


async def _propose(
    request: Request, console: ConsoleContext, kind: Action, rule_id: int, rule: Rule | None, reason: str
) -> Proposal:
    """A pending proposal of the signed-in user, on the write pool (the rules database's own login)."""
    author, connect = acting_user(request), proposals_connect(console)
    return await console.writes.run(
        propose, connect, kind, proposed_by=author, reason=reason, rule=rule, rule_id=rule_id
    )


async def _write(console: ConsoleContext, action: Action, rule_id: int, rule: Rule | None) -> Committed:
    """The edit on the write pool, with the rules table's view read on the lake pool first: neither on the loop."""
    view = await console.lake.run(table_view, console.reader)
    return await console.writes.run(console.writer.write, action, rule_id=rule_id, rule=rule, view=view)


def _status(error: Exception) -> int:
    return 504 if isinstance(error, PoolTimeout) else 503 if isinstance(error, PoolBusy | ProposalsUnavailable) else 409


async def submit_rule(request: Request, values: RuleFormValues, action: Action, *, reason: str = "") -> Response:
    """Validate with the rule model; refuse in the form with its message, else propose it (rules database) or write
    it (rules topic) and show the proposal or the edit's progress."""
    console = console_of(request)
    status, problem = 422, None
    try:
        rule = values.to_rule(console.settings.transaction_schema)
    except RuleValidationError as error:
        problem = error.reason
    if problem is None:
        try:
            if proposing(console):
                proposal = await _propose(request, console, action, rule.rule_id, rule, reason)
                return RedirectResponse(f"/proposals/{proposal.id}?submitted=1", status_code=303)
            committed = await _write(console, action, rule.rule_id, rule)
        except (EditRefused, WriteFailed, ProposalRefused) as error:
            problem = str(error)
        except (PoolBusy, PoolTimeout, ProposalsUnavailable) as error:
            status, problem = _status(error), str(error)
        else:
            record = console.edits.add(committed)
            return RedirectResponse(f"/edits/{record.id}", status_code=303)
    return console.page(
        request,
        "rule_form.html",
        status,
        values=values,
        mode=action,
        error=problem,
        reason=reason,
        **form_choices(console),
    )


def _edit(console: ConsoleContext, edit_id: str) -> EditRecord:
    record = console.edits.get(params.token(edit_id, "an edit"))
    if record is None:
        raise HTTPException(
            404,
            f"There is no edit {edit_id!r} in this console's memory (it keeps the edits made "
            "since it started); the rule's history shows every applied change.",
        )
    return record


@router.get("/edits/{edit_id}")
async def edit_page(request: Request, edit_id: str) -> Response:
    console = console_of(request)
    record = _edit(console, edit_id)
    progress = await console.lake.run(edit_progress, console.reader, record)
    return console.page(request, "edit.html", progress=progress, rules_table=RULES.name)


@router.get("/api/edits/{edit_id}")
async def edit_progress_json(request: Request, edit_id: str) -> JSONResponse:
    console = console_of(request)
    record = _edit(console, edit_id)
    progress = await console.lake.run(edit_progress, console.reader, record)
    return JSONResponse(progress.as_json())
