"""The four-eyes pages: pending proposals, one proposal against the rule in force (diff, backtest of both over the
same range), and approve/reject for approvers.

A proposal lives in the rules database (``rule_proposals``, ``rules_cdc.proposals``); approval applies it there in
one transaction, and Debezium carries the change, with its author, approver and reason, to the lakehouse: an approval
answers with the edit-progress page (``edit_progress``), which follows the applied change as it follows any edit. The
person acting is the signed-in user (``acting_user``: the one place that reads it); approving and rejecting need the
``approver`` role (``auth.require``), and the rules database refuses an author deciding their own proposal whatever
the role. Every form carries the session's CSRF token (``csrf_token``, as the other pages' forms do).

Database calls run on the console's write pool, lakehouse reads and backtests as the other pages run them."""

from __future__ import annotations

import datetime as dt
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import RedirectResponse
from starlette.responses import Response

from pipelines.console import params
from pipelines.console.auth import require, session_of
from pipelines.console.backtest_jobs import BacktestJob, BacktestQueueFull, backtest_range
from pipelines.console.context import ConsoleContext, console_of
from pipelines.console.rule_writes import RulesDbWriter, approved_edit
from rules_cdc.proposals import (
    Connect,
    Proposal,
    ProposalRefused,
    ProposalsUnavailable,
    approve_at,
    diff_rows,
    get_proposal,
    list_proposals,
    proposed_row,
    reject,
    rule_in_force,
)
from rules_cdc.rule_model import Rule, RuleValidationError, parse_rule

router = APIRouter()
APPROVER = Depends(require("approver"))
ANALYST = Depends(require("analyst"))


def acting_user(request: Request) -> str:
    """Who is acting: the signed-in user of the console's sessions (auth.py)."""
    session = session_of(request)
    if session is None:
        raise HTTPException(403, "Sign in first: a proposal's decision is made by a person. Nothing was changed.")
    return session.user


def proposals_connect(console: ConsoleContext) -> Connect:
    """The rules database login of the console's writer (fraudlake_console, its password and timeouts)."""
    writer = console.writer
    if not isinstance(writer, RulesDbWriter):
        raise HTTPException(503, "Proposals live in the rules database, and this console writes to the rules topic.")
    return writer._connect  # the writer's own connection: one login, one set of timeouts for every rules write


def _overview(console: ConsoleContext) -> list[Proposal]:
    return list_proposals(proposals_connect(console), status=None, limit=100)


@router.get("/proposals")
async def proposals_page(request: Request) -> Response:
    console = console_of(request)
    try:
        found = await console.writes.run(_overview, console)
    except ProposalsUnavailable as error:
        return console.page(request, "error.html", 503, title="Proposals unavailable", message=str(error))
    pending = [p for p in found if p.status == "pending"]
    decided = [p for p in found if p.status != "pending"][:20]
    return console.page(request, "proposals.html", pending=pending, decided=decided)


def _detail(console: ConsoleContext, proposal_id: int) -> dict[str, Any]:
    connect = proposals_connect(console)
    try:
        proposal = get_proposal(connect, proposal_id)
    except ProposalRefused as error:
        raise HTTPException(404, str(error)) from None
    current = rule_in_force(connect, proposal.rule_id)
    after = proposed_row(proposal, current)
    return {"proposal": proposal, "current": current, "diff": diff_rows(current, after), "after": after}


def _rule_of(row: dict[str, Any] | None, console: ConsoleContext) -> Rule | None:
    if row is None:
        return None
    content = {k: v for k, v in row.items() if k not in ("changed_by", "approved_by", "change_reason", "updated_at")}
    try:
        return parse_rule(content, console.settings.transaction_schema)
    except RuleValidationError:
        return None


def _comparison(console: ConsoleContext, current_job: str | None, proposed_job: str | None) -> list[dict[str, Any]]:
    """Alerts per day of both backtests side by side, with the difference (proposed minus in force)."""
    jobs: list[BacktestJob | None] = [
        console.backtests.get(params.token(j, "a backtest")) if j else None for j in (current_job, proposed_job)
    ]
    days: dict[str, dict[str, Any]] = {}
    for side, job in zip(("current", "proposed"), jobs, strict=True):
        for day in job.per_day if job is not None and job.state == "done" else []:
            days.setdefault(day["day"], {"day": day["day"], "current": 0, "proposed": 0})[side] = day["alerts"]
    rows = [days[d] for d in sorted(days)]
    for row in rows:
        row["difference"] = row["proposed"] - row["current"]
    return rows


