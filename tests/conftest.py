"""Session fixtures: one real local SparkSession with Delta, and one real Kafka broker (KRaft) when asked for.

The suite is isolated from the caller's environment: ``FRAUDLAKE_*`` variables (a lakehouse, a conf file, a Kafka
bootstrap, a fault to inject, credentials) are removed before collection and again around every test, and
``JAVA_HOME`` points at a JDK 17. Only the suite's own knobs (``SUITE_KNOBS``) pass through.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from pipelines.base.runtime_env import JARS_ENV, ensure_java_home
from pipelines.base.settings import Settings, SparkSettings, load_settings
from pipelines.base.spark_session import JVM_OPTIONS_ENV, get_spark
from pipelines.local.connect_worker import ConnectWorker
from pipelines.local.kafka_broker import KafkaBroker, started_broker
from pipelines.local.ports import free_port
from pipelines.local.rules_database import RulesDb

SUITE_KNOBS = frozenset(
    {
        "FRAUDLAKE_TEST_JVM_OPTIONS",
        "FRAUDLAKE_TEST_WORKER_JVM_OPTIONS",
        "FRAUDLAKE_TEST_WORKER_SPARK_CONF",
        "FRAUDLAKE_CONTRACT_EXAMPLES",
        "FRAUDLAKE_CONTRACT_BASE_SEED",
        "FRAUDLAKE_CONTRACT_SEEDS",
        "FRAUDLAKE_CONTRACT_DAY",
        "FRAUDLAKE_FUZZ_EXAMPLES",
        "FRAUDLAKE_RELIABILITY_REPORT",
        JARS_ENV,  # where `make setup` put the jars: the machine's, like JAVA_HOME
    }
)


def _is_jdk17(home: str | None) -> bool:
    release = Path(home or "/nonexistent", "release")
    return release.is_file() and 'JAVA_VERSION="17' in release.read_text(errors="replace")


def _isolated_environment() -> dict[str, str | None]:
    """The variables to change: every FRAUDLAKE_* but the suite's knobs removed, JAVA_HOME a JDK 17."""
    changes: dict[str, str | None] = {name: None for name in os.environ if name.startswith("FRAUDLAKE_")}
    for knob in SUITE_KNOBS:
        changes.pop(knob, None)
    if not _is_jdk17(os.environ.get("JAVA_HOME")):
        saved = os.environ.pop("JAVA_HOME", None)
        try:
            changes["JAVA_HOME"] = ensure_java_home()  # the first JDK 17 of the known locations
        finally:
            if saved is not None:
                os.environ["JAVA_HOME"] = saved
    return changes


TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""Options of the short-lived JVMs the suite starts (the CLI runs' Spark, brokers, Connect, the cluster; not the
worker's own session, see ``spark``).

The suite's JVMs are many and short-lived on two busy cores: C2's compiler threads and the parallel collector's
threads cost more CPU than their faster code saves before the JVM ends (measured on a Spark session with 8 Delta
appends and reads: 39 -> 23 CPU-s, 22.5 -> 18.1 s; with 60 of each still 126 -> 105 CPU-s at the same wall time).
Semantics are unchanged. ``FRAUDLAKE_TEST_JVM_OPTIONS`` replaces them (empty: production's, as in ``make bench``:
``spark.driver_jvm_options`` for a Spark driver, the JVM's defaults for the others). Passed as ``JDK_JAVA_OPTIONS``,
read by the ``java`` launcher (JDK 9+) of every JVM started under the suite's environment; a Spark driver then leaves
out ``spark.driver_jvm_options`` (``spark_session.driver_jvm_options``)."""


WORKER_JVM_OPTIONS_ENV = "FRAUDLAKE_TEST_WORKER_JVM_OPTIONS"
"""Replaces the JVM options of each pytest worker's own Spark JVM (``spark``), which are otherwise production's
(``spark.driver_jvm_options``: the parallel collector, ``CompileThresholdScaling=3``); empty: the JVM's defaults.

That JVM is where most of the suite's CPU goes (72% even of a broker, Connect and engine-subprocess heavy sample of
modules), and production's options were first measured there: Spark's code is vast and flat, and the default
thresholds compile much of it that runs only a few hundred times in a whole run (a 95 s sample of modules spent 65
of its 140 CPU-s in the JIT compilers). Seven in-process modules (130 tests, about 6.5 minutes), two runs side by
side: the JVM's defaults (G1) 350 CPU-s, these options 289 (-17%) at the same wall time; parallel alone vs with
scaling 3: 312 vs 293; scaling 6 vs 3: 281 vs 283 and 3% slower."""


WORKER_SPARK_CONF_ENV = "FRAUDLAKE_TEST_WORKER_SPARK_CONF"
"""Replaces ``WORKER_SPARK_CONF``: comma-separated ``key=value`` pairs; empty: production's confs (``make bench``)."""

WORKER_SPARK_CONF = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    "spark.sql.adaptive.enabled": "false",
}
"""Confs of each pytest worker's own session (``spark``) only: Spark evaluates its expressions interpreted, with no
generated code, and plans without adaptive execution.

The suite runs thousands of small queries, most of them once: each one's generated classes cost a Janino
compilation and then the JIT's work on code that runs a few hundred rows. Interpreted, the same operators' classes
serve every query. Spark's own suites run both modes against each other (``factoryMode`` is their switch), and the
results are the same by contract; the engine turns adaptive execution off in its batches anyway. Measured on seven
in-process modules (42 tests: engine contract, lifecycle, replay, backtest, shadow, rules apply, compaction) on a
cold worker JVM: 210-217 s with production's confs, 177-181 s interpreted, 171 s interpreted without adaptive
execution. The whole suite (718 tests, 2 workers): 16:46 -> 14:49, in a run that gave the subprocesses these confs
too; as committed (subprocesses on generated code), a fresh clone ran 719 tests in 15:17.

Production's code generation is still what every Spark subprocess of the suite runs (``base_settings`` and the conf
files written from it leave these out): the engine's CLI runs killed and restarted, and the chaos campaign and the
contract scenario on a standalone cluster, which compare the engine's alerts with the reference."""


def _worker_spark_conf() -> dict[str, str]:
    override = os.environ.get(WORKER_SPARK_CONF_ENV)
    if override is None:
        return dict(WORKER_SPARK_CONF)
    pairs = [pair.strip() for pair in override.split(",") if pair.strip()]
    malformed = [pair for pair in pairs if "=" not in pair]
    if malformed:
        raise pytest.UsageError(f"{WORKER_SPARK_CONF_ENV}: expected comma-separated key=value pairs, got {malformed}")
    return dict(pair.split("=", 1) for pair in pairs)


def _jvm_options() -> dict[str, str | None]:
    options = os.environ.get("FRAUDLAKE_TEST_JVM_OPTIONS", TEST_JVM_OPTIONS).strip()
    inherited = os.environ.get(JVM_OPTIONS_ENV, "")
    if options in inherited:  # an xdist worker inherits the controller's
        return {}
    return {JVM_OPTIONS_ENV: f"{inherited} {options}".strip() or None}


class XdistModuleOrder:
    """pytest-xdist's ``--dist loadfile`` hands out the longest modules first (tests/module_schedule.py)."""

    @pytest.hookimpl
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: object) -> object | None:
        if config.getvalue("dist") != "loadfile":
            return None  # xdist's own scheduler for the other modes
        from module_schedule import LongestModuleFirst  # imports xdist: only where it runs

        return LongestModuleFirst(config, log)  # type: ignore[arg-type]


def pytest_configure(config: pytest.Config) -> None:
    """Before collection (modules load settings at import): the isolated environment for the whole session, and
    the suite's JVM options (``TEST_JVM_OPTIONS``). Under pytest-xdist, the longest modules are handed out first."""
    for name, value in {**_isolated_environment(), **_jvm_options()}.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    # The random contract's day seed (test_engine_contract_random.today_seed), pinned once in the controller: its
    # pytest-xdist workers inherit it and so collect the same seed even when the run crosses midnight UTC.
    os.environ.setdefault("FRAUDLAKE_CONTRACT_DAY", datetime.now(UTC).strftime("%Y%m%d"))
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(XdistModuleOrder(), "fraudlake-module-order")


