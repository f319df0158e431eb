#!/usr/bin/env bash
# A driver's own test suite through droid-pool (issue 31): asyncpg's (the sdist's tests/,
# the version pinned in tests/drivers/requirements.txt) run against a throwaway PostgreSQL
# (a fresh one per run) directly, and through droid-pool in session mode and in transaction mode with
# track_prepared and pool.session_state: track, each once. Prints, per run and per test
# module, how many tests passed, failed, errored and were skipped, and writes the table to
# OUT (default target/driver-suites.md).
#
#   scripts/driver-suites.sh                   all three runs
#   MODES="session track" scripts/driver-suites.sh
#   PYTEST_ARGS="tests/test_listeners.py" scripts/driver-suites.sh   part of the suite
#   SUITE_TIMEOUT=900                           seconds per run (default 900)
#
# This is a measurement, not a gate: it exits 0 when every run completed (whatever the
# counts), non-zero only if the harness itself failed. Needs network access to PyPI once.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PYTHONDONTWRITEBYTECODE=1
ROOT=$PWD
MODES=${MODES:-direct session track}
SUITE_TIMEOUT=${SUITE_TIMEOUT:-900}
OUT=${OUT:-$ROOT/target/driver-suites.md}

log() { echo "driver-suites: $*" >&2; }

cargo build --quiet
POOLER=$ROOT/target/debug/droid-pool

VENV=$ROOT/target/driver-venv
if [[ ! -x $VENV/bin/python ]]; then
  log "creating $VENV"
  python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
  -r tests/drivers/requirements.txt pytest "distro~=1.9.0"

# --- the suite: the sdist of the pinned version --------------------------------------
VERSION=$(sed -n 's/^asyncpg==//p' tests/drivers/requirements.txt)
SUITE=$ROOT/target/asyncpg-$VERSION
if [[ ! -d $SUITE/tests ]]; then
  log "fetching the asyncpg $VERSION sdist"
  url=$(curl -fsS https://pypi.org/simple/asyncpg/ |
    grep -o "https://[^\"#]*asyncpg-$VERSION.tar.gz" | head -1)
  [[ -n $url ]] || {
    log "no sdist of asyncpg $VERSION on PyPI"
    exit 1
  }
  curl -fsSL "$url" | tar xz -C "$ROOT/target"
fi

# --- PostgreSQL --------------------------------------------------------------------
# shellcheck source=scripts/lib/pg.sh
source scripts/lib/pg.sh
pg_find_bin
TMP=$(mktemp -d /tmp/droid-driver-suites.XXXXXX)
PG_TMP=$TMP
PGDATA_DIR=$TMP/data
PG_STARTED=0
POOLER_PID=""

stop_pooler() {
  if [[ -n $POOLER_PID ]]; then
    kill -INT "$POOLER_PID" 2>/dev/null || true
    kill -INT "$POOLER_PID" 2>/dev/null || true
    wait "$POOLER_PID" 2>/dev/null || true
    POOLER_PID=""
  fi
}

