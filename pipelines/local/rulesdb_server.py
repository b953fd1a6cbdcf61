"""The rules database's server side: the OS user that runs PostgreSQL and the files fraudlake writes for it.

PostgreSQL refuses to run as root. When fraudlake runs as root (CI, these machines) the server runs as
``rulesdb.run_as`` and every file it reads is that user's; otherwise everything is the caller's. fraudlake owns
two server files, rewritten at every start (so an existing cluster is upgraded in place):

- ``pg_hba.conf`` (:data:`PG_HBA`): a SCRAM-SHA-256 password for every connection, TCP or local;
- ``fraudlake.conf`` (:func:`server_conf`), included at the end of postgresql.conf: loopback only, no Unix
  socket, logical decoding, SCRAM-stored passwords and a bound on the WAL a replication slot may hold.

Example::

    account = ServerAccount(run_as="postgres", log_file=folder / "server.log")
    account.run([initdb, "-D", str(pgdata), ...], what="initdb", timeout=180)
    account.write(pgdata / "pg_hba.conf", PG_HBA)        # True: changed (then reload)
"""

from __future__ import annotations

import os
import pwd
import subprocess
from dataclasses import dataclass
from pathlib import Path

SERVER_CONF_FILE = "fraudlake.conf"
INCLUDE_LINE = f"include '{SERVER_CONF_FILE}'"
PG_HBA = """\
# fraudlake rulesdb (written by pipelines/local/rules_database.py at every start; edits are replaced):
# every connection, TCP or local, authenticates with a SCRAM-SHA-256 password. No physical replication
# (Debezium's logical replication connection names its database, so the `all` lines cover it).
# TYPE  DATABASE  USER  ADDRESS       METHOD
local   all       all                 scram-sha-256
host    all       all   127.0.0.1/32  scram-sha-256
"""


class RulesDbError(RuntimeError):
    """The rules database could not be started, reached or changed; the message says why."""


def server_conf(max_slot_wal_keep_size: str) -> str:
    """The server settings fraudlake owns, in ``fraudlake.conf`` (postgresql.conf includes it last, so it wins)."""
    return f"""\
# fraudlake rulesdb (written by pipelines/local/rules_database.py at every start; edits are replaced):
# a private cluster for Debezium (logical decoding), reachable on 127.0.0.1 only, passwords stored as SCRAM.
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
password_encryption = 'scram-sha-256'
wal_level = logical
max_wal_senders = 10
max_replication_slots = 10
# A slot whose connector is gone holds WAL until the disk is full; past this much the server invalidates it
# instead (Debezium then fails with a clear error; `fraudlake rulesdb drop-slot` and a fresh snapshot recover).
max_slot_wal_keep_size = '{max_slot_wal_keep_size}'
shared_buffers = 32MB
"""


def with_include(postgresql_conf: str) -> str | None:
    """postgresql.conf with :data:`INCLUDE_LINE` appended, or None when it is there already.

    >>> with_include("port = 5432\\n")
    "port = 5432\\n\\ninclude 'fraudlake.conf'\\n"
    """
    lines = postgresql_conf.splitlines()
    return None if INCLUDE_LINE in lines else "\n".join([*lines, "", INCLUDE_LINE]) + "\n"


@dataclass(frozen=True)
class ServerAccount:
    """The OS user PostgreSQL runs as: ``run_as`` when we are root, else ourselves."""

    run_as: str
    log_file: Path  # named in error messages

    def user(self) -> pwd.struct_passwd | None:
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

    def run(self, command: list[str], *, what: str, timeout: float, ok_codes: tuple[int, ...] = (0,)) -> str:
        user = self.user()
        full = command if user is None else ["runuser", "-u", user.pw_name, "--", *command]
        result = subprocess.run(full, capture_output=True, text=True, timeout=timeout, cwd="/")
        if result.returncode not in ok_codes:
            tail = (result.stderr or result.stdout).strip()[-2000:]
            raise RulesDbError(f"{what} failed ({result.returncode}): {tail}; see {self.log_file}")
        return result.stdout

    def give(self, path: Path) -> None:
        """Make ``path`` the server user's (nothing to do when we are that user)."""
        user = self.user()
        if user is not None:
            os.chown(path, user.pw_uid, user.pw_gid)

    def write(self, path: Path, text: str) -> bool:
        """Write a file the server reads (mode 0600, the server user's); whether its content changed."""
        if path.exists() and path.read_text(encoding="utf-8") == text:
            return False
        path.write_text(text, encoding="utf-8")
        path.chmod(0o600)
        self.give(path)
        return True

    def prepare_folder(self, folder: Path, children: tuple[Path, ...]) -> None:
        """Create ``folder`` and give it (and its ``children`` that exist) to the server user, who must reach it."""
        folder.mkdir(parents=True, exist_ok=True)
        user = self.user()
        if user is None:
            return
        os.chown(folder, user.pw_uid, user.pw_gid)
        for child in children:
            if child.exists():
                os.chown(child, user.pw_uid, user.pw_gid)
        reach = subprocess.run(["runuser", "-u", user.pw_name, "--", "test", "-w", str(folder)], cwd="/")
        if reach.returncode != 0:
            raise RulesDbError(
                f"the user {user.pw_name!r} that runs PostgreSQL cannot write {folder} (a parent folder is "
                "not reachable by other users): set rulesdb.data_dir to a folder it can reach"
            )
