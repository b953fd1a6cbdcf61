"""The rules database's passwords: where each role's comes from, how it is kept, and how it reaches a client.

Each login role has a *key* (``admin`` for the bootstrap superuser, ``debezium``, ``console``, ``operator``,
``reader``). Its password is, first found wins:

1. the environment variable ``FRAUDLAKE_RULESDB_<KEY>_PASSWORD`` (a secret store's usual way in);
2. the file ``rulesdb.password_files.<key>`` names in conf (a mounted secret; never generated, never world-readable);
3. ``<secrets_dir>/<key>.password``: generated for the local cluster by ``fraudlake rulesdb init`` when absent
   (32 random URL-safe characters, no newline, mode 0600 in a 0700 folder).

A password never goes on a command line or into a log: psql gets a ``PGPASSFILE`` written for the one call
(:meth:`RoleSecrets.pgpass`); the server gets a SCRAM verifier, never the password (:func:`scram_sha256_verifier`);
Kafka Connect gets a config-provider *reference* it resolves in memory (:meth:`RoleSecrets.provider_reference`).

Example::

    secrets = RoleSecrets(folder=Path(".work/rulesdb/secrets"))
    secrets.password("console", create=True)          # generated once, then read back
    secrets.provider_reference("debezium")            # '${directory:/abs/.work/rulesdb/secrets:debezium.password}'
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets as random_source
import stat
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from pipelines.base.rulesdb_settings import RoleKey

APP_ROLES: dict[RoleKey, str] = {
    "debezium": "fraudlake_debezium",
    "console": "fraudlake_console",
    "operator": "fraudlake_operator",
    "reader": "fraudlake_reader",
}
"""The application login roles (conf/rulesdb/002_roles.sql; ``operator``: 007_operator_role.sql); ``admin`` is
``rulesdb.user``. The NOLOGIN ``fraudlake_approver`` (007) has no password and no key."""

ROLE_KEYS: tuple[RoleKey, ...] = ("admin", "debezium", "console", "operator", "reader")
MIN_LENGTH = 12
SCRAM_ITERATIONS = 4096  # PostgreSQL's default scram_iterations


class SecretError(RuntimeError):
    """A role's password is missing, unreadable, exposed (file mode) or unusable; the message says which and how
    to fix it, never the password."""


def env_name(key: RoleKey) -> str:
    """``FRAUDLAKE_RULESDB_CONSOLE_PASSWORD`` for ``console``."""
    return f"FRAUDLAKE_RULESDB_{key.upper()}_PASSWORD"


@dataclass(frozen=True)
class RoleSecrets:
    """The passwords of one cluster's roles: the generated ones in ``folder``, conf-named ``files``, or the env."""

    folder: Path
    files: Mapping[str, Path] = field(default_factory=dict, hash=False)

    def generated_file(self, key: RoleKey) -> Path:
        return self.folder / f"{key}.password"

    def source(self, key: RoleKey) -> str:
        """Where ``key``'s password comes from, for messages: an env var's name or a file's path (never the value)."""
        if os.environ.get(env_name(key)):
            return f"${env_name(key)}"
        return str(self.files.get(key) or self.generated_file(key))

    def password(self, key: RoleKey, *, create: bool = False) -> str:
        """``key``'s password: from the environment, the conf-named file, else the generated file (written first
        when ``create`` and absent)."""
        from_env = os.environ.get(env_name(key))
        if from_env:
            return _checked(from_env, f"${env_name(key)}")
        named = self.files.get(key)
        if named is not None:
            return _read(Path(named), private=False)
        path = self.generated_file(key)
        if not path.exists():
            if not create:
                raise SecretError(
                    f"no password for the rules database's {key} role: set {env_name(key)}, name a file in "
                    f"rulesdb.password_files.{key}, or run `fraudlake rulesdb init` (generates {path})"
                )
            self._generate(path)
        return _read(path, private=True)

    def provider_reference(self, key: RoleKey) -> str:
        """A Kafka Connect config-provider reference to ``key``'s password (``${env:NAME}`` or
        ``${directory:FOLDER:FILE}``): the worker resolves it in memory, so no file or log holds the password."""
        if os.environ.get(env_name(key)):
            return "${env:" + env_name(key) + "}"
        named = self.files.get(key)
        path = Path(named).resolve() if named is not None else self.generated_file(key).resolve()
        self.password(key)  # exists, readable and private enough: fail here, not in the worker
        if path.read_bytes().endswith(b"\n"):
            raise SecretError(
                f"{path} ends with a newline, which Kafka Connect's DirectoryConfigProvider keeps as part of the "
                "password: rewrite it without one (printf '%s' ...)"
            )
        if any(c in str(path) for c in ":{}"):
            raise SecretError(f"{path}: a config-provider reference cannot name a path with ':', '{{' or '}}'")
        return "${directory:" + str(path.parent) + ":" + path.name + "}"

    @contextmanager
    def pgpass(self, user: str, password: str) -> Iterator[Path]:
        """A libpq password file for ``user`` (any host, port, database), mode 0600, removed on leaving the block."""
        self._ensure_folder()
        descriptor, name = _private_temp(self.folder, ".pgpass")
        try:
            with os.fdopen(descriptor, "w", encoding="utf-8") as out:
                out.write(f"*:*:*:{_pgpass_escape(user)}:{_pgpass_escape(password)}\n")
            yield Path(name)
        finally:
            Path(name).unlink(missing_ok=True)

    def _ensure_folder(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.folder.chmod(0o700)

    def _generate(self, path: Path) -> None:
        self._ensure_folder()
        value = random_source.token_urlsafe(24)  # 32 characters of [A-Za-z0-9_-]: safe in pgpass, URLs, properties
        try:
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return  # another process generated it first: use theirs
        with os.fdopen(descriptor, "w", encoding="utf-8") as out:
            out.write(value)


def scram_sha256_verifier(password: str, *, salt: bytes | None = None, iterations: int = SCRAM_ITERATIONS) -> str:
    """The SCRAM-SHA-256 verifier PostgreSQL stores for ``password`` (RFC 5802/7677, as libpq's
    ``PQencryptPasswordConn`` computes it): ``ALTER ROLE ... PASSWORD '<verifier>'`` sets the password without it
    ever reaching the server, its logs or ``pg_stat_activity``.

    >>> scram_sha256_verifier("pencil", salt=b"0123456789abcdef").startswith("SCRAM-SHA-256$4096:MDEyMzQ1")
    True
    """
    _checked(password, "a password")  # printable ASCII, which SASLprep leaves unchanged
    salt = salt if salt is not None else random_source.token_bytes(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode("ascii"), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    stored_key = hashlib.sha256(client_key).digest()
    server_key = hmac.new(salted, b"Server Key", hashlib.sha256).digest()

    def b64(raw: bytes) -> str:
        return base64.b64encode(raw).decode("ascii")

    return f"SCRAM-SHA-256${iterations}:{b64(salt)}${b64(stored_key)}:{b64(server_key)}"


def _checked(password: str, where: str) -> str:
    if len(password) < MIN_LENGTH:
        raise SecretError(f"{where}: a rules database password needs at least {MIN_LENGTH} characters")
    if not all(" " <= c <= "~" for c in password):
        raise SecretError(f"{where}: a rules database password must be printable ASCII (no newline)")
    return password


def _read(path: Path, *, private: bool) -> str:
    try:
        mode = path.stat().st_mode
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise SecretError(f"cannot read the password file {path}: {error.strerror}") from None
    exposed = mode & (stat.S_IRWXG | stat.S_IRWXO) if private else mode & stat.S_IRWXO
    if exposed:
        raise SecretError(
            f"{path} is readable by other users (mode {stat.S_IMODE(mode):o}): chmod {'600' if private else 'o-rwx'} it"
        )
    return _checked(text.removesuffix("\n"), str(path))


def _private_temp(folder: Path, suffix: str) -> tuple[int, str]:
    import tempfile

    return tempfile.mkstemp(dir=folder, prefix=".", suffix=suffix)  # mkstemp: O_EXCL, mode 0600


def _pgpass_escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace(":", "\\:")
