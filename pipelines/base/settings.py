"""Typed, versioned settings loaded from ``conf/*.yaml``, with command-line and environment overrides.

Example::

    settings = load_settings()                                  # conf/local.yaml
    settings = load_settings("conf/databricks.yaml", lakehouse="/tmp/lh")
    settings.table_path("alerts")                               # '/tmp/lh/alerts'
"""

from __future__ import annotations

import os
import re
from decimal import Decimal
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from pipelines.base.rulesdb_settings import ConnectSettings, RulesDbSettings

SETTINGS_VERSION = 1
"""The ``version`` a conf file must declare; bump it with any incompatible change to the settings."""

LAKEHOUSE_ENV = "FRAUDLAKE_LAKEHOUSE"
KAFKA_BOOTSTRAP_ENV = "FRAUDLAKE_KAFKA_BOOTSTRAP"
CONF_ENV = "FRAUDLAKE_CONF"
REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CONF = REPO_ROOT / "conf" / "local.yaml"

FieldType = str
_SIMPLE_TYPES = {"string", "long", "int", "double", "boolean", "timestamp", "date"}
_DECIMAL = re.compile(r"^decimal\((\d+),\s*(\d+)\)$")
NUMERIC_TYPES = {"long", "int", "double"}


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SparkSettings(_Frozen):
    master: str = "local[2]"
    shuffle_partitions: int = Field(4, ge=1)
    driver_memory: str = "4g"
    # The local driver JVM's collector and JIT (``spark_session.driver_jvm_options``): the parallel collector costs
    # less CPU than G1 on two cores, and compiling at 3x the default counts spares the JIT the code Spark runs only
    # a few hundred times (docs/engine.md, "The driver JVM's collector and JIT"). ``JDK_JAVA_OPTIONS``, when set,
    # replaces them.
    driver_jvm_options: str = "-XX:+UseParallelGC -XX:CompileThresholdScaling=3"
    ui_enabled: bool = False
    extra_conf: dict[str, str] = Field(default_factory=dict)


class KafkaTopics(_Frozen):
    transactions: str = "fraudlake.transactions"
    rules: str = "fraudlake.rules"
    alerts: str = "fraudlake.alerts"


class KafkaSecurity(_Frozen):
    """Kafka client security. Credentials are read from the named environment variables, never from files."""

    protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    sasl_username_env: str | None = None
    sasl_password_env: str | None = None
    ssl_cafile: str | None = None

    def username(self) -> str | None:
        return os.environ.get(self.sasl_username_env) if self.sasl_username_env else None

    def password(self) -> SecretStr | None:
        value = os.environ.get(self.sasl_password_env) if self.sasl_password_env else None
        return SecretStr(value) if value is not None else None


class BrokerSettings(_Frozen):
    """The local KRaft broker that ``fraudlake kafka start`` runs (never used on Databricks)."""

    port: int = Field(19092, ge=1024, le=65535)
    controller_port: int = Field(19093, ge=1024, le=65535)
    heap: str = "512m"


class KafkaSettings(_Frozen):
    bootstrap_servers: str = "127.0.0.1:19092"
    topics: KafkaTopics = KafkaTopics()
    partitions: int = Field(3, ge=1)
    retention_ms: int = Field(7 * 24 * 3600 * 1000, ge=60_000)
    starting_offsets: Literal["earliest", "latest"] = "earliest"
    max_offsets_per_trigger: int = Field(200_000, ge=1)
    # The most a fetch of Spark's Kafka sources waits at the broker for more data (the consumer's fetch.max.wait.ms,
    # 500 by default): a micro-batch reads to the log end, where its consumer's next fetch would be held this long.
    fetch_max_wait_ms: int = Field(10, ge=0)
    security: KafkaSecurity = KafkaSecurity()
    broker: BrokerSettings = BrokerSettings()


