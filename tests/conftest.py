"""Session fixtures: one real local SparkSession with Delta, and one real Kafka broker (KRaft) when asked for."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from pipelines.kafka_broker import KafkaBroker
from pipelines.settings import Settings, SparkSettings, load_settings
from pipelines.spark_session import get_spark


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


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
    session = get_spark(base_settings, app_name="fraudlake-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """A real single-node KRaft broker on 127.0.0.1, started once for the session and stopped after."""
    # Free ports, so that two test sessions on one machine never share a broker.
    broker = KafkaBroker(data_dir=tmp_path_factory.mktemp("kafka"), port=_free_port(), controller_port=_free_port())
    broker.start()
    yield broker
    broker.stop()
