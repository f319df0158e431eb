#!/usr/bin/env bash
# A driver's own test suite through droid-pool (issue 31), run against a throwaway PostgreSQL
# (a fresh one per run) directly, and through droid-pool in session mode and in transaction
# mode with track_prepared and pool.session_state: track, each once. Prints, per run and per
# test module, how many tests passed, failed, errored and were skipped, and writes the table to
# OUT. SUITE picks the driver:
#
#   asyncpg        (default) the sdist's tests/ of the version pinned in
#                  tests/drivers/requirements.txt, fetched from PyPI; OUT defaults to
#                  target/driver-suites.md, the logs to target/driver-suites-MODE.*
#   psycopg        psycopg 3's tests/ (pytest), with psycopg (pure-Python implementation,
#                  PSYCOPG_IMPL=python) and psycopg_pool installed from the same checkout into
#                  target/psycopg-venv, so the code tested is the code the tests were written for
#   node-postgres  packages/pg's test/integration/**/*-tests.js, each file a node process, as
#                  its Makefile's test-integration runs them, with the workspace's packages
#                  (pg-pool, pg-protocol, ...) installed by npm in the checkout
#
# Neither psycopg's nor node-postgres's suite ships in its PyPI or npm package, so those two
# need a checkout of the repository: PSYCOPG_SRC (github.com/psycopg/psycopg) and
# NODE_POSTGRES_SRC (github.com/brianc/node-postgres). The script installs into the checkout
# (node_modules, pg-protocol's dist/) or beside it (the venv); it writes nothing else there.
# For those two, OUT defaults to target/driver-suites-SUITE.md, the logs and per-test outcomes
# go to target/driver-suites-SUITE-MODE.*, and OUT also lists the tests that fail in one mode
# but not in the one before it (session vs direct, track vs session) with their first error line.
#
#   scripts/driver-suites.sh                   all three runs of asyncpg's suite
#   SUITE=psycopg PSYCOPG_SRC=~/src/psycopg scripts/driver-suites.sh
#   SUITE=node-postgres NODE_POSTGRES_SRC=~/src/node-postgres scripts/driver-suites.sh
#   MODES="session track" scripts/driver-suites.sh
#   PYTEST_ARGS="tests/test_listeners.py" scripts/driver-suites.sh   part of a pytest suite
#   PSYCOPG_MARKERS="not slow"                  psycopg's -m expression (default: not slow)
#   NODE_TESTS="test/integration/client/api-tests.js"   part of node-postgres's (paths in packages/pg)
#   SUITE_TIMEOUT=900                           seconds per run (default 900)
#   NODE_FILE_TIMEOUT=120                       seconds per node-postgres test file (default 120)
#   POOLER=/path/to/droid-pool                  test this binary (no cargo build)
#   KEEP=target/my-run                          prefix of the kept logs (KEEP-MODE.log, ...)
#
# This is a measurement, not a gate: it exits 0 when every run completed (whatever the
# counts), non-zero only if the harness itself failed. Needs network access to PyPI (and npm
# for node-postgres) once.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PYTHONDONTWRITEBYTECODE=1
ROOT=$PWD
SUITE=${SUITE:-asyncpg}
MODES=${MODES:-direct session track}
SUITE_TIMEOUT=${SUITE_TIMEOUT:-900}
# Above PostgreSQL's authentication_timeout (60 s): client/sasl-scram-tests.js leaves a login
# it abandoned open, and its process ends only when the server drops that socket.
NODE_FILE_TIMEOUT=${NODE_FILE_TIMEOUT:-120}

log() { echo "driver-suites: $*" >&2; }

case $SUITE in
  asyncpg)
    # asyncpg's names stay as they were before the other suites came.
    OUT=${OUT:-$ROOT/target/driver-suites.md}
    KEEP=${KEEP:-$ROOT/target/driver-suites}
    ;;
  psycopg | node-postgres)
    OUT=${OUT:-$ROOT/target/driver-suites-$SUITE.md}
    KEEP=${KEEP:-$ROOT/target/driver-suites-$SUITE}
    ;;
  *)
    log "unknown SUITE $SUITE (asyncpg, psycopg, node-postgres)"
    exit 2
    ;;
