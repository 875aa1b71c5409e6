#!/usr/bin/env bash
# The whole test suite, on a machine that has only Go, git and apt:
#   ./scripts/test.sh
# It installs what the tests need when it is missing (redis-server,
# redis-tools and python3 — the gateway's third-party upstream in e2e —
# from Debian's packages; postgresql, whose server it starts when none
# answers; chromium for the console's browser test; podman, runc,
# prometheus (promtool) and systemd (systemd-analyze) for the deploy
# checks; staticcheck, at the version below, with go install), then runs
# go vet, staticcheck, every test with the race detector, every benchmark
# once (so that none rots between measurements), and each native fuzz
# target for a short bounded time.
#
# QUICK=1 ./scripts/test.sh is the developer's inner loop: go vet and every
# test of every package, without the race detector, staticcheck or fuzzing
# (CI runs the whole).
#
# Environment: QUICK=1, FUZZTIME (default 10s per fuzz target), SKIP_FUZZ=1
# to skip fuzzing, SLUICE_TEST_POSTGRES (a postgres:// URL of a role that may
# create databases; default postgres@127.0.0.1:5432), GOFLAGS as usual.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '== %s\n' "$*"; }

need_pkgs=()
command -v redis-server >/dev/null 2>&1 || need_pkgs+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || need_pkgs+=(redis-tools)
command -v python3 >/dev/null 2>&1 || need_pkgs+=(python3)
if ((${#need_pkgs[@]})); then
  log "installing ${need_pkgs[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi

# Chromium, for the operator console's browser test (internal/admin,
# TestConsoleInBrowser, driven with chromedp): Debian's package, installed
# when missing. The test skips, saying why, only where it cannot be had.
if ! command -v chromium >/dev/null 2>&1; then
  log "installing chromium"
  CR_SUDO=""
  [ "$(id -u)" -eq 0 ] || CR_SUDO="sudo"
  { $CR_SUDO apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive $CR_SUDO apt-get install -y -qq chromium >/dev/null; } ||
    log "chromium could not be installed: the console's browser test will skip"
fi

# PostgreSQL, for the rules-store tests (internal/testkit/pgtest): a server on
# $SLUICE_TEST_POSTGRES (default: role postgres on 127.0.0.1:5432 with trust
# authentication), where each test run makes and drops its own databases,
# and the server binaries, with which the outage tests start private
# servers of their own. Installed from Debian's packages when missing; the
# default server is started (and allowed trust logins of the postgres role
# from 127.0.0.1) when it does not answer.
pg_url="${SLUICE_TEST_POSTGRES:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}"
pg_ok() { PGCONNECT_TIMEOUT=3 psql "$pg_url" -Atqc 'SELECT 1' >/dev/null 2>&1; }
PG_SUDO=""
[ "$(id -u)" -eq 0 ] || PG_SUDO="sudo"
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || ! command -v psql >/dev/null 2>&1; then
  log "installing postgresql"
  $PG_SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $PG_SUDO apt-get install -y -qq postgresql >/dev/null
fi
if [ -z "${SLUICE_TEST_POSTGRES:-}" ] && ! pg_ok; then
  pg_ver="$(ls /usr/lib/postgresql | sort -n | tail -n 1)"
  log "starting PostgreSQL $pg_ver on 127.0.0.1:5432"
  [ -d "/etc/postgresql/$pg_ver/main" ] || $PG_SUDO pg_createcluster "$pg_ver" main >/dev/null
  pg_hba="/etc/postgresql/$pg_ver/main/pg_hba.conf"
  # The first matching line wins: put the test role's trust line first.
  $PG_SUDO grep -qx 'host all postgres 127.0.0.1/32 trust' "$pg_hba" ||
    $PG_SUDO sed -i '1i host all postgres 127.0.0.1/32 trust' "$pg_hba"
  if pg_lsclusters -h | awk -v v="$pg_ver" '$1 == v && $2 == "main" && $4 == "online" { found = 1 } END { exit !found }'; then
    $PG_SUDO pg_ctlcluster "$pg_ver" main reload
  else
    $PG_SUDO pg_ctlcluster --skip-systemctl-redirect "$pg_ver" main start
  fi
  for _ in $(seq 150); do pg_ok && break; sleep 0.2; done
  pg_ok || { echo "PostgreSQL does not answer at $pg_url; set SLUICE_TEST_POSTGRES to a server the tests may create databases on" >&2; exit 1; }
fi

# Deploy checks (deploy/): podman and runc build and run the container
# image, Prometheus's promtool tests the alert rules, systemd-analyze
# verifies the unit. Installed from Debian's packages when missing; where
# they cannot be installed, the tests that need them skip and say so.
deploy_pkgs=()
command -v podman >/dev/null 2>&1 || deploy_pkgs+=(podman)
command -v runc >/dev/null 2>&1 || deploy_pkgs+=(runc)
command -v promtool >/dev/null 2>&1 || deploy_pkgs+=(prometheus)
command -v systemd-analyze >/dev/null 2>&1 || deploy_pkgs+=(systemd)
if ((${#deploy_pkgs[@]})); then
  log "installing ${deploy_pkgs[*]} (deploy checks)"
  DEPLOY_SUDO=""
  [ "$(id -u)" -eq 0 ] || DEPLOY_SUDO="sudo"
  { $DEPLOY_SUDO apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive $DEPLOY_SUDO apt-get install -y -qq --no-install-recommends "${deploy_pkgs[@]}" >/dev/null; } ||
    log "could not install ${deploy_pkgs[*]}: the deploy tests that need them skip"
fi

quick=""
[ "${QUICK:-}" = 1 ] && quick=1

log "go vet"
go vet ./...

# staticcheck, at a version that supports this Go (1.26), installed into
# $(go env GOPATH)/bin when that version is not there.
staticcheck_version=v0.8.2
if [ -z "$quick" ]; then
  staticcheck="$(go env GOPATH)/bin/staticcheck"
  if ! "$staticcheck" -version 2>/dev/null | grep -qF "(${staticcheck_version#v})"; then
    log "installing staticcheck $staticcheck_version"
    go install "honnef.co/go/tools/cmd/staticcheck@$staticcheck_version"
  fi
  log "staticcheck"
  "$staticcheck" ./...
fi

# Unit and integration tests in parallel; then, one package at a time, the
# ones that time real processes (fault detection and recovery bounds, the
# built binary under load), so that they do not compete with each other
# for the machine's cores.
timed='/e2e$|/store/failover$'
race=-race
[ -n "$quick" ] && race=""
log "go test $race (parallel)"
go test $race -count=1 -timeout 20m $(go list ./... | grep -Ev "$timed")
log "go test $race (timed, one package at a time)"
go test $race -count=1 -timeout 20m -p 1 $(go list ./... | grep -E "$timed")

# Every benchmark once (-benchtime 1x): it measures nothing, but a benchmark
# that a change broke (a rule set the validator now refuses, an expectation
# that no longer holds) fails here, not in the next engineer's measurement.
if [ -z "$quick" ]; then
  log "every benchmark once"
  go test -run '^$' -bench . -benchtime 1x -timeout 10m \
    $(grep -rl --include='*_test.go' '^func Benchmark' . | xargs -n1 dirname | sort -u)
fi

if [ "${SKIP_FUZZ:-}" != 1 ] && [ -z "$quick" ]; then
  fuzztime="${FUZZTIME:-10s}"
  fuzzdir="$(mktemp -d)"
  trap 'rm -rf "$fuzzdir"' EXIT
  fuzzlog="$fuzzdir/fuzz.log"
  # Go 1.26's fuzz coordinator can fail a run at its -fuzztime deadline
  # with a bare "context deadline exceeded", having found nothing and
  # written no failing input (go.dev/issue/75804, fixed in Go 1.27). Such a
  # run is repeated, at most twice; a failing input, a panic or any other
  # failure fails the suite at once.
  deadline_race() {
    grep -qx '    context deadline exceeded' "$fuzzlog" &&
      ! grep -q 'Failing input written' "$fuzzlog" && ! grep -q 'panic:' "$fuzzlog"
  }
  for pkg in $(go list ./...); do
    for target in $(go test -list '^Fuzz' "$pkg" 2>/dev/null | grep '^Fuzz' || true); do
      log "fuzz $pkg $target ($fuzztime)"
      tries=0
      until go test -run='^$' -fuzz="^${target}\$" -fuzztime="$fuzztime" "$pkg" >"$fuzzlog" 2>&1; do
        tries=$((tries + 1))
        if [ "$tries" -le 2 ] && deadline_race; then
          log "fuzz $target: stopped by the coordinator's deadline race (go.dev/issue/75804), no failing input; again"
          continue
        fi
        cat "$fuzzlog"
        exit 1
      done
      tail -n 1 "$fuzzlog"
    done
  done
fi
log "all tests passed"
