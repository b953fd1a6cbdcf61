"""The console's people: names, roles and argon2id password hashes in one JSON file (0600), and the roles' order.

Roles, each including the ones before it: ``viewer`` reads every page; ``analyst`` changes rules (for now directly;
the proposal flow will turn these into proposals) and marks alerts; ``approver`` approves or rejects proposals;
``admin`` does everything and manages the people. The file also maps the Databricks App's proxied people (e-mail
or user name) to roles (``proxy_roles``), beside the conf's ``console.proxy_roles``.

Passwords are hashed with argon2id (``argon2-cffi``, its default parameters: salted, memory-hard) and never stored,
logged or taken from a command line. The file is written whole to a temporary file created 0600 and renamed over
the old one: a crash leaves the old file or the new, never half of one.

Example::

    users = UsersFile(Path(".work/console/users.json"))
    users.add("ana", "analyst", "correct horse battery staple")
    users.verify("ana", "correct horse battery staple")      # User(name='ana', role='analyst')
"""

from __future__ import annotations

import json
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeGuard, get_args

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

Role = Literal["viewer", "analyst", "approver", "admin"]
ROLES: tuple[Role, ...] = get_args(Role)
"""In order: each role may do what the ones before it may."""
FILE_VERSION = 1
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,99}", re.ASCII)
MIN_PASSWORD = 12
MAX_PASSWORD = 1024
_HASHER = PasswordHasher()  # argon2id, the library's current recommended parameters
_DUMMY_HASH = _HASHER.hash("an unknown name is checked against this, so that timing does not tell names apart")


class UserError(ValueError):
    """A name, role, password or users file the console cannot use; the message says which and why."""


def at_least(role: str, needed: Role) -> bool:
    """Whether ``role`` may do what ``needed`` may.

    >>> at_least("approver", "analyst"), at_least("viewer", "analyst")
    (True, False)
    """
    return is_role(role) and ROLES.index(role) >= ROLES.index(needed)


def is_role(role: str) -> TypeGuard[Role]:
    return role in ROLES


def checked_role(role: str) -> Role:
    if not is_role(role):
        raise UserError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
    return role


def checked_name(name: str) -> str:
    if not NAME.fullmatch(name):
        raise UserError(
            f"a user name is 1 to 100 characters: letters, digits and . _ @ + - (not first), got {name[:100]!r}"
        )
    return name


@dataclass(frozen=True)
class User:
    name: str
    role: Role


class UsersFile:
    """The users file: read on every use (cheap, and a change by ``add-user`` applies at once), written atomically."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def _read(self) -> dict[str, Any]:
        try:
            raw = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {"version": FILE_VERSION, "users": {}, "proxy_roles": {}}
        except (OSError, ValueError) as error:
            raise UserError(f"{self.path}: not a readable users file ({error})") from None
        if not isinstance(raw, dict) or raw.get("version") != FILE_VERSION or not isinstance(raw.get("users"), dict):
            raise UserError(f"{self.path}: not a version {FILE_VERSION} users file")
        raw.setdefault("proxy_roles", {})
        return raw

    def _write(self, data: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            with os.fdopen(fd, "w") as out:
                json.dump(data, out, indent=2, sort_keys=True)
                out.flush()
                os.fsync(out.fileno())
            os.chmod(temporary, 0o600)  # O_CREAT's mode is masked by the umask; 0600 whatever it is
            os.replace(temporary, self.path)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise

    def users(self) -> list[User]:
        data = self._read()
        return [User(name, checked_role(entry["role"])) for name, entry in sorted(data["users"].items())]

    def count(self) -> int:
        return len(self._read()["users"])

    def add(self, name: str, role: str, password: str, *, replace: bool = False) -> User:
        """Add ``name`` (or, with ``replace``, set its role and password)."""
        user = User(checked_name(name), checked_role(role))
        if not MIN_PASSWORD <= len(password) <= MAX_PASSWORD:
            raise UserError(f"a password is {MIN_PASSWORD} to {MAX_PASSWORD} characters long")
        with self._lock:
            data = self._read()
            if name in data["users"] and not replace:
                raise UserError(f"user {name!r} exists already (add --replace to set a new role and password)")
            data["users"][name] = {"role": user.role, "hash": _HASHER.hash(password)}
            self._write(data)
        return user

    def remove(self, name: str) -> bool:
        with self._lock:
            data = self._read()
            if data["users"].pop(name, None) is None:
                return False
            self._write(data)
            return True

    def role_of(self, name: str) -> Role | None:
        entry = self._read()["users"].get(name)
        return None if entry is None else checked_role(entry["role"])

    def verify(self, name: str, password: str) -> User | None:
        """The user when ``password`` is theirs, else None (an unknown name costs as much as a wrong password)."""
        entry = self._read()["users"].get(name) if NAME.fullmatch(name) else None
        try:
            _HASHER.verify(entry["hash"] if entry else _DUMMY_HASH, password[:MAX_PASSWORD])
        except (VerifyMismatchError, VerificationError, InvalidHashError):
            return None
        return User(name, checked_role(entry["role"])) if entry else None

    def proxy_roles(self) -> dict[str, Role]:
        return {str(k): checked_role(str(v)) for k, v in self._read()["proxy_roles"].items()}

    def set_proxy_role(self, who: str, role: str | None) -> None:
        """Map a proxied person (e-mail or user name) to ``role``; None removes the mapping."""
        with self._lock:
            data = self._read()
            if role is None:
                data["proxy_roles"].pop(who, None)
            else:
                data["proxy_roles"][checked_name(who)] = checked_role(role)
            self._write(data)