# shellcheck disable=SC2317 # invoked by the EXIT trap
cleanup() {
  local status=$?
  trap - EXIT INT TERM
  stop_pooler
  if [[ $PG_STARTED -eq 1 ]]; then
    pg_stop "$PGDATA_DIR" immediate
  fi
  rm -rf "$TMP"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

pg_own_tmp

# A fresh cluster per run: what one run leaves behind (a database its teardown could not drop
# while a pooler still held servers on it) must not fail the next one's setup.
fresh_pg() { # $1 = run name
  if [[ $PG_STARTED -eq 1 ]]; then
    pg_stop "$PGDATA_DIR" immediate
    PG_STARTED=0
  fi
  PGDATA_DIR=$TMP/data-$1
  pg_initdb "$PGDATA_DIR"
  pg_test_conf "$PGDATA_DIR" 200 fast
  pg_start "$PGDATA_DIR"
  PG_STARTED=1
  log "PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}') on 127.0.0.1:$PG_PORT ($1)"
}

start_pooler() { # $1 = mode, $2 = session_state
  local port cfg
  port=$(free_port)
  cfg=$TMP/pooler-$1-$2.yaml
  cat >"$cfg" <<YAML
listen:
  port: $port
server:
  port: $PG_PORT
pool:
  size: 20
  mode: $1
  track_prepared: true
  session_state: $2
  query_wait_timeout: 30s
auth:
  user_methods:
    postgres: trust
admin:
  port: $(free_port)
drain:
  accept_window: 0s
  timeout: 2s
YAML
  "$POOLER" --config "$cfg" >"$TMP/pooler-$1.log" 2>&1 &
  POOLER_PID=$!
  for _ in $(seq 1 100); do
    if grep -q '^\[POOL\] listening on' "$TMP/pooler-$1.log" 2>/dev/null; then
      POOLER_PORT=$port
      return 0
    fi
    sleep 0.1
  done
  log "droid-pool did not start"
  cat "$TMP/pooler-$1.log" >&2
  return 1
}

# Runs the suite against 127.0.0.1:$1; the per-module counts go to $2 (module pass fail
# error skip), the pytest summary line to stdout; the log and the JUnit report are kept as
# target/driver-suites-$3.{log,xml}.
run_suite() {
  local port=$1 counts=$2 junit=$TMP/junit.xml
  # Run from a copy of tests/ alone: next to the sdist's asyncpg/ (not built) the import
  # would find that instead of the installed package.
  rm -rf "$TMP/suite" && mkdir "$TMP/suite" && cp -r "$SUITE/tests" "$TMP/suite/"
  (cd "$TMP/suite" && PGHOST=127.0.0.1 PGPORT=$port PGUSER=postgres \
    timeout "$SUITE_TIMEOUT" "$VENV/bin/python" -m pytest ${PYTEST_ARGS:-tests} -q -p no:cacheprovider \
    --junitxml="$junit" -o junit_family=xunit2 >"$TMP/pytest.log" 2>&1) || true
  grep -E '[0-9]+ (passed|failed)' "$TMP/pytest.log" | tail -n 1 || true
  cp "$TMP/pytest.log" "$ROOT/target/driver-suites-$3.log"
  cp "$junit" "$ROOT/target/driver-suites-$3.xml" 2>/dev/null || true
  "$VENV/bin/python" - "$junit" >"$counts" <<'PY'
import collections, sys, xml.etree.ElementTree as ET
try:
    root = ET.parse(sys.argv[1]).getroot()
except Exception as e:  # a run that timed out writes no report
    print("ALL 0 0 1 0")
    sys.exit(0)
c = collections.defaultdict(lambda: [0, 0, 0, 0])
for tc in root.iter("testcase"):
    mod = tc.get("classname", "?").split(".")[1] if "." in tc.get("classname", "") else "?"
    kind = 0
    for child in tc:
        if child.tag == "failure":
            kind = 1
        elif child.tag == "error":
            kind = 2
        elif child.tag == "skipped":
            kind = 3
    c[mod][kind] += 1
total = [sum(v[i] for v in c.values()) for i in range(4)]
for mod in sorted(c):
    print(mod, *c[mod])
print("ALL", *total)
PY
}

declare -A RESULT
for mode in $MODES; do
  fresh_pg "$mode"
  case $mode in
    direct) port=$PG_PORT ;;
    session) start_pooler session off && port=$POOLER_PORT ;;
    track) start_pooler transaction track && port=$POOLER_PORT ;;
    *)
      log "unknown mode $mode (direct, session, track)"
      exit 2
      ;;
  esac
  log "asyncpg $VERSION suite, $mode: $(run_suite "$port" "$TMP/$mode.counts" "$mode")"
  RESULT[$mode]=$TMP/$mode.counts
  stop_pooler
  cp "$TMP/$mode.counts" "$ROOT/target/driver-suites-$mode.counts"
done

{
  echo "# asyncpg $VERSION's own test suite: passed / failed / errors / skipped"
  echo
  printf '| module |'
  for mode in $MODES; do printf ' %s |' "$mode"; done
  echo
  printf '|---|'
  for _ in $MODES; do printf -- '---|'; done
  echo
  mods=$(cat "${RESULT[@]}" | awk '{print $1}' | sort -u)
  for m in $mods; do
    printf '| %s |' "$m"
    for mode in $MODES; do
      line=$(awk -v m="$m" '$1 == m {print $2 " / " $3 " / " $4 " / " $5}' "${RESULT[$mode]}")
      printf ' %s |' "${line:-–}"
    done
    echo
  done
} >"$OUT"
cat "$OUT"
