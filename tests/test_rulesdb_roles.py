"""The rules database trusts no one: SCRAM for every connection, one least-privilege role per client, passwords
from the environment or 0600 files and never on a command line or in a log, bounded waits for the console.

Real PostgreSQL (the session cluster, a short-lived one for the in-place upgrade), the real Kafka Connect worker
and Debezium for the connector's role; the password files' rules without a server.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import pytest
from debezium_support import cdc_settings, own_database, running_connector
from engine_fixtures import make_rule

from pipelines.base.settings import Settings
from pipelines.console.rule_writes import RulesDbWriter, SessionLimits, WriteFailed
from pipelines.local.connect_worker import ConnectWorker
from pipelines.local.kafka_broker import KafkaBroker
from pipelines.local.ports import free_port
from pipelines.local.rules_database import RulesDb, RulesDbError
from pipelines.local.rulesdb_secrets import RoleSecrets, SecretError, env_name, scram_sha256_verifier
from rules_cdc.plan_changes import TableView

INSERT = (
    "INSERT INTO fraud_rules (rule_id, aggregate_field_name, aggregator_function_type, limit_operator_type, "
    "limit_value, window_minutes) VALUES ({id}, 'COUNT', 'COUNT', 'GREATER', 1, 1)"
)


@pytest.fixture(scope="module")
def db(rulesdb: RulesDb) -> RulesDb:
    return own_database(rulesdb, "fraudlake_roles")


def psql_without_password(db: RulesDb, user: str, *, password: str | None = None) -> subprocess.CompletedProcess[str]:
    """psql as ``user`` with no password anywhere (or ``password`` as the wrong one), never prompting."""
    env = {k: v for k, v in db.client_env().items() if not k.startswith("PGPASS")} | {"PGUSER": user}
    if password is not None:
        env["PGPASSWORD"] = password
    return subprocess.run(
        [str(db.binaries() / "psql"), "-X", "-w", "-c", "SELECT 1"],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
    )


# ---- authentication ------------------------------------------------------------------------------------------


def test_a_connection_without_the_password_is_refused_for_every_role(db: RulesDb) -> None:
    for user in ("fraudlake", "fraudlake_console", "fraudlake_operator", "fraudlake_reader", "fraudlake_debezium"):
        refused = psql_without_password(db, user)
        assert refused.returncode != 0 and "no password supplied" in refused.stderr, (user, refused.stderr)
        wrong = psql_without_password(db, user, password="not-the-password-at-all")
        assert wrong.returncode != 0 and "password authentication failed" in wrong.stderr, (user, wrong.stderr)
    # Every rule of pg_hba.conf asks for SCRAM; the server listens on loopback only and stores SCRAM verifiers.
    assert db.sql("SELECT DISTINCT auth_method FROM pg_hba_file_rules").split() == ["scram-sha-256"]
    assert db.sql("SHOW listen_addresses").strip() == "127.0.0.1"
    assert db.sql("SHOW password_encryption").strip() == "scram-sha-256"
    stored = db.sql("SELECT rolname || '|' || left(rolpassword, 14) FROM pg_authid WHERE rolname LIKE 'fraudlake%'")
    users = ("fraudlake", "fraudlake_console", "fraudlake_debezium", "fraudlake_operator", "fraudlake_reader")
    assert sorted(stored.split()) == sorted(f"{name}|SCRAM-SHA-256$" for name in users)  # approver: no password
    # The approval function's owner cannot log in at all, with or without a password.
    assert db.sql("SELECT rolcanlogin, rolpassword IS NULL FROM pg_authid WHERE rolname = 'fraudlake_approver'") == (
        "f|t\n"
    )
    approver = psql_without_password(db, "fraudlake_approver", password="x" * 16)  # no password matches: none set
    assert approver.returncode != 0 and "password authentication failed" in approver.stderr


def test_the_generated_passwords_are_private_files(db: RulesDb) -> None:
    folder = db.secrets.folder
    assert folder.stat().st_mode & 0o777 == 0o700
    for key in ("admin", "debezium", "console", "operator", "reader"):
        path = db.secrets.generated_file(key)
        assert path.stat().st_mode & 0o777 == 0o600, path
        assert len(path.read_text()) == 32 and not path.read_text().endswith("\n")
    assert [p.name for p in folder.iterdir() if p.name.endswith(".pgpass")] == []  # psql's files are gone


# ---- least privilege ------------------------------------------------------------------------------------------

REFUSED = [
    ("console", "CREATE TABLE mine (a int)", "permission denied for schema public"),
    ("console", "CREATE TEMP TABLE mine (a int)", "permission denied to create temporary tables"),
    ("console", "COPY (SELECT 1) TO PROGRAM 'id'", "pg_execute_server_program role to COPY"),
    ("console", "COPY fraud_rules TO '/tmp/fraud_rules.copy'", "pg_write_server_files role to COPY"),
    ("console", "SELECT pg_read_file('/etc/passwd')", "permission denied for function pg_read_file"),
    ("console", "ALTER ROLE fraudlake_console SUPERUSER", "must be superuser to alter superuser roles"),
    ("console", "ALTER ROLE fraudlake_reader PASSWORD 'guessable-password'", "permission denied"),
    ("console", "CREATE ROLE intruder", "permission denied to create role"),
    ("console", "DROP TABLE fraud_rules", "must be owner of table fraud_rules"),
    ("console", "TRUNCATE fraud_rules", "permission denied for table fraud_rules"),
    ("console", "SELECT pg_create_logical_replication_slot('console_slot', 'pgoutput')", "replication role"),
    # Four eyes is the database's (007): the console proposes and approves through approve_rule_proposal() only.
    ("console", INSERT.format(id=904), "permission denied for table fraud_rules"),
    ("console", "UPDATE fraud_rules SET limit_value = 2", "permission denied for table fraud_rules"),
    ("console", "DELETE FROM fraud_rules", "permission denied for table fraud_rules"),
    ("console", "SET ROLE fraudlake_approver", "permission denied to set role"),
    ("console", "ALTER FUNCTION approve_rule_proposal(bigint, text, text) SECURITY INVOKER", "must be owner"),
    # The operators' break-glass role writes fraud_rules and nothing else: no proposals, no approval, no DDL.
    ("operator", "SELECT count(*) FROM rule_proposals", "permission denied for table rule_proposals"),
    ("operator", "SELECT approve_rule_proposal(1, 'bob', '')", "permission denied for function approve_rule_proposal"),
    ("operator", "TRUNCATE fraud_rules", "permission denied for table fraud_rules"),
    ("operator", "CREATE TABLE mine (a int)", "permission denied for schema public"),
    ("operator", "CREATE TEMP TABLE mine (a int)", "permission denied to create temporary tables"),
    ("operator", "SET ROLE fraudlake_approver", "permission denied to set role"),
    ("operator", "ALTER TABLE fraud_rules DISABLE TRIGGER USER", "must be owner of table fraud_rules"),
    ("reader", INSERT.format(id=900), "permission denied for table fraud_rules"),
    ("reader", "UPDATE fraud_rules SET limit_value = 2", "permission denied for table fraud_rules"),
    ("reader", "DELETE FROM fraud_rules", "permission denied for table fraud_rules"),
    ("debezium", INSERT.format(id=901), "permission denied for table fraud_rules"),
    ("debezium", "UPDATE fraud_rules SET limit_value = 2", "permission denied for table fraud_rules"),
    ("debezium", "CREATE TABLE mine (a int)", "permission denied for schema public"),
]


@pytest.mark.parametrize(("role", "statement", "refusal"), REFUSED, ids=[f"{r}:{s[:32]}" for r, s, _ in REFUSED])
def test_each_application_role_is_refused_what_it_must_not_do(
    db: RulesDb, role: str, statement: str, refusal: str
) -> None:
    with pytest.raises(RulesDbError, match=refusal.replace("(", r"\(").replace(")", r"\)")):
        db.psql(["-c", statement], role=role)  # type: ignore[arg-type]


def test_each_application_role_can_do_its_job_and_has_no_powers(db: RulesDb) -> None:
    db.sql("DELETE FROM fraud_rules WHERE rule_id = 902")
    assert db.psql(["-c", INSERT.format(id=902)], role="operator").strip() == ""
    assert db.psql(["-c", "UPDATE fraud_rules SET limit_value = 3 WHERE rule_id = 902"], role="operator") == ""
    for role in ("console", "operator", "reader", "debezium"):
        count = db.psql(["-c", "SELECT count(*) FROM fraud_rules WHERE rule_id = 902"], role=role)
        assert count.strip() == "1", role
    assert db.psql(["-c", "DELETE FROM fraud_rules WHERE rule_id = 902"], role="operator") == ""
    attributes = db.sql(
        "SELECT rolname, rolsuper, rolcreaterole, rolcreatedb, rolbypassrls, rolreplication, rolcanlogin "
        "FROM pg_roles WHERE rolname IN ('fraudlake_approver', 'fraudlake_console', 'fraudlake_debezium', "
        "'fraudlake_operator', 'fraudlake_reader') ORDER BY rolname"
    )
    assert attributes.split() == [
        "fraudlake_approver|f|f|f|f|f|f",
        "fraudlake_console|f|f|f|f|f|t",
        "fraudlake_debezium|f|f|f|f|t|t",
        "fraudlake_operator|f|f|f|f|f|t",
        "fraudlake_reader|f|f|f|f|f|t",
    ]
    # Nobody is a member of the approver role: its rights are reachable through its one function only.
    members = db.sql("SELECT count(*) FROM pg_auth_members WHERE roleid = 'fraudlake_approver'::regrole")
    assert members.strip() == "0"
    # The database is closed to PUBLIC: only the three roles (and its owner) may connect, not any new role.
    db.sql("DROP ROLE IF EXISTS fraudlake_stranger; CREATE ROLE fraudlake_stranger LOGIN")
    try:
        allowed = db.sql(f"SELECT has_database_privilege('fraudlake_stranger', '{db.database}', 'CONNECT')")
        assert allowed.strip() == "f"
    finally:
        db.sql("DROP ROLE fraudlake_stranger")


# ---- secrets out of sight: ps, logs, the connector ---------------------------------------------------------------


def test_no_password_shows_in_ps_or_the_worker_log_while_debezium_runs_as_its_role(
    rulesdb: RulesDb,
    connect_worker: ConnectWorker,
    kafka_broker: KafkaBroker,
    base_settings: Settings,
    tmp_path: Path,
) -> None:
    db = own_database(rulesdb, "fraudlake_roles_cdc")
    passwords = {key: db.secrets.password(key) for key in ("admin", "debezium", "console", "operator", "reader")}
    settings = cdc_settings(base_settings, tmp_path, bootstrap=kafka_broker.bootstrap, rules_topic="roles-rules")
    with running_connector(connect_worker, settings, db, name="roles-rules") as config:
        # The connector runs, so Debezium logged in as its role with the password it resolved in memory.
        assert connect_worker.connector_state("roles-rules") == "RUNNING"
        stored = connect_worker.rest("GET", "/connectors/roles-rules/config")
        assert stored["database.user"] == "fraudlake_debezium"
        assert stored["database.password"].startswith("${directory:")
        sessions = db.sql("SELECT usename FROM pg_stat_replication").split()
        assert "fraudlake_debezium" in sessions
        # A psql of ours in flight at the same time: what `ps` shows of every process, arguments and environment.
        with ThreadPoolExecutor(1) as pool:
            sleeping = pool.submit(db.psql, ["-c", "SELECT pg_sleep(1.5)"], role="console")
            time.sleep(0.7)
            listing = subprocess.run(["ps", "axeww", "-o", "args"], capture_output=True, text=True, check=True).stdout
            sleeping.result(timeout=30)
        assert "pg_sleep" in listing and "ConnectStandalone" in listing  # both were seen
        logs = "".join(p.read_text(errors="replace") for p in connect_worker.data_dir.glob("*.log"))
        assert "database.user = fraudlake_debezium" in logs  # the log covers a connector start (its config)
        for key, password in passwords.items():
            assert password not in listing, f"the {key} password shows in ps"
            assert password not in logs, f"the {key} password is in the worker's log"
            assert password not in str(config), f"the {key} password is in the connector config"
        server_log = db.log_file.read_text(errors="replace")
        assert not any(password in server_log for password in passwords.values())


# ---- the console's bounded waits --------------------------------------------------------------------------------


def test_a_console_save_under_a_held_row_lock_fails_within_the_lock_timeout(db: RulesDb) -> None:
    db.sql(f"DELETE FROM fraud_rules WHERE rule_id = 903; {INSERT.format(id=903)}")
    # A direct save: the operator's (the console role may not write fraud_rules; its approvals wait the same way,
    # tests/test_console_bad_input.py).
    limits = SessionLimits(connect_timeout_s=5, lock_timeout_ms=800)
    writer = RulesDbWriter.for_database(db, limits, role="operator")
    rule = make_rule(903, windowMinutes=5, limit=4)
    holder = psycopg.connect(
        f"host=127.0.0.1 port={db.effective_port()} dbname={db.database} user=fraudlake_operator",
        password=db.secrets.password("operator"),
    )
    try:
        holder.execute("SELECT * FROM fraud_rules WHERE rule_id = 903 FOR UPDATE")  # held: the transaction stays open
        with ThreadPoolExecutor(1) as pool:
            started = time.monotonic()
            saving = pool.submit(writer.write, "update", rule_id=903, rule=rule, view=TableView())
            try:
                error = saving.exception(timeout=10)
            finally:
                holder.rollback()  # without the timeout the save waits for this: the test must not hang
            elapsed = time.monotonic() - started
        assert isinstance(error, WriteFailed), error
        assert "rule 903 is being changed in another session" in str(error) and "lock_timeout" in str(error)
        assert elapsed < 5, elapsed
    finally:
        holder.close()
    assert db.sql("SELECT limit_value FROM fraud_rules WHERE rule_id = 903").strip() == "1"  # nothing written
    assert writer.write("update", rule_id=903, rule=rule, view=TableView()).detail.startswith("upserted")


def test_the_console_writer_without_its_password_says_so(db: RulesDb, tmp_path: Path) -> None:
    import dataclasses

    elsewhere = dataclasses.replace(db, secrets_dir=tmp_path / "no-secrets")
    writer = RulesDbWriter.for_database(elsewhere)
    assert not writer.reachable()
    with pytest.raises(WriteFailed, match="FRAUDLAKE_RULESDB_CONSOLE_PASSWORD"):
        writer.write("delete", rule_id=1, rule=None, view=TableView())


# ---- an existing cluster, upgraded in place -------------------------------------------------------------------


@pytest.fixture
def scratch_folder() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="fraudlake-rulesdb-upgrade-"))
    folder.chmod(0o755)  # run as root, the server's user must reach it
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_a_cluster_created_with_trust_is_upgraded_in_place(scratch_folder: Path) -> None:
    db = RulesDb(data_dir=scratch_folder / "db", port=free_port())
    account, bins = db._account, db.binaries()
    # What `rulesdb start` made before roles: initdb --auth=trust, the settings appended, schema 1, a rule.
    account.prepare_folder(db.data_dir, ())
    account.run(
        [str(bins / "initdb"), "-D", str(db.pgdata), "-U", db.user, "--auth=trust", "--no-locale", "--no-instructions"],
        what="initdb",
        timeout=180,
    )
    with open(db.pgdata / "postgresql.conf", "a", encoding="utf-8") as conf:
        conf.write("listen_addresses = '127.0.0.1'\nunix_socket_directories = ''\nwal_level = logical\n")
    start = [str(bins / "pg_ctl"), "-D", str(db.pgdata), "-l", str(db.log_file), "-o", f"-p {db.port}", "-w", "start"]
    account.run(start, what="pg_ctl start", timeout=60)
    try:
        trusted = {k: v for k, v in db.client_env().items() if not k.startswith("PGPASS")}

        def old_psql(*args: str, database: str = "postgres") -> None:
            subprocess.run(
                [str(bins / "psql"), "-X", "-q", "-w", "-v", "ON_ERROR_STOP=1", "-d", database, *args],
                env=trusted,
                check=True,
                capture_output=True,
            )

        old_psql("-c", f"CREATE DATABASE {db.database}")
        schema = str(Path(__file__).resolve().parents[1] / "conf" / "rulesdb" / "001_fraud_rules.sql")
        old_psql("-f", schema, database=db.database)
        old_psql(
            "-c",
            "CREATE TABLE fraudlake_schema_version (version integer PRIMARY KEY, file text NOT NULL, "
            "applied_at timestamptz NOT NULL DEFAULT now()); "
            "INSERT INTO fraudlake_schema_version (version, file) VALUES (1, '001_fraud_rules.sql'); "
            + INSERT.format(id=7),
            database=db.database,
        )
        assert psql_without_password(db, db.user).returncode == 0  # anyone gets in: the problem

        db.start()  # the running cluster is upgraded in place

        assert db.schema_version() >= 2
        assert db.psql(["-c", "SELECT rule_id FROM fraud_rules"], role="reader").strip() == "7"  # data kept
        for user in (db.user, "fraudlake_console"):
            assert "no password supplied" in psql_without_password(db, user).stderr
        assert db.sql("SELECT DISTINCT auth_method FROM pg_hba_file_rules").split() == ["scram-sha-256"]
        assert db.sql("SHOW max_slot_wal_keep_size").strip() == "512MB"  # fraudlake.conf, included last
        assert db.secrets.generated_file("admin").stat().st_mode & 0o777 == 0o600
        db.stop()
        db.start()  # and it starts again, securely, from its files
        assert "no password supplied" in psql_without_password(db, db.user).stderr
    finally:
        db.stop()


# ---- the password files' rules (no server) -----------------------------------------------------------------------


def test_passwords_come_from_the_environment_then_the_named_file_then_the_generated_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    named = tmp_path / "mounted" / "console"
    named.parent.mkdir()
    named.write_text("from-a-mounted-secret\n")
    named.chmod(0o640)  # group-readable is a secret store's usual mode; world-readable is refused
    secrets = RoleSecrets(folder=tmp_path / "secrets", files={"console": named})
    with pytest.raises(SecretError, match="fraudlake rulesdb init"):
        secrets.password("reader")  # never generated unless asked (init, migrate)
    generated = secrets.password("reader", create=True)
    assert secrets.password("reader") == generated and len(generated) == 32
    assert secrets.provider_reference("reader") == "${directory:" + f"{tmp_path / 'secrets'}:reader.password" + "}"
    assert secrets.password("console") == "from-a-mounted-secret"
    with pytest.raises(SecretError, match="ends with a newline"):
        secrets.provider_reference("console")  # Connect would keep the newline as part of the password
    monkeypatch.setenv(env_name("console"), "from-the-environment")
    assert secrets.password("console") == "from-the-environment"
    assert secrets.provider_reference("console") == "${env:FRAUDLAKE_RULESDB_CONSOLE_PASSWORD}"
    named.chmod(0o644)
    monkeypatch.delenv(env_name("console"))
    with pytest.raises(SecretError, match="readable by other users") as refused:
        secrets.password("console")
    assert "from-a-mounted-secret" not in str(refused.value)
    secrets.generated_file("reader").chmod(0o640)
    with pytest.raises(SecretError, match="chmod 600"):
        secrets.password("reader")
    monkeypatch.setenv(env_name("admin"), "short")
    with pytest.raises(SecretError, match="at least 12 characters"):
        secrets.password("admin")


def test_the_scram_verifier_is_what_postgresql_checks(db: RulesDb) -> None:
    # A verifier of ours, set for a scratch role, lets exactly its password in.
    password = "a-password-of-ours-" + os.urandom(4).hex()
    verifier = scram_sha256_verifier(password)
    assert verifier.startswith("SCRAM-SHA-256$4096:") and password not in verifier
    db.sql("DROP ROLE IF EXISTS fraudlake_scram_probe")
    db.psql(["-f", "-"], stdin=f"CREATE ROLE fraudlake_scram_probe LOGIN PASSWORD '{verifier}';\n")
    db.sql(f'GRANT CONNECT ON DATABASE "{db.database}" TO fraudlake_scram_probe')
    try:
        ok = psql_without_password(db, "fraudlake_scram_probe", password=password)
        assert ok.returncode == 0, ok.stderr
        assert psql_without_password(db, "fraudlake_scram_probe", password=password + "x").returncode != 0
    finally:
        db.sql(f'REVOKE ALL ON DATABASE "{db.database}" FROM fraudlake_scram_probe; DROP ROLE fraudlake_scram_probe')


def test_migrate_sets_the_roles_passwords_from_the_environment(db: RulesDb, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rotation: a new FRAUDLAKE_RULESDB_READER_PASSWORD and `rulesdb migrate`; the old one no longer works."""
    old = db.secrets.password("reader")
    monkeypatch.setenv(env_name("reader"), "rotated-reader-password")
    try:
        db.migrate()
        assert psql_without_password(db, "fraudlake_reader", password="rotated-reader-password").returncode == 0
        assert psql_without_password(db, "fraudlake_reader", password=old).returncode != 0
    finally:
        monkeypatch.delenv(env_name("reader"))
        db.migrate()  # back to the file's
    assert psql_without_password(db, "fraudlake_reader", password=old).returncode == 0