esac

if [[ -n ${POOLER:-} ]]; then
  [[ -x $POOLER ]] || {
    log "POOLER=$POOLER is not an executable"
    exit 2
  }
else
  cargo build --quiet
  POOLER=$ROOT/target/debug/droid-pool
fi

# --- the suites: installs, each sets SUITE_NAME --------------------------------------

setup_asyncpg() {
  VENV=$ROOT/target/driver-venv
  if [[ ! -x $VENV/bin/python ]]; then
    log "creating $VENV"
    python3 -m venv "$VENV"
  fi
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
    -r tests/drivers/requirements.txt pytest "distro~=1.9.0"

  # The suite: the sdist of the pinned version.
  VERSION=$(sed -n 's/^asyncpg==//p' tests/drivers/requirements.txt)
  SUITE_DIR=$ROOT/target/asyncpg-$VERSION
  if [[ ! -d $SUITE_DIR/tests ]]; then
    log "fetching the asyncpg $VERSION sdist"
    local url
    url=$(curl -fsS https://pypi.org/simple/asyncpg/ |
      grep -o "https://[^\"#]*asyncpg-$VERSION.tar.gz" | head -1)
    [[ -n $url ]] || {
      log "no sdist of asyncpg $VERSION on PyPI"
      exit 1
    }
    curl -fsSL "$url" | tar xz -C "$ROOT/target"
  fi
  SUITE_NAME="asyncpg $VERSION"
}

setup_psycopg() {
  SUITE_DIR=${PSYCOPG_SRC:?set PSYCOPG_SRC to a checkout of psycopg (the suite is not in the PyPI package)}
  SUITE_DIR=$(cd "$SUITE_DIR" && pwd)
  [[ -d $SUITE_DIR/tests && -d $SUITE_DIR/psycopg && -d $SUITE_DIR/psycopg_pool ]] || {
    log "$SUITE_DIR does not look like a psycopg checkout (tests/, psycopg/, psycopg_pool/)"
    exit 2
  }
  VENV=$ROOT/target/psycopg-venv
  if [[ ! -x $VENV/bin/python ]]; then
    log "creating $VENV"
    python3 -m venv "$VENV"
  fi
  # The checkout's own psycopg and pool, with the test extra (pytest, anyio, pproxy, ...): a
  # release from PyPI would be tested by tests written for another version. Pure Python on the
  # system libpq (PSYCOPG_IMPL=python below): no compiler needed, and the protocol the
  # pooler sees is libpq's either way.
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
    "$SUITE_DIR/psycopg[test]" "$SUITE_DIR/psycopg_pool"
  SUITE_NAME="psycopg $("$VENV/bin/python" -c 'import psycopg; print(psycopg.__version__)')"
  SUITE_NAME+=" (python, libpq $("$VENV/bin/python" -c 'import psycopg; print(psycopg.pq.version())'))"
}

