"""The Spark driver's class archive: `make setup` builds it, every local driver maps it, another JDK or jar set has
its own (``pipelines.base.class_archive``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from pipelines.base.class_archive import archive_path, driver_options
from pipelines.base.runtime_env import JARS_ENV, jars_dir


def test_the_session_jvm_maps_the_class_archive_setup_built(spark: SparkSession) -> None:
    path = archive_path()
    assert path.is_file(), "make setup builds it (fraudlake class-archive)"
    pid = spark._jvm.java.lang.ProcessHandle.current().pid()  # type: ignore[union-attr]
    assert str(path) in Path(f"/proc/{pid}/maps").read_text()  # mapped: its classes are loaded from it


def test_another_jar_set_looks_for_an_archive_of_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ours = archive_path()
    jars = sorted((jars_dir() / "spark").glob("*.jar"))
    (tmp_path / "spark").mkdir()
    for jar in jars[1:]:  # one jar fewer
        (tmp_path / "spark" / jar.name).symlink_to(jar)
    monkeypatch.setenv(JARS_ENV, str(tmp_path))
    theirs = archive_path()
    assert theirs.name != ours.name and not theirs.exists()
    assert driver_options() == ""  # no archive for that class path: the driver starts without one
    shutil.copy(jars[0], tmp_path / "spark" / jars[0].name)
    assert archive_path().name == ours.name  # the same jars again: the same archive
