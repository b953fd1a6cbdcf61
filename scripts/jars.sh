#!/usr/bin/env bash
# Copies the JVM jars declared in jvm/*/pom.xml into .jars/ (git-ignored) with Maven:
#   .jars/spark  - Delta + Kafka connector for spark.jars, minus every artifact pyspark already ships;
#   .jars/broker - the Kafka broker and log4j2, for `fraudlake kafka start` only.
# Spark's own Ivy download is not used: only Maven Central, through mvn, is reachable here.
set -euo pipefail
cd "$(dirname "$0")/.."
JARS=${FRAUDLAKE_JARS_DIR:-.jars}
stamp=$(cat jvm/settings.xml jvm/spark/pom.xml jvm/broker/pom.xml scripts/prune_jars.py | sha256sum | cut -c1-16)
if [ "$(cat "$JARS/.stamp" 2>/dev/null)" = "$stamp" ]; then
  exit 0
fi
echo "setup: copying JVM jars from Maven Central into $JARS (first run: about a minute)"
rm -rf "$JARS" && mkdir -p "$JARS/spark" "$JARS/broker"
for side in spark broker; do
  mvn -s jvm/settings.xml -B -q -f "jvm/$side/pom.xml" dependency:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$PWD/$JARS/$side"
done
.venv/bin/python scripts/prune_jars.py "$JARS/spark"
echo "$stamp" > "$JARS/.stamp"