setup_node_postgres() {
  SUITE_DIR=${NODE_POSTGRES_SRC:?set NODE_POSTGRES_SRC to a checkout of node-postgres (the suite is not in the npm package)}
  SUITE_DIR=$(cd "$SUITE_DIR" && pwd)
  PG_PKG=$SUITE_DIR/packages/pg
  [[ -d $PG_PKG/test/integration ]] || {
    log "$SUITE_DIR does not look like a node-postgres checkout (packages/pg/test/integration)"
    exit 2
  }
  # The workspaces (pg-pool, pg-protocol, pg-types' dependents, ...) link into node_modules;
  # --ignore-scripts: pg-native's libpq addon would need node-gyp and a compiler, and the
  # Cloudflare tooling fetches its runtime, neither of which the pure-JS tests use.
  if [[ ! -d $SUITE_DIR/node_modules/pg-protocol || ! -d $SUITE_DIR/node_modules/async ]]; then
    log "npm install in $SUITE_DIR"
    (cd "$SUITE_DIR" && npm install --ignore-scripts --no-audit --no-fund --loglevel=error)
  fi
  # pg-protocol (and pg-cloudflare, which pg requires lazily) are TypeScript; pg loads dist/.
  if [[ ! -f $SUITE_DIR/packages/pg-protocol/dist/index.js ]]; then
    log "building pg-protocol"
    (cd "$SUITE_DIR" && npx --no-install tsc --build packages/pg-protocol packages/pg-cloudflare)
  fi
  SUITE_NAME="node-postgres (pg $(node -p "require('$PG_PKG/package.json').version"), node $(node --version))"
}

case $SUITE in
  asyncpg) setup_asyncpg ;;
  psycopg) setup_psycopg ;;
  node-postgres) setup_node_postgres ;;
esac

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

psql_pg() {
  "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres "$@"
}

# What a suite's CI gives its server beyond a plain cluster, before the start.
suite_conf() { # $1 = data directory
  case $SUITE in
    psycopg)
      # The two-phase-commit tests (test_tpc*) skip without prepared transactions; psycopg's
      # CI starts its server with max_prepared_transactions=10.
      echo "max_prepared_transactions = 10" >>"$1/postgresql.conf"
      ;;
    node-postgres)
      # node-postgres's CI server has TLS (client/ssl-tests.js connects with ssl) and two
      # roles that log in by SCRAM (client/sasl-scram-tests.js, with the SCRAM_TEST_* variables
      # set in run_node_postgres). The certificate is a throwaway self-signed one; the tests
      # connect with rejectUnauthorized: false.
      if [[ ! -f $TMP/tls/server.key ]]; then
        mkdir -p "$TMP/tls"
        openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost \
          -keyout "$TMP/tls/server.key" -out "$TMP/tls/server.crt" 2>/dev/null
        chmod 600 "$TMP/tls/server.key"
        if [[ $(id -u) -eq 0 ]]; then
          chown -R postgres: "$TMP/tls"
        fi
      fi
      {
        echo "ssl = on"
        echo "ssl_cert_file = '$TMP/tls/server.crt'"
        echo "ssl_key_file = '$TMP/tls/server.key'"
      } >>"$1/postgresql.conf"
      # pg_hba is first match: the SCRAM roles' line goes before initdb's trust lines.
      local hba
      hba=$(cat "$1/pg_hba.conf")
      {
        echo "host all scram_test,scram_unicode_test 127.0.0.1/32 scram-sha-256"
        echo "$hba"
      } >"$1/pg_hba.conf"
      ;;
  esac
}

# ... and after it.
suite_init() {
  case $SUITE in
    node-postgres)
      # U&'IX-\2168': a password whose SASLprep (NFKC) form differs from itself, as in the CI.
      psql_pg -c "SET password_encryption = 'scram-sha-256'" \
        -c "CREATE ROLE scram_test LOGIN PASSWORD 'test4scram'" \
        -c "CREATE ROLE scram_unicode_test LOGIN PASSWORD U&'IX-\2168'"
      # The pooler's users file: PostgreSQL's own verifiers, so the pooler checks the client's
      # SCRAM proof and logs in to the server with the ClientKey it gave away (passthrough).
      psql_pg -At -c "SELECT format('\"%s\" \"%s\"', rolname, rolpassword) FROM pg_authid
                      WHERE rolname IN ('scram_test', 'scram_unicode_test')" >"$TMP/userlist.txt"
      ;;
  esac
}

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
  suite_conf "$PGDATA_DIR"
  pg_start "$PGDATA_DIR"
  PG_STARTED=1
  suite_init
  log "PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}') on 127.0.0.1:$PG_PORT ($1)"
}