class EngineSettings(_Frozen):
    bucket_seconds: int = Field(60, ge=1, le=3600)
    allowed_lateness_seconds: int = Field(300, ge=0)
    trigger_interval_seconds: float = Field(1, gt=0)
    retention_every_batches: int = Field(20, ge=1)
    # The tables every micro-batch commits to get a Delta log checkpoint this many commits after their last one,
    # written after the batch (by delta-rs where it applies), not in a commit (delta_tables/log_checkpoints.py); 0:
    # only Delta's own, every 1,000 commits on the commit path (table_spec.DEFERRED_INTERVAL). Local tables only.
    log_checkpoint_every: int = Field(10, ge=0)
    # Retention's step for an append-only table (bronze, alerts, quarantine, batch log) bin-packs its small files only
    # once it holds at least this many (Delta's auto compaction waits for 50 too: autoCompact.minNumFiles).
    compact_min_files: int = Field(50, ge=1)
    backfill_retention_days: int = Field(31, ge=1)
    alerts_to_kafka: bool = False  # also send alerts to kafka.topics.alerts (at-least-once; key = alertId)
    max_files_per_trigger: int | None = Field(None, ge=1)  # files source: cap per micro-batch (None: all)
    # Hash partitions of the hot path's frames (rows, tiles, cached state) by (state, key); None: the cluster's
    # default parallelism (local[2]: 2). Fixed for a run: the cached state is laid out with it.
    state_partitions: int | None = Field(None, ge=1, le=10_000)
    # The hot path's exact arithmetic: "long" = 64-bit millionths, switching a run to "decimal" (38 digits) at the
    # first overflow; "decimal" from the start (pipelines/engine/units.py).
    units: Literal["long", "decimal"] = "long"
    # COUNT_DISTINCT: each tile keeps at most this many distinct values per key (the smallest, in text order), so a
    # distinct count is exact up to the cap and saturates at it (docs/engine.md, "Distinct counts").
    distinct_cap: int = Field(100, ge=2, le=10_001)

    @field_validator("bucket_seconds")
    @classmethod
    def _divides_a_minute_or_is_whole_minutes(cls, value: int) -> int:
        if 60 % value and value % 60:
            raise ValueError("bucket_seconds must divide 60 or be a whole number of minutes")
        return value


class QualitySettings(_Frozen):
    """Thresholds of the data-quality suites that ``fraudlake dq`` runs (see docs/data-quality.md)."""

    amount_field: str = "paymentAmount"
    max_amount: Decimal = Field(Decimal(1_000_000), gt=0)
    max_future_skew_minutes: int = Field(10, ge=0)


class MaintenanceSettings(_Frozen):
    """What ``fraudlake maintain`` does to every lakehouse table: OPTIMIZE, then VACUUM with this retention."""

    vacuum_retention_hours: int = Field(168, ge=0)


ConsoleRole = Literal["viewer", "analyst", "approver", "admin"]


class ConsoleSettings(_Frozen):
    """Who may use ``fraudlake console`` and how (docs/console.md, "Sign-in"). No secret lives here: the session
    key comes from ``$FRAUDLAKE_CONSOLE_SECRET`` or ``secret_file`` (0600, generated on first start)."""

    # "local": people sign in with a password from users_file; "databricks_proxy": the Databricks App's proxy
    # signs them in and forwards who they are (X-Forwarded-Email / X-Forwarded-Preferred-Username).
    auth: Literal["local", "databricks_proxy"] = "local"
    users_file: str | None = None  # default <work_dir>/console/users.json (0600)
    secret_file: str | None = None  # default <work_dir>/console/session.key (0600)
    allowed_hosts: tuple[str, ...] = ("127.0.0.1", "localhost")  # Host headers answered; "*.example.com" allowed
    idle_minutes: int = Field(30, ge=1, le=24 * 60)  # a session unused this long ends
    absolute_hours: int = Field(12, ge=1, le=24 * 30)  # and any session ends this long after sign-in
    secure_cookie: Literal["auto", "always"] = "auto"  # auto: Secure when the request came over https
    proxy_roles: dict[str, ConsoleRole] = {}  # databricks_proxy: e-mail or user name -> role (the users file's too)
    proxy_default_role: ConsoleRole | None = None  # a proxied person named nowhere: this role, or refused (None)

    def users_path(self, work_dir: str) -> Path:
        return Path(self.users_file) if self.users_file else Path(work_dir) / "console" / "users.json"

    def secret_path(self, work_dir: str) -> Path:
        return Path(self.secret_file) if self.secret_file else Path(work_dir) / "console" / "session.key"


class TransactionField(_Frozen):
    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    type: FieldType
    required: bool = False

    @field_validator("type")
    @classmethod
    def _known_type(cls, value: str) -> str:
        value = value.strip().lower()
        if value not in _SIMPLE_TYPES and not _DECIMAL.match(value):
            raise ValueError(f"unknown field type {value!r}; use one of {sorted(_SIMPLE_TYPES)} or decimal(p,s)")
        return value

    @property
    def is_numeric(self) -> bool:
        return self.type in NUMERIC_TYPES or self.type.startswith("decimal")


