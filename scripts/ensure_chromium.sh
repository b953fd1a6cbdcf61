#!/usr/bin/env bash
# Debian's Chromium for the console's browser tests (tests/test_console*.py drive it headless with Playwright
# pointed at this executable: no browser download). Present: returns at once. Missing and root: installs Debian's
# package `chromium`. Missing otherwise: says how to install it and carries on (only the console's browser tests
# need it, and they then fail with the same message).
set -euo pipefail
# shellcheck source=scripts/debian_packages.sh
source "$(dirname "$0")/debian_packages.sh"

have_chromium() {
  command -v chromium >/dev/null 2>&1 || [ -x /usr/bin/chromium ]
}

if have_chromium; then
  exit 0
fi
if can_install_packages; then
  echo "setup: installing Chromium (Debian package chromium) for the console's browser tests"
  install_packages chromium
  have_chromium && exit 0
  echo "setup: chromium was installed but /usr/bin/chromium is still not found" >&2
  exit 1
fi
echo "setup: Chromium not found; the console's browser tests need it: install Debian's package chromium" \
  "(e.g. sudo apt-get install chromium) or set FRAUDLAKE_CHROMIUM to a Chromium executable" >&2
