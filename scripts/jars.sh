#!/usr/bin/env bash
# Copies the JVM jars declared in jvm/*/pom.xml into .jars/ (git-ignored) with Maven:
#   .jars/spark  - Delta + Kafka connector for spark.jars, minus every artifact pyspark already ships;
#   .jars/broker - the Kafka broker and log4j2, for `fraudlake kafka start` only;
#   .jars/connect/worker, .jars/connect/plugins/debezium-postgres - the Kafka Connect worker and the Debezium
#     PostgreSQL connector (with its JDBC driver) as a plugin folder, for `fraudlake connect start` only.
# Spark's own Ivy download is not used: only Maven Central, through mvn, is reachable here.
set -euo pipefail
cd "$(dirname "$0")/.."
JARS=${FRAUDLAKE_JARS_DIR:-.jars}
stamp=$(cat jvm/settings.xml jvm/spark/pom.xml jvm/broker/pom.xml scripts/prune_jars.py | sha256sum | cut -c1-16)
if [ "$(cat "$JARS/.stamp" 2>/dev/null)" != "$stamp" ]; then
  echo "setup: copying JVM jars from Maven Central into $JARS (first run: about a minute)"
  rm -rf "$JARS" && mkdir -p "$JARS/spark" "$JARS/broker"
  for side in spark broker; do
    mvn -s jvm/settings.xml -B -q -f "jvm/$side/pom.xml" dependency:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$PWD/$JARS/$side"
  done
  .venv/bin/python scripts/prune_jars.py "$JARS/spark"
  echo "$stamp" > "$JARS/.stamp"
fi

# Kafka Connect has its own stamp: changing its poms re-copies only .jars/connect.
connect_stamp=$(cat jvm/settings.xml jvm/connect/worker/pom.xml jvm/connect/debezium-postgres/pom.xml | sha256sum | cut -c1-16)
if [ "$(cat "$JARS/connect/.stamp" 2>/dev/null)" != "$connect_stamp" ]; then
  echo "setup: copying the Kafka Connect worker and the Debezium PostgreSQL plugin into $JARS/connect"
  rm -rf "$JARS/connect" && mkdir -p "$JARS/connect/worker" "$JARS/connect/plugins/debezium-postgres"
  mvn -s jvm/settings.xml -B -q -f jvm/connect/worker/pom.xml dependency:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$PWD/$JARS/connect/worker"
  mvn -s jvm/settings.xml -B -q -f jvm/connect/debezium-postgres/pom.xml dependency:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$PWD/$JARS/connect/plugins/debezium-postgres"
  echo "$connect_stamp" > "$JARS/connect/.stamp"
fi