# The auth: section of the pooler's config; node-postgres's SCRAM roles log in by SCRAM with
# PostgreSQL's verifiers, everyone else (postgres) by trust on loopback.
pooler_auth_yaml() {
  echo "auth:"
  echo "  user_methods:"
  echo "    postgres: trust"
  if [[ $SUITE == node-postgres ]]; then
    echo "    scram_test: scram-sha-256"
    echo "    scram_unicode_test: scram-sha-256"
    echo "  users_file: $TMP/userlist.txt"
  fi
}

# TLS towards the clients where the suite's server has it (node-postgres), with the same
# throwaway certificate; the pooler talks to PostgreSQL in the clear on loopback.
pooler_tls_yaml() {
  if [[ $SUITE == node-postgres ]]; then
    echo "tls:"
    echo "  client:"
    echo "    mode: allow"
    echo "    cert_file: $TMP/tls/server.crt"
    echo "    key_file: $TMP/tls/server.key"
  fi
}

start_pooler() { # $1 = mode, $2 = session_state
  local port cfg
  port=$(free_port)
  cfg=$TMP/pooler-$1-$2.yaml
  {
    cat <<YAML
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
YAML
    pooler_auth_yaml
    cat <<YAML
admin:
  port: $(free_port)
drain:
  accept_window: 0s
  timeout: 2s
YAML
    pooler_tls_yaml
  } >"$cfg"
  POOLER_LOG=$TMP/pooler-$1.log
  "$POOLER" --config "$cfg" >"$POOLER_LOG" 2>&1 &
  POOLER_PID=$!
  for _ in $(seq 1 100); do
    if grep -q '^\[POOL\] listening on' "$POOLER_LOG" 2>/dev/null; then
      POOLER_PORT=$port
      return 0
    fi
    sleep 0.1
  done
  log "droid-pool did not start"
  cat "$POOLER_LOG" >&2
  return 1
}

# Per-test outcomes from a JUnit report ($1) to $2 (module, test, outcome, first line of the
# message; tab-separated). Modules: asyncpg's as before (the second part of the class name,
# tests.test_pool -> test_pool), psycopg's as paths under tests/ (tests.pool.test_pool.TestX ->
# pool/test_pool): its subpackages hold same-named modules. A run that timed out writes no
# report: one error for the whole run.
junit_tests() { # $1 = junit.xml, $2 = tests file
  "$VENV/bin/python" - "$1" "$SUITE" >"$2" <<'PY'
import sys, xml.etree.ElementTree as ET
try:
    root = ET.parse(sys.argv[1]).getroot()
except Exception:
    print("ALL\t(run)\terror\tno JUnit report (the run timed out or crashed)")
    sys.exit(0)

def module(classname):
    parts = classname.split(".")
    if sys.argv[2] == "asyncpg":
        return parts[1] if len(parts) > 1 else "?"
    for i, p in enumerate(parts):
        if p.startswith("test_"):
            return "/".join(parts[1 : i + 1])
    return classname or "?"

def line(text):
    text = (text or "").strip().splitlines()
    return text[0][:300].replace("\t", " ") if text else ""

for tc in root.iter("testcase"):
    cls = tc.get("classname", "")
    outcome, msg = "passed", ""
    for child in tc:
        kind = {"failure": "failed", "error": "error", "skipped": "skipped"}.get(child.tag)
        if kind:
            outcome, msg = kind, line(child.get("message") or child.text)
    # A module skipped whole at collection has no class name: it is the test's name.
    mod = module(cls or tc.get("name", "")) if sys.argv[2] != "asyncpg" else module(cls)
    print(mod, f"{cls}::{tc.get('name')}", outcome, msg, sep="\t")
PY
}