# Modules of tens of seconds to minutes each (measured with --durations on the 2-core machine): `make test-fast`
# leaves them out. Listed here, in one place, rather than marked in each file.
SLOW_MODULES = frozenset(
    {
        "test_engine_contract.py",  # 5 micro-batches, 11 rules
        "test_engine_contract_random.py",  # 2 seeds (a fixed one, the day's) x 5 micro-batches
        "test_backtest.py",  # a two-batch bronze history and a backtest per rule shape
        "test_bench.py",  # the engine and the per-event baseline over three batches
        "test_faults_concurrent.py",  # maintenance looping beside the engine
        "test_data_quality.py",  # Great Expectations over every table
        "test_notebooks.py",  # every notebook, the streaming one included
        "test_engine_contract_lifecycle.py",  # 4 micro-batches of rule lifecycles
        "test_engine_replay.py",  # crashed and replayed batches
        "test_engine_units_overflow.py",  # sums past 64-bit units through the engine
        "test_engine_sources.py",  # the engine as a stream over each source
        "test_rules_cdc_cli.py",  # the rules commands and the file-source job
        "test_dashboard.py",  # charts over real alert rows
    }
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Markers that follow from what a test uses: the session broker makes it a ``kafka`` test (marked or not),
    and the modules in SLOW_MODULES are ``slow``. ``make test-fast`` deselects both."""
    for item in items:
        if "kafka_broker" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.kafka)
        if item.path.name in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def isolated_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test starts from the isolated environment, whatever an earlier test or the caller left behind."""
    for name, value in _isolated_environment().items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)


@pytest.fixture(scope="session")
def base_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    work = tmp_path_factory.mktemp("work")
    settings = load_settings(lakehouse=str(work / "lakehouse"))
    return settings.model_copy(
        update={
            "environment": "test",
            "work_dir": str(work),
            "spark": SparkSettings(master="local[2]", shuffle_partitions=2, driver_memory="2g", ui_enabled=False),
        }
    )


@pytest.fixture
def settings(base_settings: Settings, tmp_path: Path) -> Settings:
    """Settings whose lakehouse is this test's own folder."""
    return base_settings.with_lakehouse(str(tmp_path / "lakehouse"))


@pytest.fixture(scope="session")
def spark(base_settings: Settings) -> Iterator[SparkSession]:
    """The worker's own session, the one JVM that lives for the whole run: started with production's JVM options
    (``WORKER_JVM_OPTIONS_ENV`` replaces them), not the suite's short-lived JVM options (C2 pays off over minutes of
    Spark work: with C1 only, the in-process modules took ~40% longer), and with ``WORKER_SPARK_CONF``."""
    options = os.environ.pop(JVM_OPTIONS_ENV, None)  # the suite's short-lived JVMs' options: not this one's
    worker_options = os.environ.get(WORKER_JVM_OPTIONS_ENV)
    spark_settings = base_settings.spark.model_copy(
        update={"extra_conf": {**base_settings.spark.extra_conf, **_worker_spark_conf()}}
    )
    if worker_options is not None:
        spark_settings = spark_settings.model_copy(update={"driver_jvm_options": worker_options})
    settings = base_settings.model_copy(update={"spark": spark_settings})
    try:
        session = get_spark(settings, app_name="fraudlake-tests")
    finally:
        if options is not None:
            os.environ[JVM_OPTIONS_ENV] = options
    yield session
    session.stop()


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """A real single-node KRaft broker on 127.0.0.1, started once for the session and stopped after."""
    # Free ports, so that two test sessions on one machine never share a broker.
    with started_broker(tmp_path_factory.mktemp("kafka")) as broker:
        yield broker


@pytest.fixture(scope="session")
def rulesdb() -> Iterator[RulesDb]:
    """A real PostgreSQL rules database (wal_level=logical, schema applied) on a free port, for the session.

    Its folder is made outside pytest's temporary root, which is private to root: run as root, the server runs as
    the ``postgres`` user, who must reach the folder. Stopped and removed after the session."""
    folder = Path(tempfile.mkdtemp(prefix="fraudlake-rulesdb-"))
    folder.chmod(0o755)
    db = RulesDb(data_dir=folder / "db", port=free_port())
    try:
        db.start()
        yield db
    finally:
        db.stop()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def connect_worker(kafka_broker: KafkaBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectWorker]:
    """A real Kafka Connect standalone worker (Debezium plugin) on the session broker, REST on a free port.

    Started without connectors: tests add theirs (``add_connector``) or restart it with them (``start``)."""
    worker = ConnectWorker(
        data_dir=tmp_path_factory.mktemp("connect"), bootstrap=kafka_broker.bootstrap, rest_port=free_port()
    )
    try:
        worker.start()
        yield worker
    finally:
        worker.stop()
