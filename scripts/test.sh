#!/usr/bin/env bash
# The whole test suite, on a machine that has only Go, git and apt:
#   ./scripts/test.sh
# It installs what the tests need when it is missing (redis-server and
# redis-tools from Debian's packages), then runs go vet, every test with the
# race detector, and each native fuzz target for a short bounded time.
#
# Environment: FUZZTIME (default 10s per fuzz target), SKIP_FUZZ=1 to skip
# fuzzing, GOFLAGS as usual.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '== %s\n' "$*"; }

need_pkgs=()
command -v redis-server >/dev/null 2>&1 || need_pkgs+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || need_pkgs+=(redis-tools)
if ((${#need_pkgs[@]})); then
  log "installing ${need_pkgs[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi

log "go vet"
go vet ./...

log "go test -race"
go test -race -count=1 -timeout 20m ./...

if [ "${SKIP_FUZZ:-}" != 1 ]; then
  fuzztime="${FUZZTIME:-10s}"
  for pkg in $(go list ./...); do
    for target in $(go test -list '^Fuzz' "$pkg" 2>/dev/null | grep '^Fuzz' || true); do
      log "fuzz $pkg $target ($fuzztime)"
      go test -run='^$' -fuzz="^${target}\$" -fuzztime="$fuzztime" "$pkg" >/tmp/sluice-fuzz.log 2>&1 || {
        cat /tmp/sluice-fuzz.log; exit 1; }
      tail -n 1 /tmp/sluice-fuzz.log
    done
  done
fi
log "all tests passed"
