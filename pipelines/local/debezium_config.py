"""The Debezium connector's configuration: the documented properties file in conf, filled from the settings.

``conf/connect/rules-postgres.properties`` is a Kafka Connect properties file whose ``{{rulesdb.port}}``-style
placeholders name settings; ``connect.overrides`` in conf, then the caller's overrides, replace keys. The
result is the ``{"name": ..., "config": {...}}`` document the standalone worker takes as a ``.json`` file.

The connector logs in as ``fraudlake_debezium``. Its password never appears in the result: ``{{rulesdb.debezium_
password}}`` becomes a Kafka Connect config-provider reference (``${env:...}`` or ``${directory:...}``,
rulesdb_secrets.RoleSecrets.provider_reference) that the worker resolves in memory.

Example::

    config = connector_config(settings, db_port=15432, overrides={"decimal.handling.mode": "precise"})
    config["name"], config["config"]["slot.name"]          # ('fraudlake-rules-postgres', 'fraudlake_rules')
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pipelines.base.settings import REPO_ROOT, Settings
from pipelines.local.rules_database import RulesDb
from pipelines.local.rulesdb_secrets import APP_ROLES, RoleSecrets

_PLACEHOLDER = re.compile(r"\{\{([a-z_.]+)\}\}")


class ConnectorConfigError(ValueError):
    """A connector properties file that cannot be read or filled."""


def read_properties(text: str) -> dict[str, str]:
    """Java properties, the subset conf uses: ``key=value`` lines, ``#``/``!`` comments, blank lines."""
    properties: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise ConnectorConfigError(f"line {number}: expected key=value, got {raw!r}")
        if "\\" in line:
            raise ConnectorConfigError(f"line {number}: backslashes are not supported (write a regex without them)")
        properties[key.strip()] = value.strip()
    return properties


def placeholders(
    settings: Settings, *, db_port: int, secrets: RoleSecrets | None = None
) -> dict[str, Callable[[], str] | str]:
    """The values ``{{...}}`` may name. ``secrets``: where the Debezium role's password is (default: conf's)."""
    found = secrets or RulesDb.from_settings(settings).secrets
    return {
        "rulesdb.port": str(db_port),
        "rulesdb.user": settings.rulesdb.user,
        "rulesdb.debezium_user": APP_ROLES["debezium"],
        "rulesdb.debezium_password": lambda: found.provider_reference("debezium"),
        "rulesdb.database": settings.rulesdb.database,
        "kafka.topics.rules": settings.kafka.topics.rules,
        "kafka.bootstrap_servers": settings.kafka.bootstrap_servers,
    }


def fill(properties: Mapping[str, str], values: Mapping[str, Callable[[], str] | str]) -> dict[str, str]:
    """Each ``{{name}}`` replaced by its value (a callable is called only when named: a secret reference is looked
    up only for a file that uses it)."""

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in values:
            raise ConnectorConfigError(f"unknown placeholder {{{{{name}}}}}; known: {sorted(values)}")
        value = values[name]
        return value if isinstance(value, str) else value()

    return {key: _PLACEHOLDER.sub(one, value) for key, value in properties.items()}


def connector_file(settings: Settings) -> Path:
    path = Path(settings.connect.connector_conf)
    return path if path.is_absolute() else REPO_ROOT / path


def connector_config(
    settings: Settings,
    *,
    db_port: int,
    overrides: Mapping[str, str] | None = None,
    secrets: RoleSecrets | None = None,
) -> dict[str, Any]:
    """The connector as the worker takes it: ``{"name": ..., "config": {...}}``, overrides applied. ``secrets``:
    the cluster's role secrets (default: those of ``settings.rulesdb``)."""
    config = fill(_properties(settings, overrides), placeholders(settings, db_port=db_port, secrets=secrets))
    name = config.get("name")
    if not name:
        raise ConnectorConfigError(f"{connector_file(settings)} has no name=")
    return {"name": name, "config": config}


def slot_name(settings: Settings) -> str:
    """The replication slot the configured connector reads (``slot.name``, overrides applied)."""
    name = _properties(settings, None).get("slot.name")
    if not name:
        raise ConnectorConfigError(f"{connector_file(settings)} has no slot.name=")
    return name


def _properties(settings: Settings, overrides: Mapping[str, str] | None) -> dict[str, str]:
    properties = read_properties(connector_file(settings).read_text(encoding="utf-8"))
    properties.update(settings.connect.overrides)
    properties.update(overrides or {})
    return properties
