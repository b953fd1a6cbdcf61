"""Sign-in and CSRF in the real browser (Debian's Chromium via Playwright): a page of another origin that auto-submits
a form to the console (the attack of issue 22: a cross-site POST to /rules/1/delete) is refused and the rule stays in
PostgreSQL, while the same request from the console's own page, with its token, is taken (as a proposal to delete it:
four eyes). One browser and one
console for the module; the rules database is the session's real PostgreSQL.

    .venv/bin/python -m pytest -p no:xdist -q tests/test_console_signin_browser.py
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from console_support import CHROMIUM_ARGS, PASSWORD, chromium_executable, running_console
from debezium_support import own_database
from engine_fixtures import make_rule
from lakehouse_template import fresh_lakehouse
from playwright.sync_api import BrowserContext, Page, sync_playwright
from pyspark.sql import SparkSession

from pipelines.base.settings import Settings
from pipelines.console.rule_writes import RulesDbWriter
from pipelines.local.ports import free_port
from pipelines.local.rules_database import RulesDb

RULE = 1


@dataclass
class Site:
    console: str
    db: RulesDb

    def rule_state(self) -> str:
        return self.db.sql(f"SELECT coalesce(max(rule_state), 'gone') FROM fraud_rules WHERE rule_id = {RULE}").strip()


@pytest.fixture(scope="module")
def site(
    spark: SparkSession, rulesdb: RulesDb, base_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Site]:
    settings = base_settings.with_lakehouse(str(tmp_path_factory.mktemp("console-signin-browser") / "lakehouse"))
    fresh_lakehouse(spark, settings)
    db = own_database(rulesdb, "fraudlake_console_signin")
    db.sql(f"DELETE FROM fraud_rules WHERE rule_id = {RULE}; DELETE FROM rule_proposals WHERE rule_id = {RULE}")
    writer = RulesDbWriter.for_database(db)
    db.upsert_rules([make_rule(RULE)])  # set-up as the superuser: the console role may not write fraud_rules
    with running_console(settings, writer=writer, spark=lambda: spark) as (server, _):
        yield Site(server.url, db)


@pytest.fixture(scope="module")
def attacker(site: Site) -> Iterator[str]:
    """Another origin (127.0.0.1, another port: the same *site*, so SameSite lets the cookie go) serving a page
    that posts a form to the console as soon as it loads."""
    page = (
        f'<html><body><form id="f" method="post" action="{site.console}/rules/{RULE}/delete">'
        '<input name="csrf_token" value="guessed"></form>'
        '<script>document.getElementById("f").submit()</script></body></html>'
    ).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port("127.0.0.1")), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrowserContext]:
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile-signin")),
            executable_path=chromium_executable(),
            headless=True,
            args=CHROMIUM_ARGS,
        )
        context.set_default_timeout(30_000)
        try:
            yield context
        finally:
            context.close()


def sign_in(page: Page, name: str) -> None:
    page.fill("#f-username", name)
    page.fill("#f-password", PASSWORD)
    page.click("#sign-in")
    page.wait_for_load_state()


def test_sign_in_then_a_cross_origin_form_is_refused_and_the_own_page_may_propose_a_delete(
    site: Site, attacker: str, browser: BrowserContext
) -> None:
    page = browser.new_page()
    page.goto(site.console + "/health")
    assert page.url.startswith(site.console + "/login?next=%2Fhealth")  # every page needs sign-in
    sign_in(page, "ada")
    assert page.url == site.console + "/health" and page.text_content("#me-name") == "ada"
    cookie = next(c for c in browser.cookies() if c["name"] == "fraudlake_session")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Lax" and not cookie["secure"]

    # The attack: signed in as an admin, the browser visits the other origin's page; its form posts at once.
    with page.expect_navigation(url=f"{site.console}/rules/{RULE}/delete"):
        page.goto(attacker)
    assert "it was sent from another origin" in (page.text_content("#error-message") or "")
    assert site.rule_state() == "ACTIVE", "the cross-origin form deleted the rule"

    # The same request from the console's own page, with its token (console.js's fraudlakeFetch): it is taken, as
    # a proposal to delete (four eyes: the rule stays until another person approves it).
    page.goto(site.console + "/health")
    script = (
        f"fraudlakeFetch('/rules/{RULE}/delete', {{method: 'POST', body: new URLSearchParams({{reason: 'retired'}})}})"
        ".then(r => [r.status, r.url])"
    )
    status, landed = page.evaluate(script)
    assert status == 200 and "/proposals/" in landed and site.rule_state() == "ACTIVE"
    pending = site.db.sql(f"SELECT kind, proposed_by FROM rule_proposals WHERE rule_id = {RULE} AND status = 'pending'")
    assert pending.strip() == "delete|ada"
    page.close()
