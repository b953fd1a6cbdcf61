"""Four eyes and attribution in the rules database (real PostgreSQL, as ``fraudlake_console`` with its password).

A proposal changes nothing until another person approves it; the database itself refuses a self-approval, a
stale proposal and a second decision; approval writes the rule and its attribution in one transaction; a rejected
proposal changes nothing; an edit typed in SQL that does not name the attribution columns is unattributed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from debezium_support import own_database, sql_literal
from engine_fixtures import make_rule

from pipelines.base.rulesdb_settings import RoleKey
from pipelines.base.settings import Settings
from pipelines.local.rules_database import RulesDb, RulesDbError
from rules_cdc.parse_events import rule_columns
from rules_cdc.proposals import (
    Connect,
    ProposalRefused,
    ProposalStale,
    approve,
    connector,
    diff_rows,
    get_proposal,
    list_proposals,
    propose,
    reject,
    rule_in_force,
    withdraw,
)
from rules_cdc.rule_model import parse_rule
from rules_cdc.rule_rows import database_row


@pytest.fixture(scope="module")
def db(rulesdb: RulesDb) -> RulesDb:
    return own_database(rulesdb, "fraudlake_proposals")


@pytest.fixture
def connect(db: RulesDb) -> Iterator[Connect]:
    """The console's login: fraudlake_console with its password (no superuser anywhere in these calls)."""
    db.sql("TRUNCATE fraud_rules; DELETE FROM rule_proposals")
    info = f"host=127.0.0.1 port={db.effective_port()} dbname={db.database} user={db.role_name('console')}"
    yield connector(info, password=db.secrets.password("console"))


def _row(db: RulesDb, rule_id: int) -> list[str]:
    out = db.sql(
        "SELECT rule_state, limit_value, coalesce(changed_by, '-'), coalesce(approved_by, '-'), "
        f"coalesce(change_reason, '-'), coalesce(proposal_id::text, '-') FROM fraud_rules WHERE rule_id = {rule_id}"
    )
    return out.strip().split("|") if out.strip() else []


def test_a_proposal_changes_nothing_until_another_person_approves_it(db: RulesDb, connect: Connect) -> None:
    created = propose(connect, "create", rule=make_rule(7), proposed_by="alice", reason="new payer rule")
    assert (created.status, created.kind, created.rule_id, created.base_updated_at) == ("pending", "create", 7, None)
    assert _row(db, 7) == []  # nothing written yet
    assert [p.id for p in list_proposals(connect)] == [created.id]

    # The author cannot approve: refused by the database's CHECK, nothing written, still pending.
    with pytest.raises(ProposalRefused, match="four eyes"):
        approve(connect, created.id, approver="alice", note="looks fine to me")
    assert _row(db, 7) == [] and get_proposal(connect, created.id).status == "pending"

    assert approve(connect, created.id, approver="bob", note="backtest ok") == "created rule 7"
    assert _row(db, 7) == ["ACTIVE", "100", "alice", "bob", "new payer rule", str(created.id)]
    decided = get_proposal(connect, created.id)
    assert (decided.status, decided.decided_by, decided.decision_note) == ("approved", "bob", "backtest ok")
    with pytest.raises(ProposalRefused, match="already approved"):
        approve(connect, created.id, approver="carol", note="")

    paused = propose(connect, "pause", rule_id=7, proposed_by="carol", reason="noisy")
    assert approve(connect, paused.id, approver="bob") == "paused rule 7"
    assert _row(db, 7)[:5] == ["PAUSED", "100", "carol", "bob", "noisy"]


def test_the_database_refuses_a_self_approval_whoever_calls_it(db: RulesDb, connect: Connect) -> None:
    mine = propose(connect, "create", rule=make_rule(8), proposed_by="alice", reason="x")
    role: RoleKey = "console"
    with pytest.raises(RulesDbError, match="rule_proposals_four_eyes"):
        db.psql(["-c", f"SELECT approve_rule_proposal({mine.id}, 'alice', 'psql, not python')"], role=role)
    with pytest.raises(RulesDbError, match="rule_proposals_four_eyes"):
        db.psql(
            [
                "-c",
                f"UPDATE rule_proposals SET status = 'rejected', decided_by = 'alice', decided_at = now() "
                f"WHERE id = {mine.id}",
            ],
            role=role,
        )
    # The operators' direct path (the console may not write fraud_rules at all) is held to it as well.
    with pytest.raises(RulesDbError, match="fraud_rules_four_eyes"):
        db.psql(
            [
                "-c",
                "INSERT INTO fraud_rules (rule_id, aggregate_field_name, aggregator_function_type, "
                "limit_operator_type, limit_value, window_minutes, changed_by, approved_by) "
                "VALUES (9, 'COUNT', 'COUNT', 'GREATER', 1, 1, 'alice', 'alice')",
            ],
            role="operator",
        )
    # A proposal's content is not the console's to rewrite: only the decision columns are granted.
    with pytest.raises(RulesDbError, match="permission denied"):
        db.psql(["-c", f"UPDATE rule_proposals SET reason = 'other' WHERE id = {mine.id}"], role=role)
    with pytest.raises(RulesDbError, match="permission denied"):
        db.psql(["-c", "DELETE FROM rule_proposals"], role=role)
    assert _row(db, 8) == []