# Per-module counts (module pass fail error skip, then ALL) from a tests file.
tally() { # $1 = tests file
  awk -F'\t' '
    { m = $1; mods[m] = 1; n[m, $3]++; tot[$3]++ }
    END {
      k = 0
      for (m in mods) if (m != "ALL") names[++k] = m
      # insertion sort: awk has no portable sort
      for (i = 2; i <= k; i++) { v = names[i]; j = i - 1; while (j > 0 && names[j] > v) { names[j + 1] = names[j]; j-- } names[j + 1] = v }
      for (i = 1; i <= k; i++) { m = names[i]; print m, n[m, "passed"] + 0, n[m, "failed"] + 0, n[m, "error"] + 0, n[m, "skipped"] + 0 }
      print "ALL", tot["passed"] + 0, tot["failed"] + 0, tot["error"] + 0, tot["skipped"] + 0
    }' "$1"
}

# Each run_* runs the suite against 127.0.0.1:$1; the per-module counts go to $2 (module pass
# fail error skip), a summary line to stdout; the log, the per-test outcomes and the report are
# kept as $KEEP-$3.{log,tests,xml}.

run_asyncpg() {
  local port=$1 counts=$2 junit=$TMP/junit.xml
  # Run from a copy of tests/ alone: next to the sdist's asyncpg/ (not built) the import
  # would find that instead of the installed package.
  rm -rf "$TMP/suite" && mkdir "$TMP/suite" && cp -r "$SUITE_DIR/tests" "$TMP/suite/"
  rm -f "$junit"
  # shellcheck disable=SC2086 # PYTEST_ARGS is a list of arguments
  (cd "$TMP/suite" && PGHOST=127.0.0.1 PGPORT=$port PGUSER=postgres \
    timeout "$SUITE_TIMEOUT" "$VENV/bin/python" -m pytest ${PYTEST_ARGS:-tests} -q -p no:cacheprovider \
    --junitxml="$junit" -o junit_family=xunit2 >"$TMP/pytest.log" 2>&1) || true
  grep -E '[0-9]+ (passed|failed)' "$TMP/pytest.log" | tail -n 1 || true
  cp "$TMP/pytest.log" "$KEEP-$3.log"
  cp "$junit" "$KEEP-$3.xml" 2>/dev/null || true
  junit_tests "$junit" "$TMP/$3.tests"
  if grep -q '^ALL' "$TMP/$3.tests"; then
    echo "ALL 0 0 1 0" >"$counts"
  else
    tally "$TMP/$3.tests" >"$counts"
  fi
}

run_psycopg() {
  local port=$1 counts=$2 junit=$TMP/junit.xml
  rm -f "$junit"
  # From the checkout, as its CI runs it (pyproject.toml's pytest settings; warnings are
  # errors): the installed psycopg is a regular package, so the checkout's psycopg/ folder
  # (a distribution, no __init__.py) does not shadow it. No pytest-randomly: the same order
  # in each mode. The cache (which the suite's conftest uses) goes to TMP, not the checkout.
  # At SUITE_TIMEOUT pytest gets SIGINT, on which it still writes the report of the tests
  # that completed. Deselected: test_connect_error_multi_hosts_each_message_preserved (marked
  # slow) connects to 192.0.2.1 and 198.51.100.1, documentation addresses it expects to be
  # unreachable; these tests must send nothing past loopback (and where 192.0.2.0/24 is the
  # local network, as on some CI sandboxes, it reaches the gateway and fails anyway).
  # shellcheck disable=SC2086 # PYTEST_ARGS is a list of arguments
  (cd "$SUITE_DIR" && PSYCOPG_IMPL=python \
    timeout -s INT -k 60 "$SUITE_TIMEOUT" "$VENV/bin/python" -bb -m pytest ${PYTEST_ARGS:-tests} -q \
    -m "${PSYCOPG_MARKERS-not slow}" -p no:randomly -o cache_dir="$TMP/pytest-cache" \
    --deselect tests/test_connection.py::test_connect_error_multi_hosts_each_message_preserved \
    --deselect tests/test_connection_async.py::test_connect_error_multi_hosts_each_message_preserved \
    --test-dsn "host=127.0.0.1 port=$port user=postgres dbname=postgres" \
    --junitxml="$junit" -o junit_family=xunit2 >"$TMP/pytest.log" 2>&1) || true
  grep -E '[0-9]+ (passed|failed)' "$TMP/pytest.log" | tail -n 1 | tr -d '\n' || true
  if grep -q '^!* KeyboardInterrupt' "$TMP/pytest.log"; then
    printf ' (stopped at SUITE_TIMEOUT=%ss: the tests after it did not run)' "$SUITE_TIMEOUT"
  fi
  echo
  cp "$TMP/pytest.log" "$KEEP-$3.log"
  cp "$junit" "$KEEP-$3.xml" 2>/dev/null || true
  junit_tests "$junit" "$KEEP-$3.tests"
  tally "$KEEP-$3.tests" >"$counts"
}

