"""Delete from a jar folder every jar whose artifact pyspark already ships in ``pyspark/jars``.

Two copies of one library on Spark's classpath (say jackson 2.13 from Delta's POM beside pyspark's own)
fail in ways that are hard to trace, so the Spark-side folder keeps only what pyspark lacks.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pyspark

_ARTIFACT = re.compile(r"^(?P<artifact>.+?)-\d[^/]*\.jar$")


def artifact_of(jar_name: str) -> str:
    """``jackson-core-2.13.5.jar`` -> ``jackson-core``; ``spark-sql_2.13-4.1.3.jar`` -> ``spark-sql_2.13``."""
    match = _ARTIFACT.match(jar_name)
    return match.group("artifact") if match else jar_name


def main(folder: str) -> None:
    shipped = {artifact_of(p.name) for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    kept = []
    for jar in sorted(Path(folder).glob("*.jar")):
        if artifact_of(jar.name) in shipped:
            jar.unlink()
        else:
            kept.append(jar.name)
    print(f"setup: {len(kept)} Spark-side jars kept: {', '.join(kept)}")


if __name__ == "__main__":
    main(sys.argv[1])
