"""With a rules database configured, ``fraudlake rules upsert|pause|resume|delete`` write ``fraud_rules`` (real
PostgreSQL), so that Debezium gives each edit a real position and one log orders every change of a rule.

The broker in conf is unreachable: an edit that went to Kafka instead would fail. Nothing reaches the lake but
through CDC, so the rules table stays empty here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from debezium_support import own_database
from pyspark.sql import SparkSession
from rules_cdc_support import SEED, records, rule_event, table_rows

from pipelines.base.settings import Settings
from pipelines.cli import main
from pipelines.local.rules_database import RulesDb
from rules_cdc.apply_changes import apply_records, ensure_rules_tables


@pytest.fixture(scope="module")
def db(rulesdb: RulesDb) -> RulesDb:
    return own_database(rulesdb, "fraudlake_cli_edits")


def _conf(settings: Settings, db: RulesDb, folder: Path) -> Path:
    raw = settings.model_dump(mode="json")
    raw["rulesdb"] = {**raw["rulesdb"], "data_dir": str(db.data_dir), "port": db.port, "database": db.database}
    raw["kafka"] = {**raw["kafka"], "bootstrap_servers": "127.0.0.1:9"}  # nothing listens: no Kafka fallback
    path = folder / "conf.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _password_from_the_environment(db: RulesDb, monkeypatch: pytest.MonkeyPatch) -> None:
    """No password in libpq's environment (PGPASSWORD, PGPASSFILE): the CLI finds the operator role's own through
    the rules database's secrets, and logs in as that role, never as the bootstrap superuser."""
    for name in ("PGPASSWORD", "PGPASSFILE", "FRAUDLAKE_RULESDB_DSN"):
        monkeypatch.delenv(name, raising=False)


def _rules(db: RulesDb) -> dict[int, tuple[str, str]]:
    out = db.sql("SELECT rule_id, rule_state, limit_value FROM fraud_rules ORDER BY rule_id")
    return {int(i): (state, limit) for i, state, limit in (line.split("|") for line in out.splitlines() if line)}


def test_cli_edits_go_through_the_rules_database_when_one_is_configured(
    spark: SparkSession,
    settings: Settings,
    db: RulesDb,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _password_from_the_environment(db, monkeypatch)
    db.sql("TRUNCATE fraud_rules")
    conf = _conf(settings, db, tmp_path)

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(["rules", *args, "--conf", str(conf), "--lakehouse", settings.lakehouse_root])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    upserts = tmp_path / "rules.json"
    upserts.write_text(json.dumps([SEED, {**SEED, "ruleId": 2, "limit": 5000, "ruleName": "x'); DROP TABLE t; --"}]))
    code, out, err = run("upsert", str(upserts))
    assert code == 0 and "upserted rule_id 1, 2 in fraud_rules; Debezium streams it" in out, err
    assert _rules(db) == {1: ("ACTIVE", "1000000"), 2: ("ACTIVE", "5000")}
    assert db.sql("SELECT rule_name FROM fraud_rules WHERE rule_id = 2").strip() == "x'); DROP TABLE t; --"
    # Written as the operator role, the one direct writer (the server's log of connections is not needed: the
    # superuser has no password in reach, and the console role may not write fraud_rules at all).
    assert not list(db.secrets.folder.glob("*.pgpass*"))  # the password file lived for the command only

    assert run("pause", "1")[:2] == (
        0,
        "rules pause: set rule_state = PAUSED for rule_id = 1 in fraud_rules; "
        "Debezium streams it, the rules job applies it\n",
    )
    assert _rules(db)[1] == ("PAUSED", "1000000")
    code, _, err = run("pause", "1")
    assert code == 2 and "rule 1 is already PAUSED in the rules database" in err
    assert run("resume", "1")[0] == 0 and _rules(db)[1] == ("ACTIVE", "1000000")
    assert run("delete", "2")[0] == 0 and set(_rules(db)) == {1}
    code, _, err = run("pause", "9")
    assert code == 2 and "rule 9 is not in the rules database (fraud_rules): upsert it first" in err
    assert table_rows(spark, settings, "rules") == []  # the lake changes only through CDC

    # A lake fed by the CLI (ts positions) would quarantine the database's events as another kind: refused.
    ensure_rules_tables(spark, settings)
    apply_records(spark, settings, records([rule_event("c", 1, 1_700_000_000_000, settings.transaction_schema)]))
    code, _, err = run("pause", "1")
    assert code == 2 and "the rules table holds ts positions" in err
    assert _rules(db)[1] == ("ACTIVE", "1000000")