def test_a_stale_proposal_is_refused_and_approval_is_atomic(db: RulesDb, connect: Connect) -> None:
    db.upsert_rules([make_rule(3, limit=10)])
    first = propose(connect, "update", rule=make_rule(3, limit=15), proposed_by="alice", reason="raise to 15")
    second = propose(connect, "update", rule=make_rule(3, limit=20), proposed_by="dave", reason="raise to 20")
    assert approve(connect, first.id, approver="bob") == "updated rule 3"
    # The second was made against the rule before the first: refused, nothing written, still pending.
    with pytest.raises(ProposalStale, match="stale: rule 3 changed since it was proposed"):
        approve(connect, second.id, approver="bob")
    assert _row(db, 3)[:4] == ["ACTIVE", "15", "alice", "bob"]
    assert get_proposal(connect, second.id).status == "pending"

    # A direct SQL edit makes a proposal stale too; a create is stale once the rule exists.
    late = propose(connect, "pause", rule_id=3, proposed_by="alice", reason="pause it")
    db.sql("UPDATE fraud_rules SET cooldown_minutes = 5 WHERE rule_id = 3")
    with pytest.raises(ProposalStale):
        approve(connect, late.id, approver="bob")
    create = propose(connect, "create", rule=make_rule(4), proposed_by="alice", reason="x")
    db.upsert_rules([make_rule(4, limit=1)])
    with pytest.raises(ProposalStale):
        approve(connect, create.id, approver="bob")
    assert _row(db, 4)[:3] == ["ACTIVE", "1", "-"]


def test_a_rejected_or_withdrawn_proposal_changes_nothing(db: RulesDb, connect: Connect) -> None:
    db.upsert_rules([make_rule(5, limit=10)])
    before = _row(db, 5)
    updated_at = db.sql("SELECT updated_at FROM fraud_rules WHERE rule_id = 5")
    doomed = propose(connect, "delete", rule_id=5, proposed_by="alice", reason="obsolete")
    with pytest.raises(ProposalRefused, match="four eyes"):
        reject(connect, doomed.id, decided_by="alice", note="")
    rejected = reject(connect, doomed.id, decided_by="bob", note="still catches mules")
    assert (rejected.status, rejected.decided_by) == ("rejected", "bob")
    with pytest.raises(ProposalRefused, match="already rejected"):
        approve(connect, doomed.id, approver="carol")
    with pytest.raises(RulesDbError, match="a decision is final"):
        db.sql(
            f"UPDATE rule_proposals SET status = 'pending', decided_by = NULL, decided_at = NULL WHERE id = {doomed.id}"
        )
    mine = propose(connect, "update", rule=make_rule(5, limit=11), proposed_by="alice", reason="x")
    with pytest.raises(ProposalRefused, match="only its author"):
        withdraw(connect, mine.id, by="bob")
    assert withdraw(connect, mine.id, by="alice").status == "withdrawn"
    assert _row(db, 5) == before
    assert db.sql("SELECT updated_at FROM fraud_rules WHERE rule_id = 5") == updated_at
    assert list_proposals(connect) == []


def test_proposals_are_checked_against_the_rule_as_it_is(connect: Connect) -> None:
    with pytest.raises(ProposalRefused, match="not in the rules database"):
        propose(connect, "pause", rule_id=99, proposed_by="alice", reason="x")
    with pytest.raises(ProposalRefused, match="reason is required"):
        propose(connect, "create", rule=make_rule(99), proposed_by="alice", reason="  ")
    with pytest.raises(ProposalRefused, match="kind"):
        propose(connect, "truncate", rule_id=1, proposed_by="alice", reason="x")
    p = propose(connect, "create", rule=make_rule(99), proposed_by="alice", reason="x'); DROP TABLE fraud_rules; --")
    assert get_proposal(connect, p.id).reason == "x'); DROP TABLE fraud_rules; --"
    assert p.proposed_rule == database_row(make_rule(99))
    assert rule_in_force(connect, 99) is None
    assert diff_rows(None, p.proposed_rule)[0] == ("rule_id", None, 99)


