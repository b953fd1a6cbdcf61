"""Where this checkout keeps its JVM pieces: the JDK 17 to use and the jar folders that `make setup` fills."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
JARS_ENV = "FRAUDLAKE_JARS_DIR"
_JDK17_CANDIDATES = (
    "/usr/lib/jvm/java-17-openjdk-amd64",
    "/usr/lib/jvm/java-17-openjdk-arm64",
    "/usr/lib/jvm/java-17-openjdk",
    "/usr/lib/jvm/temurin-17-jdk-amd64",
)


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
