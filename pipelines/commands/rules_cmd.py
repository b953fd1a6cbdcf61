"""``fraudlake rules ...``: apply CDC files, run the CDC job, read rules and their history, publish edits.

::

    fraudlake rules apply FILE                     a JSON-lines file of record values, applied as one batch
    fraudlake rules run [--source files|kafka] [--once]   the streaming job (checkpoint per source)
    fraudlake rules list [--as-of VERSION|TIMESTAMP] [--json] [--all]
    fraudlake rules history [ID] [--rule ID] [--at TIME] [--json]
                                                   applied changes (who, approved by, why), then refused ones;
                                                   --at: per rule, the change in force at TIME
    fraudlake rules rejected [--rule ID] [--json]  quarantined rule changes, newest first (stale ones included)
    fraudlake rules export [--output FILE]         EXPORT_RULES_CURRENT: the live rules as a JSON array
    fraudlake rules delete-all                     DELETE_RULES_ALL: a truncate event, applied at once
    fraudlake rules upsert FILE.json | pause ID | resume ID | delete ID  [--via auto|rulesdb|kafka]
                                                   to the rules database if one is configured, else the topic
    fraudlake rules backtest FILE.json [--from ISO] [--to ISO] [--output PATH]   alerts a candidate would have raised
    fraudlake rules propose create|update FILE.json | pause|resume|delete ID --reason TEXT [--as-user NAME]
    fraudlake rules proposals [--all] [--rule ID] [--json]      pending (or all) four-eyes proposals
    fraudlake rules approve ID [--note TEXT] [--as-user NAME]   apply it (another person than its author)
    fraudlake rules reject ID [--note TEXT] [--as-user NAME] | withdraw ID [--as-user NAME]

Proposals and decisions reach the rules database as ``fraudlake_console`` (which may not write ``fraud_rules``:
approval goes through ``approve_rule_proposal()``), the direct edits ``upsert|pause|resume|delete`` as
``fraudlake_operator`` (the break-glass path, conf/rulesdb/007_operator_role.sql): ``FRAUDLAKE_RULESDB_DSN`` when
set (its own login, whichever it is), else conf's local database with that role's password (``rulesdb_login``).
The acting person is ``--as-user``, else the OS user.

A rule file (``upsert``, ``propose create|update``, ``backtest``) holds a rule in the seeds' camelCase vocabulary
(docs/rules-cdc.md, "The rule"); ``RULE_EXAMPLES`` (printed under ``--help`` of those actions) shows a distinct
count and a relative limit.
"""

from __future__ import annotations

import argparse
import dataclasses
import getpass
import json
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from delta_tables.rules import RULES
from pipelines.base.rulesdb_settings import RoleKey
from pipelines.base.runtime_env import SetupMissingError
from pipelines.base.settings import Settings
from pipelines.commands.context import settings_from, spark_from
from pipelines.engine.backtest import alert_json_lines, backtest_per_day, backtest_rule, parse_instant_ms
from pipelines.local.rules_database import RulesDb
from pipelines.local.rulesdb_secrets import SecretError
from rules_cdc.apply_changes import apply_parsed, apply_records, ensure_rules_tables, read_view
from rules_cdc.manage import edit_rules
from rules_cdc.parse_events import ParsedBatch, RawRecord
from rules_cdc.proposals import (
    KINDS,
    Proposal,
    ProposalRefused,
    ProposalsUnavailable,
    approve,
    connector,
    list_proposals,
    propose,
    reject,
    withdraw,
)
from rules_cdc.publisher import PublishRefused, delete_all_event
from rules_cdc.rejected_changes import pending_rejections, quarantined_changes, rejections_text
from rules_cdc.rule_model import RuleValidationError, parse_rule
from rules_cdc.rule_rows import LIVE_STATES
from rules_cdc.rules_views import (
    history_text,
    read_rules,
    rule_history,
    rules_json,
    rules_table_text,
    to_json_text,
)
from rules_cdc.rulesdb_edits import RulesDbUnavailable, dsn_from_environment
from rules_cdc.streaming_job import start_rules_job

