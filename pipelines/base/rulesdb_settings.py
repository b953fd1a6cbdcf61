"""Settings of the real CDC path on one machine: the operational rules database and the Kafka Connect worker.

``conf/local.yaml`` has a ``rulesdb:`` and a ``connect:`` section (both optional: these defaults apply). On
Databricks neither is used: the rules database and Debezium are managed services there (docs/rules-cdc.md).

Example::

    settings.rulesdb.port            # 15432; 0 picks a free port at the cluster's first start (kept in its folder)
    settings.connect.connector_conf  # 'conf/connect/rules-postgres.properties'
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RulesDbSettings(_Frozen):
    """The private PostgreSQL cluster that ``fraudlake rulesdb start`` runs (initdb + pg_ctl, no service)."""

    data_dir: str | None = None  # default: <work_dir>/rulesdb
    port: int = Field(15432, ge=0, le=65535)  # 0: a free port, picked at first start and kept in data_dir
    database: str = Field("fraudlake", pattern=r"^[a-z_][a-z0-9_]*$")
    user: str = Field("fraudlake", pattern=r"^[a-z_][a-z0-9_]*$")
    run_as: str = "postgres"  # the OS user that runs the server when fraudlake runs as root (postgres refuses root)
    bin_dir: str | None = None  # PostgreSQL server binaries; default: the newest /usr/lib/postgresql/*/bin


class ConnectSettings(_Frozen):
    """The Kafka Connect standalone worker that ``fraudlake connect start`` runs with the Debezium connector."""

    data_dir: str | None = None  # default: <work_dir>/connect (offsets file, rendered configs, logs)
    rest_port: int = Field(18083, ge=0, le=65535)
    heap: str = "384m"
    connector_conf: str = "conf/connect/rules-postgres.properties"  # relative to the repository
    overrides: dict[str, str] = Field(default_factory=dict)  # connector properties that replace the file's