@router.get("/proposals/{proposal_id}")
async def proposal_page(request: Request, proposal_id: str) -> Response:
    console = console_of(request)
    number = params.bounded_int(proposal_id, "the proposal id", low=1, high=2**63 - 1)
    data = await console.writes.run(_detail, console, number)
    current_job, proposed_job = request.query_params.get("current"), request.query_params.get("proposed")
    comparison = _comparison(console, current_job, proposed_job)
    me = session_of(request)
    return console.page(
        request,
        "proposal.html",
        **data,
        current_job=console.backtests.get(current_job) if current_job else None,
        proposed_job=console.backtests.get(proposed_job) if proposed_job else None,
        comparison=comparison,
        error=request.query_params.get("error"),
        submitted=request.query_params.get("submitted") == "1",
        may_decide=me is not None and me.role in ("approver", "admin") and me.user != data["proposal"].proposed_by,
    )


@router.post("/proposals/{proposal_id}/backtest", dependencies=[ANALYST])
async def backtest_both(request: Request, proposal_id: str) -> Response:
    """Backtest the rule in force and the proposed one over the same event-time range."""
    console = console_of(request)
    number = params.bounded_int(proposal_id, "the proposal id", low=1, high=2**63 - 1)
    form = await request.form()
    since, until = str(form.get("since", "") or ""), str(form.get("until", "") or "")
    start, end = backtest_range(*params.time_range(since, until), now=dt.datetime.now(dt.UTC))
    data = await console.writes.run(_detail, console, number)
    ids: dict[str, str] = {}
    try:
        for side, row in (("current", data["current"]), ("proposed", data["after"])):
            rule = _rule_of(row, console)
            if rule is not None and (side == "current" or row.get("rule_state") != "PAUSED"):
                ids[side] = console.backtests.submit(rule, start=start, end=end, range_text=(since, until)).id
    except BacktestQueueFull as error:
        return console.page(request, "error.html", 429, title="Backtests busy", message=str(error))
    query = "&".join(f"{side}={job}" for side, job in ids.items())
    return RedirectResponse(f"/proposals/{number}?{query}", status_code=303)


async def _decide(request: Request, proposal_id: str, decision: str) -> Response:
    console = console_of(request)
    number = params.bounded_int(proposal_id, "the proposal id", low=1, high=2**63 - 1)
    who = acting_user(request)
    note = str((await request.form()).get("note", "") or "")
    connect = proposals_connect(console)
    try:
        if decision == "approve":
            proposal = await console.writes.run(get_proposal, connect, number)
            done, lsn = await console.writes.run(approve_at, connect, number, approver=who, note=note)
            # Applied: from here the change travels as any edit does; the edit page follows it to the engine.
            committed = approved_edit(proposal.kind, proposal.rule_id, lsn, f"approved proposal {number}: {done}")
            return RedirectResponse(f"/edits/{console.edits.add(committed).id}", status_code=303)
        else:
            await console.writes.run(reject, connect, number, decided_by=who, note=note)
    except ProposalRefused as error:
        return console.page(
            request, "error.html", 409, title=f"Could not {decision} proposal {number}", message=str(error)
        )
    except ProposalsUnavailable as error:
        return console.page(request, "error.html", 503, title="Proposals unavailable", message=str(error))
    return RedirectResponse(f"/proposals/{number}", status_code=303)


@router.post("/proposals/{proposal_id}/approve", dependencies=[APPROVER])
async def approve_proposal(request: Request, proposal_id: str) -> Response:
    return await _decide(request, proposal_id, "approve")


@router.post("/proposals/{proposal_id}/reject", dependencies=[APPROVER])
async def reject_proposal(request: Request, proposal_id: str) -> Response:
    return await _decide(request, proposal_id, "reject")
