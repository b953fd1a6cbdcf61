"""Where this checkout keeps its JVM pieces: the JDK 17 to use and the jar folders that `make setup` fills."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
JARS_ENV = "FRAUDLAKE_JARS_DIR"
_JDK17_CANDIDATES = (
    "/usr/lib/jvm/java-17-openjdk-amd64",
    "/usr/lib/jvm/java-17-openjdk-arm64",
    "/usr/lib/jvm/java-17-openjdk",
    "/usr/lib/jvm/temurin-17-jdk-amd64",
)


_LOG4J2 = """\
<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="WARN">
  <Appenders>
    <File name="file" fileName="{log_file}">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </File>
  </Appenders>
  <Loggers>
{loggers}    <Root level="WARN"><AppenderRef ref="file"/></Root>
  </Loggers>
</Configuration>
"""


class SetupMissingError(RuntimeError):
    """A piece that `make setup` installs is not there."""


def on_databricks() -> bool:
    return "DATABRICKS_RUNTIME_VERSION" in os.environ


def ensure_java_home() -> str:
    """Point JAVA_HOME at a JDK 17 unless it is set already (the machine also has a JDK 25 Spark 4.1 rejects)."""
    current = os.environ.get("JAVA_HOME")
    if current:
        return current
    for candidate in _JDK17_CANDIDATES:
        if Path(candidate, "bin", "java").exists():
            os.environ["JAVA_HOME"] = candidate
            return candidate
    raise SetupMissingError("no JDK 17 found: set JAVA_HOME to a Java 17 installation")


def jars_dir() -> Path:
    return Path(os.environ.get(JARS_ENV, REPO_ROOT / ".jars"))


def jar_files(side: str) -> list[Path]:
    """The jars of one side (``spark`` or ``broker``), or a clear error pointing at `make setup`."""
    folder = jars_dir() / side
    jars = sorted(folder.glob("*.jar"))
    if not jars:
        raise SetupMissingError(f"no jars in {folder}: run `make setup` (copies them from Maven Central)")
    return jars


def log4j2_config(log_file: Path, levels: Mapping[str, str]) -> str:
    """A ``log4j2.xml`` for a JVM daemon of ours: everything to ``log_file``, WARN and up unless ``levels`` (logger
    name -> level) says otherwise."""
    loggers = "".join(f'    <Logger name="{name}" level="{level}"/>\n' for name, level in levels.items())
    return _LOG4J2.format(log_file=log_file, loggers=loggers)
