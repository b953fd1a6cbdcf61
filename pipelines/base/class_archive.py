"""A class-data-sharing archive of the Spark driver's classes, so that a Spark JVM starts in about 2/3 of the time.

A Spark driver loads ~24,000 classes (Spark, Delta, Hadoop, their dependencies) and parses, verifies and links each
one at every start: most of a JVM's start-up and of its first micro-batch. JDK 17 can dump the classes an
application loaded into an archive (``-XX:ArchiveClassesAtExit``: dynamic AppCDS) that later JVMs map ready-made
(``-XX:SharedArchiveFile``). ``make setup`` builds one (``fraudlake class-archive``,
``pipelines.commands.class_archive_cmd``): the demo's backlog (a fresh lakehouse, the sample rules, two landing files
through the engine) in a JVM that dumps its classes when it exits. ``get_spark`` then starts every local driver
with it; the standalone cluster's executors and the other JVMs (broker, Connect) do not use it.

An archive is valid only for the JDK and class path it was made with: its file name carries a stamp of both (the
JDK's ``release`` file, the names and sizes of the jars), so another JDK or jar set looks for an archive of its own
instead of mismatching; a JVM that cannot map an archive starts without it, silently (its CDS logging is off).

Measured on the 2-core machine (a local session, one Delta write and read; three runs each): 10.5 s -> 6.8 s
(session start 4.4 -> 2.7 s), ~14,800 of ~23,500 classes loaded from the archive.

Example::

    options = driver_options()   # "-XX:SharedArchiveFile=... -Xlog:cds=off ..." or "" without an archive
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pyspark

from pipelines.base.runtime_env import ensure_java_home, jar_files, jars_dir

QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
"""A JVM that cannot map the archive (another class path) says so on stdout: not wanted in a job's output."""
DUMP_OPTION = "-XX:ArchiveClassesAtExit"


def archive_path() -> Path:
    """Where the archive for this JDK and these jars is (whether or not it exists)."""
    java_home = Path(os.environ.get("JAVA_HOME") or ensure_java_home())
    release = java_home / "release"
    digest = hashlib.sha256(release.read_bytes() if release.is_file() else str(java_home).encode())
    pyspark_jars = Path(pyspark.__file__).parent / "jars"
    for jar in [*sorted(pyspark_jars.glob("*.jar")), *jar_files("spark")]:
        digest.update(f"{jar.name}:{jar.stat().st_size}\n".encode())
    return jars_dir() / "cds" / f"spark-driver-{digest.hexdigest()[:16]}.jsa"


def driver_options() -> str:
    """The driver's JVM options to use the archive, or "" where there is none (or the stamp cannot be taken)."""
    try:
        path = archive_path()
    except Exception:  # no JDK or jars yet: `make setup` will say so elsewhere
        return ""
    return f"-XX:SharedArchiveFile={path} {QUIET}" if path.is_file() else ""
