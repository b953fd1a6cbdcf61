"""The rules database and the connector config: the private PostgreSQL cluster, its versioned schema, the CLI.

Real PostgreSQL (the session cluster, and one short-lived cluster for the free-port case); no Connect, no Spark.
Roles, passwords and what each role is refused: tests/test_rulesdb_roles.py.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
import yaml
from debezium_support import own_database, sql_literal
from rules_cdc_support import FAN_OUT_RULE, SPIKE_RULE

from pipelines.base.settings import REPO_ROOT, Settings
from pipelines.cli import main
from pipelines.local.debezium_config import ConnectorConfigError, connector_config, read_properties
from pipelines.local.rules_database import RulesDb, RulesDbError, schema_files
from rules_cdc.parse_events import rule_columns
from rules_cdc.rule_model import parse_rule
from rules_cdc.rulesdb_edits import write_edit

SAMPLE_RULES = json.loads((REPO_ROOT / "conf" / "sample_rules.json").read_text())


@pytest.fixture(scope="module")
def db(rulesdb: RulesDb) -> RulesDb:
    return own_database(rulesdb, "fraudlake_unit")


def _conf(settings: Settings, db: RulesDb, folder: Path) -> Path:
    raw = settings.model_dump(mode="json")
    raw["rulesdb"] = {**raw["rulesdb"], "data_dir": str(db.data_dir), "port": db.port, "database": db.database}
    path = folder / "conf.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_the_schema_is_versioned_and_applied_once(db: RulesDb) -> None:
    assert [path.name for _, path in schema_files()][:2] == ["001_fraud_rules.sql", "002_roles.sql"]
    assert db.schema_version() == max(v for v, _ in schema_files())
    assert db.migrate() == []  # nothing new: applied once, recorded
    wal = db.psql(["-c", "SHOW wal_level"], database="postgres").strip()
    publication = db.sql("SELECT pubname FROM pg_publication_tables WHERE tablename = 'fraud_rules'").strip()
    assert (wal, publication) == ("logical", "fraudlake_rules")
    # A connector left down holds WAL only up to this much; then the server invalidates its slot (drop-slot).
    assert db.sql("SHOW max_slot_wal_keep_size").strip() == "512MB"


def test_sample_rules_round_trip_through_the_table(db: RulesDb, base_settings: Settings) -> None:
    schema = base_settings.transaction_schema
    rules = [parse_rule(r, schema) for r in SAMPLE_RULES]
    db.sql("TRUNCATE fraud_rules")
    assert db.upsert_rules(rules) == len(rules)
    assert db.upsert_rules(rules[:1]) == 1  # an upsert: no duplicate key
    rows = json.loads(db.sql("SELECT json_agg(row_to_json(r) ORDER BY rule_id) FROM fraud_rules r"))
    assert [parse_rule(rule_columns(row), schema) for row in rows] == rules


def test_updated_at_is_kept_by_the_database(db: RulesDb) -> None:
    db.sql("TRUNCATE fraud_rules")
    db.sql(
        "INSERT INTO fraud_rules (rule_id, aggregate_field_name, aggregator_function_type, limit_operator_type, "
        "limit_value, window_minutes, updated_at) VALUES (1, 'COUNT', 'COUNT', 'GREATER', 1, 1, '2000-01-01')"
    )
    db.sql("UPDATE fraud_rules SET limit_value = 2 WHERE rule_id = 1")
    assert db.sql("SELECT updated_at > '2020-01-01' FROM fraud_rules").strip() == "t"


def test_a_rule_too_big_for_a_row_is_refused_by_the_database_not_toasted(db: RulesDb) -> None:
    huge = {"field": "channel", "op": "IN", "value": [f"channel-{n:05d}-padding" for n in range(1000)]}
    with pytest.raises(RulesDbError, match="row is too big"):
        db.sql(
            "INSERT INTO fraud_rules (rule_id, aggregate_field_name, aggregator_function_type, limit_operator_type, "
            f"limit_value, window_minutes, filter) VALUES (2, 'COUNT', 'COUNT', 'GREATER', 1, 1, {sql_literal(huge)})"
        )


def test_cli_seeds_only_an_empty_table_when_asked_and_runs_psql(
    db: RulesDb, base_settings: Settings, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    conf = _conf(base_settings, db, tmp_path)
    db.sql("TRUNCATE fraud_rules")
    assert main(["rulesdb", "--conf", str(conf), "seed", "--if-empty"]) == 0
    assert f"{len(SAMPLE_RULES)} rule(s)" in capfd.readouterr().out
    assert main(["rulesdb", "--conf", str(conf), "seed", "--if-empty"]) == 0
    assert "nothing loaded" in capfd.readouterr().out
    update = "UPDATE fraud_rules SET limit_value = 15 WHERE rule_id = 3"
    assert main(["rulesdb", "--conf", str(conf), "psql", "-c", update]) != 0  # options before the action
    assert "permission denied for table fraud_rules" in capfd.readouterr().err  # fraudlake_console, the default
    assert main(["rulesdb", "--conf", str(conf), "--as", "operator", "psql", "-c", update]) == 0
    assert "UPDATE 1" in capfd.readouterr().out  # the operators' direct edit
    assert db.sql("SELECT limit_value FROM fraud_rules WHERE rule_id = 3").strip() == "15"
    assert main(["rulesdb", "--conf", str(conf), "--as", "reader", "psql", "-c", update]) != 0
    assert "permission denied for table fraud_rules" in capfd.readouterr().err
    who = "SELECT current_user"
    assert main(["rulesdb", "--conf", str(conf), "--as", "admin", "psql", "-X", "-A", "-t", "-c", who]) == 0
    assert capfd.readouterr().out.strip() == "fraudlake"
    assert main(["rulesdb", "--conf", str(conf), "status"]) == 0
    assert f"running (postgresql://fraudlake@127.0.0.1:{db.port}/fraudlake_unit" in capfd.readouterr().out


@pytest.fixture
def scratch_folder() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="fraudlake-rulesdb-scratch-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_port_zero_picks_a_free_port_and_keeps_it_across_restarts(scratch_folder: Path) -> None:
    db = RulesDb(data_dir=scratch_folder / "db", port=0)
    try:
        db.start()
        port = db.effective_port()
        assert port > 0 and db.running() and db.schema_version() >= 1
        assert db.stop() and not db.running()
        db.start()
        assert db.effective_port() == port and db.running()
        assert "running" in db.status()
    finally:
        db.stop()
    assert not dataclasses.replace(db).running() and db.status().startswith("stopped")


def test_cli_drops_a_replication_slot_by_a_checked_name(
    db: RulesDb, base_settings: Settings, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    conf = _conf(base_settings, db, tmp_path)
    db.sql("SELECT pg_create_logical_replication_slot('cli_unit_slot', 'pgoutput')")
    assert main(["rulesdb", "--conf", str(conf), "drop-slot", "--name", "cli_unit_slot"]) == 0
    assert "dropped cli_unit_slot" in capfd.readouterr().out
    assert "cli_unit_slot" not in db.replication_slots()
    assert main(["rulesdb", "--conf", str(conf), "drop-slot", "--name", "cli_unit_slot"]) == 0
    assert "no replication slot cli_unit_slot" in capfd.readouterr().out
    assert main(["rulesdb", "--conf", str(conf), "drop-slot", "--name", "x'); DROP TABLE fraud_rules; --"]) == 1
    assert "is not a replication slot name" in capfd.readouterr().err
    assert db.sql("SELECT count(*) >= 0 FROM fraud_rules").strip() == "t"
    assert main(["rulesdb", "--conf", str(conf), "drop-slot", "--bogus"]) == 2
    assert "unexpected --bogus" in capfd.readouterr().err


def test_connector_config_fills_placeholders_and_takes_overrides(
    db: RulesDb, base_settings: Settings, tmp_path: Path
) -> None:
    config = connector_config(
        base_settings, db_port=5555, overrides={"decimal.handling.mode": "precise"}, secrets=db.secrets
    )
    values = config["config"]
    assert config["name"] == "fraudlake-rules-postgres"
    assert (values["database.port"], values["transforms.route.replacement"]) == ("5555", "fraudlake.rules")
    assert values["decimal.handling.mode"] == "precise" and values["skipped.operations"] == "none"
    assert not any("{{" in v for v in values.values())
    # The connector's own role, and its password only as a reference the worker resolves in memory.
    secret_file = db.secrets.generated_file("debezium").resolve()
    assert values["database.user"] == "fraudlake_debezium"
    assert values["database.password"] == "${directory:" + f"{secret_file.parent}:{secret_file.name}" + "}"
    assert db.secrets.password("debezium") not in json.dumps(config)
    bad = tmp_path / "bad.properties"
    bad.write_text("name=x\ndatabase.port={{rulesdb.nope}}\n")
    with pytest.raises(ConnectorConfigError, match="unknown placeholder"):
        connector_config(
            base_settings.model_copy(
                update={"connect": base_settings.connect.model_copy(update={"connector_conf": str(bad)})}
            ),
            db_port=1,
        )
    with pytest.raises(ConnectorConfigError, match="expected key=value"):
        read_properties("just words\n")


def test_rules_of_the_new_kinds_round_trip_through_sql_and_the_operators_edits(
    db: RulesDb, base_settings: Settings
) -> None:
    """conf/rulesdb/008_rule_kinds.sql: a distinct count and a relative limit typed in SQL (as the operators' role),
    and written by ``rulesdb_edits`` (parameters, a ``::jsonb`` cast), read back as the rule model has them."""
    schema = base_settings.transaction_schema
    db.sql("TRUNCATE fraud_rules")
    db.psql(
        [
            "-c",
            "INSERT INTO fraud_rules (rule_id, grouping_key_names, aggregate_field_name, aggregator_function_type, "
            "limit_operator_type, limit_value, window_minutes) "
            "VALUES (21, '{payerId}', 'beneficiaryId', 'COUNT_DISTINCT', 'GREATER', 5, 60)",
            "-c",
            "INSERT INTO fraud_rules (rule_id, grouping_key_names, aggregate_field_name, aggregator_function_type, "
            "limit_operator_type, limit_value, window_minutes, baseline) "
            "VALUES (22, '{payerId}', 'paymentAmount', 'VALUE', 'GREATER', 5, 1, "
            """'{"aggregatorFunctionType": "AVG", "windowMinutes": 43200, "minCount": 5}')""",
        ],
        role="operator",
    )
    typed = {21: FAN_OUT_RULE, 22: SPIKE_RULE}
    expected = [parse_rule(rule, schema) for rule in typed.values()]
    rows = json.loads(db.sql("SELECT json_agg(row_to_json(r) ORDER BY rule_id) FROM fraud_rules r"))
    assert [parse_rule(rule_columns(row), schema) for row in rows] == expected

    # The operators' edit path (the CLI's `rules upsert`, notebook 01 with publish_to=rulesdb) writes the same.
    db.sql("TRUNCATE fraud_rules")
    info = f"host=127.0.0.1 port={db.effective_port()} dbname={db.database} user={db.role_name('operator')}"
    with pytest.MonkeyPatch.context() as env:
        env.setenv("PGPASSWORD", db.secrets.password("operator"))
        write_edit(info, "upsert", rules=expected)
        changed = [expected[0], expected[1].model_copy(update={"baseline": None, "limit": Decimal(50000)})]
        write_edit(info, "upsert", rules=changed)  # a relative limit made fixed: the column is cleared
    rows = json.loads(db.sql("SELECT json_agg(row_to_json(r) ORDER BY rule_id) FROM fraud_rules r"))
    assert [parse_rule(rule_columns(row), schema) for row in rows] == changed
    assert rows[1]["baseline"] is None
    assert db.upsert_rules(expected) == 2  # and the loader (`rulesdb seed`, the tests' set-up)
    rows = json.loads(db.sql("SELECT json_agg(row_to_json(r) ORDER BY rule_id) FROM fraud_rules r"))
    assert [parse_rule(rule_columns(row), schema) for row in rows] == expected
    assert rows[1]["baseline"] == {
        "aggregatorFunctionType": "AVG",
        "windowMinutes": 43200,
        "minCount": 5,
        "perWindow": False,
    }

    # The catalog says what the columns take (`\d+ fraud_rules`).
    comments = db.sql(
        "SELECT col_description('fraud_rules'::regclass, attnum) FROM pg_attribute "
        "WHERE attrelid = 'fraud_rules'::regclass AND attname IN ('aggregator_function_type', 'baseline') "
        "ORDER BY attname"
    )
    assert "COUNT_DISTINCT" in comments and "VALUE" in comments and "windowMinutes" in comments
    assert (
        db.sql(
            "SELECT attstorage FROM pg_attribute WHERE attrelid = 'fraud_rules'::regclass AND attname = 'baseline'"
        ).strip()
        == "p"
    )
