"""Four eyes through the console, over HTTP with sign-in against the session's real PostgreSQL: a rule change made in
the console (form, pause, resume, delete) is a pending proposal of the signed-in user and changes nothing; its author
cannot approve it (the rules database refuses, the page says why); another person with the approver role approves
it and ``fraud_rules`` then holds the change with its author, approver and reason; a viewer proposes nothing; a
request without the CSRF token is refused.

    .venv/bin/python -m pytest -p no:xdist -q tests/test_console_proposals.py
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator

import pytest
from console_support import Visitor, running_console
from debezium_support import own_database
from engine_fixtures import make_rule
from lakehouse_template import fresh_lakehouse
from pyspark.sql import SparkSession

from pipelines.base.settings import Settings
from pipelines.console.rule_form import RuleFormValues
from pipelines.console.rule_writes import RulesDbWriter
from pipelines.local.rules_database import RulesDb

NEW, PAUSED = 611, 612


@dataclasses.dataclass
class Site:
    url: str
    db: RulesDb

    def rule(self, rule_id: int) -> list[str]:
        """state, limit, changed_by, approved_by, change_reason of the rule in fraud_rules ([] when absent)."""
        out = self.db.sql(
            "SELECT rule_state, limit_value, coalesce(changed_by, '-'), coalesce(approved_by, '-'), "
            f"coalesce(change_reason, '-') FROM fraud_rules WHERE rule_id = {int(rule_id)}"
        )
        return out.strip().split("|") if out.strip() else []

    def proposals(self) -> list[str]:
        out = self.db.sql("SELECT kind || ' ' || rule_id || ' ' || proposed_by || ' ' || status FROM rule_proposals")
        return sorted(line for line in out.splitlines() if line.strip())

    def person(self, name: str) -> Visitor:
        visitor = Visitor(self.url)
        status, text, _ = visitor.sign_in(name)
        assert status == 200 and visitor.csrf, text[:2000]
        return visitor


@pytest.fixture(scope="module")
def site(
    spark: SparkSession, rulesdb: RulesDb, base_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Site]:
    settings = base_settings.with_lakehouse(str(tmp_path_factory.mktemp("console-proposals") / "lakehouse"))
    fresh_lakehouse(spark, settings)  # the edit-progress page an approval lands on reads the lakehouse
    db = own_database(rulesdb, "fraudlake_console_proposals")
    with running_console(settings, writer=RulesDbWriter.for_database(db), spark=lambda: spark) as (server, _):
        yield Site(server.url, db)


@pytest.fixture(autouse=True)
def clean(site: Site) -> None:
    site.db.sql("TRUNCATE fraud_rules; DELETE FROM rule_proposals")


def rule_form(rule_id: int, **changes: str) -> dict[str, str]:
    values = RuleFormValues.from_rule(make_rule(rule_id).to_json_dict())
    return {**dataclasses.asdict(values), **changes}


def proposal_id(location: str | None) -> int:
    found = re.fullmatch(r"/proposals/(\d+)\?submitted=1", location or "")
    assert found, location
    return int(found.group(1))


def test_an_analysts_form_is_a_pending_proposal_and_only_another_approver_applies_it(site: Site) -> None:
    ana, abe = site.person("ana"), site.person("abe")
    ana.fetch("/rules/new")
    status, _, headers = ana.fetch("/rules/new", form=rule_form(NEW, reason="payer bursts"), follow=False)
    assert status == 303, status
    number = proposal_id(headers["Location"])
    assert site.rule(NEW) == [] and site.proposals() == [f"create {NEW} ana pending"]  # nothing applied

    status, text, _ = ana.fetch(f"/proposals/{number}?submitted=1")
    assert status == 200 and 'id="proposal-submitted"' in text and ">pending<" in text
    assert 'id="approve"' not in text  # the author is offered no decision

    # The author may not approve (an analyst lacks the role; for an approver, see the next test).
    status, text, _ = ana.fetch(f"/proposals/{number}/approve", form={"note": "mine"})
    assert status == 403 and "needs the approver role" in text

    # Another person with the approver role sees it with approve/reject, approves it: applied, attributed.
    status, text, _ = abe.fetch(f"/proposals/{number}")
    assert status == 200 and 'id="approve"' in text and 'id="reject"' in text
    status, _, headers = abe.fetch(f"/proposals/{number}/approve", form={"note": "backtested"}, follow=False)
    assert status == 303 and headers["Location"].startswith("/edits/")
    assert site.rule(NEW) == ["ACTIVE", "100", "ana", "abe", "payer bursts"]
    status, text, _ = abe.fetch(headers["Location"])  # the edit page follows the applied change
    assert status == 200 and f"approved proposal {number}: created rule {NEW}" in text
    assert site.proposals() == [f"create {NEW} ana approved"]


def test_an_approver_cannot_approve_their_own_proposal_and_the_page_says_why(site: Site) -> None:
    site.db.sql(
        "INSERT INTO fraud_rules (rule_id, rule_name, aggregate_field_name, aggregator_function_type, "
        f"limit_operator_type, limit_value, window_minutes) VALUES ({PAUSED}, 'r', 'paymentAmount', 'SUM', "
        "'GREATER', 10, 5)"
    )
    abe, ada = site.person("abe"), site.person("ada")
    status, _, headers = abe.fetch(f"/rules/{PAUSED}/pause", form={"reason": "false positives"}, follow=False)
    number = proposal_id(headers["Location"])
    status, text, _ = abe.fetch(f"/proposals/{number}/approve", form={"note": "self"})
    assert status == 409 and "four eyes" in text and "another person must" in text
    assert site.rule(PAUSED)[0] == "ACTIVE"

    status, _, _ = ada.fetch(f"/proposals/{number}/approve", form={"note": "ok"}, follow=False)
    assert status == 303 and site.rule(PAUSED) == ["PAUSED", "10", "abe", "ada", "false positives"]


def test_a_change_without_a_reason_a_viewers_and_one_without_the_token_propose_nothing(site: Site) -> None:
    ana, vic = site.person("ana"), site.person("vic")
    ana.fetch("/rules/new")
    status, text, _ = ana.fetch("/rules/new", form=rule_form(NEW))
    assert status == 422 and "a reason is required" in text and 'id="f-reason"' in text

    vic.fetch("/rules/new")
    status, text, _ = vic.fetch("/rules/new", form=rule_form(NEW, reason="viewer"))
    assert status == 403 and "may only read" in text

    status, text, _ = ana.fetch("/rules/new", form=rule_form(NEW, reason="no token"), csrf=False)
    assert status == 403 and "CSRF token is missing" in text
    assert site.proposals() == [] and site.rule(NEW) == []