class TransactionSchema(_Frozen):
    """The transaction fields rules may reference; ``transactionId``, ``eventTime``, ``paymentAmount`` are required."""

    fields: tuple[TransactionField, ...]

    @model_validator(mode="after")
    def _has_core_fields(self) -> TransactionSchema:
        names = [f.name for f in self.fields]
        if len(set(names)) != len(names):
            raise ValueError("transaction_schema has duplicate field names")
        for core, kind in (("transactionId", "string"), ("eventTime", "timestamp")):
            if core not in names or self.field(core).type != kind:
                raise ValueError(f"transaction_schema must declare {core} as {kind}")
        return self

    def field(self, name: str) -> TransactionField:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)

    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)


class Settings(_Frozen):
    version: int
    environment: Literal["local", "databricks", "test"] = "local"
    work_dir: str = ".work"
    lakehouse_root: str = ".work/lakehouse"
    spark: SparkSettings = SparkSettings()
    kafka: KafkaSettings = KafkaSettings()
    engine: EngineSettings = EngineSettings()
    quality: QualitySettings = QualitySettings()
    maintenance: MaintenanceSettings = MaintenanceSettings()
    rulesdb: RulesDbSettings = RulesDbSettings()  # the local rules database (fraudlake rulesdb)
    connect: ConnectSettings = ConnectSettings()  # the local Kafka Connect worker with Debezium (fraudlake connect)
    console: ConsoleSettings = ConsoleSettings()  # sign-in, roles and hosts of fraudlake console
    transaction_schema: TransactionSchema

    @field_validator("version")
    @classmethod
    def _supported_version(cls, value: int) -> int:
        if value != SETTINGS_VERSION:
            raise ValueError(f"conf version {value} is not supported; this fraudlake reads version {SETTINGS_VERSION}")
        return value

    def table_path(self, table: str) -> str:
        """Where a lakehouse table lives: ``<lakehouse_root>/<table>``."""
        return f"{self.lakehouse_root.rstrip('/')}/{table}"

    def checkpoint_path(self, job: str) -> str:
        return f"{self.lakehouse_root.rstrip('/')}/_checkpoints/{job}"

    def landing_path(self, feed: str) -> str:
        return f"{self.lakehouse_root.rstrip('/')}/_landing/{feed}"

    def with_lakehouse(self, root: str) -> Settings:
        return self.model_copy(update={"lakehouse_root": root})


def _absolute(path: str, base: Path) -> str:
    if "://" in path or path.startswith("/"):
        return path
    return str((base / path).resolve())


def resolve_conf_path(conf: str | Path | None = None) -> Path:
    """The settings file ``load_settings`` reads: ``conf``, else ``$FRAUDLAKE_CONF``, else conf/local.yaml."""
    return Path(conf or os.environ.get(CONF_ENV) or DEFAULT_CONF)


def load_settings(conf: str | Path | None = None, *, lakehouse: str | None = None) -> Settings:
    """Load settings: ``conf`` (else ``$FRAUDLAKE_CONF``, else conf/local.yaml), then the lakehouse override.

    The lakehouse root is ``lakehouse`` if given, else ``$FRAUDLAKE_LAKEHOUSE``, else the file's value;
    ``$FRAUDLAKE_KAFKA_BOOTSTRAP`` (set per bundle target) overrides ``kafka.bootstrap_servers``.
    Relative paths resolve against the current directory.
    """
    conf_path = resolve_conf_path(conf)
    raw = yaml.safe_load(conf_path.read_text())
    if not isinstance(raw, dict):
        raise ValueError(f"{conf_path}: expected a mapping of settings")
    settings = Settings.model_validate(raw)
    root = lakehouse or os.environ.get(LAKEHOUSE_ENV) or settings.lakehouse_root
    bootstrap = os.environ.get(KAFKA_BOOTSTRAP_ENV)
    if bootstrap:
        settings = settings.model_copy(
            update={"kafka": settings.kafka.model_copy(update={"bootstrap_servers": bootstrap})}
        )
    cwd = Path.cwd()
    return settings.model_copy(
        update={"lakehouse_root": _absolute(root, cwd), "work_dir": _absolute(settings.work_dir, cwd)}
    )