RULE_EXAMPLES = """\
rule files (a JSON object, or an array of them), e.g.:
  a distinct count: more than 5 different beneficiaries of one payer within an hour
    {"ruleId": 21, "groupingKeyNames": ["payerId"], "aggregateFieldName": "beneficiaryId",
     "aggregatorFunctionType": "COUNT_DISTINCT", "limitOperatorType": "GREATER", "limit": 5, "windowMinutes": 60}
  a relative limit: a payment over 5 times the payer's average of the last 30 days (at least 5 payments)
    {"ruleId": 22, "groupingKeyNames": ["payerId"], "aggregateFieldName": "paymentAmount",
     "aggregatorFunctionType": "VALUE", "limitOperatorType": "GREATER", "limit": 5, "windowMinutes": 1,
     "baseline": {"aggregatorFunctionType": "AVG", "windowMinutes": 43200, "minCount": 5}}
  (baseline: AVG | SUM | COUNT over windowMinutes >= the rule's; "perWindow": true scales it to the rule's window;
  COUNT_DISTINCT takes no baseline; docs/rules-cdc.md, "The rule")"""


def register(subparsers: Any, parent: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser("rules", help="rules CDC: apply, run, list, history, edit")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

    apply = actions.add_parser("apply", parents=[parent], help="apply a JSON-lines file of CDC record values")
    apply.add_argument("file", type=Path)
    run = actions.add_parser("run", parents=[parent], help="run the rules CDC streaming job")
    run.add_argument("--source", choices=["files", "kafka"], default="files")
    run.add_argument("--once", action="store_true", help="process what is available now, then stop")
    listing = actions.add_parser("list", parents=[parent], help="the current (or a past) rules")
    listing.add_argument("--as-of", dest="as_of", help="a rules-table version or a timestamp (UTC)")
    listing.add_argument("--json", action="store_true", help="a JSON array in the rules' camelCase vocabulary")
    listing.add_argument("--all", action="store_true", help="include tombstones (DELETED, DISABLED)")
    history = actions.add_parser("history", parents=[parent], help="applied changes: who, approved by, why")
    history.add_argument("rule_id", type=int, nargs="?", help="one rule's (same as --rule)")
    history.add_argument("--rule", type=int, dest="rule", help="only this rule's (default: every rule's)")
    history.add_argument("--at", help="per rule, only the change in force at this ISO time (UTC)")
    history.add_argument("--json", action="store_true")
    rejected = actions.add_parser("rejected", parents=[parent], help="quarantined rule changes, stale ones included")
    rejected.add_argument("--rule", type=int, dest="rule", help="only this rule's")
    rejected.add_argument("--json", action="store_true")
    export = actions.add_parser("export", parents=[parent], help="EXPORT_RULES_CURRENT: live rules as JSON")
    export.add_argument("--output", type=Path, help="write to this file instead of stdout")
    actions.add_parser("delete-all", parents=[parent], help="DELETE_RULES_ALL: tombstone every rule")
    examples: dict[str, Any] = {"epilog": RULE_EXAMPLES, "formatter_class": argparse.RawDescriptionHelpFormatter}
    upsert = actions.add_parser("upsert", parents=[parent], help="create or update the rule(s) in FILE", **examples)
    upsert.add_argument("file", type=Path, help="a JSON rule object or an array of them")
    edits = [upsert]
    for name in ("pause", "resume", "delete"):
        edit = actions.add_parser(name, parents=[parent], help=f"{name} rule ID")
        edit.add_argument("rule_id", type=int)
        edits.append(edit)
    for edit in edits:
        edit.add_argument(
            "--via",
            choices=["auto", "rulesdb", "kafka"],
            default="auto",
            help="rulesdb: write fraud_rules (Debezium streams it); kafka: CLI events on the rules topic (a table "
            "not fed by a database); auto (default): rulesdb when FRAUDLAKE_RULESDB_DSN is set or conf's runs",
        )
    backtest = actions.add_parser(
        "backtest",
        parents=[parent],
        help="the alerts a candidate rule would have raised on bronze (writes nothing)",
        **examples,
    )
    backtest.add_argument("file", type=Path, help="a JSON rule object or an array of them (each backtested)")
    backtest.add_argument("--from", dest="from_", help="evaluate transactions from this ISO time (UTC) on")
    backtest.add_argument("--to", help="evaluate transactions before this ISO time (UTC)")
    backtest.add_argument("--output", type=Path, help="also write the alerts as JSON lines to this file")
    _register_proposals(actions, parent)
    parser.set_defaults(handler=run_rules)


def _register_proposals(actions: Any, parent: argparse.ArgumentParser) -> None:
    as_user = argparse.ArgumentParser(add_help=False)
    as_user.add_argument("--as-user", dest="as_user", help="who is acting (default: the OS user)")
    propose_ = actions.add_parser(
        "propose",
        parents=[parent, as_user],
        help="propose a change; it applies once another person approves",
        epilog=RULE_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    propose_.add_argument("kind", choices=list(KINDS))
    propose_.add_argument("target", help="create/update: a JSON rule file; pause/resume/delete: the rule id")
    propose_.add_argument("--reason", required=True, help="why (kept with the change in the change log)")
    proposals = actions.add_parser("proposals", parents=[parent], help="pending four-eyes proposals, newest first")
    proposals.add_argument("--all", action="store_true", help="decided ones too")
    proposals.add_argument("--rule", type=int, help="only this rule's")
    proposals.add_argument("--json", action="store_true")
    for name, what in (("approve", "approve and apply"), ("reject", "reject"), ("withdraw", "withdraw your own")):
        decide = actions.add_parser(name, parents=[parent, as_user], help=f"{what} proposal ID")
        decide.add_argument("proposal_id", type=int)
        if name != "withdraw":
            decide.add_argument("--note", default="", help="a note kept with the decision")


PROPOSAL_ACTIONS = ("propose", "proposals", "approve", "reject", "withdraw")


def run_rules(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    action: str = args.action
    if action in PROPOSAL_ACTIONS:
        return _proposals(args, settings)  # the rules database only: no Spark
    spark = spark_from(settings, f"rules-{action}")
    if action in ("apply", "run", "delete-all", "upsert", "pause", "resume", "delete"):
        ensure_rules_tables(spark, settings)
    if action == "apply":
        lines = args.file.read_text().splitlines()
        path = args.file.resolve()
        records = [RawRecord(line, f"file:{path}:{n}") for n, line in enumerate(lines, start=1) if line.strip()]
        print(f"rules apply: {apply_records(spark, settings, records).summary()}")
        return 0
    if action == "run":
        query = start_rules_job(spark, settings, source=args.source, once=args.once)
        print(f"rules run: {args.source} job started (checkpoint under {settings.checkpoint_path('rules_cdc')})")
        query.awaitTermination()
        return 0
    if action == "list":
        rows = read_rules(spark, settings, as_of=args.as_of)
        if args.json:
            print(to_json_text(rules_json(rows, include_tombstones=args.all)))
        else:
            print(rules_table_text([r for r in rows if args.all or r["ruleState"] in LIVE_STATES]))
            rejected = rejections_text(pending_rejections(spark, settings)) if args.as_of is None else ""
            if rejected:
                print(f"\n{rejected}")
        return 0
    if action == "history":
        return _history(args, spark, settings)
    if action == "rejected":
        found = quarantined_changes(spark, settings, rule_id=args.rule)
        if args.json:
            print(to_json_text([dataclasses.asdict(r) for r in found]))
        else:
            print(rejections_text(found, title="quarantined rule changes, newest first") or "no rejected changes")
        return 0
    if action == "export":
        text = to_json_text(rules_json(read_rules(spark, settings)))
        if args.output:
            args.output.write_text(text + "\n")
            print(f"rules export: {len(json.loads(text))} rules to {args.output}")
        else:
            print(text)
        return 0
    if action == "backtest":
        return _backtest(args, spark, settings)
    return _edit(args, spark, settings)


def _history(args: argparse.Namespace, spark: SparkSession, settings: Settings) -> int:
    """Applied changes (who, approved by, why; ``--at``: the one in force then), then one rule's refused ones."""
    if args.rule_id is not None and args.rule is not None and args.rule_id != args.rule:
        print(f"rules history: rule {args.rule_id} or rule {args.rule}?", file=sys.stderr)
        return 2
    rule_id = args.rule if args.rule is not None else args.rule_id
    try:
        changes = rule_history(spark, settings, rule_id, at=args.at)
    except ValueError as error:
        print(f"rules history: {error}", file=sys.stderr)
        return 2
    show_refused = not args.json and args.at is None and rule_id is not None
    refused = quarantined_changes(spark, settings, rule_id=rule_id) if show_refused else []
    print(to_json_text(changes) if args.json else history_text(changes))
    if refused:
        print(f"\n{rejections_text(refused, title=f'refused changes of rule {rule_id}')}")
    return 0 if changes or refused else 1


def _proposals(args: argparse.Namespace, settings: Settings) -> int:
    """Four eyes through the rules database, as ``fraudlake_console``; the person is ``--as-user`` or the OS user."""
    action: str = args.action
    who = getattr(args, "as_user", None) or getpass.getuser()
    try:
        with rulesdb_login(settings) as conninfo:
            if conninfo is None:
                print(f"rules {action}: no rules database: set FRAUDLAKE_RULESDB_DSN or start conf's", file=sys.stderr)
                return 2
            connect = connector(conninfo)
            if action == "propose":
                made = _propose(args, settings, connect, who)
                print(
                    f"rules propose: proposal {made.id} ({made.kind} rule {made.rule_id}) by {who}, pending: "
                    "another person approves it with `fraudlake rules approve {made.id}`"
                )
            elif action == "proposals":
                found = list_proposals(connect, status=None if args.all else "pending", rule_id=args.rule)
                print(to_json_text([p.as_json() for p in found]) if args.json else proposals_text(found))
            elif action == "approve":
                done = approve(connect, args.proposal_id, approver=who, note=args.note)
                print(f"rules approve: proposal {args.proposal_id} approved by {who}: {done}; Debezium streams it")
            elif action == "reject":
                reject(connect, args.proposal_id, decided_by=who, note=args.note)
                print(f"rules reject: proposal {args.proposal_id} rejected by {who}; no rule changed")
            else:
                withdraw(connect, args.proposal_id, by=who)
                print(f"rules withdraw: proposal {args.proposal_id} withdrawn by {who}")
    except (ProposalRefused, ProposalsUnavailable, RuleValidationError, SecretError, ValueError) as error:
        print(f"rules {action}: {error}", file=sys.stderr)
        return 2
    return 0


def _propose(args: argparse.Namespace, settings: Settings, connect: Any, who: str) -> Proposal:
    if args.kind in ("create", "update"):
        raw = json.loads(Path(args.target).read_text())
        rule = parse_rule(raw, settings.transaction_schema)
        return propose(connect, args.kind, rule=rule, proposed_by=who, reason=args.reason)
    if not args.target.isdigit():
        raise ValueError(f"{args.kind} takes a rule id, got {args.target!r}")
    return propose(connect, args.kind, rule_id=int(args.target), proposed_by=who, reason=args.reason)


def proposals_text(found: list[Proposal]) -> str:
    """A plain-text table of proposals, newest first."""
    if not found:
        return "no proposals"
    lines = [f"{'id':>5}  {'status':<9}  {'kind':<6}  {'ruleId':>6}  {'by':<14}  {'created (UTC)':<19}  reason"]
    for p in found:
        decided = f"  [{p.decided_by}: {p.decision_note or '-'}]" if p.decided_by else ""
        lines.append(
            f"{p.id:>5}  {p.status:<9}  {p.kind:<6}  {p.rule_id:>6}  {p.proposed_by[:14]:<14}  "
            f"{p.created_at:%Y-%m-%d %H:%M:%S}  {' '.join(p.reason.split())[:60]}{decided}"
        )
    return "\n".join(lines)


def _backtest(args: argparse.Namespace, spark: SparkSession, settings: Settings) -> int:
    """Print each candidate's alerts per day; with ``--output``, write their alerts as JSON lines."""
    try:
        raw = json.loads(args.file.read_text())
        rules = [parse_rule(item, settings.transaction_schema) for item in (raw if isinstance(raw, list) else [raw])]
        window = {"from_ms": parse_instant_ms(args.from_), "to_ms": parse_instant_ms(args.to)}
    except (RuleValidationError, ValueError) as error:
        print(f"rules backtest: {error}", file=sys.stderr)
        return 2
    with ExitStack() as stack:
        out = None
        if args.output:
            args.output.parent.mkdir(parents=True, exist_ok=True)
            out = stack.enter_context(args.output.open("w", encoding="utf-8"))
        for rule in rules:
            alerts = backtest_rule(spark, settings, rule, **window).persist()
            days = backtest_per_day(alerts).collect()  # one small row per day
            print(f"rules backtest: rule {rule.rule_id}: {sum(d['alerts'] for d in days)} alerts")
            print("\n".join(f"  {d['day']}  {d['alerts']:>7} alerts  {d['keys']:>7} keys" for d in days))
            if out is not None:
                out.writelines(f"{line}\n" for line in alert_json_lines(alerts))
            alerts.unpersist()
    if args.output:
        print(f"rules backtest: alerts written to {args.output}")
    return 0


def _edit(args: argparse.Namespace, spark: SparkSession, settings: Settings) -> int:
    """``delete-all`` at once in the lake; an edit to the rules database when one is configured (``--via``), else
    as CLI events on the rules topic (refused on a table fed by a database)."""
    if args.action == "delete-all":
        event = delete_all_event(read_view(spark, settings.table_path(RULES.name)))
        print(f"rules delete-all: {apply_parsed(spark, settings, ParsedBatch(events=[event])).summary()}")
        return 0
    with ExitStack() as stack:
        try:
            conninfo = stack.enter_context(rulesdb_login(settings, "operator")) if args.via != "kafka" else None
        except SecretError as error:
            print(f"rules {args.action}: {error}", file=sys.stderr)
            return 2
        return _edit_with(args, spark, settings, conninfo)


def _edit_with(args: argparse.Namespace, spark: SparkSession, settings: Settings, conninfo: str | None) -> int:
    if args.via == "rulesdb" and conninfo is None:
        print(f"rules {args.action}: no rules database: set FRAUDLAKE_RULESDB_DSN or start conf's", file=sys.stderr)
        return 2
    try:
        rules = []
        if args.action == "upsert":
            raw = json.loads(args.file.read_text())
            items = raw if isinstance(raw, list) else [raw]
            rules = [parse_rule(item, settings.transaction_schema) for item in items]
        outcome = edit_rules(
            spark,
            settings,
            args.action,
            rules=rules,
            rule_id=getattr(args, "rule_id", None),
            publish_to="rulesdb" if conninfo else "kafka",
            conninfo=conninfo,
        )
    except (PublishRefused, RuleValidationError, RulesDbUnavailable, ValueError) as error:
        print(f"rules {args.action}: {error}", file=sys.stderr)
        return 2
    if outcome.database is not None:
        print(f"rules {args.action}: {outcome.database.detail}; Debezium streams it, the rules job applies it")
    else:
        print(f"rules {args.action}: published {len(outcome.events)} event(s) to {outcome.topic}")
    return 0


@contextmanager
def rulesdb_login(settings: Settings, role: RoleKey = "console") -> Iterator[str | None]:
    """The rules database CLI edits and proposals go to, as a libpq connection string: ``FRAUDLAKE_RULESDB_DSN``
    as given (its own login), else conf's local database when it runs, as ``role`` (never the bootstrap
    superuser): ``console`` for proposals and decisions, ``operator`` for the direct edits (the console role may
    not write ``fraud_rules``); None when neither. The role's password (its env variable or secret file,
    ``RoleSecrets``) reaches libpq through a 0600 password file that lives only inside the block: it is in neither
    the string nor a command line. Raises ``SecretError`` when the password is missing or exposed."""
    dsn = dsn_from_environment()
    if dsn:
        yield dsn
        return
    db = RulesDb.from_settings(settings)
    try:
        running = db.running()
    except (SetupMissingError, OSError):
        running = False
    if not running:
        yield None
        return
    from psycopg.conninfo import make_conninfo

    user = db.role_name(role)
    with db.secrets.pgpass(user, db.secrets.password(role)) as passfile:
        yield make_conninfo(
            host="127.0.0.1",
            port=str(db.effective_port()),
            dbname=db.database,
            user=user,
            passfile=str(passfile),
            connect_timeout="5",
        )
