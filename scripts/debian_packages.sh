# Sourced by the ensure_*.sh scripts: installing a missing Debian package during set-up, only when that is possible.

# can_install_packages: whether set-up may install Debian packages here (running as root, with apt-get).
can_install_packages() {
  [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1
}

# install_packages PACKAGE...: install quietly, without recommended packages, from a fresh package index.
install_packages() {
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
