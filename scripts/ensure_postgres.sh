#!/usr/bin/env bash
# The PostgreSQL server binaries that `fraudlake rulesdb` runs as a private cluster (initdb, pg_ctl, postgres, psql).
# Present: returns at once. Missing and root: installs Debian's package `postgresql` without creating or starting
# its own cluster (fraudlake never uses a system service). Missing otherwise: says how to install them and
# carries on (the rest of fraudlake does not need them; `fraudlake rulesdb start` and its tests then fail clearly).
set -euo pipefail
# shellcheck source=scripts/debian_packages.sh
source "$(dirname "$0")/debian_packages.sh"

have_server() {
  local dir
  for dir in /usr/lib/postgresql/*/bin; do
    if [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ] && [ -x "$dir/postgres" ] && [ -x "$dir/psql" ]; then
      return 0
    fi
  done
  command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1 && command -v psql >/dev/null 2>&1
}

if have_server; then
  exit 0
fi
if can_install_packages; then
  echo "setup: installing PostgreSQL (Debian package postgresql) for the rules database"
  mkdir -p /etc/postgresql-common/createcluster.d
  echo "create_main_cluster = false" > /etc/postgresql-common/createcluster.d/fraudlake.conf
  install_packages postgresql
  have_server && exit 0
  echo "setup: PostgreSQL was installed but its server binaries are still not found" >&2
  exit 1
fi
echo "setup: PostgreSQL server binaries not found; \`fraudlake rulesdb\` (and its tests) need them:" \
  "install the package postgresql (e.g. sudo apt-get install postgresql) or set rulesdb.bin_dir in conf" >&2