def test_an_approved_delete_carries_its_attribution_then_deletes(db: RulesDb, connect: Connect) -> None:
    db.upsert_rules([make_rule(6)])
    p = propose(connect, "delete", rule_id=6, proposed_by="alice", reason="retired")
    assert approve(connect, p.id, approver="bob") == "deleted rule 6"
    assert _row(db, 6) == []


def test_a_sql_edit_that_does_not_name_the_attribution_columns_is_unattributed(db: RulesDb, connect: Connect) -> None:
    db.upsert_rules([make_rule(2, limit=10)])
    p = propose(connect, "update", rule=make_rule(2, limit=12), proposed_by="alice", reason="tune")
    approve(connect, p.id, approver="bob")
    assert _row(db, 2)[2:5] == ["alice", "bob", "tune"]
    db.psql(["-c", "UPDATE fraud_rules SET limit_value = 13 WHERE rule_id = 2"], role="operator")  # break-glass
    assert _row(db, 2) == ["ACTIVE", "13", "-", "-", "-", "-"]  # not alice's: nobody said who
    # Naming the columns keeps them, even with the values they had (PostgreSQL's UPDATE OF).
    db.sql("UPDATE fraud_rules SET changed_by = 'erin', change_reason = 'hotfix' WHERE rule_id = 2")
    db.sql(
        "UPDATE fraud_rules SET limit_value = 14, changed_by = changed_by, change_reason = change_reason "
        "WHERE rule_id = 2"
    )
    assert _row(db, 2)[1:5] == ["14", "erin", "-", "hotfix"]
    db.sql("UPDATE fraud_rules SET change_reason = 'typo' WHERE rule_id = 2")  # the reason alone: erin is cleared
    assert _row(db, 2)[1:5] == ["14", "-", "-", "typo"]


# ---- four eyes is the database's: the console role cannot go around approve_rule_proposal() -----------------------


def test_the_console_role_cannot_write_a_rule_or_an_approval_by_hand(db: RulesDb, connect: Connect) -> None:
    db.upsert_rules([make_rule(11, limit=10)])
    p = propose(connect, "update", rule=make_rule(11, limit=99), proposed_by="alice", reason="raise")
    for statement in (
        "UPDATE fraud_rules SET limit_value = 99, changed_by = 'alice', approved_by = 'bob' WHERE rule_id = 11",
        "DELETE FROM fraud_rules WHERE rule_id = 11",
        "INSERT INTO fraud_rules (rule_id, aggregate_field_name, aggregator_function_type, limit_operator_type, "
        "limit_value, window_minutes) VALUES (12, 'COUNT', 'COUNT', 'GREATER', 1, 1)",
    ):
        with pytest.raises(RulesDbError, match="permission denied for table fraud_rules"):
            db.psql(["-c", statement], role="console")
    # Nor may it record an approval that never applied the change (its right to decide is for reject/withdraw).
    with pytest.raises(RulesDbError, match="only approve_rule_proposal\\(\\) approves"):
        db.psql(
            [
                "-c",
                "UPDATE rule_proposals SET status = 'approved', decided_by = 'bob', decided_at = now() "
                f"WHERE id = {p.id}",
            ],
            role="console",
        )
    with pytest.raises(RulesDbError, match="only approve_rule_proposal\\(\\) approves"):
        db.psql(
            [
                "-c",
                "INSERT INTO rule_proposals (kind, rule_id, proposed_by, reason, status, decided_by, decided_at) "
                "VALUES ('pause', 11, 'alice', 'x', 'approved', 'bob', now())",
            ],
            role="console",
        )
    assert _row(db, 11)[:3] == ["ACTIVE", "10", "-"] and get_proposal(connect, p.id).status == "pending"
    # Through the function, as the same console login: applied, attributed.
    assert approve(connect, p.id, approver="bob") == "updated rule 11"
    assert _row(db, 11)[:5] == ["ACTIVE", "99", "alice", "bob", "raise"]