# node-postgres: each file is a process (as `make test-integration` runs them, minus xargs's
# stop at an exit status of 255, so one failing file does not end the run). Its runner stops
# a file at its first failure: the tests after it in that file do not run and are not counted.
# Counted per test from the reporter's records (scripts/lib/node-suite-reporter.js): an end
# without error passed, with one failed, a start without end is an error (the process died in
# it: the runner's 5 s timeout, an uncaught exception); a file that exits non-zero with no
# failed or errored test is one error "(file)", and a file with no Suite tests (some use bare
# asserts) is one test "(file)", passed if it exits 0.
run_node_postgres() {
  local port=$1 counts=$2 name=$3 deadline file rel rc files=()
  local records=$TMP/node-records logf=$KEEP-$name.log tests=$KEEP-$name.tests
  rm -rf "$records" && mkdir "$records"
  : >"$logf"
  if [[ -n ${NODE_TESTS:-} ]]; then
    read -r -a files <<<"$NODE_TESTS"
  else
    mapfile -t files < <(cd "$PG_PKG" && find test/integration -name '*-tests.js' | LC_ALL=C sort)
  fi
  deadline=$((SECONDS + SUITE_TIMEOUT))
  for rel in "${files[@]}"; do
    file=${rel#test/integration/}
    if [[ $SECONDS -ge $deadline ]]; then
      echo "== $file: not run (SUITE_TIMEOUT)" >>"$logf"
      echo "-1" >"$records/${file//\//__}.rc"
      continue
    fi
    rc=0
    # The CI's environment (PGTESTNOSSL skips gh-issues/2085, which wants a CA-signed
    # certificate; the SCRAM_TEST_* roles are made in suite_init). The connection string
    # argument of the Makefile is postgres://, i.e. the PG* variables.
    (cd "$PG_PKG" && PGHOST=127.0.0.1 PGPORT=$port PGUSER=postgres PGDATABASE=postgres \
      PGPASSWORD=postgres PGTESTNOSSL=true \
      SCRAM_TEST_PGUSER=scram_test SCRAM_TEST_PGPASSWORD=test4scram \
      SCRAM_TEST_PGUSER_UNICODE=scram_unicode_test SCRAM_TEST_PGPASSWORD_UNICODE=$'IX-\xe2\x85\xa8' \
      SUITE_JS=$PG_PKG/test/suite.js SUITE_REPORT=$records/${file//\//__}.jsonl \
      timeout "$NODE_FILE_TIMEOUT" node -r "$ROOT/scripts/lib/node-suite-reporter.js" \
      "$rel" postgres:// >"$TMP/node.out" 2>&1) || rc=$?
    echo "$rc" >"$records/${file//\//__}.rc"
    {
      echo "== $file (exit $rc)"
      cat "$TMP/node.out"
    } >>"$logf"
  done
  python3 - "$records" "$logf" >"$tests" <<'PY'
import json, os, sys

records, logf = sys.argv[1], sys.argv[2]
logs, cur = {}, None
for line in open(logf, encoding="utf-8", errors="replace"):
    if line.startswith("== "):
        cur = line[3:].split(" ")[0].rstrip(":\n")
        logs[cur] = []
    elif cur:
        logs[cur].append(line.rstrip("\n"))

def first(text):
    for l in (text or "").splitlines():
        if l.strip():
            return l.strip()[:300].replace("\t", " ")
    return ""

def log_reason(file):
    # The last lines that say something: an uncaught exception's message, a timeout.
    keep = [l for l in logs.get(file, []) if l.strip()]
    for l in keep:
        if "did not complete" in l or l.startswith("Message:") or "Error" in l:
            return l.strip()[:300].replace("\t", " ")
    return keep[-1].strip()[:300] if keep else ""

for name in sorted(os.listdir(records)):
    if not name.endswith(".rc"):
        continue
    base = name[:-3]
    file = base.replace("__", "/")
    rc = int(open(os.path.join(records, name)).read())
    if rc == -1:
        print(file, "(file)", "error", "not run: SUITE_TIMEOUT reached", sep="\t")
        continue
    events, path = [], os.path.join(records, base + ".jsonl")
    if os.path.exists(path):
        events = [json.loads(l) for l in open(path, encoding="utf-8")]
    started, bad = {}, False
    out = []
    for e in events:
        if e["t"] == "skip":
            out.append((e["name"], "skipped", ""))
        elif e["t"] == "start":
            started[e["name"]] = True
        else:
            started.pop(e["name"], None)
            if e.get("err"):
                bad = True
                out.append((e["name"], "failed", first(e["err"])))
            else:
                out.append((e["name"], "passed", ""))
    for n in started:
        bad = True
        why = "timed out (NODE_FILE_TIMEOUT)" if rc == 124 else f"exit {rc} during the test: {log_reason(file)}"
        out.append((n, "error", why))
    if not events:
        if rc == 0:
            out.append(("(file)", "passed", ""))
        else:
            bad = True
            why = "timed out (NODE_FILE_TIMEOUT)" if rc == 124 else f"exit {rc}: {log_reason(file)}"
            out.append(("(file)", "error", why))
    if rc != 0 and not bad:
        why = "timed out (NODE_FILE_TIMEOUT)" if rc == 124 else f"exit {rc} after its tests: {log_reason(file)}"
        out.append(("(file)", "error", why))
    for n, outcome, msg in out:
        print(file, f"{file}::{n}", outcome, msg, sep="\t")
PY
  tally "$tests" >"$counts"
  awk '$1 == "ALL" {print $2 " passed, " $3 " failed, " $4 " errors, " $5 " skipped"}' "$counts"
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
  log "$SUITE_NAME suite, $mode: $("run_${SUITE//-/_}" "$port" "$TMP/$mode.counts" "$mode")"
  RESULT[$mode]=$TMP/$mode.counts
  stop_pooler
  cp "$TMP/$mode.counts" "$KEEP-$mode.counts"
  if [[ $mode != direct ]]; then
    cp "$POOLER_LOG" "$KEEP-$mode.pooler.log"
  fi
done

# The tests failing (failed or error) in run $2 that passed in run $1.
newly_failing() { # $1 $2 = tests files
  awk -F'\t' 'NR == FNR { if ($3 == "passed") ok[$2] = 1; next }
    ($3 == "failed" || $3 == "error") && ($2 in ok) { print "- `" $2 "` (" $3 "): " $4; n++ }
    END { if (!n) print "(none)" }' "$1" "$2"
}

{
  echo "# $SUITE_NAME's own test suite: passed / failed / errors / skipped"
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
  if [[ $SUITE != asyncpg ]]; then
    prev=""
    for mode in $MODES; do
      if [[ -n $prev ]]; then
        echo
        echo "## Failing in $mode, passing in $prev"
        echo
        newly_failing "$KEEP-$prev.tests" "$KEEP-$mode.tests" | LC_ALL=C sort
      fi
      prev=$mode
    done
  fi
} >"$OUT"
cat "$OUT"
