"""The rules pages: the rules in force and the tombstones, one rule with its history, the form, edits' progress."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import JSONResponse, RedirectResponse
from starlette.responses import Response

from delta_tables.alerts import ALERTS
from delta_tables.rules import RULES
from pipelines.console.alerts_data import AlertQuery, recent_alerts
from pipelines.console.context import ConsoleContext, console_of
from pipelines.console.edit_progress import edit_progress
from pipelines.console.rule_form import AGGREGATORS, OPERATORS, STATES, RuleFormValues
from pipelines.console.rule_writes import Action, EditRefused, WriteFailed
from pipelines.console.rules_data import rule_entry, rule_history, rules_overview, table_view
from rules_cdc.rule_model import COUNT_FIELD, RuleValidationError

router = APIRouter()


def form_choices(console: ConsoleContext) -> dict[str, Any]:
    schema = console.settings.transaction_schema
    return {
        "aggregators": AGGREGATORS,
        "operators": OPERATORS,
        "states": STATES,
        "numeric_fields": [COUNT_FIELD, *(f.name for f in schema.fields if f.is_numeric)],
        "key_fields": list(schema.names()),
    }


@router.get("/rules")
def rules_page(request: Request) -> Response:
    console = console_of(request)
    overview = rules_overview(console.reader)
    return console.page(request, "rules.html", overview=overview, edits=console.edits.recent())


@router.get("/rules/new")
def new_rule_form(request: Request) -> Response:
    console = console_of(request)
    return console.page(request, "rule_form.html", values=RuleFormValues(), mode="create", **form_choices(console))


@router.post("/rules/new")
async def create_rule(request: Request) -> Response:
    values = RuleFormValues.from_form(await request.form())
    return submit_rule(request, values, "create")


@router.get("/rules/{rule_id}")
def rule_page(request: Request, rule_id: int) -> Response:
    console = console_of(request)
    entry = rule_entry(console.reader, rule_id)
    history = rule_history(console.reader, rule_id)
    if entry is None and not history:
        raise HTTPException(404, f"There is no rule {rule_id} in the rules table of this lakehouse.")
    alerts = []
    if console.reader.exists(ALERTS.name):
        alerts = recent_alerts(console.reader, AlertQuery(rule_id=rule_id), limit=20)
    return console.page(request, "rule.html", rule_id=rule_id, entry=entry, history=history, alerts=alerts)


@router.get("/rules/{rule_id}/edit")
def edit_rule_form(request: Request, rule_id: int) -> Response:
    console = console_of(request)
    entry = rule_entry(console.reader, rule_id)
    if entry is None or not entry.live:
        raise HTTPException(404, f"Rule {rule_id} is not a live rule of this lakehouse: there is nothing to edit.")
    values = RuleFormValues.from_rule(entry.document)
    return console.page(request, "rule_form.html", values=values, mode="update", **form_choices(console))


@router.post("/rules/{rule_id}/edit")
async def update_rule(request: Request, rule_id: int) -> Response:
    values = RuleFormValues.from_form(await request.form()).with_rule_id(str(rule_id))
    return submit_rule(request, values, "update")


@router.post("/rules/{rule_id}/{action}")
def rule_action(request: Request, rule_id: int, action: str) -> Response:
    if action not in ("pause", "resume", "delete"):
        raise HTTPException(404, f"There is no action {action!r} for rules (pause, resume or delete).")
    checked: Action = "pause" if action == "pause" else "resume" if action == "resume" else "delete"
    console = console_of(request)
    try:
        committed = console.writer.write(checked, rule_id=rule_id, rule=None, view=table_view(console.reader))
    except (EditRefused, WriteFailed) as error:
        return console.page(request, "error.html", 409, title=f"Could not {action} rule {rule_id}", message=str(error))
    record = console.edits.add(committed)
    return RedirectResponse(f"/edits/{record.id}", status_code=303)


def submit_rule(request: Request, values: RuleFormValues, action: Action) -> Response:
    """Validate with the rule model; refuse in the form with its message, else write and show the progress."""
    console = console_of(request)
    problem: str | None = None
    try:
        rule = values.to_rule(console.settings.transaction_schema)
    except RuleValidationError as error:
        problem = error.reason
    if problem is None:
        try:
            committed = console.writer.write(action, rule_id=rule.rule_id, rule=rule, view=table_view(console.reader))
        except (EditRefused, WriteFailed) as error:
            problem = str(error)
        else:
            record = console.edits.add(committed)
            return RedirectResponse(f"/edits/{record.id}", status_code=303)
    return console.page(
        request, "rule_form.html", 422, values=values, mode=action, error=problem, **form_choices(console)
    )


@router.get("/edits/{edit_id}")
def edit_page(request: Request, edit_id: str) -> Response:
    console = console_of(request)
    record = console.edits.get(edit_id)
    if record is None:
        raise HTTPException(
            404,
            f"There is no edit {edit_id!r} in this console's memory (it keeps the edits made "
            "since it started); the rule's history shows every applied change.",
        )
    progress = edit_progress(console.reader, record)
    return console.page(request, "edit.html", progress=progress, rules_table=RULES.name)


@router.get("/api/edits/{edit_id}")
def edit_progress_json(request: Request, edit_id: str) -> JSONResponse:
    console = console_of(request)
    record = console.edits.get(edit_id)
    if record is None:
        return JSONResponse({"error": f"no edit {edit_id}"}, status_code=404)
    return JSONResponse(edit_progress(console.reader, record).as_json())