def test_approval_runs_as_its_nologin_owner_whatever_search_path_the_caller_sets(db: RulesDb, connect: Connect) -> None:
    owner, definer, config = (
        db.sql(
            "SELECT proowner::regrole, prosecdef, array_to_string(proconfig, ';') FROM pg_proc "
            "WHERE oid = 'approve_rule_proposal(bigint, text, text)'::regprocedure"
        )
        .strip()
        .split("|")
    )
    assert (owner, definer) == ("fraudlake_approver", "t")
    assert config == "search_path=pg_catalog, public, pg_temp"
    # A decoy schema the caller may use, with tables of the same names first on its search_path: the function,
    # running with its owner's rights, still reads and writes public's (the decoy stays empty).
    db.sql(
        "DROP SCHEMA IF EXISTS decoy CASCADE; CREATE SCHEMA decoy; "
        "CREATE TABLE decoy.fraud_rules (LIKE public.fraud_rules); "
        "CREATE TABLE decoy.rule_proposals (LIKE public.rule_proposals); "
        "GRANT USAGE ON SCHEMA decoy TO fraudlake_console; "
        "GRANT ALL ON ALL TABLES IN SCHEMA decoy TO fraudlake_console"
    )
    try:
        p = propose(connect, "create", rule=make_rule(13), proposed_by="alice", reason="new")
        out = db.psql(
            ["-c", f"SET search_path = decoy, public; SELECT approve_rule_proposal({p.id}, 'bob', 'decoyed')"],
            role="console",
        )
        assert out.strip() == "created rule 13"
        assert _row(db, 13)[2:4] == ["alice", "bob"]
        decoyed = db.sql(
            "SELECT (SELECT count(*) FROM decoy.fraud_rules) + (SELECT count(*) FROM decoy.rule_proposals)"
        )
        assert decoyed.strip() == "0"
        # Its owner's rights do not lift four eyes: a self-approval is still refused, as the console login.
        mine = propose(connect, "pause", rule_id=13, proposed_by="carol", reason="noisy")
        with pytest.raises(RulesDbError, match="rule_proposals_four_eyes"):
            db.psql(["-c", f"SELECT approve_rule_proposal({mine.id}, 'carol', '')"], role="console")
        assert _row(db, 13)[0] == "ACTIVE"
    finally:
        db.sql("DROP SCHEMA decoy CASCADE")


# ---- the baseline (conf/rulesdb/008_rule_kinds.sql): a proposal carries it, approval writes it ---------------------

RELATIVE_BASELINE = {"aggregatorFunctionType": "AVG", "windowMinutes": 43200, "minCount": 5, "perWindow": False}


def test_a_proposal_with_a_baseline_is_approved_with_it(db: RulesDb, connect: Connect, base_settings: Settings) -> None:
    schema = base_settings.transaction_schema
    relative = make_rule(14, aggregatorFunctionType="VALUE", limit=5, windowMinutes=1, baseline=RELATIVE_BASELINE)
    created = propose(connect, "create", rule=relative, proposed_by="alice", reason="5x the usual payment")
    assert created.proposed_rule is not None and created.proposed_rule["baseline"] == RELATIVE_BASELINE
    assert created.rule(schema) == relative
    assert approve(connect, created.id, approver="bob") == "created rule 14"
    in_force = rule_in_force(connect, 14)
    assert in_force is not None and in_force["baseline"] == RELATIVE_BASELINE
    assert in_force["aggregator_function_type"] == "VALUE"
    stored = json.loads(db.sql("SELECT row_to_json(r) FROM fraud_rules r WHERE rule_id = 14"))
    assert parse_rule(rule_columns(stored), schema) == relative

    # An update to a fixed limit (a COUNT_DISTINCT rule, no baseline) clears it; the diff shows both columns.
    distinct = make_rule(
        14, aggregatorFunctionType="COUNT_DISTINCT", aggregateFieldName="beneficiaryId", limit=5, windowMinutes=60
    )
    update = propose(connect, "update", rule=distinct, proposed_by="carol", reason="count beneficiaries instead")
    changed = {column for column, _, _ in diff_rows(in_force, update.proposed_rule)}
    assert {"aggregator_function_type", "aggregate_field_name", "baseline"} <= changed
    assert approve(connect, update.id, approver="bob") == "updated rule 14"
    assert db.sql("SELECT baseline IS NULL, aggregator_function_type FROM fraud_rules WHERE rule_id = 14").strip() == (
        "t|COUNT_DISTINCT"
    )

    # A proposal stored before schema version 8 has no baseline key: approved as a fixed limit.
    old = database_row(make_rule(15, limit=7))
    del old["baseline"]
    db.sql(
        "INSERT INTO rule_proposals (kind, rule_id, proposed_rule, proposed_by, reason) "
        f"VALUES ('create', 15, {sql_literal(old)}, 'alice', 'from before 008')"
    )
    (older,) = [p for p in list_proposals(connect) if p.rule_id == 15]
    assert approve(connect, older.id, approver="bob") == "created rule 15"
    assert _row(db, 15)[:2] == ["ACTIVE", "7"]
    assert db.sql("SELECT baseline IS NULL FROM fraud_rules WHERE rule_id = 15").strip() == "t"
