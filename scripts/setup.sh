#!/usr/bin/env bash
# Idempotent set-up for a fresh clone: a Python 3.11 virtualenv with the pinned packages, the JVM jars
# (Delta, the Spark Kafka connector, the Kafka broker, Kafka Connect + Debezium) copied from Maven Central by Maven,
# the PostgreSQL server binaries for the rules database and Chromium for the console's browser tests (Debian's
# packages, installed when missing and root), and the Spark driver's class archive (faster JVM starts).
# A second run only compares two stamps and returns.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
VENV=.venv
stamp_of() { cat "$@" | sha256sum | cut -c1-16; }

py_stamp=$(stamp_of pyproject.toml constraints.txt)
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$VENV/.fraudlake-stamp" 2>/dev/null)" != "$py_stamp" ]; then
  echo "setup: creating $VENV and installing Python packages (first run: a few minutes)"
  [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
  # uv (pinned in constraints.txt) installs the same pinned set as pip, downloading and unpacking in parallel:
  # ~32 s against ~67 s on a fresh clone (uv included, no cache). It honours pip's certificate and local wheel
  # folder when they are set (PIP_CERT, PIP_FIND_LINKS); pip does the job if uv cannot.
  uv_env=()
  [ -z "${PIP_CERT:-}" ] || [ -n "${SSL_CERT_FILE:-}" ] || uv_env+=("SSL_CERT_FILE=$PIP_CERT")
  [ -z "${PIP_FIND_LINKS:-}" ] || [ -n "${UV_FIND_LINKS:-}" ] || uv_env+=("UV_FIND_LINKS=$PIP_FIND_LINKS")
  if ! { "$VENV/bin/python" -m pip install -q -c constraints.txt uv &&
    env "${uv_env[@]}" "$VENV/bin/python" -m uv pip install -q --python "$VENV/bin/python" -c constraints.txt \
      -e ".[local,dq,console,dev]"; }; then
    echo "setup: uv could not install the packages; pip installs them"
    "$VENV/bin/python" -m pip install -q --upgrade pip
    "$VENV/bin/python" -m pip install -q -c constraints.txt -e ".[local,dq,console,dev]"
  fi
  # pyspark is an sdist: uv builds its wheel (~0.5 GB) under a new cache revision whenever the index serves the
  # archive again, and keeps the old ones (57 GB on a developer machine after many fresh clones). Prune drops
  # those dangling revisions (the newest stays); housekeeping only, so its failure is no set-up failure.
  "$VENV/bin/python" -m uv cache prune -q 2>/dev/null || true
  echo "$py_stamp" > "$VENV/.fraudlake-stamp"
fi

bash scripts/jars.sh
# The Spark driver's class archive (pipelines/base/class_archive.py): ~1 min once; returns at once when it exists.
"$VENV/bin/fraudlake" class-archive
bash scripts/ensure_postgres.sh
bash scripts/ensure_chromium.sh
