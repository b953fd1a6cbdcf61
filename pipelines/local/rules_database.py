"""The operational rules database: a private PostgreSQL cluster under the work dir, with logical decoding on.

``fraudlake rulesdb init|start|migrate|stop|status|psql|seed|drop-slot`` and the tests' session fixture use it.
``start`` (``init`` is the same) runs ``initdb`` once, starts the server with ``pg_ctl`` on the configured port
(or a free one, kept in the folder), secures it, creates the database and applies the schema files
``conf/rulesdb/NNN_*.sql`` not yet recorded in ``fraudlake_schema_version``, each in one transaction. No
system service and no root: when fraudlake itself runs as root (PostgreSQL refuses to), the server runs as
``rulesdb.run_as`` (the ``postgres`` user of the Debian package), and the folder is given to that user.

Nobody is trusted. The server listens on 127.0.0.1 only, without a Unix socket, and ``pg_hba.conf`` asks every
connection for a SCRAM-SHA-256 password. The bootstrap superuser (``rulesdb.user``) is for these administration
commands only; the clients log in as ``fraudlake_debezium``, ``fraudlake_console``, ``fraudlake_operator`` or
``fraudlake_reader`` (conf/rulesdb/002_roles.sql, 007_operator_role.sql). Passwords: pipelines/local/rulesdb_secrets.py.
A cluster created before the roles (``trust``) is upgraded in place by the next ``start``: its superuser gets a
password, then pg_hba.conf changes.

Example::

    db = RulesDb.from_settings(settings)
    db.start()                                   # idempotent
    db.sql("UPDATE fraud_rules SET limit_value = 15 WHERE rule_id = 3")    # as the superuser
    db.psql(["-c", "SELECT count(*) FROM fraud_rules"], role="reader")    # as fraudlake_reader
    db.psql(["-c", "DELETE FROM fraud_rules WHERE rule_id = 3"], role="operator")  # a direct edit
    db.stop()
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

from pipelines.base.rulesdb_settings import RoleKey
from pipelines.base.runtime_env import SetupMissingError
from pipelines.base.settings import REPO_ROOT, Settings
from pipelines.local.ports import free_port, port_open
from pipelines.local.processes import wait_until
from pipelines.local.rulesdb_secrets import APP_ROLES, RoleSecrets, scram_sha256_verifier
from pipelines.local.rulesdb_server import (
    PG_HBA,
    SERVER_CONF_FILE,
    ServerAccount,
    server_conf,
    with_include,
)
from pipelines.local.rulesdb_server import (
    RulesDbError as RulesDbError,  # re-exported: where callers have always found it
)
from rules_cdc.rule_model import Rule
from rules_cdc.rule_rows import DATABASE_COLUMNS, database_row

SCHEMA_DIR = REPO_ROOT / "conf" / "rulesdb"
RULES_TABLE = "fraud_rules"
_SCHEMA_FILE = re.compile(r"^(\d{3})_[a-z0-9_]+\.sql$")
_SLOT_NAME = re.compile(r"^[a-z0-9_]{1,63}$")  # what PostgreSQL accepts as a replication slot's name
_IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]*$")


@dataclass(frozen=True)
class RulesDb:
    """One private PostgreSQL cluster: its folder, port, database, superuser, binaries and role secrets."""

    data_dir: Path
    port: int = 15432  # 0: a free port, picked at the first start and kept in data_dir/port
    database: str = "fraudlake"
    user: str = "fraudlake"  # the bootstrap superuser: administration commands only
    run_as: str = "postgres"
    bin_dir: Path | None = None
    secrets_dir: Path | None = None  # default: data_dir/secrets
    password_files: Mapping[str, Path] = field(default_factory=dict, hash=False)
    max_slot_wal_keep_size: str = "512MB"

    @classmethod
    def from_settings(cls, settings: Settings) -> RulesDb:
        conf = settings.rulesdb
        return cls(
            data_dir=Path(conf.data_dir or Path(settings.work_dir) / "rulesdb").resolve(),
            port=conf.port,
            database=conf.database,
            user=conf.user,
            run_as=conf.run_as,
            bin_dir=Path(conf.bin_dir) if conf.bin_dir else None,
            secrets_dir=Path(conf.secrets_dir).resolve() if conf.secrets_dir else None,
            password_files={key: Path(path).resolve() for key, path in conf.password_files.items()},
            max_slot_wal_keep_size=conf.max_slot_wal_keep_size,
        )

    @property
    def secrets(self) -> RoleSecrets:
        return RoleSecrets(folder=self.secrets_dir or self.data_dir / "secrets", files=self.password_files)

    def role_name(self, role: RoleKey) -> str:
        """The PostgreSQL role of ``role``: ``rulesdb.user`` for ``admin``, else ``fraudlake_<role>``."""
        return self.user if role == "admin" else APP_ROLES[role]

    # ---- where things are ------------------------------------------------------------------------------

    @property
    def pgdata(self) -> Path:
        return self.data_dir / "cluster"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "server.log"

    @property
    def _account(self) -> ServerAccount:
        return ServerAccount(run_as=self.run_as, log_file=self.log_file)

    @property
    def _port_file(self) -> Path:
        return self.data_dir / "port"

    def effective_port(self) -> int:
        """The configured port, or the free one this cluster picked at its first start."""
        if self.port:
            return self.port
        try:
            return int(self._port_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return 0

    def binaries(self) -> Path:
        """The PostgreSQL server binaries: ``bin_dir``, else the newest /usr/lib/postgresql/*/bin, else PATH."""
        if self.bin_dir is not None:
            candidates = [self.bin_dir]
        else:
            found = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: _major(p.parent.name))
            on_path = shutil.which("initdb")
            candidates = [*reversed(found), *([Path(on_path).resolve().parent] if on_path else [])]
        for folder in candidates:
            if all((folder / tool).exists() for tool in ("initdb", "pg_ctl", "postgres", "psql")):
                return folder
        raise SetupMissingError(
            "PostgreSQL server binaries (initdb, pg_ctl, postgres, psql) not found: run `make setup` "
            "(installs the Debian package postgresql when run as root) or set rulesdb.bin_dir in conf"
        )

    def client_env(self, role: RoleKey = "admin", passfile: Path | None = None) -> dict[str, str]:
        """Environment for libpq clients (psql) to reach this database over TCP as ``role``; the password only
        through ``passfile`` (a PGPASSWORD of the caller's is dropped: it would win over the file)."""
        env = {k: v for k, v in os.environ.items() if k not in ("PGPASSWORD", "PGPASSFILE", "PGSERVICE")}
        return env | {
            "PGHOST": "127.0.0.1",
            "PGPORT": str(self.effective_port()),
            "PGUSER": self.role_name(role),
            "PGDATABASE": self.database,
            "PGCONNECT_TIMEOUT": "5",
            **({"PGPASSFILE": str(passfile)} if passfile else {}),
        }

    def dsn(self, role: RoleKey = "admin") -> str:
        """The connection's address for messages: no password in it."""
        return f"postgresql://{self.role_name(role)}@127.0.0.1:{self.effective_port()}/{self.database}"

    # ---- lifecycle -------------------------------------------------------------------------------------

    def running(self) -> bool:
        return (self.pgdata / "postmaster.pid").exists() and self.answers()

    def answers(self) -> bool:
        port = self.effective_port()
        if not port or not port_open(port):
            return False
        result = subprocess.run(
            [str(self.binaries() / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(port), "-t", "2"],
            capture_output=True,
            timeout=10,
        )
        return result.returncode == 0

    def start(self, wait_s: float = 60.0) -> None:
        """Create the cluster once, start it, secure it (SCRAM for all), create the database and migrate
        (schema files, then the roles' passwords). Idempotent; upgrades a cluster created with ``trust``."""
        if not self.running():
            self._launch(wait_s)
        self.migrate()

    def _launch(self, wait_s: float) -> None:
        bins = self.binaries()
        self._account.prepare_folder(self.data_dir, (self.log_file, self._port_file))
        if not (self.pgdata / "PG_VERSION").exists():
            self._initdb(bins)
        self._write_server_conf()
        port = self._choose_port()
        if port_open(port):
            raise RulesDbError(f"port {port} is taken by another process; set rulesdb.port in conf (0: a free one)")
        self._account.run(
            [
                str(bins / "pg_ctl"),
                "-D",
                str(self.pgdata),
                "-l",
                str(self.log_file),
                "-o",
                f"-p {port}",
                "-w",
                "-t",
                str(int(wait_s)),
                "start",
            ],
            what="starting PostgreSQL",
            timeout=wait_s + 10,
        )
        if wait_until(self.answers, wait_s=wait_s, every_s=0.2) != "ready":
            raise RulesDbError(f"PostgreSQL did not answer on port {port} in {wait_s:.0f}s; see {self.log_file}")

    def stop(self, wait_s: float = 30.0) -> bool:
        """Stop the server (fast shutdown: open sessions are ended); return whether one was running."""
        if not (self.pgdata / "postmaster.pid").exists():
            return False
        self._account.run(
            [
                str(self.binaries() / "pg_ctl"),
                "-D",
                str(self.pgdata),
                "-m",
                "fast",
                "-w",
                "-t",
                f"{wait_s:.0f}",
                "stop",
            ],
            what="stopping PostgreSQL",
            timeout=wait_s + 10,
            ok_codes=(0, 1),  # 1: not running (a stale pid file)
        )
        return True

    def status(self) -> str:
        if not (self.pgdata / "PG_VERSION").exists():
            return "not created"
        if not (self.pgdata / "postmaster.pid").exists():
            return f"stopped (cluster in {self.pgdata})"
        state = "answering" if self.answers() else "not answering"
        return f"running ({self.dsn()}, {state}; cluster in {self.pgdata}, log {self.log_file})"

    # ---- SQL -------------------------------------------------------------------------------------------

    def psql(
        self,
        args: Sequence[str],
        *,
        database: str | None = None,
        check: bool = True,
        role: RoleKey = "admin",
        stdin: str | None = None,
    ) -> str:
        """Run psql as ``role`` with ``args`` (unaligned, tuples only, stop on the first error); return its output.
        ``stdin``: SQL read from standard input (``-f -``), for statements that must not show in ``ps``."""
        command = [str(self.binaries() / "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", *args]
        with self._passfile(role) as passfile:
            env = self.client_env(role, passfile) | ({"PGDATABASE": database} if database else {})
            result = subprocess.run(command, env=env, input=stdin, capture_output=True, text=True, timeout=120)
        if check and result.returncode != 0:
            raise RulesDbError(f"psql {' '.join(args)[:200]} failed: {result.stderr.strip() or result.stdout.strip()}")
        return result.stdout

    def sql(self, statement: str) -> str:
        """Run SQL as the superuser (one or more statements, one transaction per statement); psql's output."""
        return self.psql(["-c", statement])

    def interactive(self, args: Sequence[str], role: RoleKey = "console") -> int:
        """``psql`` as ``role`` with the user's arguments and the terminal: what ``fraudlake rulesdb psql`` runs."""
        with self._passfile(role) as passfile:
            return subprocess.run(
                [str(self.binaries() / "psql"), *args], env=self.client_env(role, passfile)
            ).returncode

    def migrate(self) -> list[str]:
        """On the running cluster: our server settings (reloaded if changed), SCRAM for everyone (``_secure``), the
        database, then the schema files not recorded yet, in order, each with its record in one transaction, and
        last the application roles' passwords. Returns the files applied."""
        if self._write_server_conf():
            self._reload()
        self._secure()
        self._create_database()
        self.sql(
            "CREATE TABLE IF NOT EXISTS fraudlake_schema_version ("
            "version integer PRIMARY KEY, file text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        done = {int(v) for v in self.sql("SELECT version FROM fraudlake_schema_version").split()}
        applied = []
        for version, path in schema_files():
            if version in done:
                continue
            record = f"INSERT INTO fraudlake_schema_version (version, file) VALUES ({version}, '{path.name}')"
            self.psql(["--single-transaction", "-f", str(path), "-c", record])
            applied.append(path.name)
        self._set_passwords({APP_ROLES[key]: self.secrets.password(key, create=True) for key in APP_ROLES})
        return applied

    def schema_version(self) -> int:
        return int(self.sql("SELECT coalesce(max(version), 0) FROM fraudlake_schema_version").strip() or 0)

    def upsert_rules(self, rules: Iterable[Rule]) -> int:
        """Insert or update rules in ``fraud_rules`` (one statement, so one transaction); return their count."""
        rows = [database_row(rule) for rule in rules]
        if not rows:
            return 0
        document = json.dumps(rows)
        if "$rules$" in document:
            raise RulesDbError("a rule contains the text '$rules$', which this loader cannot quote")
        columns = ", ".join(DATABASE_COLUMNS)
        updates = ", ".join(f"{c} = excluded.{c}" for c in DATABASE_COLUMNS if c != "rule_id")
        self.sql(
            f"INSERT INTO {RULES_TABLE} ({columns}) SELECT {columns} "
            f"FROM jsonb_populate_recordset(NULL::{RULES_TABLE}, $rules${document}$rules$::jsonb) "
            f"ON CONFLICT (rule_id) DO UPDATE SET {updates}"
        )
        return len(rows)

    def replication_slots(self) -> dict[str, str]:
        """Replication slots of this cluster and their confirmed LSN (Debezium's progress)."""
        out = self.sql("SELECT slot_name, coalesce(confirmed_flush_lsn::text, '') FROM pg_replication_slots")
        return dict(line.split("|", 1) for line in out.splitlines() if "|" in line)

    def drop_slot(self, name: str, wait_s: float = 30.0) -> bool:
        """Drop a replication slot once its consumer has let go of it; return whether it existed."""
        if not _SLOT_NAME.match(name):
            raise RulesDbError(f"{name!r} is not a replication slot name (lower-case letters, digits, _; 1-63)")
        deadline = time.monotonic() + wait_s
        while True:
            active = self.sql(f"SELECT active FROM pg_replication_slots WHERE slot_name = '{name}'").strip()
            if not active:
                return False
            if active == "f":
                self.sql(f"SELECT pg_drop_replication_slot('{name}')")
                return True
            if time.monotonic() > deadline:
                raise RulesDbError(
                    f"replication slot {name} still in use after {wait_s:.0f}s: stop its connector first "
                    "(fraudlake connect stop)"
                )
            time.sleep(0.3)

    # ---- access ----------------------------------------------------------------------------------------

    def _secure(self) -> None:
        """SCRAM for every connection. On a cluster whose pg_hba.conf is not ours yet (just initdb'd, or created
        with ``trust`` before the roles existed) the superuser is given its password first, while the old rules
        still let it in, and the ``postgres`` database is closed to PUBLIC; then pg_hba.conf is replaced."""
        hba = self.pgdata / "pg_hba.conf"
        if hba.exists() and hba.read_text(encoding="utf-8") == PG_HBA:
            return
        password = self.secrets.password("admin", create=True)
        self._set_passwords({self.user: password}, extra="REVOKE ALL ON DATABASE postgres FROM PUBLIC;")
        self._account.write(hba, PG_HBA)
        self._reload()

    def _set_passwords(self, passwords: Mapping[str, str], *, extra: str = "") -> None:
        """``ALTER ROLE ... PASSWORD '<SCRAM verifier>'`` for each role, read by psql from stdin: the password never
        reaches the server, and the verifier shows neither in ``ps`` nor in a log."""
        statements = []
        for role, password in passwords.items():
            if not _IDENTIFIER.match(role):
                raise RulesDbError(f"{role!r} is not a role name fraudlake uses")
            statements.append(f"ALTER ROLE \"{role}\" PASSWORD '{scram_sha256_verifier(password)}';")
        self.psql(["-f", "-"], database="postgres", stdin="\n".join([*statements, extra]) + "\n")

    def _passfile(self, role: RoleKey) -> AbstractContextManager[Path]:
        return self.secrets.pgpass(self.role_name(role), self.secrets.password(role))

    def _reload(self) -> None:
        self._account.run(
            [str(self.binaries() / "pg_ctl"), "-D", str(self.pgdata), "reload"], what="reloading PostgreSQL", timeout=30
        )

    # ---- internals -------------------------------------------------------------------------------------

    def _initdb(self, bins: Path) -> None:
        """initdb with SCRAM from the first start: the superuser's password through a 0600 file of the server
        user's that lives only while initdb runs (never on its command line)."""
        password = self.secrets.password("admin", create=True)
        descriptor, pwfile = tempfile.mkstemp(dir=self.data_dir, prefix=".initdb-", suffix=".pw")
        try:
            with os.fdopen(descriptor, "w", encoding="utf-8") as out:
                out.write(password + "\n")
            self._account.give(Path(pwfile))
            self._account.run(
                [
                    str(bins / "initdb"),
                    "-D",
                    str(self.pgdata),
                    "-U",
                    self.user,
                    "--auth=scram-sha-256",
                    f"--pwfile={pwfile}",
                    "--encoding=UTF8",
                    "--no-locale",
                    "--no-instructions",
                ],
                what="initdb",
                timeout=180,
            )
        finally:
            Path(pwfile).unlink(missing_ok=True)

    def _write_server_conf(self) -> bool:
        """``fraudlake.conf`` with our settings, included at the end of postgresql.conf (so it wins over the block
        older versions appended there); whether anything changed."""
        changed = self._account.write(self.pgdata / SERVER_CONF_FILE, server_conf(self.max_slot_wal_keep_size))
        main = self.pgdata / "postgresql.conf"
        included = with_include(main.read_text(encoding="utf-8"))
        if included is not None:
            self._account.write(main, included)
            changed = True
        return changed

    def _choose_port(self) -> int:
        if self.port:
            return self.port
        port = self.effective_port() or free_port()
        self._port_file.write_text(f"{port}\n")
        return port

    def _create_database(self) -> None:
        exists = self.psql(["-c", f"SELECT 1 FROM pg_database WHERE datname = '{self.database}'"], database="postgres")
        if not exists.strip():
            self.psql(["-c", f'CREATE DATABASE "{self.database}"'], database="postgres")


def schema_files(folder: Path = SCHEMA_DIR) -> list[tuple[int, Path]]:
    """``NNN_name.sql`` files, by version; two files with one version are an error."""
    files: dict[int, Path] = {}
    for path in sorted(folder.glob("*.sql")):
        match = _SCHEMA_FILE.match(path.name)
        if not match:
            continue
        version = int(match.group(1))
        if version in files:
            raise RulesDbError(f"two schema files with version {version}: {files[version].name}, {path.name}")
        files[version] = path
    return sorted(files.items())


def _major(name: str) -> int:
    return int(name) if name.isdigit() else -1
