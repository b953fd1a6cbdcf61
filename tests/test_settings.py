from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from pipelines.base.settings import LAKEHOUSE_ENV, REPO_ROOT, load_settings


def test_local_conf_loads_with_defaults() -> None:
    settings = load_settings(REPO_ROOT / "conf" / "local.yaml")
    assert settings.version == 1
    assert settings.engine.bucket_seconds == 60
    assert settings.kafka.topics.transactions == "fraudlake.transactions"
    assert settings.transaction_schema.field("paymentAmount").type == "decimal(18,2)"
    assert Path(settings.lakehouse_root).is_absolute()


def test_databricks_conf_loads_and_reads_secrets_only_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = load_settings(REPO_ROOT / "conf" / "databricks.yaml")
    assert settings.environment == "databricks"
    assert settings.kafka.security.password() is None
    monkeypatch.setenv("FRAUDLAKE_KAFKA_SASL_PASSWORD", "s3cret")
    secret = settings.kafka.security.password()
    assert secret is not None and secret.get_secret_value() == "s3cret"
    assert "s3cret" not in repr(settings.kafka.security) and "s3cret" not in str(secret)


def test_lakehouse_override_order(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(LAKEHOUSE_ENV, str(tmp_path / "from-env"))
    assert load_settings().lakehouse_root == str(tmp_path / "from-env")
    assert load_settings(lakehouse=str(tmp_path / "from-flag")).lakehouse_root == str(tmp_path / "from-flag")
    assert load_settings().table_path("alerts") == str(tmp_path / "from-env" / "alerts")


def test_wrong_version_and_bad_field_type_are_rejected(tmp_path: Path) -> None:
    text = (REPO_ROOT / "conf" / "local.yaml").read_text()
    bad_version = tmp_path / "v2.yaml"
    bad_version.write_text(text.replace("version: 1", "version: 2"))
    with pytest.raises(ValidationError, match="version 2 is not supported"):
        load_settings(bad_version)
    bad_type = tmp_path / "type.yaml"
    bad_type.write_text(text.replace("type: long}", "type: money}", 1))
    with pytest.raises(ValidationError, match="unknown field type"):
        load_settings(bad_type)
