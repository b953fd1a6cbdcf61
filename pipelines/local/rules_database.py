"""The operational rules database: a private PostgreSQL cluster under the work dir, with logical decoding on.

``fraudlake rulesdb start|stop|status|psql|seed`` and the tests' session fixture use it. ``start`` runs ``initdb``
once (trust authentication, listening on 127.0.0.1 only, no Unix socket), starts the server with ``pg_ctl`` on
the configured port (or a free one, kept in the folder), creates the database and applies the schema files
``conf/rulesdb/NNN_*.sql`` not yet recorded in ``fraudlake_schema_version``, each in one transaction. No
system service and no root: when fraudlake itself runs as root (PostgreSQL refuses to), the server runs as
``rulesdb.run_as`` (the ``postgres`` user of the Debian package), and the folder is given to that user.

Example::

    db = RulesDb.from_settings(settings)
    db.start()                                   # idempotent
    db.sql("UPDATE fraud_rules SET limit_value = 15 WHERE rule_id = 3")
    db.stop()
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pipelines.base.runtime_env import SetupMissingError
from pipelines.base.settings import REPO_ROOT, Settings
from pipelines.local.ports import free_port, port_open
from pipelines.local.processes import wait_until
from rules_cdc.rule_model import Rule
from rules_cdc.rule_rows import DATABASE_COLUMNS, database_row

SCHEMA_DIR = REPO_ROOT / "conf" / "rulesdb"
RULES_TABLE = "fraud_rules"
_SCHEMA_FILE = re.compile(r"^(\d{3})_[a-z0-9_]+\.sql$")
_SERVER_CONF = """
# fraudlake rulesdb: a private cluster for Debezium (logical decoding), reachable on 127.0.0.1 only.
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
wal_level = logical
max_wal_senders = 10
max_replication_slots = 10
shared_buffers = 32MB
"""


class RulesDbError(RuntimeError):
    """The rules database could not be started, reached or changed; the message says why."""


@dataclass(frozen=True)
class RulesDb:
    """One private PostgreSQL cluster: its folder, port, database, superuser and binaries."""

    data_dir: Path
    port: int = 15432  # 0: a free port, picked at the first start and kept in data_dir/port
    database: str = "fraudlake"
    user: str = "fraudlake"
    run_as: str = "postgres"
    bin_dir: Path | None = None

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
        )

    # ---- where things are ------------------------------------------------------------------------------

    @property
    def pgdata(self) -> Path:
        return self.data_dir / "cluster"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "server.log"

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

    def client_env(self) -> dict[str, str]:
        """Environment for libpq clients (psql) to reach this database over TCP."""
        return {
            **os.environ,
            "PGHOST": "127.0.0.1",
            "PGPORT": str(self.effective_port()),
            "PGUSER": self.user,
            "PGDATABASE": self.database,
            "PGCONNECT_TIMEOUT": "5",
        }

    def dsn(self) -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.effective_port()}/{self.database}"

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
        """Create the cluster once, start it, create the database and apply new schema files (idempotent)."""
        if self.running():
            self._create_database()
            self.migrate()
            return
        bins = self.binaries()
        self._prepare_folder()
        if not (self.pgdata / "PG_VERSION").exists():
            self._initdb(bins)
        port = self._choose_port()
        if port_open(port):
            raise RulesDbError(f"port {port} is taken by another process; set rulesdb.port in conf (0: a free one)")
        self._as_server_user(
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
        self._create_database()
        self.migrate()

    def stop(self, wait_s: float = 30.0) -> bool:
        """Stop the server (fast shutdown: open sessions are ended); return whether one was running."""
        if not (self.pgdata / "postmaster.pid").exists():
            return False
        self._as_server_user(
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

    def psql(self, args: Sequence[str], *, database: str | None = None, check: bool = True) -> str:
        """Run psql with ``args`` (unaligned, tuples only, stop on the first error); return its output."""
        env = self.client_env() | ({"PGDATABASE": database} if database else {})
        command = [str(self.binaries() / "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", *args]
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
        if check and result.returncode != 0:
            raise RulesDbError(f"psql {' '.join(args)[:200]} failed: {result.stderr.strip() or result.stdout.strip()}")
        return result.stdout

    def sql(self, statement: str) -> str:
        """Run SQL (one or more statements, one transaction per statement) and return psql's unaligned output."""
        return self.psql(["-c", statement])

    def interactive(self, args: Sequence[str]) -> int:
        """``psql`` with the user's arguments and the terminal: what ``fraudlake rulesdb psql`` runs."""
        return subprocess.run([str(self.binaries() / "psql"), *args], env=self.client_env()).returncode

    def migrate(self) -> list[str]:
        """Apply the schema files not recorded yet, in order, each with its record in one transaction."""
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
        deadline = time.monotonic() + wait_s
        while True:
            active = self.sql(f"SELECT active FROM pg_replication_slots WHERE slot_name = '{name}'").strip()
            if not active:
                return False
            if active == "f":
                self.sql(f"SELECT pg_drop_replication_slot('{name}')")
                return True
            if time.monotonic() > deadline:
                raise RulesDbError(f"replication slot {name} still in use after {wait_s:.0f}s")
            time.sleep(0.3)

    # ---- internals -------------------------------------------------------------------------------------

    def _server_user(self) -> pwd.struct_passwd | None:
        """The OS user to run the server as, or None to run it as ourselves (we are not root)."""
        if os.geteuid() != 0:
            return None
        try:
            return pwd.getpwnam(self.run_as)
        except KeyError:
            raise RulesDbError(
                f"running as root, and PostgreSQL refuses root: create the user {self.run_as!r} "
                "(the Debian package postgresql does) or set rulesdb.run_as"
            ) from None

    def _as_server_user(
        self, command: list[str], *, what: str, timeout: float, ok_codes: tuple[int, ...] = (0,)
    ) -> str:
        user = self._server_user()
        full = command if user is None else ["runuser", "-u", user.pw_name, "--", *command]
        result = subprocess.run(full, capture_output=True, text=True, timeout=timeout, cwd="/")
        if result.returncode not in ok_codes:
            tail = (result.stderr or result.stdout).strip()[-2000:]
            raise RulesDbError(f"{what} failed ({result.returncode}): {tail}; see {self.log_file}")
        return result.stdout

    def _prepare_folder(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        user = self._server_user()
        if user is None:
            return
        os.chown(self.data_dir, user.pw_uid, user.pw_gid)
        for child in (self.log_file, self._port_file):
            if child.exists():
                os.chown(child, user.pw_uid, user.pw_gid)
        reach = subprocess.run(["runuser", "-u", user.pw_name, "--", "test", "-w", str(self.data_dir)], cwd="/")
        if reach.returncode != 0:
            raise RulesDbError(
                f"the user {user.pw_name!r} that runs PostgreSQL cannot write {self.data_dir} (a parent folder is "
                "not reachable by other users): set rulesdb.data_dir to a folder it can reach"
            )

    def _initdb(self, bins: Path) -> None:
        self._as_server_user(
            [
                str(bins / "initdb"),
                "-D",
                str(self.pgdata),
                "-U",
                self.user,
                "--auth=trust",
                "--encoding=UTF8",
                "--no-locale",
                "--no-instructions",
            ],
            what="initdb",
            timeout=180,
        )
        with open(self.pgdata / "postgresql.conf", "a", encoding="utf-8") as conf:
            conf.write(_SERVER_CONF)

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
